"""Contract registrations for /api/v1/api-keys/ and /api/v1/tenants/{slug}/members/."""

from apps.tenants import services
from apps.tenants.models import ApiKey, Membership
from tests.api_contract import Endpoint, register
from tests.factories import ACTOR, make_user


def _make_key(tenant) -> str:
    key, _ = services.api_key_create(actor=ACTOR, tenant=tenant, scopes=["jobs:read"], name="contract")
    return key.key_id


def _make_member(tenant) -> str:
    user = make_user()
    services.membership_add(actor=ACTOR, tenant=tenant, user=user, role="viewer")
    return user.username


def _member_payload(tenant) -> dict:
    return {"username": make_user().username, "role": "member", "cluster_identity": "someone@example.com"}


register(
    Endpoint(
        name="api-keys",
        model=ApiKey,
        list_path=lambda t: "/api/v1/api-keys/",
        detail_path=lambda t, i: f"/api/v1/api-keys/{i}/",
        make=_make_key,
        read_scope="keys:read",
        write_scope="keys:write",
        create_payload=lambda t: {"name": "new", "scopes": ["jobs:read"]},
        update_payload={"name": "renamed"},
        deletes=True,
        read_only_scopes=["keys:read"],
    )
)

register(
    Endpoint(
        name="members",
        model=Membership,
        list_path=lambda t: f"/api/v1/tenants/{t.slug}/members/",
        detail_path=lambda t, i: f"/api/v1/tenants/{t.slug}/members/{i}/",
        make=_make_member,
        read_scope=None,
        write_scope="admin",
        create_payload=_member_payload,
        update_payload={"role": "admin"},
        deletes=True,
        read_only_scopes=["keys:write", "jobs:write"],
        id_field=("username",),
    )
)

"""Tenants over REST: visibility, platform-only changes, manifests, suspension, archiving, bad input."""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from apps.core.models import AuditEntry
from apps.tenants.models import Membership, Tenant
from tests.factories import client_for, make_key, make_tenant, make_user

pytestmark = pytest.mark.django_db

MANIFEST = """
apiVersion: gryvia.io/v1alpha1
kind: GryviaTenant
metadata:
  name: research
  labels: {team: ml}
spec:
  displayName: Research
  maxGpus: 16
  gpuTypeCeilings: {H100: 8}
  maxMemory: 512Gi
"""


def test_a_tenant_key_sees_only_its_tenant(client_a, tenant_b):
    slugs = [t["slug"] for t in client_a.get("/api/v1/tenants/").json()["results"]]
    assert slugs == ["alpha"]
    assert client_a.get("/api/v1/tenants/bravo/").status_code == 404
    assert client_a.get("/api/v1/tenants/alpha/").json()["namespace"] == "tenant-alpha"


def test_only_platform_staff_create_change_and_archive_tenants(client_a, platform_key):
    assert client_a.post("/api/v1/tenants/", {"slug": "x1"}, format="json").status_code == 403
    assert client_a.patch("/api/v1/tenants/alpha/", {"max_gpus": 99}, format="json").status_code == 403
    staff = client_for(platform_key)
    created = staff.post("/api/v1/tenants/", {"slug": "x1", "max_gpus": 4}, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["status"]["phase"] == "Pending"
    changed = staff.patch("/api/v1/tenants/x1/", {"max_gpus": 8}, format="json")
    assert changed.status_code == 200 and changed.json()["generation"] == 2
    assert staff.patch("/api/v1/tenants/x1/", {"slug": "renamed"}, format="json").status_code == 400
    assert staff.delete("/api/v1/tenants/x1/").status_code == 204
    tenant = Tenant.objects.get(slug="x1")
    assert tenant.archived_at is not None and tenant.suspended  # archived, never deleted
    assert [e.action for e in AuditEntry.all_tenants.filter(object_id="x1").order_by("id")] == [
        "tenant.create",
        "tenant.update",
        "tenant.archive",
    ]


@pytest.mark.parametrize("content_type", ["application/yaml", "application/x-yaml", "text/yaml"])
def test_tenant_manifest_in_yaml(platform_key, content_type):
    response = client_for(platform_key).post("/api/v1/tenants/", MANIFEST, content_type=content_type)
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["slug"] == "research" and body["max_gpus"] == 16 and body["gpu_type_ceilings"] == {"H100": 8}
    assert body["labels"] == {"team": "ml"} and body["display_name"] == "Research"


def test_manifest_of_the_wrong_kind_or_with_unknown_fields_is_refused(platform_key):
    staff = client_for(platform_key)
    wrong = staff.post("/api/v1/tenants/", MANIFEST.replace("GryviaTenant", "GryviaAIJob"), content_type="text/yaml")
    assert wrong.status_code == 400 and "kind" in wrong.json()["error"]["fields"]
    extra = staff.post("/api/v1/tenants/", MANIFEST + "  colour: blue\n", content_type="text/yaml")
    assert extra.status_code == 400 and "colour" in extra.json()["error"]["message"]
    assert not Tenant.objects.filter(slug="research").exists()


def test_a_suspended_tenants_keys_are_refused_reads_included_and_its_members_may_only_read(client_a, tenant_a):
    staff = client_for(make_key(make_tenant("ops"), ["admin"], platform=True))
    member = make_user("reader")
    Membership.all_tenants.create(tenant=tenant_a, user=member, role="admin")
    browser = APIClient()
    browser.force_login(member)
    assert staff.patch("/api/v1/tenants/alpha/", {"suspended": True}, format="json").status_code == 200

    refused = "tenant 'alpha' is suspended: its API keys are refused until it is resumed"
    for response in (
        client_a.get("/api/v1/api-keys/"),
        client_a.post("/api/v1/api-keys/", {"scopes": ["jobs:read"]}, format="json"),
    ):
        assert response.status_code == 403 and response.json()["error"]["message"] == refused
    assert browser.get("/api/v1/api-keys/").status_code == 200  # a member's session still reads
    write = browser.post("/api/v1/api-keys/", {"scopes": ["jobs:read"]}, format="json")
    assert write.status_code == 403 and "suspended" in write.json()["error"]["message"]
    assert staff.get("/api/v1/api-keys/", HTTP_X_GRYVIA_TENANT="alpha").status_code == 200  # staff act on

    assert staff.patch("/api/v1/tenants/alpha/", {"suspended": False}, format="json").status_code == 200
    assert client_a.get("/api/v1/api-keys/").status_code == 200  # resumed: the same key works again


def test_archived_tenant_keys_stop_working(client_a, platform_key):
    assert client_for(platform_key).delete("/api/v1/tenants/alpha/").status_code == 204
    assert client_a.get("/api/v1/tenants/").status_code == 401


def test_members_are_managed_by_tenant_admins(client_a, tenant_a, tenant_b):
    user = make_user("carol")
    added = client_a.post("/api/v1/tenants/alpha/members/", {"username": "carol", "role": "viewer"}, format="json")
    assert added.status_code == 201, added.content
    assert Tenant.objects.get(pk=tenant_a.pk).generation == 2  # RoleBindings follow members
    assert client_a.get("/api/v1/tenants/bravo/members/").status_code == 404
    dup = client_a.post("/api/v1/tenants/alpha/members/", {"username": "carol"}, format="json")
    assert dup.status_code == 400
    nobody = client_a.post("/api/v1/tenants/alpha/members/", {"username": "nobody"}, format="json")
    assert nobody.status_code == 400 and "username" in nobody.json()["error"]["fields"]
    assert Membership.all_tenants.filter(user=user).count() == 1


# -- bad input: a 400 naming the field, and nothing written ------------------------------------------------------

BAD_BODIES = [
    ("malformed-json", "/api/v1/api-keys/", '{"scopes": ["jobs:read"', "application/json", "body"),
    (
        "unknown-field",
        "/api/v1/api-keys/",
        json.dumps({"scopes": ["jobs:read"], "colour": "x"}),
        "application/json",
        "colour",
    ),
    (
        "too-long",
        "/api/v1/api-keys/",
        json.dumps({"scopes": ["jobs:read"], "name": "n" * 101}),
        "application/json",
        "name",
    ),
    ("wrong-type", "/api/v1/api-keys/", json.dumps({"scopes": "jobs:read"}), "application/json", "scopes"),
    (
        "wrong-type-date",
        "/api/v1/api-keys/",
        json.dumps({"scopes": ["jobs:read"], "expires_at": 5}),
        "application/json",
        "expires_at",
    ),
    ("bad-yaml", "/api/v1/tenants/", "metadata: [unclosed", "application/yaml", "body"),
    ("slug-too-long", "/api/v1/tenants/", json.dumps({"slug": "s" * 60}), "application/json", "slug"),
    ("slug-not-dns", "/api/v1/tenants/", json.dumps({"slug": "Bad_Slug"}), "application/json", "slug"),
    ("gpus-negative", "/api/v1/tenants/", json.dumps({"slug": "ok", "max_gpus": -1}), "application/json", "max_gpus"),
    ("gpus-string", "/api/v1/tenants/", json.dumps({"slug": "ok", "max_gpus": "many"}), "application/json", "max_gpus"),
    (
        "bad-quantity",
        "/api/v1/tenants/",
        json.dumps({"slug": "ok", "max_memory": "lots"}),
        "application/json",
        "max_memory",
    ),
    (
        "bad-label",
        "/api/v1/tenants/",
        json.dumps({"slug": "ok", "labels": {"bad key!": "x"}}),
        "application/json",
        "labels",
    ),
]


@pytest.mark.parametrize(("case", "path", "body", "content_type", "field"), BAD_BODIES, ids=[b[0] for b in BAD_BODIES])
def test_bad_input_is_400_naming_the_field_and_writes_nothing(
    tenant_a, platform_key, case, path, body, content_type, field
):
    client = client_for(platform_key, HTTP_X_GRYVIA_TENANT="alpha")
    rows = (Tenant.objects.count(), AuditEntry.all_tenants.count(), Membership.all_tenants.count())
    from apps.tenants.models import ApiKey

    keys = ApiKey.all_tenants.count()
    response = client.generic("POST", path, body, content_type=content_type)
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert field in error["fields"], error
    assert field in error["message"]
    assert (Tenant.objects.count(), AuditEntry.all_tenants.count(), Membership.all_tenants.count()) == rows
    assert ApiKey.all_tenants.count() == keys


def test_multi_tenant_credential_must_name_the_tenant_for_a_create(platform_key, tenant_b):
    response = client_for(platform_key).post("/api/v1/api-keys/", {"scopes": ["jobs:read"]}, format="json")
    assert response.status_code == 400 and "X-Gryvia-Tenant" in response.json()["error"]["message"]
    assert client_for(platform_key, HTTP_X_GRYVIA_TENANT="nope").get("/api/v1/api-keys/").status_code == 404


def test_roles_cannot_be_raised_above_ones_own(tenant_a):
    from rest_framework.test import APIClient

    from apps.tenants import services
    from tests.factories import ACTOR

    owner, admin_user, member = make_user("own"), make_user("adm"), make_user("mem")
    services.membership_add(actor=ACTOR, tenant=tenant_a, user=owner, role="owner")
    services.membership_add(actor=ACTOR, tenant=tenant_a, user=admin_user, role="admin")
    services.membership_add(actor=ACTOR, tenant=tenant_a, user=member, role="member")
    as_admin = APIClient()
    assert as_admin.login(username="adm", password="pw-for-tests-1")
    base = "/api/v1/tenants/alpha/members/"
    promote = as_admin.patch(f"{base}mem/", {"role": "owner"}, format="json")
    assert promote.status_code == 403 and "owner" in promote.json()["error"]["message"]
    assert as_admin.patch(f"{base}own/", {"role": "viewer"}, format="json").status_code == 403
    assert as_admin.delete(f"{base}own/").status_code == 403
    assert as_admin.patch(f"{base}mem/", {"role": "admin"}, format="json").status_code == 200
    # An `admin` key acts as an admin: it cannot mint owners either.
    key_client = client_for(make_key(tenant_a, ["admin"]))
    new = make_user("newbie")
    assert key_client.post(base, {"username": new.username, "role": "owner"}, format="json").status_code == 403
    assert Membership.all_tenants.get(user=owner).role == "owner"


def test_members_cannot_manage_keys(tenant_a):
    from rest_framework.test import APIClient

    from apps.tenants import services
    from tests.factories import ACTOR

    services.membership_add(actor=ACTOR, tenant=tenant_a, user=make_user("mem2"), role="member")
    client = APIClient()
    assert client.login(username="mem2", password="pw-for-tests-1")
    assert client.get("/api/v1/api-keys/").status_code == 200
    assert client.post("/api/v1/api-keys/", {"scopes": ["jobs:read"]}, format="json").status_code == 403

"""The dashboard's API keys page (apps/dashboard/views_keys.py): list, create with the secret shown once, revoke,
who may do what, and the header's log-out target for an SSO session."""

from __future__ import annotations

import importlib
import re

import pytest
from django.test import Client, override_settings
from django.urls import clear_url_caches

from apps.core.models import AuditEntry
from apps.tenants import services as tenant_services
from apps.tenants.models import ApiKey
from gryvia_site.settings.components.oidc import OIDC_BACKEND, oidc_settings
from tests.factories import ACTOR, make_key, make_user

pytestmark = pytest.mark.django_db

SECRET = re.compile(rb'id="new-key-secret" type="text" readonly value="([^"]+)"')


def _signed_in(tenant, role: str, *, csrf: bool = False) -> tuple[Client, object]:
    user = make_user()
    tenant_services.membership_add(actor=ACTOR, tenant=tenant, user=user, role=role)
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client, user


def test_an_admin_creates_a_key_sees_the_secret_once_and_it_works_against_the_api(tenant_a):
    client, user = _signed_in(tenant_a, "admin")
    page = client.get("/keys/")
    assert page.status_code == 200 and b'name="scopes"' in page.content
    response = client.post("/keys/", {"name": "ci", "scopes": ["jobs:read"], "expires_at": "2099-01-01T00:00"})
    assert response.status_code == 200 and "no-store" in response["Cache-Control"]
    secret = SECRET.search(response.content).group(1).decode()
    assert b"dashboard/copy.js" in response.content and b"data-copy-target" in response.content
    key = ApiKey.all_tenants.get(name="ci")
    assert key.scopes == ["jobs:read"] and key.expires_at.year == 2099 and key.created_by == f"user:{user.username}"
    assert secret not in key.secret_digest  # only a digest is kept
    assert AuditEntry.all_tenants.filter(action="api_key.create", actor=f"user:{user.username}").exists()
    again = client.get("/keys/")
    assert key.key_id.encode() in again.content and secret.encode() not in again.content
    api = Client().get("/api/v1/jobs/", HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert api.status_code == 200


def test_the_form_offers_only_scopes_the_user_may_grant_and_refuses_others(tenant_a):
    client, _ = _signed_in(tenant_a, "admin")
    assert b'value="admin"' in client.get("/keys/").content
    unknown = client.post("/keys/", {"scopes": ["not-a-scope"]})
    assert unknown.status_code == 400 and not ApiKey.all_tenants.filter(tenant=tenant_a).exists()
    past = client.post("/keys/", {"scopes": ["jobs:read"], "expires_at": "2001-01-01T00:00"})
    assert past.status_code == 400 and b"must be in the future" in past.content


def test_revoke_stops_the_key(tenant_a):
    client, _ = _signed_in(tenant_a, "owner")
    plaintext = make_key(tenant_a, ["jobs:read"], name="old")
    key = ApiKey.all_tenants.get(name="old")
    assert Client().get("/api/v1/jobs/", HTTP_AUTHORIZATION=f"Bearer {plaintext}").status_code == 200
    response = client.post(f"/keys/{key.key_id}/revoke/", follow=True)
    assert response.redirect_chain[-1][0] == "/keys/" and b"revoked" in response.content
    key.refresh_from_db()
    assert key.revoked_at is not None
    assert Client().get("/api/v1/jobs/", HTTP_AUTHORIZATION=f"Bearer {plaintext}").status_code == 401


def test_another_tenants_key_is_a_404_and_not_listed(tenant_a, tenant_b):
    make_key(tenant_b, ["jobs:read"], name="theirs")
    theirs = ApiKey.all_tenants.get(name="theirs")
    client, _ = _signed_in(tenant_a, "owner")
    assert b"theirs" not in client.get("/keys/").content
    assert client.post(f"/keys/{theirs.key_id}/revoke/").status_code == 404
    theirs.refresh_from_db()
    assert theirs.revoked_at is None


@pytest.mark.parametrize("role", ["viewer", "member"])
def test_a_role_without_keys_write_sees_the_keys_but_no_buttons_and_its_posts_are_refused(tenant_a, role):
    make_key(tenant_a, ["jobs:read"], name="listed")
    key = ApiKey.all_tenants.get(name="listed")
    client, _ = _signed_in(tenant_a, role)
    page = client.get("/keys/")
    assert page.status_code == 200 and key.key_id.encode() in page.content
    assert b"Create a key" not in page.content and b"/revoke/" not in page.content
    assert client.post("/keys/", {"scopes": ["jobs:read"]}).status_code == 403
    assert client.post(f"/keys/{key.key_id}/revoke/").status_code == 403
    assert ApiKey.all_tenants.filter(tenant=tenant_a).count() == 1
    key.refresh_from_db()
    assert key.revoked_at is None


def test_key_posts_require_the_csrf_token(tenant_a):
    make_key(tenant_a, ["jobs:read"], name="kept")
    key = ApiKey.all_tenants.get(name="kept")
    client, _ = _signed_in(tenant_a, "owner", csrf=True)
    assert client.post("/keys/", {"scopes": ["jobs:read"]}).status_code == 403
    assert client.post(f"/keys/{key.key_id}/revoke/").status_code == 403
    key.refresh_from_db()
    assert key.revoked_at is None and ApiKey.all_tenants.filter(tenant=tenant_a).count() == 1


def test_the_header_logs_a_local_session_out_locally(tenant_a):
    client, _ = _signed_in(tenant_a, "viewer")
    assert b'<form method="post" action="/logout/">' in client.get("/").content


@pytest.fixture
def sso_configured():
    """SSO settings as components/oidc.py makes them (nothing contacts the provider: discovery is lazy) and the
    URLconf rebuilt to mount /oidc/."""
    import gryvia_site.urls

    values = oidc_settings(
        provider_url="http://127.0.0.1:9/idp",
        client_id="gryvia-test",
        client_secret="s",
        scopes="openid",
        tenant_claim="g",
    )
    with override_settings(**values):
        importlib.reload(gryvia_site.urls)
        clear_url_caches()
        yield
    importlib.reload(gryvia_site.urls)
    clear_url_caches()


def test_the_header_logs_an_sso_session_out_at_the_provider_too(tenant_a, sso_configured):
    user = make_user("sso-carol")
    tenant_services.membership_add(actor=ACTOR, tenant=tenant_a, user=user, role="viewer")
    sso = Client()
    sso.force_login(user, backend=OIDC_BACKEND)
    assert b'<form method="post" action="/oidc/logout/">' in sso.get("/").content
    # A local account in the same deployment, even one named like an SSO user, logs out locally.
    local = Client()
    local.force_login(user, backend="django.contrib.auth.backends.ModelBackend")
    assert b'<form method="post" action="/logout/">' in local.get("/").content

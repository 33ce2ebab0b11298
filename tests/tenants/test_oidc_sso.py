"""OIDC single sign-on against a real provider process (oidc-provider-mock on loopback), no browser: the code flow
from /oidc/authenticate/ through the provider's authorize form to /oidc/callback/, and the tenant claim's rules."""

from __future__ import annotations

import importlib
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.test import override_settings
from django.urls import NoReverseMatch, clear_url_caches, reverse

from apps.core.models import AuditEntry
from apps.core.principal import SYSTEM
from apps.tenants.models import Membership
from apps.tenants.services import membership_add
from apps.tenants.sso import discovery
from apps.tenants.sso.backend import username_for_sub
from gryvia_site.settings.components.oidc import oidc_settings
from tests.factories import make_tenant

pytestmark = pytest.mark.django_db

PROVIDER_BIN = Path(sys.executable).parent / "oidc-provider-mock"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _Provider:
    """One oidc-provider-mock process on a free loopback port; any client id is accepted (no registration)."""

    def __init__(self) -> None:
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.process = subprocess.Popen(
            [str(PROVIDER_BIN), "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(f"{self.url}/.well-known/openid-configuration", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("oidc-provider-mock did not answer within 20 s")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)


@pytest.fixture(scope="module")
def provider():
    started = _Provider()
    try:
        yield started.url
    finally:
        started.stop()


def _sso_on(provider_url: str):
    """Settings as components/oidc.py makes them from the environment, and the URLconf rebuilt to mount /oidc/."""
    values = oidc_settings(
        provider_url=provider_url,
        client_id="gryvia-test",
        client_secret="test-secret",
        scopes="openid email profile",
        tenant_claim="groups",
    )
    return override_settings(**values)


@pytest.fixture
def sso(provider):
    import gryvia_site.urls

    discovery.forget()
    with _sso_on(provider):
        importlib.reload(gryvia_site.urls)
        clear_url_caches()
        yield provider
    discovery.forget()
    importlib.reload(gryvia_site.urls)
    clear_url_caches()


def _sign_in(client, provider: str, sub: str, claims: dict):
    """Walk the code flow as a browser would; returns Gryvia's answer to the provider's redirect."""
    assert httpx.put(f"{provider}/users/{sub}", json=claims).status_code == 204
    start = client.get("/oidc/authenticate/")
    assert start.status_code == 302, start.content
    authorize = start["Location"]
    assert authorize.startswith(f"{provider}/oauth2/authorize?")
    assert "code_challenge" in parse_qs(urlsplit(authorize).query)  # PKCE
    assert 'name="sub"' in httpx.get(authorize).text  # the provider's authorize form
    answer = httpx.post(authorize, data={"sub": sub})
    assert answer.status_code == 302, answer.text
    callback = urlsplit(answer.headers["location"])
    assert callback.path == "/oidc/callback/"
    return client.get(f"{callback.path}?{callback.query}")


def _memberships(username: str) -> dict[str, str]:
    user = get_user_model().objects.get(username=username)
    return {m.tenant.slug: m.role for m in Membership.all_tenants.filter(user=user).select_related("tenant")}


def test_code_flow_signs_in_a_member_of_the_tenant_in_groups(client, sso):
    make_tenant(slug="demo")
    response = _sign_in(client, sso, "alice", {"email": "alice@example.com", "groups": ["demo"]})
    assert response.status_code == 302
    assert response["Location"] != reverse("oidc_no_tenant")
    user = get_user_model().objects.get(username="sso-alice")
    assert user.email == "alice@example.com"
    assert client.session["_auth_user_id"] == str(user.pk)
    assert _memberships("sso-alice") == {"demo": "member"}
    membership = Membership.all_tenants.get(user=user)
    assert membership.source == "sso"
    entry = AuditEntry.all_tenants.get(action="membership.create", object_id=str(membership.pk))
    assert entry.actor == "system:sso"


def test_roles_follow_the_claim_and_only_sso_memberships_go(client, sso, caplog):
    make_tenant(slug="demo")
    make_tenant(slug="lab")
    kept = make_tenant(slug="kept")
    _sign_in(client, sso, "bob", {"groups": ["demo", "lab:admin"]})
    assert _memberships("sso-bob") == {"demo": "member", "lab": "admin"}
    user = get_user_model().objects.get(username="sso-bob")
    membership_add(actor=SYSTEM, tenant=kept, user=user, role="member")  # granted by hand: not SSO's to remove

    client.logout()
    _sign_in(client, sso, "bob", {"groups": ["demo:viewer", "lab:superuser"]})
    # demo's role follows the claim; lab's unknown role is ignored, so lab (made by SSO) goes; kept stays.
    assert _memberships("sso-bob") == {"demo": "viewer", "kept": "member"}
    assert "unknown role 'superuser'" in caplog.text


def test_a_claim_naming_no_tenant_lands_on_the_no_tenant_page(client, sso):
    response = _sign_in(client, sso, "carol", {"groups": ["nonexistent", "other:viewer"]})
    assert response.status_code == 302
    assert response["Location"] == reverse("oidc_no_tenant")
    page = client.get(response["Location"])
    assert page.status_code == 200
    assert b"No tenant yet" in page.content and b"operator" in page.content


def test_a_tampered_state_is_refused(client, sso):
    make_tenant(slug="demo")
    assert httpx.put(f"{sso}/users/mallory", json={"groups": ["demo"]}).status_code == 204
    authorize = client.get("/oidc/authenticate/")["Location"]
    answer = httpx.post(authorize, data={"sub": "mallory"})
    callback = urlsplit(answer.headers["location"])
    query = parse_qs(callback.query)
    response = client.get(callback.path, {"code": query["code"][0], "state": "forged-" + query["state"][0]})
    assert response.status_code == 400
    assert b"does not belong to this browser" in response.content
    assert "_auth_user_id" not in client.session
    assert not get_user_model().objects.filter(username="sso-mallory").exists()


def test_a_provider_that_is_down_gets_a_clear_page(client):
    import gryvia_site.urls

    discovery.forget()
    try:
        with _sso_on(f"http://127.0.0.1:{_free_port()}"):
            importlib.reload(gryvia_site.urls)
            clear_url_caches()
            response = client.get("/oidc/authenticate/")
    finally:
        discovery.forget()
        importlib.reload(gryvia_site.urls)
        clear_url_caches()
    assert response.status_code == 502
    assert b"Single sign-on is unavailable" in response.content


def test_a_provider_that_goes_down_during_sign_in_gets_a_clear_page(client):
    import gryvia_site.urls

    doomed = _Provider()
    discovery.forget()
    try:
        with _sso_on(doomed.url):
            importlib.reload(gryvia_site.urls)
            clear_url_caches()
            authorize = client.get("/oidc/authenticate/")["Location"]  # discovery is now cached
            callback = urlsplit(httpx.post(authorize, data={"sub": "erin"}).headers["location"])
            doomed.stop()  # before Gryvia redeems the code at the token endpoint
            response = client.get(f"{callback.path}?{callback.query}")
    finally:
        doomed.stop()
        discovery.forget()
        importlib.reload(gryvia_site.urls)
        clear_url_caches()
    assert response.status_code == 502
    assert b"did not complete the sign-in" in response.content
    assert "_auth_user_id" not in client.session


def test_a_denied_authorization_is_a_page_not_a_login(client, sso):
    authorize = client.get("/oidc/authenticate/")["Location"]
    callback = urlsplit(httpx.post(authorize, data={"action": "deny"}).headers["location"])
    response = client.get(f"{callback.path}?{callback.query}")
    assert response.status_code == 403
    assert b"Sign-in did not complete" in response.content
    assert "_auth_user_id" not in client.session


def test_usernames_come_from_sub_and_an_odd_sub_gets_a_digest():
    assert username_for_sub("alice") == "sso-alice"
    odd = username_for_sub("CN=Alice Smith,OU=People")
    assert odd.startswith("sso-h-") and len(odd) == 46
    assert odd != username_for_sub("CN=Bob,OU=People")


def test_logout_ends_the_session_and_goes_to_the_provider(client, sso):
    make_tenant(slug="demo")
    _sign_in(client, sso, "dave", {"groups": ["demo"]})
    response = client.post("/oidc/logout/")
    assert response.status_code == 302
    assert response["Location"].startswith(f"{sso}/oauth2/end_session?")
    assert "id_token_hint" in parse_qs(urlsplit(response["Location"]).query)
    assert "_auth_user_id" not in client.session


def test_login_context_flag_and_urls_follow_the_configuration(rf, sso):
    from apps.tenants.sso.context import sso as sso_context

    assert sso_context(rf.get("/")) == {"oidc_enabled": True}


def test_without_configuration_nothing_of_sso_is_active(rf):
    from django.conf import settings

    from apps.tenants.sso.context import sso as sso_context

    assert sso_context(rf.get("/")) == {"oidc_enabled": False}
    assert "apps.tenants.sso.backend.GryviaOIDCBackend" not in settings.AUTHENTICATION_BACKENDS
    with pytest.raises(NoReverseMatch):
        reverse("oidc_authentication_init")


def test_the_sso_button_shows_only_when_configured(rf, sso):
    from django.template.loader import render_to_string

    request = rf.get("/login/")
    html = render_to_string("dashboard/_sso_button.html", {"next": "/jobs/"}, request=request)
    assert "Sign in with SSO" in html and 'href="/oidc/authenticate/?next=/jobs/"' in html
    with override_settings(GRYVIA_OIDC_ENABLED=False):
        assert "Sign in with SSO" not in render_to_string("dashboard/_sso_button.html", {}, request=request)


def test_the_login_page_offers_sso_only_when_configured(client, sso):
    page = client.get("/login/?next=/jobs/").content.decode()
    assert "Sign in with SSO" in page and "/oidc/authenticate/?next=/jobs/" in page
    with override_settings(GRYVIA_OIDC_ENABLED=False):
        assert "Sign in with SSO" not in client.get("/login/").content.decode()

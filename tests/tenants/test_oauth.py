"""OAuth2 / OIDC: tokens from Gryvia's own provider (authorization code + PKCE, device flow) on /api/v1/.

Acceptance: an access token obtained through authorization code + PKCE works on /api/v1/ for the user's tenants
only; revoking it gives 401.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from html.parser import HTMLParser
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from django.test import Client
from jwcrypto import jwk, jwt
from oauth2_provider.models import get_access_token_model, get_application_model

from apps.tenants import services
from apps.tenants.models import ApiKey
from tests.factories import ACTOR, client_for, make_user

REDIRECT_URI = "http://127.0.0.1/callback"
PASSWORD = "pw-for-tests-1"


class _FormInputs(HTMLParser):
    """The named <input> fields of the page's form(s): what a browser would submit."""

    def __init__(self) -> None:
        super().__init__()
        self.fields: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag != "input":
            return
        attr = dict(attrs)
        if attr.get("name") and attr.get("type") != "submit":
            self.fields[attr["name"]] = attr.get("value") or ""


def _form_fields(html: str) -> dict[str, str]:
    parser = _FormInputs()
    parser.feed(html)
    return parser.fields


def _pkce_pair() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


@pytest.fixture
def app(db):
    Application = get_application_model()
    return Application.objects.create(
        name="test cli",
        client_id="test-cli",
        client_type=Application.CLIENT_PUBLIC,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris=REDIRECT_URI,
        skip_authorization=False,
        algorithm=Application.RS256_ALGORITHM,
    )


@pytest.fixture
def user_a(tenant_a, tenant_b):
    """A user who is an admin of tenant alpha only (bravo exists but is not theirs)."""
    user = make_user("alice", password=PASSWORD)
    services.membership_add(actor=ACTOR, tenant=tenant_a, user=user, role="admin")
    return user


@pytest.fixture
def keys(tenant_a, tenant_b):
    """One key in each tenant, created before the token is used."""
    a, _ = services.api_key_create(actor=ACTOR, tenant=tenant_a, scopes=["jobs:read"], name="alpha-key")
    b, _ = services.api_key_create(actor=ACTOR, tenant=tenant_b, scopes=["jobs:read"], name="bravo-key")
    return a, b


def _authorize(app, user, scope: str) -> tuple[Client, str, str]:
    """Log in, open the consent page, allow it, and return (browser, code, verifier)."""
    browser = Client()
    assert browser.login(username=user.username, password=PASSWORD)
    verifier, challenge = _pkce_pair()
    state = secrets.token_urlsafe(16)
    params = {
        "response_type": "code",
        "client_id": app.client_id,
        "redirect_uri": REDIRECT_URI,
        "scope": scope,
        "state": state,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
    }
    page = browser.get("/o/authorize/", params)
    assert page.status_code == 200, page.content[:500]
    fields = _form_fields(page.content.decode())
    # The consent form carries the request through, PKCE challenge included.
    assert fields["client_id"] == app.client_id
    assert fields["code_challenge"] == challenge
    assert fields["code_challenge_method"] == "S256"
    assert "csrfmiddlewaretoken" in fields
    consent = browser.post("/o/authorize/", {**fields, "allow": "Authorize"})
    assert consent.status_code == 302, consent.content[:500]
    location = urlsplit(consent["Location"])
    assert f"{location.scheme}://{location.netloc}{location.path}" == REDIRECT_URI
    query = parse_qs(location.query)
    assert query["state"] == [state]
    return browser, query["code"][0], verifier


def _form_post(path: str, data: dict, client: Client | None = None):
    """POST as an OAuth client does: application/x-www-form-urlencoded."""
    return (client or Client()).post(path, urlencode(data), content_type="application/x-www-form-urlencoded")


def _exchange(code: str, app, **extra):
    body = {"grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT_URI, "client_id": app.client_id}
    body.update({k: v for k, v in extra.items() if v is not None})
    return _form_post("/o/token/", body)


def _token(app, user, scope: str = "openid read write") -> dict:
    _browser, code, verifier = _authorize(app, user, scope)
    response = _exchange(code, app, code_verifier=verifier)
    assert response.status_code == 200, response.content
    return response.json()


def test_authorize_requires_pkce(app, user_a):
    browser = Client()
    assert browser.login(username=user_a.username, password=PASSWORD)
    page = browser.get(
        "/o/authorize/",
        {"response_type": "code", "client_id": app.client_id, "redirect_uri": REDIRECT_URI, "scope": "read"},
    )
    # PKCE_REQUIRED: without a code_challenge the client gets an error redirect, never a code.
    assert page.status_code == 302
    query = parse_qs(urlsplit(page["Location"]).query)
    assert "code" not in query
    assert query["error"] == ["invalid_request"]
    assert "challenge" in query["error_description"][0].lower()


@pytest.mark.parametrize("verifier", [None, "wrong-" + "x" * 50])
def test_code_exchange_needs_the_right_verifier(app, user_a, verifier):
    _browser, code, real_verifier = _authorize(app, user_a, "openid read write")
    response = _exchange(code, app, code_verifier=verifier)
    assert response.status_code == 400, response.content
    assert "access_token" not in response.json()
    assert response.json()["error"] in ("invalid_request", "invalid_grant")
    assert not get_access_token_model().objects.exists()


def test_pkce_token_works_for_the_users_tenants_only_and_revocation_gives_401(app, user_a, keys):
    key_a, key_b = keys
    issued = _token(app, user_a)
    assert issued["token_type"] == "Bearer"
    assert set(issued["scope"].split()) == {"openid", "read", "write"}
    api = client_for(issued["access_token"])

    listed = api.get("/api/v1/api-keys/")
    assert listed.status_code == 200, listed.content
    ids = {row["id"] for row in listed.json()["results"]}
    assert key_a.key_id in ids
    assert key_b.key_id not in ids
    assert {row["tenant"] for row in listed.json()["results"]} == {"alpha"}

    assert api.get(f"/api/v1/api-keys/{key_a.key_id}/").status_code == 200
    assert api.get(f"/api/v1/api-keys/{key_b.key_id}/").status_code == 404

    tenants = api.get("/api/v1/tenants/")
    assert tenants.status_code == 200
    assert [row["slug"] for row in tenants.json()["results"]] == ["alpha"]
    assert api.get("/api/v1/tenants/bravo/").status_code == 404

    revoked = _form_post("/o/revoke_token/", {"token": issued["access_token"], "client_id": app.client_id})
    assert revoked.status_code == 200, revoked.content
    after = api.get("/api/v1/api-keys/")
    assert after.status_code == 401
    assert api.get("/api/v1/tenants/").status_code == 401


def test_write_scope_token_can_create_a_key_in_its_tenant(app, user_a, keys):
    api = client_for(_token(app, user_a)["access_token"])
    created = api.post("/api/v1/api-keys/", {"scopes": ["jobs:read"], "name": "via-oauth"}, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["tenant"] == "alpha"
    assert created.json()["key"].startswith("gry_")


def test_read_scope_token_can_read_but_not_write(app, user_a, keys):
    issued = _token(app, user_a, scope="read")
    assert issued["scope"] == "read"
    api = client_for(issued["access_token"])
    listed = api.get("/api/v1/api-keys/")
    assert listed.status_code == 200
    assert keys[0].key_id in {row["id"] for row in listed.json()["results"]}
    denied = api.post("/api/v1/api-keys/", {"scopes": ["jobs:read"], "name": "nope"}, format="json")
    assert denied.status_code == 403, denied.content
    assert not ApiKey.all_tenants.filter(name="nope").exists()


def test_openid_only_token_reads_no_tenant_data(app, user_a, keys):
    """`openid` alone is consent to identity (userinfo), not to the user's tenants' objects."""
    issued = _token(app, user_a, scope="openid")
    assert issued["scope"] == "openid"
    api = client_for(issued["access_token"])
    assert api.get("/api/v1/api-keys/").status_code == 403
    assert api.get("/api/v1/tenants/").status_code == 403
    assert api.get("/o/userinfo/").json()["memberships"] == [{"tenant": "alpha", "role": "admin"}]


def test_bogus_bearer_token_is_401(db):
    assert client_for("not-a-real-token").get("/api/v1/api-keys/").status_code == 401


def test_id_token_and_userinfo_carry_memberships(app, user_a):
    issued = _token(app, user_a)
    expected = [{"tenant": "alpha", "role": "admin"}]

    jwks = Client().get("/o/.well-known/jwks.json")
    assert jwks.status_code == 200
    keyset = jwk.JWKSet.from_json(jwks.content.decode())
    id_token = jwt.JWT(jwt=issued["id_token"], key=keyset, expected_type="JWS")  # verifies the RS256 signature
    claims = json.loads(id_token.claims)
    assert claims["aud"] == app.client_id
    assert claims["sub"] == str(user_a.pk)
    assert claims["memberships"] == expected
    assert claims["preferred_username"] == "alice"

    userinfo = client_for(issued["access_token"]).get("/o/userinfo/")
    assert userinfo.status_code == 200, userinfo.content
    assert userinfo.json()["memberships"] == expected
    assert userinfo.json()["sub"] == str(user_a.pk)


DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"


def test_device_flow_token_works_on_the_api(user_a, keys):
    Application = get_application_model()
    app = Application.objects.create(
        name="test device cli",
        client_id="test-device-cli",
        client_type=Application.CLIENT_PUBLIC,
        authorization_grant_type=Application.GRANT_DEVICE_CODE,
        algorithm=Application.RS256_ALGORITHM,
    )
    started = _form_post("/o/device-authorization/", {"client_id": app.client_id, "scope": "read"})
    assert started.status_code == 200, started.content
    grant = started.json()
    assert grant["verification_uri"], "OAUTH_DEVICE_VERIFICATION_URI must be set for RFC 8628 clients"
    poll = {"grant_type": DEVICE_GRANT, "device_code": grant["device_code"], "client_id": app.client_id}
    pending = _form_post("/o/token/", poll)
    assert pending.status_code == 400
    assert pending.json()["error"] == "authorization_pending"

    browser = Client()
    assert browser.login(username=user_a.username, password=PASSWORD)
    entered = browser.post("/o/device/", {"user_code": grant["user_code"]})
    assert entered.status_code == 302
    confirmed = browser.post(entered["Location"], {"action": "accept"})
    assert confirmed.status_code == 302

    issued = _form_post("/o/token/", poll)
    assert issued.status_code == 200, issued.content
    assert issued.json()["scope"] == "read"
    api = client_for(issued.json()["access_token"])
    listed = api.get("/api/v1/api-keys/")
    assert listed.status_code == 200
    assert {row["tenant"] for row in listed.json()["results"]} == {"alpha"}
    assert api.post("/api/v1/api-keys/", {"scopes": ["jobs:read"]}, format="json").status_code == 403


def test_a_member_who_is_not_staff_signs_in_on_the_login_page_to_authorize(app, user_a):
    assert not user_a.is_staff
    browser = Client()
    verifier, challenge = _pkce_pair()
    query = urlencode(
        {
            "response_type": "code",
            "client_id": app.client_id,
            "redirect_uri": REDIRECT_URI,
            "scope": "read",
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        }
    )
    first = browser.get(f"/o/authorize/?{query}")
    assert first.status_code == 302 and first["Location"].startswith("/accounts/login/")
    page = browser.get(first["Location"])
    assert page.status_code == 200 and b'name="password"' in page.content
    signed_in = browser.post(
        "/accounts/login/", {"username": user_a.username, "password": PASSWORD, "next": f"/o/authorize/?{query}"}
    )
    assert signed_in.status_code == 302 and signed_in["Location"].startswith("/o/authorize/")
    consent = browser.get(signed_in["Location"])
    assert consent.status_code == 200 and "code_challenge" in _form_fields(consent.content.decode())

"""OAuth at the current best practice (RFC 9700), and the provider serving only what it advertises (issue 28, items 1
and 6): hashed token storage, refresh-token replay detection, PKCE S256 only, RFC 9207 `iss`, http redirects only to
loopback, the device endpoint only for device clients, discovery naming only the code flow."""

from __future__ import annotations

import hashlib
from urllib.parse import parse_qs, urlsplit

import httpx
from django.test import Client
from oauth2_provider.models import get_access_token_model, get_application_model, get_refresh_token_model

from tests.core.test_security_http import site  # noqa: F401 - the real server on loopback
from tests.factories import client_for
from tests.tenants.test_oauth import (  # noqa: F401 - fixtures
    PASSWORD,
    REDIRECT_URI,
    _form_fields,
    _form_post,
    _pkce_pair,
    _token,
    app,
    keys,
    user_a,
)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def test_access_and_refresh_tokens_are_stored_as_digests_only(app, user_a):  # noqa: F811
    issued = _token(app, user_a)
    access = get_access_token_model().objects.get()
    refresh = get_refresh_token_model().objects.get()
    assert (access.token, access.token_checksum) == ("", _digest(issued["access_token"]))
    assert (refresh.token, refresh.token_checksum) == ("", _digest(issued["refresh_token"]))
    # Looked up by digest, the token still works.
    assert client_for(issued["access_token"]).get("/api/v1/tenants/").status_code == 200


def test_a_replayed_refresh_token_revokes_the_whole_family(app, user_a):  # noqa: F811
    first = _token(app, user_a)
    body = {"grant_type": "refresh_token", "refresh_token": first["refresh_token"], "client_id": app.client_id}
    second = _form_post("/o/token/", body)
    assert second.status_code == 200, second.content
    fresh = second.json()["access_token"]
    assert client_for(fresh).get("/api/v1/tenants/").status_code == 200

    replayed = _form_post("/o/token/", body)  # someone else holds the old refresh token
    assert replayed.status_code == 400
    assert client_for(fresh).get("/api/v1/tenants/").status_code == 401
    rotated = {**body, "refresh_token": second.json()["refresh_token"]}
    assert _form_post("/o/token/", rotated).status_code == 400


def _authorize(app, user, **params):  # noqa: F811
    """Log in, open the consent page; if it is shown, allow it. Returns the last answer."""
    browser = Client()
    assert browser.login(username=user.username, password=PASSWORD)
    query = {
        "response_type": "code",
        "client_id": app.client_id,
        "redirect_uri": REDIRECT_URI,
        "scope": "read",
        "state": "s1",
        **params,
    }
    page = browser.get("/o/authorize/", query)
    if page.status_code != 200:
        return page
    return browser.post("/o/authorize/", {**_form_fields(page.content.decode()), "allow": "Authorize"})


def _pkce(method: str = "S256") -> dict[str, str]:
    verifier, challenge = _pkce_pair()
    return {"code_challenge": verifier if method == "plain" else challenge, "code_challenge_method": method}


def test_pkce_plain_is_refused(app, user_a):  # noqa: F811
    answer = _authorize(app, user_a, **_pkce("plain"))
    assert answer.status_code == 302, answer.content[:300]
    query = parse_qs(urlsplit(answer["Location"]).query)
    assert "code" not in query and query["error"] == ["invalid_request"]
    assert "S256" in query["error_description"][0]


def test_the_authorization_response_names_the_issuer(app, user_a):  # noqa: F811
    answer = _authorize(app, user_a, **_pkce())
    assert answer.status_code == 302, answer.content[:300]
    query = parse_qs(urlsplit(answer["Location"]).query)
    assert "code" in query
    assert query["iss"] == ["http://testserver/o"]


def test_http_redirect_uris_are_for_loopback_native_clients_only(user_a):  # noqa: F811
    Application = get_application_model()
    web = Application.objects.create(
        name="plain http web app",
        client_id="http-web",
        client_type=Application.CLIENT_PUBLIC,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris="http://app.example.com/callback",
        algorithm=Application.RS256_ALGORITHM,
    )
    # Never redirected to the plain-http address (neither a code nor an error travels there): refused on this page.
    refused = _authorize(web, user_a, redirect_uri="http://app.example.com/callback", **_pkce())
    assert refused.status_code == 400, refused.content[:300]
    assert b"redirect" in refused.content.lower()
    # A confidential client is not a native app: not even loopback over http.
    web.redirect_uris, web.client_type = REDIRECT_URI, Application.CLIENT_CONFIDENTIAL
    web.save()
    assert _authorize(web, user_a, **_pkce()).status_code == 400
    # The public (native) client on loopback gets its code, as the gryvia CLI does.
    web.client_type = Application.CLIENT_PUBLIC
    web.save()
    answer = _authorize(web, user_a, **_pkce())
    assert answer.status_code == 302 and "code" in parse_qs(urlsplit(answer["Location"]).query)


def test_the_device_endpoint_refuses_a_client_not_registered_for_the_device_flow(site, app):  # noqa: F811
    refused = httpx.post(f"{site}/o/device-authorization/", data={"client_id": app.client_id, "scope": "read"})
    assert refused.status_code in (400, 401), refused.text
    assert refused.json()["error"] == "unauthorized_client"
    assert "device flow" in refused.json()["error_description"]
    assert "user_code" not in refused.json()


def test_discovery_advertises_only_what_is_served(site):  # noqa: F811
    config = httpx.get(f"{site}/o/.well-known/openid-configuration").json()
    assert config["response_types_supported"] == ["code"]
    assert config["code_challenge_methods_supported"] == ["S256"]
    assert config["authorization_response_iss_parameter_supported"] is True

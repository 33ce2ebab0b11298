"""/ws/events/ through the real server on loopback, with a real websocket client: a socket lives only as long as its
credential (revoked, expired, its tenant suspended, its membership removed: closed within seconds, and no subscribe
meanwhile), its origin is checked whole (scheme, host and port), and a missing credential gets the close code the
docs promise (4401).

The changes are made as a user makes them, through the server's REST API and /o/revoke_token/, so each notice
travels the channel layer of the profile (in-process, or channels-redis)."""

from __future__ import annotations

import datetime as dt
import json
import secrets
from collections.abc import Iterator

import httpx
import pytest
from django.test import Client
from django.utils import timezone
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from apps.tenants import services
from apps.tenants.models import ApiKey
from tests.factories import ACTOR, make_key, make_tenant, make_user
from tests.llm.gateway_env import ServerThread

pytestmark = pytest.mark.django_db(transaction=True)

WAIT_S = 10  # the longest a socket may take to close after its credential died ("within seconds")


@pytest.fixture
def server() -> Iterator[ServerThread]:
    server = ServerThread().start()
    yield server
    server.stop()


def _base(server: ServerThread) -> str:
    return f"http://127.0.0.1:{server.port}"


def _open(server: ServerThread, *, token: str | None = None, cookie: str = "", origin: str = "") -> ClientConnection:
    headers = {}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if cookie:
        headers["Cookie"] = cookie
    return connect(
        f"ws://127.0.0.1:{server.port}/ws/events/",
        origin=origin or _base(server),
        additional_headers=headers,
        open_timeout=WAIT_S,
    )


def _ask(ws: ClientConnection, **message: str) -> dict:
    ws.send(json.dumps(message))
    return json.loads(ws.recv(timeout=WAIT_S))


def _closed_with(ws: ClientConnection) -> int:
    """Read until the server closes the socket (events before the close are fine); the close code."""
    with pytest.raises(ConnectionClosed) as closed:
        while True:
            ws.recv(timeout=WAIT_S)  # a TimeoutError here: the socket stayed open
    return closed.value.rcvd.code


def _api(server: ServerThread, token: str) -> httpx.Client:
    return httpx.Client(base_url=_base(server), headers={"Authorization": f"Bearer {token}"}, timeout=WAIT_S)


def _key_id(plaintext: str) -> str:
    return plaintext.split("_")[1]


# --- a dead credential closes its sockets -------------------------------------------------------------------------


def test_revoking_the_key_closes_its_socket(server, tenant_a, key_a):
    other_admin = make_key(tenant_a, ["admin"], name="other-admin")
    with _open(server, token=key_a) as ws:
        assert _ask(ws, action="subscribe", tenant="alpha")["type"] == "subscribed"
        with _api(server, other_admin) as api:
            assert api.post(f"/api/v1/api-keys/{_key_id(key_a)}/revoke/").status_code == 200
        assert _closed_with(ws) == 4401


def test_a_key_revoked_elsewhere_cannot_subscribe(server, tenant_a, key_a):
    """A change no notice announced (made by another process of the embedded profile, say): the next subscribe
    checks the key again and closes the socket instead of subscribing."""
    with _open(server, token=key_a) as ws:
        assert _ask(ws, action="subscribe", tenant="alpha")["type"] == "subscribed"
        ApiKey.all_tenants.filter(key_id=_key_id(key_a)).update(revoked_at=timezone.now())
        ws.send(json.dumps({"action": "subscribe", "kind": "api_key", "id": _key_id(key_a)}))
        assert _closed_with(ws) == 4401


def test_the_keys_expiry_closes_its_socket(server, tenant_a):
    expiring = make_key(tenant_a, ["admin"], expires_at=timezone.now() + dt.timedelta(seconds=2))
    with _open(server, token=expiring) as ws:
        assert _ask(ws, action="subscribe", tenant="alpha")["type"] == "subscribed"
        assert _closed_with(ws) == 4401


def test_moving_the_keys_expiry_earlier_moves_the_close(server, tenant_a, key_a):
    later = make_key(tenant_a, ["admin"], expires_at=timezone.now() + dt.timedelta(days=1))
    with _open(server, token=later) as ws:
        assert _ask(ws, action="subscribe", tenant="alpha")["type"] == "subscribed"
        soon = (timezone.now() + dt.timedelta(seconds=2)).isoformat()
        with _api(server, key_a) as api:
            assert api.patch(f"/api/v1/api-keys/{_key_id(later)}/", json={"expires_at": soon}).status_code == 200
        assert _closed_with(ws) == 4401


def _oauth_app():
    from oauth2_provider.models import get_application_model

    Application = get_application_model()
    return Application.objects.create(
        name="ws test",
        client_id=f"ws-{secrets.token_hex(4)}",
        client_type=Application.CLIENT_PUBLIC,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris="http://127.0.0.1:8765/callback",
    )


def _oauth_token(user, application, *, seconds: int = 3600) -> str:
    from oauth2_provider.models import get_access_token_model, set_token_value

    raw = secrets.token_urlsafe(32)
    token = get_access_token_model()(
        user=user, application=application, scope="read write", expires=timezone.now() + dt.timedelta(seconds=seconds)
    )
    set_token_value(token, raw)  # stored as the toolkit's settings say (hashed or not)
    token.save()
    return raw


@pytest.fixture
def viewer_a(tenant_a, tenant_b):
    user = make_user("wsviewer")
    services.membership_add(actor=ACTOR, tenant=tenant_a, user=user, role="viewer")
    return user


def test_revoking_the_oauth_token_closes_its_socket(server, viewer_a):
    application = _oauth_app()
    token = _oauth_token(viewer_a, application)
    with _open(server, token=token) as ws:
        assert _ask(ws, action="subscribe", tenant="alpha")["type"] == "subscribed"
        revoked = httpx.post(
            f"{_base(server)}/o/revoke_token/", data={"token": token, "client_id": application.client_id}
        )
        assert revoked.status_code == 200, revoked.text
        assert _closed_with(ws) == 4401


def test_the_oauth_tokens_expiry_closes_its_socket(server, viewer_a):
    token = _oauth_token(viewer_a, _oauth_app(), seconds=2)
    with _open(server, token=token) as ws:
        assert _ask(ws, action="subscribe", tenant="alpha")["type"] == "subscribed"
        assert _closed_with(ws) == 4401


def test_suspending_the_tenant_closes_its_sockets(server, tenant_a, key_a):
    staff = make_key(make_tenant("ops"), ["admin"], platform=True)
    with _open(server, token=key_a) as ws, _open(server, token=staff) as staff_ws:
        assert _ask(ws, action="subscribe", tenant="alpha")["type"] == "subscribed"
        assert _ask(staff_ws, action="subscribe", tenant="alpha")["type"] == "subscribed"
        with _api(server, staff) as api:
            assert api.patch("/api/v1/tenants/alpha/", json={"suspended": True}).status_code == 200
        assert _closed_with(ws) == 4403  # the key is refused, as over REST and at the LLM gateway
        # Platform staff keep watching: the suspension's own event still reaches them.
        assert json.loads(staff_ws.recv(timeout=WAIT_S))["event"] == "tenant.update"
    with _open(server, token=key_a) as again:  # and a new socket is refused at once, saying why
        assert _closed_with(again) == 4403


def test_removing_the_membership_closes_the_users_socket(server, tenant_a, key_a, viewer_a):
    browser = Client()
    assert browser.login(username="wsviewer", password="pw-for-tests-1")
    with _open(server, cookie=f"sessionid={browser.cookies['sessionid'].value}") as ws:
        assert _ask(ws, action="subscribe", tenant="alpha")["type"] == "subscribed"
        with _api(server, key_a) as api:
            assert api.delete("/api/v1/tenants/alpha/members/wsviewer/").status_code == 204
        assert _closed_with(ws) == 4403


# --- the handshake ------------------------------------------------------------------------------------------------


def test_a_missing_or_bad_credential_gets_close_code_4401(server, tenant_a):
    for token in (None, "gry_nosuchkey_notasecret", "not-an-oauth-token"):
        with _open(server, token=token) as ws:
            assert _closed_with(ws) == 4401


@pytest.mark.parametrize(
    "origin",
    ["http://127.0.0.1:9999", "http://localhost:31337", "https://127.0.0.1:{port}", "http://evil.example:{port}"],
)
def test_another_origin_is_refused_even_on_the_same_host(server, viewer_a, origin):
    browser = Client()
    assert browser.login(username="wsviewer", password="pw-for-tests-1")
    cookie = f"sessionid={browser.cookies['sessionid'].value}"
    with pytest.raises(InvalidStatus) as refused:
        _open(server, cookie=cookie, origin=origin.format(port=server.port))
    assert refused.value.response.status_code == 403
    with _open(server, cookie=cookie) as ws:  # the page's own origin: scheme, host and port all equal
        assert _ask(ws, action="subscribe", tenant="alpha")["type"] == "subscribed"

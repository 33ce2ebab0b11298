"""Live events on /ws/events/.

Acceptance: a websocket client of tenant A receives the event after commit, nothing on rollback, nothing for
tenant B's objects.

Each "nothing" is checked twice: `receive_nothing` right away, then a later committed write in A whose event must be
the very next message (events arrive in order, so a leaked or rolled-back event would come first).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import secrets

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.db import transaction
from django.test import Client
from django.utils import timezone

from apps.core import events
from apps.tenants import services
from apps.tenants.models import ApiKey
from gryvia_site.asgi import application
from tests.factories import ACTOR, make_key, make_user

pytestmark = pytest.mark.django_db(transaction=True)

ORIGIN = (b"origin", b"http://testserver")
HOST = (b"host", b"testserver")  # the origin check compares the Origin with the request's own (apps.core.ws)
QUIET = 0.3  # seconds to wait for a message that must not come


class Boom(Exception):
    pass


@pytest.fixture(autouse=True)
def _clean_channel_layer():
    yield
    layer = get_channel_layer()
    if layer is not None:  # on the loop plain sync code sends on, whose connections a flush closes
        events.on_layer_loop(layer.flush)


def _headers(token: str | None, *extra: tuple[bytes, bytes]) -> list[tuple[bytes, bytes]]:
    headers = [ORIGIN, HOST, *extra]
    if token is not None:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    return headers


@contextlib.asynccontextmanager
async def connected(token: str | None, *extra: tuple[bytes, bytes]):
    communicator = WebsocketCommunicator(application, "/ws/events/", headers=_headers(token, *extra))
    ok, code = await communicator.connect()
    assert ok, f"websocket refused (close code {code})"
    try:
        yield communicator
    finally:
        await communicator.disconnect()


async def subscribe(communicator: WebsocketCommunicator, **target: str) -> dict:
    await communicator.send_json_to({"action": "subscribe", **target})
    return await communicator.receive_json_from(timeout=2)


@database_sync_to_async
def create_key(tenant, name: str) -> ApiKey:
    key, _ = services.api_key_create(actor=ACTOR, tenant=tenant, scopes=["jobs:read"], name=name)
    return key


@database_sync_to_async
def rename_key(key: ApiKey, name: str) -> ApiKey:
    return services.api_key_update(actor=ACTOR, key=key, name=name)


async def next_event(communicator: WebsocketCommunicator) -> dict:
    message = await communicator.receive_json_from(timeout=2)
    assert message["type"] == "event", message
    return message


def _name() -> str:
    return f"k-{secrets.token_hex(4)}"


async def test_tenant_subscriber_receives_event_after_commit(tenant_a, key_a):
    async with connected(key_a) as ws:
        assert await subscribe(ws, tenant="alpha") == {"type": "subscribed", "target": "tenant 'alpha'"}
        name = _name()
        seen_before_commit: list[bool] = []

        def write_and_wait_inside_transaction() -> ApiKey:
            with transaction.atomic():
                key, _ = services.api_key_create(actor=ACTOR, tenant=tenant_a, scopes=["jobs:read"], name=name)
                # The row is written but not committed: nothing may reach the client yet.
                seen_before_commit.append(not async_to_sync(ws.receive_nothing)(QUIET))
            return key

        # Not thread-sensitive: the consumer needs the shared sync thread (close_old_connections) to deliver
        # anything, so holding that thread open would hide an early send.
        key = await database_sync_to_async(write_and_wait_inside_transaction, thread_sensitive=False)()
        assert seen_before_commit == [False]
        event = await next_event(ws)
        assert event["event"] == "api_key.create"
        assert event["kind"] == "api_key"
        assert event["id"] == key.key_id
        assert event["data"]["name"] == name
        assert event["data"]["scopes"] == ["jobs:read"]
        assert "secret_digest" not in event["data"]
        assert await ws.receive_nothing(QUIET)


async def test_rolled_back_write_sends_nothing(tenant_a, key_a):
    async with connected(key_a) as ws:
        await subscribe(ws, tenant="alpha")
        doomed = _name()

        @database_sync_to_async
        def write_then_fail() -> None:
            with transaction.atomic():
                services.api_key_create(actor=ACTOR, tenant=tenant_a, scopes=["jobs:read"], name=doomed)
                raise Boom

        with pytest.raises(Boom):
            await write_then_fail()
        assert not await database_sync_to_async(ApiKey.all_tenants.filter(name=doomed).exists)()
        assert await ws.receive_nothing(QUIET)

        kept = await create_key(tenant_a, _name())
        event = await next_event(ws)
        assert (event["event"], event["id"]) == ("api_key.create", kept.key_id)


async def test_other_tenants_writes_are_not_delivered(tenant_a, tenant_b, key_a):
    async with connected(key_a) as ws:
        await subscribe(ws, tenant="alpha")
        b_key = await create_key(tenant_b, _name())
        await rename_key(b_key, "renamed-in-bravo")
        assert await ws.receive_nothing(QUIET)

        a_key = await create_key(tenant_a, _name())
        event = await next_event(ws)
        assert event["id"] == a_key.key_id
        assert await ws.receive_nothing(QUIET)


async def test_events_of_one_transaction_arrive_one_by_one_in_order(tenant_a, key_a):
    """Several events for one group travel as one batch message (apps.core.events); the client still gets one
    message per event, in the order they were recorded, and nothing else."""
    async with connected(key_a) as ws:
        await subscribe(ws, tenant="alpha")
        names = [_name() for _ in range(3)]

        @database_sync_to_async
        def create_three() -> list[ApiKey]:
            with transaction.atomic():
                return [
                    services.api_key_create(actor=ACTOR, tenant=tenant_a, scopes=["jobs:read"], name=name)[0]
                    for name in names
                ]

        keys = await create_three()
        got = [await next_event(ws) for _ in keys]
        assert [(e["event"], e["id"], e["data"]["name"]) for e in got] == [
            ("api_key.create", key.key_id, name) for key, name in zip(keys, names, strict=True)
        ]
        assert all("_tenant_id" not in e and "_scope" not in e for e in got)
        assert await ws.receive_nothing(QUIET)


async def test_subscribing_to_another_tenant_is_refused_and_not_joined(tenant_a, tenant_b, key_a):
    async with connected(key_a) as ws:
        refused = await subscribe(ws, tenant="bravo")
        assert refused == {"type": "error", "message": "tenant 'bravo' not found"}
        # The same answer as for a tenant that does not exist: no existence leak.
        assert (await subscribe(ws, tenant="nosuch"))["message"] == "tenant 'nosuch' not found"

        await create_key(tenant_b, _name())
        assert await ws.receive_nothing(QUIET)


async def test_object_subscription_in_own_tenant_only(tenant_a, tenant_b, key_a):
    mine = await create_key(tenant_a, _name())
    other_a = await create_key(tenant_a, _name())
    theirs = await create_key(tenant_b, _name())
    async with connected(key_a) as ws:
        refused = await subscribe(ws, kind="api_key", id=theirs.key_id)
        assert refused == {"type": "error", "message": f"api_key {theirs.key_id!r} not found"}
        assert (await subscribe(ws, kind="secret", id=mine.key_id))["type"] == "error"  # unknown kind
        assert await subscribe(ws, kind="api_key", id=mine.key_id) == {
            "type": "subscribed",
            "target": f"api_key {mine.key_id!r}",
        }

        await rename_key(theirs, "bravo-renamed")  # refused subscription: nothing
        await rename_key(other_a, "other-renamed")  # same tenant, not the watched object: nothing
        assert await ws.receive_nothing(QUIET)

        await rename_key(mine, "mine-renamed")
        event = await next_event(ws)
        assert (event["event"], event["id"], event["data"]["name"]) == ("api_key.update", mine.key_id, "mine-renamed")
        assert await ws.receive_nothing(QUIET)


async def test_unsubscribe_stops_delivery(tenant_a, key_a):
    async with connected(key_a) as ws:
        await subscribe(ws, tenant="alpha")
        await ws.send_json_to({"action": "unsubscribe", "tenant": "alpha"})
        assert await ws.receive_json_from(timeout=2) == {"type": "unsubscribed", "target": "tenant 'alpha'"}
        await create_key(tenant_a, _name())
        assert await ws.receive_nothing(QUIET)


async def closed_with_4401(headers: list[tuple[bytes, bytes]], reason: str = "no valid credential") -> None:
    """Accepted, then closed with 4401 at once (a close before the accept would reach a real client as an HTTP 403,
    with no code: tests/core/test_events_ws_live.py)."""
    communicator = WebsocketCommunicator(application, "/ws/events/", headers=headers)
    assert (await communicator.connect())[0]
    assert await communicator.receive_output(timeout=2) == {
        "type": "websocket.close",
        "code": 4401,
        "reason": reason,  # an API key's: what REST and the LLM gateway say of it
    }
    await communicator.disconnect()


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        (None, "no valid credential"),
        ("gry_nosuchkey_notasecret", "invalid API key"),
        ("not-an-oauth-token", "no valid credential"),
    ],
)
async def test_no_or_bad_credential_is_refused(tenant_a, token, reason):
    await closed_with_4401(_headers(token), reason)


async def test_revoked_key_is_refused(tenant_a, key_a):
    @database_sync_to_async
    def revoke() -> None:
        services.api_key_revoke(actor=ACTOR, key=ApiKey.all_tenants.get(key_id=key_a.split("_")[1]))

    await revoke()
    await closed_with_4401(_headers(key_a), f"API key {key_a.split('_')[1]} was revoked")


async def test_foreign_origin_is_refused(tenant_a, key_a):
    communicator = WebsocketCommunicator(
        application,
        "/ws/events/",
        headers=[(b"origin", b"http://evil.example"), HOST, (b"authorization", f"Bearer {key_a}".encode())],
    )
    ok, _code = await communicator.connect()
    assert not ok
    await communicator.disconnect()


def _oauth_token(user, *, scope: str = "read write", expires_in: int = 3600) -> str:
    from oauth2_provider.models import get_access_token_model

    token = secrets.token_urlsafe(32)
    get_access_token_model().objects.create(
        user=user, token=token, scope=scope, expires=timezone.now() + dt.timedelta(seconds=expires_in)
    )
    return token


@pytest.fixture
def member_a(tenant_a, tenant_b):
    user = make_user("wsuser")
    services.membership_add(actor=ACTOR, tenant=tenant_a, user=user, role="viewer")
    return user


async def test_oauth_token_sees_the_users_tenants_only(tenant_a, tenant_b, member_a):
    token = await database_sync_to_async(_oauth_token)(member_a)
    async with connected(token) as ws:
        assert (await subscribe(ws, tenant="bravo"))["type"] == "error"
        assert (await subscribe(ws, tenant="alpha"))["type"] == "subscribed"
        await create_key(tenant_b, _name())
        a_key = await create_key(tenant_a, _name())
        event = await next_event(ws)
        assert event["id"] == a_key.key_id


@pytest.mark.parametrize("kwargs", [{"expires_in": -10}, {"scope": "openid"}], ids=["expired", "openid-only"])
async def test_expired_or_identity_only_oauth_token_is_refused(member_a, kwargs):
    token = await database_sync_to_async(_oauth_token)(member_a, **kwargs)
    await closed_with_4401(_headers(token))


async def test_browser_session_sees_the_users_tenants_only(tenant_a, tenant_b, member_a):
    @database_sync_to_async
    def session_cookie() -> bytes:
        browser = Client()
        assert browser.login(username="wsuser", password="pw-for-tests-1")
        return f"sessionid={browser.cookies['sessionid'].value}".encode()

    async with connected(None, (b"cookie", await session_cookie())) as ws:
        assert (await subscribe(ws, tenant="bravo"))["type"] == "error"
        assert (await subscribe(ws, tenant="alpha"))["type"] == "subscribed"
        a_key = await create_key(tenant_a, _name())
        assert (await next_event(ws))["id"] == a_key.key_id


async def test_events_need_the_scope_that_reads_their_object(tenant_a):
    """A jobs:read key watching its tenant sees tenant changes but no API key changes (keys:read)."""
    jobs_reader = await database_sync_to_async(make_key)(tenant_a, ["jobs:read"])
    async with connected(jobs_reader) as ws:
        await subscribe(ws, tenant="alpha")
        await create_key(tenant_a, _name())
        assert await ws.receive_nothing(QUIET)
        await database_sync_to_async(services.tenant_update)(actor=ACTOR, tenant=tenant_a, display_name=_name())
        event = await next_event(ws)
        assert event["event"] == "tenant.update" and event["id"] == "alpha"
        assert "_scope" not in event and "_tenant_id" not in event

"""One check of an API key at every door: `api_key_verify` decides, REST (and so the CLI's login), the LLM gateway
and websockets answer with the same status and message.

Each rule is exercised through REST (GET /api/v1/api-keys/) and through the gateway (GET /v1/models, served by the
site's ASGI application on loopback), and the two answers are compared; a suspended tenant's key also through a
websocket. The function itself is checked on records built by hand, without a database.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from collections.abc import Callable, Iterator

import httpx
import pytest
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.utils import timezone

from apps.core import events
from apps.core import scopes as S
from apps.core.principal import Refusal
from apps.tenants import keys, services
from apps.tenants.models import ApiKey, Tenant
from apps.tenants.services import KeyRecord, api_key_verify
from gryvia_site.asgi import application
from tests.factories import ACTOR, client_for, make_key, make_tenant
from tests.llm.gateway_env import ServerThread, clear_counters

SCOPES = ["keys:read", "llm:invoke"]  # what both doors' endpoints need
SUSPENDED = "tenant 'alpha' is suspended: its API keys are refused until it is resumed"
NOW = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)


# --- the function, on records built by hand ---------------------------------------------------------------------


def _record(secret: str = "s" * 40, **changes) -> KeyRecord:
    record = KeyRecord(
        pk=7,
        key_id="abcdefghijkl",
        secret_digest=keys.digest(secret),
        previous_secret_digest="",
        previous_valid_until=None,
        expires_at=None,
        revoked_at=None,
        scopes=S.expand(["jobs:write"]),
        is_platform=False,
        bound_to="",
        user_id=None,
        tenant_id=3,
        tenant_slug="alpha",
        tenant_suspended=False,
        tenant_archived=False,
    )
    return dataclasses.replace(record, **changes)


def _verify(record: KeyRecord | None, secret: str = "s" * 40, **kw) -> Refusal | object:
    return api_key_verify(presented=keys.format_key("abcdefghijkl", secret), record=record, now=NOW, **kw)


def test_a_valid_key_is_its_tenants_principal_and_a_platform_key_acts_everywhere():
    principal = _verify(_record())
    assert principal.tenant_scopes == {3: S.expand(["jobs:write"])} and principal.api_key_pk == 7
    assert principal.has_scope("jobs:read", 3) and not principal.has_scope("jobs:read", 4)
    staff = _verify(_record(is_platform=True, scopes=S.ALL_SCOPES))
    assert staff.is_platform and staff.has_scope("jobs:write", 4) and staff.tenant_scopes == {}


@pytest.mark.parametrize(
    ("record", "presented", "expected"),
    [
        (_record(), "gry_abcdefghijkl_short", Refusal(401, "invalid_api_key", "invalid API key")),
        (None, keys.format_key("abcdefghijkl", "s" * 40), Refusal(401, "invalid_api_key", "invalid API key")),
        (_record(), keys.format_key("abcdefghijkl", "t" * 40), Refusal(401, "invalid_api_key", "invalid API key")),
        (_record(), keys.format_key("otherkeyid12", "s" * 40), Refusal(401, "invalid_api_key", "invalid API key")),
    ],
    ids=["malformed", "unknown", "wrong-secret", "another-key-id"],
)
def test_nothing_is_said_about_a_key_to_whoever_lacks_its_secret(record, presented, expected):
    assert api_key_verify(presented=presented, record=record, now=NOW) == expected
    if record is not None:  # nor of the key's state
        revoked = dataclasses.replace(record, revoked_at=NOW, tenant_suspended=True)
        assert api_key_verify(presented=presented, record=revoked, now=NOW) == expected


def test_each_rule_refuses_with_its_status_and_reason():
    hour = dt.timedelta(hours=1)
    old = _record(secret="n" * 40, previous_secret_digest=keys.digest("s" * 40))
    cases = {
        "key_revoked": (_record(revoked_at=NOW - hour), 401),
        "key_expired": (_record(expires_at=NOW), 401),
        "key_rotated": (dataclasses.replace(old, previous_valid_until=NOW - hour), 401),
        "tenant_archived": (_record(tenant_archived=True, tenant_suspended=True, revoked_at=NOW), 401),
        "tenant_suspended": (_record(tenant_suspended=True), 403),
    }
    for code, (record, status) in cases.items():
        refusal = _verify(record)
        assert (refusal.code, refusal.status) == (code, status), code
    assert _verify(_record(expires_at=NOW + hour)).api_key_pk == 7  # not yet expired
    assert _verify(dataclasses.replace(old, previous_valid_until=NOW + hour)).api_key_pk == 7  # within the grace
    assert _verify(old).code == "key_rotated"  # a rotation without grace: the old secret stops at once
    assert _verify(_record(tenant_suspended=True, is_platform=True)).code == "tenant_suspended"
    assert _verify(_record(tenant_suspended=True)).message == SUSPENDED


def test_a_scope_the_door_requires_and_the_key_lacks_is_a_403_naming_it():
    refusal = _verify(_record(), required_scopes=("llm:invoke",))
    assert refusal == Refusal(403, "insufficient_scope", "this key lacks the scope llm:invoke")
    assert _verify(_record(), required_scopes=("jobs:read",)).api_key_pk == 7  # jobs:write grants jobs:read


# --- every rule through REST and through the gateway -------------------------------------------------------------


def _key_id(raw: str) -> str:
    return keys.parse_key(raw)[0]


def _stored(raw: str) -> ApiKey:
    return ApiKey.all_tenants.get(key_id=_key_id(raw))


def _valid(tenant: Tenant) -> str:
    return make_key(tenant, SCOPES)


def _wrong_secret(tenant: Tenant) -> str:
    return keys.format_key(_key_id(make_key(tenant, SCOPES)), "W" * 40)


def _unknown(tenant: Tenant) -> str:
    return keys.format_key("nosuchkey123", "W" * 40)


def _expired(tenant: Tenant) -> str:
    raw = make_key(tenant, SCOPES)
    ApiKey.all_tenants.filter(key_id=_key_id(raw)).update(expires_at=timezone.now() - dt.timedelta(minutes=1))
    return raw


def _revoked(tenant: Tenant) -> str:
    raw = make_key(tenant, SCOPES)
    services.api_key_revoke(actor=ACTOR, key=_stored(raw))
    return raw


def _rotated(tenant: Tenant, *, grace_over: bool) -> str:
    raw = make_key(tenant, SCOPES)
    services.api_key_rotate(actor=ACTOR, key=_stored(raw), grace_seconds=3600)
    if grace_over:
        ApiKey.all_tenants.filter(key_id=_key_id(raw)).update(previous_valid_until=timezone.now())
    return raw  # the secret before the rotation


def _suspended(tenant: Tenant) -> str:
    raw = make_key(tenant, SCOPES)
    services.tenant_update(actor=ACTOR, tenant=tenant, suspended=True)
    return raw


def _archived(tenant: Tenant) -> str:
    raw = make_key(tenant, SCOPES)
    services.tenant_archive(actor=ACTOR, tenant=tenant)
    return raw


def _lacking_scope(tenant: Tenant) -> str:
    return make_key(tenant, ["jobs:read"])


# rule: (the key presented, status, the message both doors give: a string, a prefix ending in "...", or None)
RULES: dict[str, tuple[Callable[[Tenant], str], int, str | None]] = {
    "valid": (_valid, 200, None),
    "wrong-secret": (_wrong_secret, 401, "invalid API key"),
    "unknown-key": (_unknown, 401, "invalid API key"),
    "expired": (_expired, 401, "API key {id} expired at ..."),
    "revoked": (_revoked, 401, "API key {id} was revoked"),
    "rotated-within-grace": (lambda t: _rotated(t, grace_over=False), 200, None),
    "rotated-past-grace": (lambda t: _rotated(t, grace_over=True), 401, "API key {id} was rotated: ..."),
    "tenant-suspended": (_suspended, 403, SUSPENDED),
    "tenant-archived": (_archived, 401, "tenant 'alpha' is archived: its keys no longer work"),
    "missing-scope": (_lacking_scope, 403, None),
}


@pytest.fixture
def gateway(transactional_db) -> Iterator[ServerThread]:
    clear_counters()
    server = ServerThread().start()
    yield server
    server.stop()
    clear_counters()


def _rest(raw: str) -> tuple[int, str]:
    response = client_for(raw).get("/api/v1/api-keys/")
    return response.status_code, response.json().get("error", {}).get("message", "")


def _gateway(server: ServerThread, raw: str) -> tuple[int, str, str | None]:
    response = httpx.get(f"{server.url}/models", headers={"Authorization": f"Bearer {raw}"}, timeout=10)
    error = response.json().get("error") or {}
    return response.status_code, error.get("message", ""), error.get("code")


def _matches(message: str, expected: str, raw: str) -> bool:
    expected = expected.replace("{id}", _key_id(raw))
    return message.startswith(expected[:-3]) if expected.endswith("...") else message == expected


@pytest.mark.parametrize("rule", list(RULES))
def test_rest_and_the_gateway_give_one_answer_per_rule(gateway, rule):
    setup, status, message = RULES[rule]
    raw = setup(make_tenant("alpha"))
    rest_status, rest_message = _rest(raw)
    gateway_status, gateway_message, code = _gateway(gateway, raw)
    assert rest_status == gateway_status == status, (rest_message, gateway_message)
    if message is not None:
        assert _matches(rest_message, message, raw), rest_message
        assert gateway_message == rest_message  # the same reason at both doors
    if rule == "missing-scope":  # REST: the view's scope; the gateway: llm:invoke
        assert "keys:read" in rest_message and code == "insufficient_scope" and "llm:invoke" in gateway_message
    elif status == 401:
        assert code == "invalid_api_key"  # as OpenAI's clients expect, whatever the reason
    elif status == 403:
        assert code == "tenant_suspended"


def test_the_gateway_decides_on_every_request_even_from_its_cache(gateway, settings):
    settings.GRYVIA_LLM_CACHE_TTL_S = 600  # the record stays cached throughout
    tenant = make_tenant("alpha")
    raw = make_key(tenant, SCOPES, expires_at=timezone.now() + dt.timedelta(seconds=1.5))
    rotated = make_key(tenant, SCOPES)
    services.api_key_rotate(actor=ACTOR, key=_stored(rotated), grace_seconds=1)
    assert _gateway(gateway, raw)[0] == 200 and _gateway(gateway, rotated)[0] == 200
    wrong = keys.format_key(_key_id(raw), "W" * 40)
    assert _gateway(gateway, wrong)[:2] == (401, "invalid API key")  # a cached record lets no wrong secret in
    time.sleep(1.6)
    assert _gateway(gateway, raw)[1].startswith(f"API key {_key_id(raw)} expired at ")
    assert _gateway(gateway, rotated)[1].startswith(f"API key {_key_id(rotated)} was rotated")


def test_suspending_then_resuming_a_tenant_is_seen_at_once_by_both_doors(gateway):
    tenant = make_tenant("alpha")
    raw = make_key(tenant, SCOPES)
    assert _gateway(gateway, raw)[0] == 200  # cached now
    services.tenant_update(actor=ACTOR, tenant=tenant, suspended=True)
    assert _rest(raw) == (403, SUSPENDED) and _gateway(gateway, raw) == (403, SUSPENDED, "tenant_suspended")
    services.tenant_update(actor=ACTOR, tenant=tenant, suspended=False)
    assert _rest(raw)[0] == 200 and _gateway(gateway, raw)[0] == 200


# --- the websocket door ------------------------------------------------------------------------------------------


@pytest.fixture
def _clean_channel_layer():
    yield
    layer = get_channel_layer()
    if layer is not None:
        events.on_layer_loop(layer.flush)


@pytest.mark.django_db(transaction=True)
async def test_a_suspended_tenants_key_is_refused_by_the_websocket_with_the_same_reason(_clean_channel_layer):
    from channels.db import database_sync_to_async

    raw = await database_sync_to_async(_suspended)(await database_sync_to_async(make_tenant)("alpha"))
    headers = [
        (b"origin", b"http://testserver"),
        (b"host", b"testserver"),
        (b"authorization", f"Bearer {raw}".encode()),
    ]
    communicator = WebsocketCommunicator(application, "/ws/events/", headers=headers)
    assert (await communicator.connect())[0]
    closed = await communicator.receive_output(timeout=2)
    assert closed == {"type": "websocket.close", "code": 4403, "reason": SUSPENDED}
    await communicator.disconnect()

"""API keys on the gateway's hot path: records kept in an in-process cache, loaded in a worker thread on a miss.

A key's record (digests, dates, scopes, its tenant's state; apps.tenants.services.KeyRecord) and its gateway limits
are kept for `GRYVIA_LLM_CACHE_TTL_S`; a change made through the tenants services in this process drops the cache
at once (apps.llm.routing, registered in apps.llm.apps), other processes see it when their entry expires. Every
request is decided by the tenants app's one check, `api_key_verify`, on the cached record: the same rules (secret,
rotation grace, revocation, expiry, tenant suspended or archived, scope) as REST and websockets, so a cached entry
never lets a wrong secret, or a key expired since it was cached, in.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from django.conf import settings
from django.utils import timezone

from apps.core import scopes as S
from apps.core.principal import Refusal
from apps.llm import routing
from apps.tenants.models import ApiKey
from apps.tenants.services import KEY_RECORD_FIELDS, KeyRecord, api_key_verify, parse_key

from .db import off_loop
from .errors import GatewayError

_REQUIRED = (S.LLM_INVOKE,)


@dataclass(frozen=True)
class KeyInfo:
    """What the gateway needs to know about a key and its tenant: the record every request is checked against, and
    the limits the gateway enforces."""

    record: KeyRecord
    pk: int
    key_id: str
    tenant_id: int
    tenant_slug: str
    allowed_models: frozenset[str]  # empty: every model the tenant may use
    requests_per_minute: int | None
    tokens_per_minute: int | None
    tokens_per_day: int | None
    tenant_tokens_per_day: int | None

    def may_call(self, model: str) -> bool:
        return not self.allowed_models or model in self.allowed_models


_cache: dict[str, tuple[float, int, KeyInfo | None]] = {}  # key id -> (expires, routing generation, info)


def _load(key_id: str) -> KeyInfo | None:
    key = (
        ApiKey.all_tenants.select_related("tenant")
        .filter(key_id=key_id, bound_to="")  # a key bound to a job is that job's, not a gateway credential
        .only(
            *KEY_RECORD_FIELDS,
            "allowed_models",
            "requests_per_minute",
            "tokens_per_minute",
            "tokens_per_day",
            "tenant__tokens_per_day",
        )
        .first()
    )
    if key is None:
        return None
    record = KeyRecord.from_key(key)
    return KeyInfo(
        record=record,
        pk=record.pk,
        key_id=record.key_id,
        tenant_id=record.tenant_id,
        tenant_slug=record.tenant_slug,
        allowed_models=frozenset(key.allowed_models or ()),
        requests_per_minute=key.requests_per_minute,
        tokens_per_minute=key.tokens_per_minute,
        tokens_per_day=key.tokens_per_day,
        tenant_tokens_per_day=key.tenant.tokens_per_day,
    )


_load_async = off_loop(_load)


async def authenticate(authorization: str | None) -> KeyInfo:
    """The key a request's `Authorization: Bearer gry_...` header presents, or a 401/403 GatewayError whose message
    is the one REST and websockets give for the same key (`invalid_api_key` for every 401, as OpenAI names it)."""
    if not authorization or not authorization.startswith("Bearer "):
        raise GatewayError(401, "missing API key: send Authorization: Bearer <key>", code="invalid_api_key")
    presented = authorization[7:].strip()
    parsed = parse_key(presented)
    if parsed is None:
        raise GatewayError(401, "invalid API key", code="invalid_api_key")
    key_id = parsed[0]
    now_mono = time.monotonic()
    cached = _cache.get(key_id)
    if cached is None or cached[0] < now_mono or cached[1] != routing.current:
        if len(_cache) > 100_000:
            _cache.clear()
        info = await _load_async(key_id)
        _cache[key_id] = (now_mono + settings.GRYVIA_LLM_CACHE_TTL_S, routing.current, info)
    else:
        info = cached[2]
    verdict = api_key_verify(
        presented=presented, record=info.record if info else None, now=timezone.now(), required_scopes=_REQUIRED
    )
    if isinstance(verdict, Refusal):
        raise GatewayError(
            verdict.status, verdict.message, code="invalid_api_key" if verdict.status == 401 else verdict.code
        )
    return info


def forget() -> None:
    """Drop every cached key (tests; routing.routes_changed() does it for changes)."""
    _cache.clear()

"""API keys on the gateway's hot path: checked against an in-process cache, loaded in a worker thread on a miss.

A key's record (digest, scopes, limits, its tenant's quota and state) is kept for `GRYVIA_LLM_CACHE_TTL_S`; a
change made through the services in this process drops the cache at once (apps.llm.routing), other processes see
it when their entry expires. The secret is checked on every request (HMAC with the server pepper; constant-time
compare), so a cached entry never lets a wrong secret in.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass

from django.conf import settings
from django.utils import timezone

from apps.core import scopes as S
from apps.llm import routing
from apps.tenants import keys as key_format
from apps.tenants.models import ApiKey

from .db import off_loop
from .errors import GatewayError


@dataclass(frozen=True)
class KeyInfo:
    """What the gateway needs to know about a key and its tenant."""

    pk: int
    key_id: str
    digest: str
    previous_digest: str
    previous_valid_until: dt.datetime | None
    expires_at: dt.datetime | None
    revoked: bool
    can_invoke: bool
    tenant_id: int
    tenant_slug: str
    tenant_usable: bool  # not archived, not suspended
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
        .filter(key_id=key_id, bound_to="")
        .only(
            "pk",
            "key_id",
            "secret_digest",
            "previous_secret_digest",
            "previous_valid_until",
            "expires_at",
            "revoked_at",
            "scopes",
            "allowed_models",
            "requests_per_minute",
            "tokens_per_minute",
            "tokens_per_day",
            "tenant__slug",
            "tenant__archived_at",
            "tenant__suspended",
            "tenant__tokens_per_day",
        )
        .first()
    )
    if key is None:
        return None
    return KeyInfo(
        pk=key.pk,
        key_id=key.key_id,
        digest=key.secret_digest,
        previous_digest=key.previous_secret_digest,
        previous_valid_until=key.previous_valid_until,
        expires_at=key.expires_at,
        revoked=key.revoked_at is not None,
        can_invoke=S.LLM_INVOKE in S.expand(key.scopes),
        tenant_id=key.tenant_id,
        tenant_slug=key.tenant.slug,
        tenant_usable=key.tenant.archived_at is None and not key.tenant.suspended,
        allowed_models=frozenset(key.allowed_models or ()),
        requests_per_minute=key.requests_per_minute,
        tokens_per_minute=key.tokens_per_minute,
        tokens_per_day=key.tokens_per_day,
        tenant_tokens_per_day=key.tenant.tokens_per_day,
    )


_load_async = off_loop(_load)


async def authenticate(authorization: str | None) -> KeyInfo:
    """The key a request's `Authorization: Bearer gry_...` header presents, or a 401/403 GatewayError."""
    if not authorization or not authorization.startswith("Bearer "):
        raise GatewayError(401, "missing API key: send Authorization: Bearer <key>", code="invalid_api_key")
    parsed = key_format.parse_key(authorization[7:].strip())
    if parsed is None:
        raise GatewayError(401, "invalid API key", code="invalid_api_key")
    key_id, secret = parsed
    now_mono = time.monotonic()
    cached = _cache.get(key_id)
    if cached is None or cached[0] < now_mono or cached[1] != routing.current:
        if len(_cache) > 100_000:
            _cache.clear()
        info = await _load_async(key_id)
        _cache[key_id] = (now_mono + settings.GRYVIA_LLM_CACHE_TTL_S, routing.current, info)
    else:
        info = cached[2]
    if info is None or info.revoked:
        raise GatewayError(401, "invalid API key", code="invalid_api_key")
    now = timezone.now()
    current = key_format.digest_matches(secret, info.digest)
    if not current and not (
        info.previous_valid_until is not None
        and info.previous_valid_until > now
        and key_format.digest_matches(secret, info.previous_digest)
    ):
        raise GatewayError(401, "invalid API key", code="invalid_api_key")
    if info.expires_at is not None and info.expires_at <= now:
        raise GatewayError(401, "API key expired", code="invalid_api_key")
    if not info.tenant_usable:
        raise GatewayError(403, f"tenant {info.tenant_slug} is suspended or archived", code="tenant_suspended")
    if not info.can_invoke:
        raise GatewayError(403, f"this key lacks the {S.LLM_INVOKE} scope", code="insufficient_scope")
    return info


def forget() -> None:
    """Drop every cached key (tests; routing.routes_changed() does it for changes)."""
    _cache.clear()

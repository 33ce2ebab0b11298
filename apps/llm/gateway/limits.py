"""Which counters a request counts against, from its key: the tenant's and the key's tokens per UTC day, the key's
tokens and requests per minute. Only scopes with a limit are counted (an unlimited tenant costs no counter); a day
counter that does not exist is rebuilt from that day's metered usage (and, in Redis, the open reservations)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection

from .keys import KeyInfo
from .quota import Scope, Seed, day_key, minute_key
from .recovery import durable_usage

TOKENS_PER_DAY, TOKENS_PER_MINUTE, REQUESTS_PER_MINUTE = "tokens_per_day", "tokens_per_minute", "requests_per_minute"


def _seed(day_start: dt.datetime, tenant_id: int, key_id: str | None) -> Seed:
    async def seed(request_ids: Collection[str]) -> tuple[int, set[str]]:
        return await durable_usage(day_start, tenant_id, key_id, request_ids)

    return seed


def token_scopes(key: KeyInfo, now: dt.datetime) -> list[Scope]:
    """The token counters of a request by `key`, at `now` (UTC)."""
    day_start = now.replace(hour=0, minute=0, second=0, microsecond=0)
    tomorrow = day_start + dt.timedelta(days=1)
    scopes = []
    if key.tenant_tokens_per_day is not None:
        scopes.append(
            Scope(
                key=day_key("tenant", key.tenant_id, day_start),
                limit=key.tenant_tokens_per_day,
                label=f"tokens per day of tenant {key.tenant_slug}",
                resets_at=tomorrow,
                seed=_seed(day_start, key.tenant_id, None),
                kind=TOKENS_PER_DAY,
            )
        )
    if key.tokens_per_day is not None:
        scopes.append(
            Scope(
                key=day_key("key", key.key_id, day_start),
                limit=key.tokens_per_day,
                label=f"tokens per day of API key {key.key_id}",
                resets_at=tomorrow,
                seed=_seed(day_start, key.tenant_id, key.key_id),
                kind=TOKENS_PER_DAY,
            )
        )
    if key.tokens_per_minute is not None:
        scopes.append(
            Scope(
                key=minute_key("tpm", key.key_id, now),
                limit=key.tokens_per_minute,
                label=f"tokens per minute of API key {key.key_id}",
                resets_at=_next_minute(now),
                kind=TOKENS_PER_MINUTE,
            )
        )
    return scopes


def request_scope(key: KeyInfo, now: dt.datetime) -> Scope | None:
    if key.requests_per_minute is None:
        return None
    return Scope(
        key=minute_key("rpm", key.key_id, now),
        limit=key.requests_per_minute,
        label=f"requests per minute of API key {key.key_id}",
        resets_at=_next_minute(now),
        kind=REQUESTS_PER_MINUTE,
    )


def _next_minute(now: dt.datetime) -> dt.datetime:
    return now.replace(second=0, microsecond=0) + dt.timedelta(minutes=1)

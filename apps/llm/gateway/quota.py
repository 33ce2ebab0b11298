"""Token quotas and rate limits: one shared counter per scope, reserved before a request and settled after it.

Scopes: the tenant's and the key's tokens per UTC day, the key's tokens per minute and requests per minute. A
request reserves its most possible use (the prompt's bound + `max_tokens` or the default) in every token scope at
once, atomically, or is refused naming the first scope it would overrun; when it ends (stream end, error, or the
client hanging up) the reservation is settled to the real usage, so each counter ends exact. Counters live in Redis
(shared_counters.py: every replica shares them, with a durable record of each open reservation) or, without
REDIS_URL, in this process (the embedded profile has one); counters.py picks them. A day counter that does not exist
is rebuilt from the day's metered usage in the database plus the open reservations, never re-created by a
settlement.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Any

PREFIX = "gryvia:llm:"
# The day's durable usage in the database for a scope, and which of the given request ids it already includes.
Seed = Callable[[Collection[str]], Awaitable[tuple[int, set[str]]]]


@dataclass(frozen=True)
class Scope:
    """One counter a request counts against."""

    key: str
    limit: int | None  # None: counted, never refused
    label: str  # "tokens per day of tenant acme"
    resets_at: dt.datetime
    seed: Seed | None = None  # how to rebuild the counter when it does not exist (day scopes)
    kind: str = "tokens_per_day"  # tokens_per_day, tokens_per_minute or requests_per_minute

    @property
    def open_key(self) -> str | None:
        """Where the open reservations of a rebuildable counter are listed (request id -> tokens counted)."""
        return f"{PREFIX}open:{self.key}" if self.seed is not None else None

    def entry(self) -> list[Any]:
        """As a request's record keeps it: counter, open list ("" for none), when its window ends (epoch s)."""
        return [self.key, self.open_key or "", self.resets_at.timestamp()]

    @property
    def ttl_s(self) -> int:
        return max(int((self.resets_at - dt.datetime.now(dt.UTC)).total_seconds()) + 3600, 60)


class Refused(Exception):
    def __init__(self, scope: Scope, used: int, asked: int) -> None:
        super().__init__(scope.label)
        self.scope, self.used, self.asked = scope, used, asked


class MemoryCounters:
    """Counters in this process (the embedded profile: one server process, whose reservations die with it)."""

    def __init__(self) -> None:
        self._values: dict[str, tuple[int, dt.datetime]] = {}
        self._lock = threading.Lock()

    async def reserve(self, scopes: list[Scope], amounts: list[int], record: dict[str, Any] | None = None) -> None:
        for scope in scopes:
            if scope.seed is not None and self._get(scope.key) is None:
                start, _ = await scope.seed(())
                with self._lock:
                    self._values.setdefault(scope.key, (start, scope.resets_at))
        with self._lock:
            for scope, amount in zip(scopes, amounts, strict=True):
                used = self._get(scope.key) or 0
                if scope.limit is not None and used + amount > scope.limit:
                    raise Refused(scope, used, amount)
            for scope, amount in zip(scopes, amounts, strict=True):
                self._values[scope.key] = ((self._get(scope.key) or 0) + amount, scope.resets_at)
            if len(self._values) > 50_000:
                now = dt.datetime.now(dt.UTC)
                self._values = {k: v for k, v in self._values.items() if v[1] > now}

    async def settle(self, scopes: list[Scope], used: int, reserved: int, row: dict[str, Any]) -> None:
        """Move the reservation to the usage; a counter that is gone (its window ended) is not re-created."""
        with self._lock:
            for scope in scopes:
                if scope.key in self._values:
                    value, resets = self._values[scope.key]
                    self._values[scope.key] = (value + used - reserved, resets)

    def forget(self, rows: list[dict[str, Any]]) -> None:
        """Nothing to forget: this process holds no record beyond the meter's queue."""

    async def value(self, key: str) -> int | None:
        return self._get(key)

    def _get(self, key: str) -> int | None:
        found = self._values.get(key)
        if found is None or found[1] <= dt.datetime.now(dt.UTC):
            return None
        return found[0]


def day_key(scope: str, ident: str | int, day: dt.date) -> str:
    return f"{PREFIX}tpd:{scope}:{ident}:{day:%Y%m%d}"


def minute_key(kind: str, key_id: str, now: dt.datetime) -> str:
    return f"{PREFIX}{kind}:key:{key_id}:{now:%Y%m%d%H%M}"

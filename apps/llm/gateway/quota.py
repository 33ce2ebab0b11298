"""Token quotas and rate limits: one shared counter per scope, reserved before a request and settled after it.

Scopes: the tenant's and the key's tokens per UTC day, the key's tokens per minute and requests per minute. A
request reserves its estimate (prompt + `max_tokens` or the default) in every token scope at once, atomically, or
is refused naming the first scope it would overrun; when it ends (stream end, error, or the client hanging up) the
reservation is settled to the real usage, so each counter ends exact. Counters live in Redis (one Lua script:
every replica shares them) or, without REDIS_URL, in this process (the embedded profile has one). A day counter
that does not exist yet starts from the day's metered usage in the database, so a restart loses nothing.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from django.conf import settings

PREFIX = "gryvia:llm:"


@dataclass(frozen=True)
class Scope:
    """One counter a request counts against."""

    key: str
    limit: int | None  # None: counted, never refused
    label: str  # "tokens per day of tenant acme"
    resets_at: dt.datetime
    seed: Callable[[], Awaitable[int]] | None = None  # the starting value when the counter does not exist yet
    kind: str = "tokens_per_day"  # tokens_per_day, tokens_per_minute or requests_per_minute

    @property
    def ttl_s(self) -> int:
        return max(int((self.resets_at - dt.datetime.now(dt.UTC)).total_seconds()) + 3600, 60)


class Refused(Exception):
    def __init__(self, scope: Scope, used: int, asked: int) -> None:
        super().__init__(scope.label)
        self.scope, self.used, self.asked = scope, used, asked


_RESERVE = """
local n = #KEYS
for i = 1, n do
  local v = redis.call('GET', KEYS[i])
  if not v then
    if ARGV[3 * n + i] == '1' then return {-1, i, 0} end
    v = '0'
  end
  local limit = tonumber(ARGV[i])
  if limit >= 0 and tonumber(v) + tonumber(ARGV[n + i]) > limit then return {0, i, tonumber(v)} end
end
for i = 1, n do
  redis.call('INCRBY', KEYS[i], ARGV[n + i])
  redis.call('EXPIRE', KEYS[i], ARGV[2 * n + i])
end
return {1, 0, 0}
"""


class RedisCounters:
    """Counters in Redis: every server process and replica shares them."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._clients: dict[int, object] = {}

    def _client(self):
        import redis.asyncio as aioredis

        loop = id(asyncio.get_running_loop())
        client = self._clients.get(loop)
        if client is None:
            client = aioredis.from_url(self.url, decode_responses=True)
            client.gryvia_reserve = client.register_script(_RESERVE)
            self._clients[loop] = client
        return client

    async def reserve(self, scopes: list[Scope], amounts: list[int]) -> None:
        client = self._client()
        keys = [s.key for s in scopes]
        while True:
            args = [-1 if s.limit is None else s.limit for s in scopes]
            args += amounts + [s.ttl_s for s in scopes] + ["1" if s.seed else "0" for s in scopes]
            status, index, used = await client.gryvia_reserve(keys=keys, args=args)
            if status == 1:
                return
            scope = scopes[index - 1]
            if status == 0:
                raise Refused(scope, int(used), amounts[index - 1])
            start = await scope.seed()  # the day's first request here: start from what was metered
            await client.set(scope.key, start, nx=True, ex=scope.ttl_s)

    async def adjust(self, keys: list[str], deltas: list[int]) -> None:
        client = self._client()
        async with client.pipeline(transaction=False) as pipe:
            for key, delta in zip(keys, deltas, strict=True):
                if delta:
                    pipe.incrby(key, delta)
            await pipe.execute()

    async def value(self, key: str) -> int | None:
        raw = await self._client().get(key)
        return None if raw is None else int(raw)


class MemoryCounters:
    """Counters in this process (the embedded profile: one server process)."""

    def __init__(self) -> None:
        self._values: dict[str, tuple[int, dt.datetime]] = {}
        self._lock = threading.Lock()

    async def reserve(self, scopes: list[Scope], amounts: list[int]) -> None:
        for scope in scopes:
            if scope.seed is not None and self._get(scope.key) is None:
                start = await scope.seed()
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

    async def adjust(self, keys: list[str], deltas: list[int]) -> None:
        with self._lock:
            for key, delta in zip(keys, deltas, strict=True):
                if key in self._values:
                    value, resets = self._values[key]
                    self._values[key] = (value + delta, resets)

    async def value(self, key: str) -> int | None:
        return self._get(key)

    def _get(self, key: str) -> int | None:
        found = self._values.get(key)
        if found is None or found[1] <= dt.datetime.now(dt.UTC):
            return None
        return found[0]


_counters: RedisCounters | MemoryCounters | None = None


def counters() -> RedisCounters | MemoryCounters:
    global _counters
    if _counters is None:
        _counters = RedisCounters(settings.REDIS_URL) if settings.REDIS_URL else MemoryCounters()
    return _counters


def reset() -> None:
    """Forget the counters object (tests that switch profiles)."""
    global _counters
    _counters = None


def day_key(scope: str, ident: str | int, day: dt.date) -> str:
    return f"{PREFIX}tpd:{scope}:{ident}:{day:%Y%m%d}"


def minute_key(kind: str, key_id: str, now: dt.datetime) -> str:
    return f"{PREFIX}{kind}:key:{key_id}:{now:%Y%m%d%H%M}"

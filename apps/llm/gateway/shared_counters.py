"""The quota counters in Redis (the production profile), shared by every server process and replica, with a durable
record of each request from its reservation until the meter has written its usage row.

Per request, in the same Lua calls that move the counters (so no extra round trip):
- reserve: every scope checked and incremented at once, the request listed in each day counter's open list
  (`open:<counter>`: request id -> tokens counted) and its record written under this process's records
  (`req:<replica>`: request id -> JSON);
- settle, before the answer's last byte: each counter that exists moves by usage - reservation (a missing one is
  left missing: it is rebuilt, never re-created at a negative value), the open lists hold the usage, and the record
  becomes the usage row;
- forget, once the meter has committed the row: the record goes, and the open list entries go a retention later
  (a rebuild that read the database before that commit still finds them).

Each process holds a lease (`alive:<replica>`, renewed by a thread); the settlement pass (recovery.py) writes the
rows of a process whose lease is gone and settles its open reservations as estimated usage.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import threading
import time
import uuid
from typing import Any

import redis
from django.conf import settings

from .quota import PREFIX, Refused, Scope

logger = logging.getLogger(__name__)
REPLICAS = f"{PREFIX}replicas"
FLUSHED = f"{PREFIX}flushed"  # "request id\topen list\t…" by the time its row was committed
RETENTION_S = 300  # how long a written request stays in its open lists; far above a rebuild's few queries
RECORD_TTL_S = 2 * 86400  # a records hash nobody writes to any more goes after this
TOMB = "tomb"  # a record the settlement pass has written; its process, if it was only slow, leaves it alone

_RESERVE = """
local n = tonumber(ARGV[1])
for i = 1, n do
  local v = redis.call('GET', KEYS[i])
  if not v then
    if ARGV[1 + 3 * n + i] == '1' then return {-1, i, 0} end
    v = '0'
  end
  local limit = tonumber(ARGV[1 + i])
  if limit >= 0 and tonumber(v) + tonumber(ARGV[1 + n + i]) > limit then return {0, i, tonumber(v)} end
end
local rid = ARGV[2 + 4 * n]
for i = 1, n do
  redis.call('INCRBY', KEYS[i], ARGV[1 + n + i])
  redis.call('EXPIRE', KEYS[i], ARGV[1 + 2 * n + i])
  if ARGV[1 + 3 * n + i] == '1' then
    redis.call('HSET', KEYS[n + i], rid, ARGV[1 + n + i])
    redis.call('EXPIRE', KEYS[n + i], ARGV[1 + 2 * n + i])
  end
end
redis.call('HSET', KEYS[2 * n + 1], rid, ARGV[3 + 4 * n])
redis.call('EXPIRE', KEYS[2 * n + 1], ARGV[4 + 4 * n])
return {1, 0, 0}
"""

# KEYS: n counters, their n open lists ('' for none), the records hash. ARGV: n, used, reserved, rid, row, reserved
# ('1': a record was written at the reservation), the open lists' ttls (n), record ttl.
_SETTLE = """
local n = tonumber(ARGV[1])
local used, reserved, rid = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local records = KEYS[2 * n + 1]
local delta = used - reserved
if ARGV[6] == '1' then
  local raw = redis.call('HGET', records, rid)
  if raw == 'tomb' or (raw and string.find(raw, '"settled": true', 1, true)) then return 0 end
  if not raw then delta = used end
end
for i = 1, n do
  if redis.call('EXISTS', KEYS[i]) == 1 then redis.call('INCRBY', KEYS[i], delta) end
  if KEYS[n + i] ~= '' then
    redis.call('HSET', KEYS[n + i], rid, used)
    redis.call('EXPIRE', KEYS[n + i], ARGV[6 + i])
  end
end
redis.call('HSET', records, rid, ARGV[5])
redis.call('EXPIRE', records, ARGV[7 + n])
return 1
"""

# KEYS: the records hash, FLUSHED. ARGV: now, retention, then one "rid\topen list\t…" per written row.
_FORGET = """
local now = tonumber(ARGV[1])
for i = 3, #ARGV do
  local rid = string.match(ARGV[i], '^[^\\t]+')
  redis.call('HDEL', KEYS[1], rid)
  if string.find(ARGV[i], '\\t') then redis.call('ZADD', KEYS[2], now, ARGV[i]) end
end
local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now - tonumber(ARGV[2]), 'LIMIT', 0, 1000)
for _, member in ipairs(old) do
  local rid = nil
  for part in string.gmatch(member, '[^\\t]+') do
    if rid then redis.call('HDEL', part, rid) else rid = part end
  end
  redis.call('ZREM', KEYS[2], member)
end
return #old
"""

# KEYS: the counter, its open list. ARGV: the durable usage, ttl, then the open request ids it already includes.
_REBUILD = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local written = {}
for i = 3, #ARGV do written[ARGV[i]] = true end
local total = tonumber(ARGV[1])
local open = redis.call('HGETALL', KEYS[2])
for i = 1, #open, 2 do
  if not written[open[i]] then total = total + tonumber(open[i + 1]) end
end
redis.call('SET', KEYS[1], total, 'EX', ARGV[2])
return 1
"""


def records_key(replica: str) -> str:
    return f"{PREFIX}req:{replica}"


def alive_key(replica: str) -> str:
    return f"{PREFIX}alive:{replica}"


def settle_call(
    records: str, scopes: list[list[Any]], used: int, reserved: int, row: dict[str, Any]
) -> tuple[list[str], list[Any]]:
    """The settle script's keys and arguments; the row (the request's usage row) becomes its record."""
    now = time.time()
    row = dict(row, settled=True, scopes=scopes)
    keys = [s[0] for s in scopes] + [s[1] for s in scopes] + [records]
    args = [len(scopes), used, reserved, row["request_id"], json.dumps(row, default=str), "1" if scopes else "0"]
    args += [max(int(s[2] - now) + 3600, 60) for s in scopes] + [RECORD_TTL_S]
    return keys, args


def forget_member(row: dict[str, Any]) -> str:
    """How FLUSHED lists a written row: its request id and the open lists it is in."""
    return "\t".join([row["request_id"], *(s[1] for s in row.get("scopes", ()) if s[1])])


class Lease:
    """This process's lease in Redis, renewed by a daemon thread every third of GRYVIA_LLM_REPLICA_TTL_S."""

    def __init__(self, client: redis.Redis, replica: str) -> None:
        self.client, self.replica = client, replica
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def ensure(self) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self.renew()  # held before the first reservation is written
                    self._thread = threading.Thread(target=self._run, name="gateway-lease", daemon=True)
                    self._thread.start()

    def renew(self) -> None:
        ttl_ms = int(settings.GRYVIA_LLM_REPLICA_TTL_S * 1000)
        with self.client.pipeline(transaction=False) as pipe:
            pipe.sadd(REPLICAS, self.replica).set(alive_key(self.replica), "1", px=ttl_ms).execute()

    def _run(self) -> None:
        while not self._stop.wait(settings.GRYVIA_LLM_REPLICA_TTL_S / 3):
            try:
                self.renew()
            except redis.RedisError as exc:
                logger.warning("gateway: could not renew this process's lease in Redis: %s", exc)

    def stop(self) -> None:
        self._stop.set()


class RedisCounters:
    """Counters in Redis: every server process and replica shares them."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.replica = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.records = records_key(self.replica)
        self._clients: dict[int, Any] = {}
        self.sync = redis.Redis.from_url(url, decode_responses=True)
        self.lease = Lease(self.sync, self.replica)
        self._forget = self.sync.register_script(_FORGET)
        self._settle = self.sync.register_script(_SETTLE)

    def _client(self):
        import redis.asyncio as aioredis

        loop = id(asyncio.get_running_loop())
        client = self._clients.get(loop)
        if client is None:
            client = aioredis.from_url(self.url, decode_responses=True)
            client.gryvia_reserve = client.register_script(_RESERVE)
            client.gryvia_settle = client.register_script(_SETTLE)
            client.gryvia_rebuild = client.register_script(_REBUILD)
            self._clients[loop] = client
        return client

    async def reserve(self, scopes: list[Scope], amounts: list[int], record: dict[str, Any] | None = None) -> None:
        """Reserve `amounts` in every scope at once and write the request's record, or raise Refused."""
        self.lease.ensure()
        client = self._client()
        keys = [s.key for s in scopes] + [s.open_key or s.key for s in scopes] + [self.records]
        record = dict(record or {}, scopes=[s.entry() for s in scopes if s.kind != "requests_per_minute"])
        while True:
            args = [len(scopes)] + [-1 if s.limit is None else s.limit for s in scopes]
            args += amounts + [s.ttl_s for s in scopes] + ["1" if s.seed else "0" for s in scopes]
            args += [record["request_id"], json.dumps(record, default=str), RECORD_TTL_S]
            status, index, used = await client.gryvia_reserve(keys=keys, args=args)
            if status == 1:
                return
            scope = scopes[index - 1]
            if status == 0:
                raise Refused(scope, int(used), amounts[index - 1])
            await self.rebuild(scope)

    async def rebuild(self, scope: Scope) -> None:
        """Re-create a missing day counter: the day's usage written to the database plus every open reservation
        the database does not hold yet. Two processes may do it at once: the first SET wins, atomically."""
        client = self._client()
        listed = await client.hkeys(scope.open_key)
        durable, written = await scope.seed(listed)
        rebuilt = await client.gryvia_rebuild(
            keys=[scope.key, scope.open_key], args=[durable, scope.ttl_s, *sorted(written)]
        )
        if rebuilt:
            logger.warning("gateway: rebuilt the missing counter %s from metered usage and open requests", scope.key)

    async def settle(self, scopes: list[Scope], used: int, reserved: int, row: dict[str, Any]) -> None:
        """Move the reservation to the usage and make the request's usage row durable, in one call."""
        self.lease.ensure()
        keys, args = settle_call(self.records, [s.entry() for s in scopes], used, reserved, row)
        await self._client().gryvia_settle(keys=keys, args=args)

    def settle_record(self, records: str, record: dict[str, Any], used: int, row: dict[str, Any]) -> bool:
        """Settle another (dead) process's open reservation, from its record (the settlement pass); False when it
        was settled already."""
        keys, args = settle_call(records, record["scopes"], used, record["reserved"], row)
        return bool(self._settle(keys=keys, args=args))

    def forget(self, rows: list[dict[str, Any]], records: str | None = None) -> None:
        """The rows are committed to the database: their records go (called from the meter's thread)."""
        if rows:
            members = [forget_member(r) for r in rows]
            self._forget(keys=[records or self.records, FLUSHED], args=[time.time(), RETENTION_S, *members])

    async def value(self, key: str) -> int | None:
        raw = await self._client().get(key)
        return None if raw is None else int(raw)

    def close(self) -> None:
        self.lease.stop()

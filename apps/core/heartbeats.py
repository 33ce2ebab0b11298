"""Which Celery workers and beats have been seen lately (production profile: REDIS_URL set).

Each worker refreshes its entry every `EVERY_S` from a consumer bootstep, each beat (leader or standby) from its
scheduler's tick; /readyz reads them. Entries are scored with Redis's own clock (TIME, in the scripts), so hosts
whose clocks disagree still agree on an entry's age. The beat leader's lease (apps.core.beat) is the beat's
heartbeat that matters: while a beat holds it, periodic work is being sent.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import redis
from celery import bootsteps
from django.conf import settings

from .leader import Holder

WORKER = "worker"
BEAT = "beat"
EVERY_S = 5.0
# Three missed refreshes: no longer seen, and dropped from the set.
SEEN_WITHIN_S = 3 * EVERY_S
BEAT_LEASE_KEY = "gryvia:beat:leader"

_TOUCH = """
local t = redis.call('TIME')
redis.call('ZADD', KEYS[1], t[1] + t[2] / 1000000, ARGV[1])
return 1
"""
# Drops the stale entries of the role keys, then returns Redis's time, each role key's entries with their scores,
# and the lease (last key): its token and milliseconds left.
_READ = """
local t = redis.call('TIME')
local now = t[1] + t[2] / 1000000
local out = {tostring(now)}
for i = 1, #KEYS - 1 do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now - tonumber(ARGV[1]))
  out[#out + 1] = redis.call('ZRANGE', KEYS[i], 0, -1, 'WITHSCORES')
end
out[#out + 1] = redis.call('GET', KEYS[#KEYS])
out[#out + 1] = redis.call('PTTL', KEYS[#KEYS])
return out
"""


def connect() -> redis.Redis:
    """A client for REDIS_URL that gives up within 2 s: a probe or a heartbeat must not hang on a dead Redis."""
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)


def _key(role: str) -> str:
    return f"gryvia:seen:{role}"


def touch(*, client: redis.Redis, role: str, identity: str) -> None:
    """Record that `identity` (a worker or a beat) is alive now."""
    client.register_script(_TOUCH)(keys=[_key(role)], args=[identity])


def forget(*, client: redis.Redis, role: str, identity: str) -> None:
    """Drop `identity` at a clean stop, so it is not reported as seen for the rest of the window."""
    client.zrem(_key(role), identity)


@dataclass(frozen=True)
class Seen:
    """One process seen within SEEN_WITHIN_S, `age_s` ago by Redis's clock."""

    identity: str
    age_s: float


@dataclass(frozen=True)
class Background:
    """What /readyz reports of the production profile's background processes."""

    workers: list[Seen]
    beats: list[Seen]
    beat_leader: Holder | None

    def as_json(self) -> dict:
        leader = self.beat_leader.token if self.beat_leader else None
        return {
            "workers": [{"id": s.identity, "seen_s_ago": round(s.age_s, 1)} for s in self.workers],
            "beat": {
                "leader": leader,
                "lease_s_left": round(self.beat_leader.ttl_left_s, 1) if self.beat_leader else None,
                "standbys": [s.identity for s in self.beats if s.identity != leader],
            },
        }

    def warnings(self) -> list[str]:
        """Why periodic work is not running, in words an operator can act on; empty when it is."""
        found = []
        if not self.workers:
            found.append(f"no Celery worker seen in the last {SEEN_WITHIN_S:g} s: start `make worker`")
        if self.beat_leader is None:
            found.append("no Celery beat holds the leader lease: start `make beat`")
        return found


def background(*, client: redis.Redis) -> Background:
    """The workers and beats seen lately and the beat leader, in one round trip (two the first time: the script)."""
    keys = [_key(WORKER), _key(BEAT), BEAT_LEASE_KEY]
    now, workers, beats, token, ttl_ms = client.register_script(_READ)(keys=keys, args=[SEEN_WITHIN_S])
    now = float(now)

    def seen(rows: list) -> list[Seen]:
        pairs = zip(rows[::2], rows[1::2], strict=True)
        found = [Seen(identity=name.decode(), age_s=max(now - float(score), 0.0)) for name, score in pairs]
        return sorted(found, key=lambda s: (s.age_s, s.identity))

    leader = None if token is None else Holder(token=token.decode(), ttl_left_s=max(ttl_ms, 0) / 1000)
    return Background(workers=seen(workers), beats=seen(beats), beat_leader=leader)


class WorkerHeartbeat(bootsteps.StartStopStep):
    """A worker consumer's step: refreshes this worker's entry every EVERY_S on the consumer's timer while it
    consumes, and drops it when the consumer stops (a clean shutdown, or a lost broker connection)."""

    def __init__(self, c, **kwargs) -> None:
        super().__init__(c, **kwargs)
        self.identity = ""
        self.client: redis.Redis | None = None
        self.timer_ref = None

    def start(self, c) -> None:
        self.identity = f"{c.hostname} (pid {os.getpid()})"
        self.client = connect()
        self._touch()
        self.timer_ref = c.timer.call_repeatedly(EVERY_S, self._touch)

    def stop(self, c) -> None:
        if self.timer_ref is not None:
            self.timer_ref.cancel()
            self.timer_ref = None
        if self.client is not None:
            try:
                forget(client=self.client, role=WORKER, identity=self.identity)
            except redis.RedisError:  # it ages out of the window instead
                pass

    shutdown = stop

    def _touch(self) -> None:
        try:
            touch(client=self.client, role=WORKER, identity=self.identity)
        except redis.RedisError:  # the next refresh tries again; /readyz shows the gap if it lasts
            pass

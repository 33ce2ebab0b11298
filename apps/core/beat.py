"""Celery beat that sends once per installation however many run: `LeaderScheduler` (CELERY_BEAT_SCHEDULER).

Any number of `make beat` processes may run (the chart runs a hot standby). The one holding the lease
`heartbeats.BEAT_LEASE_KEY` in Redis sends the periodic tasks; the others tick as standbys, asking for the lease
every `poll_s`, and take over when the leader releases it (SIGTERM, Ctrl-C) or its TTL runs out (SIGKILL, a lost
host): within `GRYVIA_BEAT_LOCK_TTL_S` plus one poll.

The schedule is the periodic registry (apps.core.periodic, filled by each app's tasks.py), with any
CELERY_BEAT_SCHEDULE entries beside it.

There is no schedule file. Celery's default keeps the schedule in a shelve file that two beats sharing a data dir
corrupt, and each then sends everything; our intervals are seconds, so the file saved nothing worth keeping. When
each entry was last sent lives in a Redis hash instead: the leader writes an entry's time as it sends it, and a
new leader reads them all when it takes over, so a handover neither repeats nor skips a tick.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime

import redis
from celery.beat import Scheduler
from django.conf import settings

from . import heartbeats, periodic
from .leader import LeaderLease, lease_holder

logger = logging.getLogger(__name__)

LAST_SENT_KEY = "gryvia:beat:last-sent"


class LeaderScheduler(Scheduler):
    """Celery's in-memory scheduler, sending only while this beat holds the leader lease (renewed every third of its
    TTL), with the entries' last-sent times shared through Redis. Each tick also refreshes this beat's heartbeat."""

    def __init__(self, *args, **kwargs) -> None:
        ttl_s = settings.GRYVIA_BEAT_LOCK_TTL_S
        self.lease = LeaderLease(client=heartbeats.connect(), key=heartbeats.BEAT_LEASE_KEY, ttl_s=ttl_s)
        self.renew_every_s = ttl_s / 3
        self.poll_s = min(1.0, ttl_s / 3)
        self._leading = False
        self._renew_at = 0.0
        self._touched_at = float("-inf")
        self._redis_failing = False
        self._said_standby = False
        self._closed = False
        super().__init__(*args, **kwargs)

    @property
    def info(self) -> str:
        return (
            f"    . leader lease -> {self.lease.key} ({self.lease.ttl_s:g} s TTL)\n    . last sent -> {LAST_SENT_KEY}"
        )

    def setup_schedule(self) -> None:
        """The apps' periodic work (apps.core.periodic) besides any CELERY_BEAT_SCHEDULE entries (one merge: a
        second would drop what the first added)."""
        self.install_default_entries(self.data)
        self.merge_inplace({**self.app.conf.beat_schedule, **periodic.registry.beat_schedule()})

    def tick(self, *args, **kwargs) -> float:
        now = time.monotonic()
        self._heartbeat(now)
        if not self._lead(now):
            return self.poll_s
        wait = super().tick(*args, **kwargs)
        # Awake in time to renew the lease, however far off the next entry is.
        return max(0.0, min(wait, self._renew_at - time.monotonic()))

    def reserve(self, entry):
        """Stamp the entry as sent now and record that before tick() sends it: a leader stopped in between skips
        one tick of it rather than have its successor send it twice."""
        stamped = super().reserve(entry)
        try:
            self.lease.client.hset(LAST_SENT_KEY, entry.name, stamped.last_run_at.timestamp())
        except redis.RedisError as exc:  # a new leader would send this entry once more, at worst
            logger.warning("beat: could not record when %s was sent: %s", entry.name, exc)
        return stamped

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            leading, self._leading = self._leading, False
            try:
                self.lease.release()
                heartbeats.forget(client=self.lease.client, role=heartbeats.BEAT, identity=self.lease.token)
            except redis.RedisError as exc:
                logger.warning("beat: could not release the leader lease (it expires by itself): %s", exc)
            else:
                logger.info("beat: stopped%s", ", leader lease released" if leading else "")
        super().close()

    def _lead(self, now: float) -> bool:
        """Whether this beat leads for this tick: renew the lease when due, or take it when nobody holds it."""
        if self._closed:
            return False
        try:
            if self._leading and now >= self._renew_at:
                if self.lease.renew():
                    self._renew_at = now + self.renew_every_s
                else:
                    logger.warning("beat: the leader lease passed to another beat; standing by")
                    self._stand_by()
            # `held` without leading: the lease was taken but the takeover's reads failed; finish it.
            if not self._leading and (self.lease.held or self.lease.try_acquire()):
                self._take_over(now)
            elif not self._leading and not self._said_standby:
                holder = lease_holder(client=self.lease.client, key=self.lease.key)
                logger.info("beat: standing by (%s leads); this beat is %s", holder and holder.token, self.lease.token)
                self._said_standby = True
            self._redis_failing = False
        except redis.RedisError as exc:
            if not self._redis_failing:
                logger.warning("beat: Redis is failing (%s); leading only while the lease lasts", exc)
            self._redis_failing = True
            self._renew_at = now + self.poll_s
        if self._leading and not self.lease.held:
            logger.warning("beat: the leader lease ran out before it could be renewed; standing by")
            self._stand_by()
        return self._leading

    def _take_over(self, now: float) -> None:
        """Start leading from the shared last-sent times; entries never sent start from this beat's schedule."""
        client = self.lease.client
        sent = {name.decode(): float(at) for name, at in client.hgetall(LAST_SENT_KEY).items()}
        for name, entry in self.schedule.items():
            if name in sent:
                entry.last_run_at = datetime.fromtimestamp(sent[name], tz=UTC).astimezone(self.app.timezone)
        mapping = {name: entry.last_run_at.timestamp() for name, entry in self.schedule.items()}
        if mapping:  # rewritten whole, so names no longer in the table drop out of the hash
            client.pipeline(transaction=True).delete(LAST_SENT_KEY).hset(LAST_SENT_KEY, mapping=mapping).execute()
        self._heap = None  # rebuilt from the entries' new times at the next tick
        self._leading = True
        self._renew_at = now + self.renew_every_s
        logger.info("beat: leading (lease %s, %g s TTL)", self.lease.token, self.lease.ttl_s)

    def _stand_by(self) -> None:
        self._leading = False
        self._said_standby = False
        self._heap = None

    def _heartbeat(self, now: float) -> None:
        if now - self._touched_at < heartbeats.EVERY_S:
            return
        self._touched_at = now
        try:
            heartbeats.touch(client=self.lease.client, role=heartbeats.BEAT, identity=self.lease.token)
        except redis.RedisError:  # _lead reports a failing Redis
            pass

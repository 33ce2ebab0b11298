"""A leader lease in Redis: one process of an installation holds a name at a time, others wait and take over.

The holder takes the key with SET NX PX and renews it well before the TTL runs out; a clean stop deletes it at once,
and a holder killed without its release loses it when the TTL runs out. Renewal and release compare the stored token
first (in one Lua script), so a holder whose lease already passed to another process can never extend or drop the
new holder's. The holder counts its own lease from the moment it sent the command, before Redis started the TTL, so
it always believes itself leader for less time than Redis does: two processes never both act as leader.
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from dataclasses import dataclass

import redis

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


def process_identity() -> str:
    """How this process is named to an operator: host and pid."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True)
class Holder:
    """Who holds a lease now, and for how much longer unless renewed."""

    token: str
    ttl_left_s: float


class LeaderLease:
    """The lease `key` for this process: `try_acquire`, then `renew` before `ttl_s` passes, `release` on a clean stop.

    `held` is this process's own, conservative view; Redis errors propagate to the caller, who decides whether to
    retry (the lease stays valid locally until it would have expired)."""

    def __init__(self, *, client: redis.Redis, key: str, ttl_s: float) -> None:
        if ttl_s <= 0:
            raise ValueError(f"a lease needs a positive TTL, got {ttl_s}")
        self.client = client
        self.key = key
        self.ttl_s = ttl_s
        # Unique even for two processes that share a host name and pid (containers).
        self.token = f"{process_identity()}:{secrets.token_hex(3)}"
        self._valid_until = 0.0
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)

    @property
    def held(self) -> bool:
        return time.monotonic() < self._valid_until

    def try_acquire(self) -> bool:
        """Take the lease if nobody holds it; True when this process is now the leader."""
        sent = time.monotonic()
        if self.client.set(self.key, self.token, nx=True, px=self._ttl_ms()):
            self._valid_until = sent + self.ttl_s
            return True
        return False

    def renew(self) -> bool:
        """Extend the lease by a whole TTL; False when it is no longer this process's (it expired meanwhile)."""
        sent = time.monotonic()
        if self._renew(keys=[self.key], args=[self.token, self._ttl_ms()]):
            self._valid_until = sent + self.ttl_s
            return True
        self._valid_until = 0.0
        return False

    def release(self) -> None:
        """Give the lease up now, if Redis still has it as this process's, so a standby need not wait for the TTL.

        Asked even when `held` is already False: Redis's TTL outlasts this process's view of it."""
        self._valid_until = 0.0
        self._release(keys=[self.key], args=[self.token])

    def _ttl_ms(self) -> int:
        return max(int(self.ttl_s * 1000), 1)


def lease_holder(*, client: redis.Redis, key: str) -> Holder | None:
    """Who holds the lease `key` now (one round trip), or None."""
    token, ttl_ms = client.pipeline(transaction=False).get(key).pttl(key).execute()
    if token is None:
        return None
    return Holder(token=token.decode() if isinstance(token, bytes) else token, ttl_left_s=max(ttl_ms, 0) / 1000)

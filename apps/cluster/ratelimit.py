"""Client-side rate limiting for calls to the Kubernetes API server.

The API server protects itself with priority-and-fairness, but a control plane that fans out over many tenants
should not lean on that: like client-go (20 QPS, burst 30 by default), every backend call first takes a token.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class TokenBucket:
    """A thread-safe token bucket: `burst` tokens at most, refilled at `qps` tokens per second.

    `acquire()` reserves a token under a lock and then sleeps, outside the lock, until that token is due. The
    bucket may go negative (a reservation for the future), so waiting callers are served in arrival order and
    the long-run rate never exceeds `qps`. `clock` and `sleep` are injectable so tests need no real time.
    """

    def __init__(
        self,
        qps: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if qps <= 0:
            raise ValueError(f"qps must be positive, got {qps}")
        if burst < 1:
            raise ValueError(f"burst must be at least 1, got {burst}")
        self.qps = float(qps)
        self.burst = int(burst)
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._tokens = float(burst)
        self._last = clock()

    def _refill(self, now: float) -> None:
        elapsed = max(0.0, now - self._last)
        self._tokens = min(float(self.burst), self._tokens + elapsed * self.qps)
        self._last = now

    def reserve(self) -> float:
        """Take one token now and return how many seconds the caller must wait before using it (0 if none)."""
        with self._lock:
            self._refill(self._clock())
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def acquire(self) -> float:
        """Block until a token is available; return the seconds waited (0.0 when a token was at hand)."""
        wait = self.reserve()
        if wait > 0:
            self._sleep(wait)
        return wait

    @property
    def available(self) -> float:
        """Tokens available right now (negative while callers are queued for future tokens)."""
        with self._lock:
            self._refill(self._clock())
            return self._tokens

"""The quota counters of this profile (quota.py): RedisCounters (shared_counters.py) with REDIS_URL, shared by every
gateway process, else MemoryCounters in this one process."""

from __future__ import annotations

from django.conf import settings

from .quota import MemoryCounters
from .shared_counters import RedisCounters

_counters: MemoryCounters | RedisCounters | None = None


def counters() -> MemoryCounters | RedisCounters:
    """This process's counters, made on first use."""
    global _counters
    if _counters is None:
        _counters = RedisCounters(settings.REDIS_URL) if settings.REDIS_URL else MemoryCounters()
    return _counters


def reset() -> None:
    """Forget the counters object (tests that switch profiles)."""
    global _counters
    if _counters is not None and hasattr(_counters, "close"):
        _counters.close()
    _counters = None

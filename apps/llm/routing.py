"""The gateway's view of what it may route to changes: services, aliases and keys call `routes_changed()` after a
commit. This process drops its cached routes and keys at once; other server processes reload theirs within
`GRYVIA_LLM_CACHE_TTL_S` (their caches expire)."""

from __future__ import annotations

import itertools

_generation = itertools.count(1)
current = 0


def routes_changed() -> None:
    """Invalidate this process's cached routes and keys (call it on commit)."""
    global current
    current = next(_generation)

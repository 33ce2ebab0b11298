"""The garbage collector in long-running processes (the Celery worker, `serve` with its ticker).

Everything a started process has built (modules, classes, settings, URL patterns, compiled queries: some 145,000
objects in a worker) lives as long as the process. The cyclic collector would walk all of it on every full
collection, for nothing: a reconcile pass frees its own garbage by reference counting (no collection in
bench-admission's cycles found any). `freeze_startup_heap()` moves it to the permanent generation, once, after
start-up (as CPython's documentation suggests for long-lived processes: `gc.freeze`); what is created later is
collected as before.
"""

from __future__ import annotations

import gc


def freeze_startup_heap() -> int:
    """Collect once, then exempt every object alive now from later collections; returns how many were frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()

"""The garbage collector in long-running processes (the Celery worker, `serve` with its ticker).

Everything a started process has built (modules, classes, settings, URL patterns, compiled queries: some 145,000
objects in a worker) lives as long as the process. The cyclic collector would walk all of it on every full
collection, for nothing: a reconcile pass frees its own garbage by reference counting (no collection in
bench-admission's cycles found any). `freeze_startup_heap()` moves it to the permanent generation, once, after
start-up (as CPython's documentation suggests for long-lived processes: `gc.freeze`); what is created later is
collected as before.

It also raises the young generation's threshold (`GRYVIA_GC_YOUNG_THRESHOLD`, default 50,000 net allocations of
container objects instead of Python's 700). A pass keeps thousands of objects alive while it runs (rows, models,
manifests), so at 700 the collector walks them about twice a pass and finds nothing to free: 5 % of
bench-admission's CPU at 15,000 jobs. Cyclic garbage is still collected, in batches of up to the threshold's
objects (a few megabytes at most).
"""

from __future__ import annotations

import gc

from django.conf import settings


def freeze_startup_heap() -> int:
    """Collect once, then exempt every object alive now from later collections, and set the young generation's
    threshold (`GRYVIA_GC_YOUNG_THRESHOLD`; 0 keeps the current one); returns how many objects were frozen."""
    gc.collect()
    gc.freeze()
    young = settings.GRYVIA_GC_YOUNG_THRESHOLD
    if young:
        gc.set_threshold(young, *gc.get_threshold()[1:])
    return gc.get_freeze_count()

"""apps.core.db.heap: what a started process keeps for life leaves the collector's generations."""

from __future__ import annotations

import gc
import weakref

from apps.core.db.heap import freeze_startup_heap


def test_the_startup_heap_is_frozen_and_later_objects_are_collected_as_before(settings):
    settings.GRYVIA_GC_YOUNG_THRESHOLD = 0
    threshold = gc.get_threshold()
    try:
        before = [object()]  # alive at start-up
        frozen = freeze_startup_heap()
        assert frozen > 0 and gc.get_freeze_count() > 0  # (frozen objects may still be freed meanwhile)
        assert not any(o is before for o in gc.get_objects())  # no generation walks it now
        later = [object()]
        assert any(o is later for o in gc.get_objects())
        assert gc.get_threshold() == threshold  # 0: the thresholds stay as they were
    finally:
        gc.unfreeze()  # the rest of the test session collects as usual


def test_the_celery_worker_freezes_each_worker_process_once_started():
    from celery.signals import worker_process_init

    from gryvia_site import celery

    assert celery._freeze_startup_heap in [ref() for _key, ref in worker_process_init.receivers]


def test_the_young_generation_threshold_is_raised_and_cycles_are_still_collected(settings):
    settings.GRYVIA_GC_YOUNG_THRESHOLD = 50_000
    threshold = gc.get_threshold()
    try:
        freeze_startup_heap()
        assert gc.get_threshold() == (50_000, *threshold[1:])

        class Node:
            pass

        node = Node()
        node.me = node  # a cycle: only the collector frees it
        alive = weakref.ref(node)
        del node
        gc.collect(0)
        assert alive() is None
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()

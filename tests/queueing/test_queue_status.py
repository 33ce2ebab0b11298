"""Queue status after an admission cycle (apps.queueing.services.queue_status_sync): only rows that changed are
written, a queue left out has nothing admitted and none waiting, and the queue table's epoch stays (both
databases)."""

from __future__ import annotations

import pytest

from apps.core.db import epochs
from apps.queueing import services
from apps.queueing.models import Queue
from tests.factories import ACTOR, make_tenant

pytestmark = pytest.mark.django_db


def _status() -> dict[str, tuple[dict, int]]:
    return {q.name: (q.status_admitted, q.status_pending) for q in Queue.all_tenants.order_by("name")}


def _epoch() -> int:
    with epochs.snapshot():
        return epochs._snapshot.get().of("default").get("queueing_queue", 0)


def test_only_changed_queues_are_written_and_left_out_ones_are_emptied():
    tenant, other = make_tenant(), make_tenant()
    for owner, name in ((tenant, "a"), (tenant, "b"), (other, "c")):
        services.queue_create(actor=ACTOR, tenant=owner, name=name)
    epoch = _epoch()
    admitted = {(tenant.pk, "a"): {"nvidia.com/gpu": 4}, (other.pk, "c"): {"cpu": 2000}}
    assert services.queue_status_sync(admitted=admitted, pending={(tenant.pk, "b"): 3}) == 3
    assert _status() == {"a": ({"nvidia.com/gpu": 4}, 0), "b": ({}, 3), "c": ({"cpu": 2000}, 0)}
    stamped = Queue.all_tenants.get(name="b").status_updated_at
    assert stamped is not None

    # The same status again: nothing written.
    assert services.queue_status_sync(admitted=admitted, pending={(tenant.pk, "b"): 3}) == 0
    # Queue a is left out now (nothing admitted there any more), b's count moves, c stays.
    assert services.queue_status_sync(admitted={(other.pk, "c"): {"cpu": 2000}}, pending={(tenant.pk, "b"): 1}) == 2
    assert _status() == {"a": ({}, 0), "b": ({}, 1), "c": ({"cpu": 2000}, 0)}
    assert Queue.all_tenants.get(name="c").status_updated_at == stamped  # unchanged rows keep their stamp
    assert _epoch() == epoch  # status columns leave the epoch (and the cached queue limits) alone

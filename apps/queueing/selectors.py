"""Read access to queues, priority classes and reservations, and queues' quota as flat resource vectors; what the
job reconciler reads of the nodes (their views, placement, reservation claims) and of Kueue and KAI (a Workload's
phase, a pod's unschedulable reason)."""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field

from django.db.models import Q, QuerySet
from django.utils import timezone

from .inventory import node_views
from .kai import unschedulable_reason
from .kueue import phase_from_workload, workload_for
from .models import GpuNode, PriorityClass, Queue, Reservation
from .placement import RESERVED_KEY, place, reservation_claims
from .resources import resource_amount, resource_key

__all__ = [
    "UNLIMITED",
    "QuotaVector",
    "all_priority_classes",
    "all_queues",
    "all_reservations_active",
    "node_views",
    "phase_from_workload",
    "place",
    "priority_class_default",
    "queue_quota_vector",
    "queues_of_tenant",
    "quota_vector",
    "reservation_claims",
    "reservation_ends",
    "reservations_active",
    "reservations_billable",
    "reserved_gpus",
    "reserved_node_holders",
    "resource_amount",
    "resource_key",
    "unschedulable_reason",
    "workload_for",
]

UNLIMITED = math.inf


@dataclass(frozen=True)
class QuotaVector:
    """A queue's quota by resource key. An unlimited borrowing or lending limit is `math.inf`."""

    nominal: dict[str, int] = field(default_factory=dict)
    borrowing_limit: dict[str, int | float] = field(default_factory=dict)
    lending_limit: dict[str, int | float] = field(default_factory=dict)


def queues_of_tenant(tenant_id: int) -> QuerySet[Queue]:
    """The tenant's queues by name (an empty result means the implicit `default` queue)."""
    return Queue.all_tenants.filter(tenant_id=tenant_id).select_related("cohort").order_by("name")


def queue_quota_vector(queue: Queue) -> QuotaVector:
    """`queue.quotas` as flat mappings: {"nvidia.com/gpu:H100": 8, "cpu": 64000, "memory": 274877906944}."""
    return quota_vector(queue.quotas)


def quota_vector(quotas: list[dict] | None) -> QuotaVector:
    """A queue's `quotas` list as flat mappings (see queue_quota_vector)."""
    vector = QuotaVector()
    for entry in quotas or []:
        resource = entry["resource"]
        key = resource_key(resource, entry.get("flavor") or "")
        vector.nominal[key] = resource_amount(resource, entry["nominal"])
        for name, out in (("borrowingLimit", vector.borrowing_limit), ("lendingLimit", vector.lending_limit)):
            limit = entry.get(name)
            out[key] = UNLIMITED if limit is None else resource_amount(resource, limit)
    return vector


def priority_class_default() -> PriorityClass | None:
    return PriorityClass.objects.filter(is_default=True).first()


def reservations_active(tenant_id: int, now: dt.datetime | None = None) -> QuerySet[Reservation]:
    """The tenant's reservations holding GPUs at `now` (default: the current time)."""
    now = now or timezone.now()
    return Reservation.all_tenants.filter(tenant_id=tenant_id, start_at__lte=now, end_at__gt=now).order_by("start_at")


def all_reservations_active(now: dt.datetime | None = None) -> QuerySet[Reservation]:
    """Every tenant's reservations holding GPUs at `now` (archived tenants' excluded), earliest start first."""
    now = now or timezone.now()
    return (
        Reservation.all_tenants.filter(start_at__lte=now, end_at__gt=now, tenant__archived_at__isnull=True)
        .select_related("tenant")
        .order_by("start_at", "pk")
    )


def reservations_billable(*, now: dt.datetime, ids: set[int]) -> QuerySet[Reservation]:
    """What billing looks at: the reservations active at `now` and those named in `ids` (they have an open usage
    record), with their tenants (apps.billing.services.reservations)."""
    return Reservation.all_tenants.filter(Q(start_at__lte=now, end_at__gt=now) | Q(pk__in=ids)).select_related("tenant")


def reserved_node_holders(names: set[str]) -> dict[str, str]:
    """node name -> the tenant slug its `gryvia.io/reserved` label names, for those of `names` a reservation holds
    (from the inventory the job reconciler keeps)."""
    rows = GpuNode.objects.filter(name__in=names).values_list("name", "labels")
    return {name: labels[RESERVED_KEY] for name, labels in rows if (labels or {}).get(RESERVED_KEY)}


def reserved_gpus(now: dt.datetime | None = None) -> dict[int, dict[str, int]]:
    """tenant id -> GPU type -> GPUs reserved at `now`: the sum of the tenant's active reservations per type, with
    the type as the reservations spell it ("H100"). One query; tenants without an active reservation are absent."""
    reserved: dict[int, dict[str, int]] = {}
    for tenant_id, gpu_type, count in all_reservations_active(now).values_list("tenant_id", "gpu_type", "count"):
        by_type = reserved.setdefault(tenant_id, {})
        by_type[gpu_type] = by_type.get(gpu_type, 0) + count
    return reserved


def all_queues() -> QuerySet[Queue]:
    """Every tenant's queues (the admission cycle's input), with their cohorts."""
    return Queue.all_tenants.select_related("cohort").order_by("pk")


def all_priority_classes() -> QuerySet[PriorityClass]:
    return PriorityClass.objects.order_by("name")


def reservation_ends(ids: list[int]) -> dict[int, dt.datetime]:
    """reservation id -> the end of its window, for those among `ids` that exist (billing's forecast)."""
    return dict(Reservation.all_tenants.filter(pk__in=ids).values_list("pk", "end_at"))

"""Pricing: which SKU is in force for a GPU type at an instant, and what a run costs.

Amounts are exact Decimals rounded half-up to 6 places at each step a reader can check: GPU-hours =
GPUs × whole seconds / 3600; cost = GPU-hours × rate + core-hours × core rate + GiB-hours × GiB rate. A run
keeps the rate in force when it was admitted, whatever the catalog does later.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.core.cache import cache
from django.db.models import Q

from apps.core.db.epochs import EpochCached
from apps.core.db.prepared import PreparedRead, model_fields

from ..models import CATALOG_CACHE_KEY, GpuSku

DEFAULT_CURRENCY = "USD"
SIX = Decimal("0.000001")
ZERO = Decimal(0)
CATALOG_CACHE_S = 300
_CATALOG_FIELDS = (
    "id",
    "name",
    "gpu_type",
    "hourly_rate",
    "cpu_core_hour_rate",
    "memory_gib_hour_rate",
    "currency",
    "effective_from",
    "effective_to",
)


def q6(value: Decimal) -> Decimal:
    return value.quantize(SIX, rounding=ROUND_HALF_UP)


def hours_between(start: dt.datetime, end: dt.datetime) -> Decimal:
    return Decimal(max(int((end - start).total_seconds()), 0)) / Decimal(3600)


def sku_in_force(gpu_type: str, at: dt.datetime) -> GpuSku | None:
    """The SKU of this GPU type (case-insensitive) whose window holds `at`; None when the catalog has none."""
    window = Q(effective_to__isnull=True) | Q(effective_to__gt=at)
    return GpuSku.objects.filter(window, gpu_type__iexact=gpu_type, effective_from__lte=at).first()


# The whole catalog in force order, compiled once: every pass that opens a usage record reads it.
_SKUS = PreparedRead(lambda: GpuSku.objects.order_by("effective_from").values_list(*model_fields(GpuSku)))


class Catalog:
    """The whole catalog read once, for pricing many records in one batch (it is small)."""

    def __init__(self, skus: Iterable[GpuSku] | None = None) -> None:
        self._by_type: dict[str, list[GpuSku]] = {}
        for sku in _SKUS.models(GpuSku) if skus is None else skus:
            self._by_type.setdefault(sku.gpu_type.lower(), []).append(sku)

    @classmethod
    def cached(cls) -> Catalog:
        """The catalog from the cache (no query while it holds; one query after a SKU changed or it expired)."""
        rows = cache.get(CATALOG_CACHE_KEY)
        if rows is None:
            rows = list(GpuSku.objects.order_by("effective_from").values_list(*_CATALOG_FIELDS))
            cache.set(CATALOG_CACHE_KEY, rows, CATALOG_CACHE_S)
        return cls(GpuSku(**dict(zip(_CATALOG_FIELDS, row, strict=True))) for row in rows)

    def in_force(self, gpu_type: str, at: dt.datetime) -> GpuSku | None:
        for sku in self._by_type.get(gpu_type.lower(), ()):
            if sku.effective_from <= at and (sku.effective_to is None or at < sku.effective_to):
                return sku
        return None

    def all_in_force(self, at: dt.datetime) -> list[GpuSku]:
        """One SKU per GPU type: the one in force at `at`, for every type that has one."""
        return [sku for gpu_type in self._by_type if (sku := self.in_force(gpu_type, at)) is not None]

    def by_name(self, name: str) -> GpuSku | None:
        for skus in self._by_type.values():
            for sku in skus:
                if sku.name == name:
                    return sku
        return None


_CATALOG = EpochCached(("billing_gpusku",), Catalog)


def catalog() -> Catalog:
    """The whole catalog, read again inside a reconcile pass only when a SKU changed (apps.core.db.epochs)."""
    return _CATALOG.get()


def cost_of(
    *, sku: GpuSku | None, gpus: int, cpu_cores: Decimal, memory_gib: Decimal, hours: Decimal
) -> tuple[Decimal, Decimal]:
    """(GPU-hours, cost) of a run of `hours` at the SKU's rates (none: the hours are metered, the cost is 0)."""
    gpu_hours = q6(Decimal(gpus) * hours)
    if sku is None:
        return gpu_hours, ZERO
    cost = gpu_hours * sku.hourly_rate
    if cpu_cores:  # adding a zero term changes nothing once rounded: skipped on the ingest path
        cost += q6(Decimal(cpu_cores) * hours) * sku.cpu_core_hour_rate
    if memory_gib:
        cost += q6(Decimal(memory_gib) * hours) * sku.memory_gib_hour_rate
    return gpu_hours, q6(cost)


def price(record: Any, *, end: dt.datetime) -> dict[str, Decimal]:
    """The `gpu_hours` and `cost` of a run record from its start to `end`, at its SKU's rates. GPUs on nodes of the
    tenant's reservation (`reserved_gpus`) are the reservation's to bill: neither their hours nor their cost count."""
    gpu_hours, cost = cost_of(
        sku=record.sku,
        gpus=record.gpus - (getattr(record, "reserved_gpus", 0) or 0),
        cpu_cores=record.cpu_cores,
        memory_gib=record.memory_gib,
        hours=hours_between(record.start, end),
    )
    return {"gpu_hours": gpu_hours, "cost": cost}

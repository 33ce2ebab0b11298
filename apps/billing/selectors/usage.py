"""Reading billing: the catalog, the SKU in force, usage summed per group, ledger entries."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import Count, DecimalField, Q, QuerySet, Sum, Value
from django.db.models.functions import Coalesce, TruncDate

from apps.core.scoping import ALL_TENANTS, Scope

from ..models import GpuSku, LedgerEntry, UsageRecord

USAGE_GROUPS = ("tenant", "queue", "job", "sku", "model", "kind", "day")
USAGE_GROUP_KEYS = {
    "tenant": "tenant__slug",
    "queue": "queue_name",
    "job": "job_name",
    "sku": "sku_name",
    "model": "model",
    "kind": "kind",
    "day": "day",
}
USAGE_METRICS = ("records", "open", "gpu_hours", "input_tokens", "output_tokens", "cost", "currency")
_ZERO = Value(Decimal(0), output_field=DecimalField(max_digits=20, decimal_places=6))


def skus(*, gpu_type: str | None = None, at: dt.datetime | None = None) -> QuerySet[GpuSku]:
    """The catalog (every tenant reads it), optionally one GPU type's prices, or those in force at `at`."""
    queryset = GpuSku.objects.all()
    if gpu_type:
        queryset = queryset.filter(gpu_type__iexact=gpu_type)
    if at is not None:
        queryset = queryset.filter(Q(effective_to__isnull=True) | Q(effective_to__gt=at), effective_from__lte=at)
    return queryset


def usage_records_visible(*, tenants: Scope) -> QuerySet[UsageRecord]:
    queryset = UsageRecord.all_tenants.select_related("tenant")
    return queryset if tenants is ALL_TENANTS else queryset.filter(tenant_id__in=tenants)


@dataclass(frozen=True)
class UsageReport:
    """Usage whose start is in [start, end): one row per group (the group keys, then `USAGE_METRICS`; currency is
    always a key, so amounts in different currencies are never added) and totals per currency."""

    start: dt.datetime
    end: dt.datetime
    group_by: tuple[str, ...]
    rows: QuerySet
    totals: list[dict[str, Any]]


def usage_report(
    *,
    tenants: Scope,
    start: dt.datetime,
    end: dt.datetime,
    group_by: Sequence[str] = ("day", "sku"),
    tenant_slug: str | None = None,
    job: str | None = None,
    kind: str | None = None,
) -> UsageReport:
    """Usage of `tenants` (a principal's scope, or ALL_TENANTS), summed per group. Open runs count with their
    hours and cost as last refreshed.

    Raises:
        ValidationError: an unknown or empty `group_by`, or `end` not after `start`.
    """
    group_by = tuple(dict.fromkeys(group_by))
    unknown = [name for name in group_by if name not in USAGE_GROUPS]
    if unknown or not group_by:
        what = f"unknown {', '.join(map(repr, unknown))}" if unknown else "empty"
        raise ValidationError({"group_by": [f"{what}: use a comma-separated list of {', '.join(USAGE_GROUPS)}"]})
    if end <= start:
        raise ValidationError({"end": [f"must be after start ({start.isoformat()}); got {end.isoformat()}"]})
    records = usage_records_visible(tenants=tenants).filter(start__gte=start, start__lt=end)
    if tenant_slug:
        records = records.filter(tenant__slug=tenant_slug)
    if job:
        records = records.filter(job_name=job)
    if kind:
        records = records.filter(kind=kind)
    sums = {
        "records": Count("id"),
        "open": Count("id", filter=Q(final=False)),
        "gpu_hours": Coalesce(Sum("gpu_hours"), _ZERO),
        "input_tokens": Coalesce(Sum("input_tokens"), 0),
        "output_tokens": Coalesce(Sum("output_tokens"), 0),
        "cost": Coalesce(Sum("cost"), _ZERO),
    }
    keys = [USAGE_GROUP_KEYS[name] for name in group_by]
    plain = [key for key in keys if key != "day"]
    computed = {"day": TruncDate("start", tzinfo=dt.UTC)} if "day" in group_by else {}
    rows = records.values(*plain, "currency", **computed).annotate(**sums).order_by(*keys, "currency")
    totals = list(records.values("currency").annotate(**sums).order_by("currency"))
    return UsageReport(start=start, end=end, group_by=group_by, rows=rows, totals=totals)


def ledger_entries(*, tenant_id: int) -> QuerySet[LedgerEntry]:
    return LedgerEntry.all_tenants.filter(tenant_id=tenant_id).order_by("sequence")

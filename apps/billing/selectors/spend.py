"""Spend in a period: what budgets and the month-end forecast are measured with.

Periods are half-open `[start, end)` in UTC. Spend of a tenant in a period, per currency: every final usage record
that lies in it (summed by the database), the share of its wall-clock time inside the period of one that crosses
a boundary, and each open record (a job run, a reservation) priced at its rates up to `now`, likewise prorated.
Currencies are never added together, nor converted.

Final records that started more than `LOOKBACK` before the period are not looked at (a job run that long is not
expected; reservation records are split at each month's start, apps.billing.services.reservations).
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable
from decimal import Decimal

from django.db.models import Q, Sum

from ..models import UsageRecord
from . import pricing

LOOKBACK = dt.timedelta(days=92)
_CROSSING = ("tenant_id", "currency", "start", "end", "cost")
Spend = dict[tuple[int, str], Decimal]  # (tenant id, currency) -> amount


def month_of(at: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """The UTC calendar month holding `at`, as [first instant, first instant of the next month)."""
    at = at.astimezone(dt.UTC)
    start = at.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = (start + dt.timedelta(days=32)).replace(day=1)
    return start, end


def overlap_seconds(start: dt.datetime, end: dt.datetime, window_start: dt.datetime, window_end: dt.datetime) -> int:
    return max(int((min(end, window_end) - max(start, window_start)).total_seconds()), 0)


def prorated(cost: Decimal, start: dt.datetime, end: dt.datetime, window: tuple[dt.datetime, dt.datetime]) -> Decimal:
    """The share of `cost`, spread evenly over [start, end), that falls in `window` (half-up, 6 places)."""
    total = int((end - start).total_seconds())
    if total <= 0:  # an instant: all of it where it lies
        return cost if window[0] <= start < window[1] else pricing.ZERO
    inside = overlap_seconds(start, end, *window)
    if inside >= total:
        return cost
    return pricing.q6(cost * inside / total)


def open_cost(record: UsageRecord, now: dt.datetime) -> Decimal:
    """An open record's cost from its start up to `now`, at its rates (its stored cost is as last refreshed)."""
    return pricing.price(record, end=max(now.replace(microsecond=0), record.start))["cost"]


def usage_spend(*, tenant_ids: Iterable[int], start: dt.datetime, end: dt.datetime, now: dt.datetime) -> Spend:
    """Spend of each tenant in [start, end) as of `now`, per currency (three queries)."""
    tenant_ids = list(tenant_ids)
    out: Spend = defaultdict(lambda: pricing.ZERO)
    if not tenant_ids:
        return {}
    window = (start, end)
    records = UsageRecord.all_tenants.filter(tenant_id__in=tenant_ids)
    inside = (
        records.filter(final=True, start__gte=start, end__lte=end)
        .values_list("tenant_id", "currency")
        .annotate(total=Sum("cost"))
        .order_by()
    )
    for tenant_id, currency, total in inside:
        out[(tenant_id, currency)] += total or pricing.ZERO
    crossing = records.filter(final=True, start__gte=start - LOOKBACK, start__lt=end, end__gt=start).filter(
        Q(start__lt=start) | Q(end__gt=end)
    )
    for tenant_id, currency, begun, ended, cost in crossing.values_list(*_CROSSING):
        out[(tenant_id, currency)] += prorated(cost, begun, ended, window)
    if now > start:
        for record in records.filter(final=False, start__lt=min(now, end)).select_related("sku"):
            upto = max(now.replace(microsecond=0), record.start)
            out[(record.tenant_id, record.currency)] += prorated(open_cost(record, now), record.start, upto, window)
    return {key: pricing.q6(amount) for key, amount in out.items()}

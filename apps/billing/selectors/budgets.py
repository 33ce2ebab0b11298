"""The hard budgets in force, as the admission cycle reads them: two queries per cycle (the budgets, and the usage
that became final since their evaluation), and none while the cache says there are none (forgotten whenever a
budget is written)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass
from decimal import Decimal

from django.core.cache import cache

from ..choices import BudgetPeriod
from ..models import HARD_CACHE_KEY, Budget, UsageRecord
from . import pricing
from .spend import LOOKBACK, month_of, prorated

HARD_CACHE_S = 300


def hard_budgets_maybe() -> bool:
    """Whether a hard budget may exist, from the cache alone (never a query: for hot paths)."""
    return cache.get(HARD_CACHE_KEY) != 0


@dataclass(frozen=True)
class HardBudget:
    """A hard budget in force, as admission sees it: its spend at its last evaluation (`evaluated_at`), and `closed`:
    the part after that evaluation of the usage that has become final since (a job run that ended), which the
    evaluation has not measured yet and the running jobs' forecasts no longer cover."""

    id: int
    name: str
    tenant_ids: tuple[int, ...]
    amount: Decimal
    currency: str
    spent: Decimal
    evaluated_at: dt.datetime
    end: dt.datetime  # its period's end
    closed: Decimal = pricing.ZERO


_HARD_FIELDS = (
    "id",
    "name",
    "tenant_id",
    "cost_center__code",
    "status_tenants",
    "amount",
    "currency",
    "period",
    "start",
    "end",
    "status_spent",
    "status_evaluated_at",
    "status_period_start",
)


def hard_budgets_in_force(now: dt.datetime) -> list[HardBudget]:
    """The hard budgets whose period holds `now`, each with what has closed since its evaluation: two queries, or
    none while the cache says there are none."""
    if cache.get(HARD_CACHE_KEY) == 0:
        return []
    rows = list(Budget.all_tenants.filter(hard_limit=True).order_by().values_list(*_HARD_FIELDS))
    cache.set(HARD_CACHE_KEY, 1 if rows else 0, HARD_CACHE_S)
    month_start, month_end = month_of(now)
    out = []
    for pk, name, tenant_id, center, tenants, amount, currency, period, start, end, spent, at, status_start in rows:
        if period == BudgetPeriod.CUSTOM:
            if not start <= now < end:
                continue
        else:
            start, end = month_start, month_end
        if status_start != start or at is None:  # not evaluated in this period yet: nothing measured
            spent, at = pricing.ZERO, start
        out.append(
            HardBudget(
                id=pk,
                name=name if tenant_id else f"{name} (cost center {center})",
                tenant_ids=(tenant_id,) if tenant_id else tuple(tenants or ()),
                amount=amount,
                currency=currency,
                spent=spent,
                evaluated_at=at,
                end=end,
            )
        )
    return _with_closed(out) if out else out


def _with_closed(budgets: list[HardBudget]) -> list[HardBudget]:
    """The budgets with `closed` filled in, from one query: the final usage of their tenants that ends after the
    earliest of their evaluations, each record's part after its budget's evaluation (prorated over its time, as
    spend is). A record still open at the evaluation was measured up to it; from it on, only this counts it."""
    since = min(budget.evaluated_at for budget in budgets)
    tenants = {tenant_id for budget in budgets for tenant_id in budget.tenant_ids}
    rows = list(
        UsageRecord.all_tenants.filter(
            tenant_id__in=tenants, final=True, end__gt=since, start__gte=since - LOOKBACK
        ).values_list("tenant_id", "currency", "start", "end", "cost")
    )
    if not rows:
        return budgets
    out = []
    for budget in budgets:
        window = (budget.evaluated_at, budget.end)
        members = set(budget.tenant_ids)
        closed = sum(
            (
                prorated(cost, start, end, window)
                for tenant_id, currency, start, end, cost in rows
                if tenant_id in members and currency == budget.currency and end > budget.evaluated_at
            ),
            pricing.ZERO,
        )
        out.append(dataclasses.replace(budget, closed=pricing.q6(closed)) if closed else budget)
    return out

"""The hard budgets in force, as the admission cycle reads them: one query per cycle, and none while the cache
says there are none (forgotten whenever a budget is written)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal

from django.core.cache import cache
from django.db import transaction

from .. import pricing
from ..models import Budget, BudgetPeriod
from ..spend import month_of

HARD_CACHE_KEY = "gryvia:billing:hard-budgets:v1"
HARD_CACHE_S = 300


def forget_hard_budgets() -> None:
    """Drop the cached "is there a hard budget" answer now and once the writer's transaction commits."""
    cache.delete(HARD_CACHE_KEY)
    transaction.on_commit(lambda: cache.delete(HARD_CACHE_KEY))


def hard_budgets_maybe() -> bool:
    """Whether a hard budget may exist, from the cache alone (never a query: for hot paths)."""
    return cache.get(HARD_CACHE_KEY) != 0


@dataclass(frozen=True)
class HardBudget:
    """A hard budget in force, as admission sees it: its spend at its last evaluation (`evaluated_at`)."""

    id: int
    name: str
    tenant_ids: tuple[int, ...]
    amount: Decimal
    currency: str
    spent: Decimal
    evaluated_at: dt.datetime


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
    """The hard budgets whose period holds `now`: one query, or none while the cache says there are none."""
    if cache.get(HARD_CACHE_KEY) == 0:
        return []
    rows = list(Budget.all_tenants.filter(hard_limit=True).order_by().values_list(*_HARD_FIELDS))
    cache.set(HARD_CACHE_KEY, 1 if rows else 0, HARD_CACHE_S)
    month_start, _month_end = month_of(now)
    out = []
    for pk, name, tenant_id, center, tenants, amount, currency, period, start, end, spent, at, status_start in rows:
        if period == BudgetPeriod.CUSTOM:
            if not start <= now < end:
                continue
        else:
            start = month_start
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
            )
        )
    return out

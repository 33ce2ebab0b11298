"""Budget evaluation: each budget's spend in its period, its state, and each threshold crossed recorded once.

Evaluation (`budgets_evaluate`, periodic `evaluate-budgets`, nudged when usage closes while a hard budget exists)
measures spend (apps.billing.selectors.spend), sets each budget's state and records each threshold crossed once per
period: a `BudgetEvent` row whose unique (budget, period start, threshold) makes a second evaluator's insert fail,
and, in the same transaction, a `budget.threshold_crossed` event for outside receivers (apps.core.events). A cost
center's budget emits it in each of its tenants.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.core import events as core_events
from apps.core.db.bulk import bulk_set
from apps.core.locks import try_advisory_lock
from apps.core.periodic import nudge
from apps.tenants.models import Tenant

from ...choices import BudgetPeriod, BudgetState
from ...models import Budget, BudgetEvent, TenantCostCenter
from ...selectors import pricing
from ...selectors.budgets import hard_budgets_maybe
from ...selectors.spend import month_of, usage_spend

EVALUATE = "evaluate-budgets"
EVENT_TYPE = "budget.threshold_crossed"
WARNING_WITHOUT_THRESHOLDS = 80


def period_of(budget: Budget, at: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """The budget's period holding `at` (a custom one is its window, whenever `at` is)."""
    if budget.period == BudgetPeriod.CUSTOM:
        return budget.start, budget.end
    return month_of(at)


def state_of(*, spent: Decimal, amount: Decimal, thresholds: list[int], hard_limit: bool) -> str:
    """blocked (hard, at or past 100 %), exceeded (past 100 %), warning (past the lowest threshold, or 80 % without
    thresholds), else ok."""
    percent = spent * 100 / amount if amount > 0 else Decimal(100)
    if percent >= 100:
        return BudgetState.BLOCKED if hard_limit else BudgetState.EXCEEDED
    if percent >= (min(thresholds) if thresholds else WARNING_WITHOUT_THRESHOLDS):
        return BudgetState.WARNING
    return BudgetState.OK


def percent_of(spent: Decimal, amount: Decimal) -> Decimal:
    return (spent * 100 / amount).quantize(Decimal("0.01")) if amount > 0 else Decimal(0)


def _members(budgets: list[Budget]) -> dict[int, list[int]]:
    """budget id -> the tenants whose spend counts (a cost center's: those mapped to it now)."""
    centers = {b.cost_center_id for b in budgets if b.cost_center_id}
    mapped: dict[int, list[int]] = defaultdict(list)
    if centers:
        for tenant_id, center in TenantCostCenter.objects.filter(cost_center_id__in=centers).values_list(
            "tenant_id", "cost_center_id"
        ):
            mapped[center].append(tenant_id)
    return {b.pk: [b.tenant_id] if b.tenant_id else sorted(mapped.get(b.cost_center_id, [])) for b in budgets}


def _message(budget: Budget, spent: Decimal, state: str, start: dt.datetime, end: dt.datetime) -> str:
    span = f"{start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC"
    text = f"{spent:.2f} of {budget.amount:.2f} {budget.currency} spent ({percent_of(spent, budget.amount)} %), {span}"
    if state == BudgetState.BLOCKED:
        text += "; hard limit reached: new jobs are held"
    elif budget.hard_limit:
        text += "; hard limit: new jobs whose forecast would exceed it are held"
    return text


def _event_items(budget: Budget, event: BudgetEvent, slugs: dict[int, str], tenants: list[int]) -> list[dict]:
    data = {
        "budget": {
            "name": budget.name,
            "cost_center": budget.cost_center_code,
            "period_start": event.period_start.isoformat(),
            "period_end": event.period_end.isoformat(),
            "threshold": event.threshold,
            "spent": str(event.spent),
            "amount": str(event.amount),
            "currency": event.currency,
            "percent": str(percent_of(event.spent, event.amount)),
            "hard_limit": budget.hard_limit,
        }
    }
    return [
        {"tenant_id": t, "tenant_slug": slugs[t], "type": EVENT_TYPE, "data": data, "subject": f"budget/{budget.name}"}
        for t in tenants
        if t in slugs
    ]


def _recorded(budget_ids: set[int]) -> set[tuple[int, dt.datetime, int]]:
    """(budget, period start, threshold) already recorded: those need no insert attempt."""
    rows = BudgetEvent.all_tenants.filter(budget_id__in=budget_ids)
    return set(rows.values_list("budget_id", "period_start", "threshold"))


def _record_crossings(
    crossed: list[tuple[Budget, int, Decimal, dt.datetime, dt.datetime]], members: dict[int, list[int]]
) -> int:
    """Insert each (budget, threshold, period) not recorded yet and emit its event, in the caller's transaction.
    A row another evaluator inserted first is skipped (the unique constraint), so each is emitted once."""
    if not crossed:
        return 0
    recorded = _recorded({b.pk for b, *_ in crossed})
    fresh = [c for c in crossed if (c[0].pk, c[3], c[1]) not in recorded]
    if not fresh:
        return 0

    tenant_ids = {t for budget, *_ in fresh for t in members[budget.pk]}
    slugs = dict(Tenant.objects.filter(pk__in=tenant_ids).values_list("pk", "slug"))
    items: list[dict[str, Any]] = []
    for budget, threshold, spent, start, end in fresh:
        event = BudgetEvent(
            tenant_id=budget.tenant_id or (members[budget.pk] or [None])[0],
            budget=budget,
            period_start=start,
            period_end=end,
            threshold=threshold,
            spent=spent,
            amount=budget.amount,
            currency=budget.currency,
        )
        if event.tenant_id is None:
            continue  # a cost center without tenants spends nothing: it cannot cross a threshold
        try:
            with transaction.atomic():
                event.save()
        except IntegrityError:
            continue  # recorded by a concurrent evaluator, which emits it
        items += _event_items(budget, event, slugs, members[budget.pk])
    core_events.emit_many(items)
    return len(items)


def evaluate(budgets: list[Budget], now: dt.datetime) -> int:
    """Measure the budgets' spend, write their status where it changed, and record the thresholds crossed.
    Returns how many threshold events were emitted."""
    if not budgets:
        return 0
    now = now.replace(microsecond=0)
    members = _members(budgets)
    by_period: dict[tuple[dt.datetime, dt.datetime], set[int]] = defaultdict(set)
    for budget in budgets:
        by_period[period_of(budget, now)] |= set(members[budget.pk])
    spends = {
        window: usage_spend(tenant_ids=tenants, start=window[0], end=window[1], now=now)
        for window, tenants in by_period.items()
    }
    changes: dict[int, dict[str, Any]] = {}
    crossed = []
    for budget in budgets:
        start, end = period_of(budget, now)
        spend = spends[(start, end)]
        spent = pricing.q6(
            sum((spend.get((t, budget.currency), pricing.ZERO) for t in members[budget.pk]), pricing.ZERO)
        )
        state = state_of(spent=spent, amount=budget.amount, thresholds=budget.thresholds, hard_limit=budget.hard_limit)
        changes[budget.pk] = {
            "status_state": state,
            "status_spent": spent,
            "status_period_start": start,
            "status_period_end": end,
            "status_evaluated_at": now,
            "status_message": _message(budget, spent, state, start, end),
            "status_tenants": members[budget.pk],
        }
        percent = spent * 100 / budget.amount
        crossed += [(budget, t, spent, start, end) for t in budget.thresholds if percent >= t]
    with transaction.atomic():
        bulk_set(Budget, changes)
        return _record_crossings(crossed, members)


def budgets_evaluate(*, now: dt.datetime | None = None) -> dict[str, int]:
    """Evaluate every budget (periodic, under a non-blocking lock: a concurrent run is skipped)."""
    with try_advisory_lock("billing:evaluate-budgets") as acquired:
        if not acquired:
            return {"budgets": 0, "events": 0, "skipped": 1}
        budgets = list(Budget.all_tenants.select_related("tenant", "cost_center"))
        return {"budgets": len(budgets), "events": evaluate(budgets, now or timezone.now())}


def budgets_nudge() -> None:
    """Ask for an evaluation soon (usage closed while a hard budget may exist); costs no query."""
    if hard_budgets_maybe():
        nudge(EVALUATE)

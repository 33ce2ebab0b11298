"""Budgets: their writes (validated, transactional, audited), their evaluation, and what admission reads of them.

A budget belongs to a tenant (tenant admins and platform admins write it: `billing:write` in the tenant) or to a
cost center (platform admins only), and covers a period: the current UTC month, or a custom `[start, end)`.

Evaluation (`budgets_evaluate`, periodic `evaluate-budgets`, nudged when usage closes while a hard budget exists)
measures spend (apps.billing.spend), sets each budget's state and records each threshold crossed once per period:
a `BudgetEvent` row whose unique (budget, period start, threshold) makes a second evaluator's insert fail, and, in
the same transaction, a `budget.threshold_crossed` event for outside receivers (apps.core.events). A cost
center's budget emits it in each of its tenants.

Admission (`hard_budgets_in_force`) reads the hard budgets with one query per cycle, and none while the cache
says there are none (forgotten whenever a budget is written).
"""

from __future__ import annotations

import datetime as dt
import re
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.core import events as core_events
from apps.core.audit import audit_record, snapshot
from apps.core.bulk import bulk_set
from apps.core.locks import try_advisory_lock
from apps.core.periodic import nudge
from apps.core.principal import Principal
from apps.core.scopes import ADMIN

from . import pricing
from .models import Budget, BudgetEvent, BudgetPeriod, BudgetState, CostCenter, TenantCostCenter
from .spend import month_of, usage_spend

WRITE = "billing:write"
EVALUATE = "evaluate-budgets"
EVENT_TYPE = "budget.threshold_crossed"
HARD_CACHE_KEY = "gryvia:billing:hard-budgets:v1"
HARD_CACHE_S = 300
FIELDS = ("period", "start", "end", "amount", "currency", "thresholds", "hard_limit", "description")
MAX_AMOUNT = Decimal(10) ** 12
MAX_THRESHOLDS = 10
WARNING_WITHOUT_THRESHOLDS = 80
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_CURRENCY = re.compile(r"^[A-Z]{3}$")


def forget_hard_budgets() -> None:
    """Drop the cached "is there a hard budget" answer now and once the writer's transaction commits."""
    cache.delete(HARD_CACHE_KEY)
    transaction.on_commit(lambda: cache.delete(HARD_CACHE_KEY))


def hard_budgets_maybe() -> bool:
    """Whether a hard budget may exist, from the cache alone (never a query: for hot paths)."""
    return cache.get(HARD_CACHE_KEY) != 0


# --- periods and state -------------------------------------------------------------------------------------------


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


# --- validation ----------------------------------------------------------------------------------------------------


def _amount(value: Any) -> Decimal:
    if value is None:
        raise ValidationError({"amount": "is required: the budget's limit, e.g. 500.00"})
    if isinstance(value, bool) or not isinstance(value, int | str | Decimal | float):
        raise ValidationError({"amount": "must be a positive decimal number such as 500 or 500.00"})
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        raise ValidationError({"amount": f"{value!r} is not a decimal number"}) from None
    if not amount.is_finite() or amount <= 0 or amount > MAX_AMOUNT:
        raise ValidationError({"amount": f"must be greater than 0 and at most {MAX_AMOUNT} (got {value})"})
    if amount != amount.quantize(pricing.SIX):
        raise ValidationError({"amount": "at most 6 decimal places"})
    return amount.quantize(pricing.SIX)


def _thresholds(value: Any) -> list[int]:
    if not isinstance(value, list):
        raise ValidationError({"thresholds": "must be a list of percentages such as [50, 80, 100]"})
    if len(value) > MAX_THRESHOLDS:
        raise ValidationError({"thresholds": f"at most {MAX_THRESHOLDS} thresholds"})
    out = []
    for index, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, int) or not 1 <= item <= 1000:
            raise ValidationError({"thresholds": f"thresholds[{index}]: must be a whole percentage from 1 to 1000"})
        out.append(item)
    if len(set(out)) != len(out):
        raise ValidationError({"thresholds": "each percentage may appear once"})
    return sorted(out)


def _instant(value: Any, name: str) -> dt.datetime | None:
    if value is None:
        return None
    if not isinstance(value, dt.datetime):
        raise ValidationError({name: "must be a date and time"})
    if timezone.is_naive(value):
        raise ValidationError({name: "needs a UTC offset"})
    return value.astimezone(dt.UTC)


def _check(fields: dict[str, Any]) -> dict[str, Any]:
    """Normalized fields of a budget, from the current ones updated with the changes. Errors name the field."""
    period = fields.get("period")
    if period not in BudgetPeriod.values:
        raise ValidationError({"period": f"must be one of {', '.join(BudgetPeriod.values)} (got {period!r})"})
    start, end = _instant(fields.get("start"), "start"), _instant(fields.get("end"), "end")
    if period == BudgetPeriod.CUSTOM:
        if start is None:
            raise ValidationError({"start": "is required for a custom period"})
        if end is None:
            raise ValidationError({"end": "is required for a custom period"})
        if end <= start:
            raise ValidationError({"end": f"must be after start ({start.isoformat()})"})
    elif start is not None or end is not None:
        raise ValidationError({"start" if start is not None else "end": "only a custom period has a start and an end"})
    currency = fields.get("currency")
    if not isinstance(currency, str) or not _CURRENCY.match(currency):
        raise ValidationError({"currency": f"must be an ISO 4217 code such as USD (got {currency!r})"})
    if not isinstance(fields.get("hard_limit"), bool):
        raise ValidationError({"hard_limit": "must be true or false"})
    description = fields.get("description")
    if not isinstance(description, str) or len(description) > 500:
        raise ValidationError({"description": "must be a string of at most 500 characters"})
    return {
        "period": period,
        "start": start,
        "end": end,
        "amount": _amount(fields.get("amount")),
        "currency": currency,
        "thresholds": _thresholds(fields.get("thresholds")),
        "hard_limit": fields["hard_limit"],
        "description": description,
    }


def budget_validate(fields: dict[str, Any]) -> dict[str, Any]:
    """The normalized spec fields (FIELDS) of a budget; ValidationError naming the field (admin forms call it)."""
    return _check(fields)


def _reject_unknown(fields: dict[str, Any]) -> None:
    unknown = sorted(set(fields) - set(FIELDS))
    if unknown:
        raise ValidationError({name: "unknown field, or one that cannot be changed" for name in unknown})


def _require_write(actor: Principal, budget: Budget) -> None:
    if budget.tenant_id is None:
        if not (actor.is_platform and ADMIN in actor.platform_scopes):
            raise PermissionError("only platform staff with admin can write a cost center's budget")
    elif not actor.has_scope(WRITE, budget.tenant_id):
        raise PermissionError(f"this credential lacks the scope {WRITE!r} in tenant {budget.tenant.slug}")


def _audit(actor: Principal, action: str, budget: Budget, before: Any, after: Any) -> None:
    audit_record(
        actor=actor,
        action=action,
        obj=budget,
        object_type="budget",
        object_id=budget.name,
        tenant_id=budget.tenant_id,
        tenant_slug=budget.tenant.slug if budget.tenant_id else "",
        before=before,
        after=after,
    )


# --- writes --------------------------------------------------------------------------------------------------------


@transaction.atomic
def budget_create(
    *, actor: Principal, name: Any, tenant: Any = None, cost_center: CostCenter | None = None, **fields: Any
) -> Budget:
    """A budget of `tenant`, or of `cost_center` (platform admins only), evaluated at once. Raises
    ValidationError naming the field, PermissionError."""
    _reject_unknown(fields)
    if (tenant is None) == (cost_center is None):
        raise ValidationError({"cost_center": "a budget is either a tenant's or a cost center's"})
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValidationError({"name": "must be a DNS label: lowercase letters, digits and '-', at most 63"})
    defaults = {"period": BudgetPeriod.MONTHLY, "currency": pricing.DEFAULT_CURRENCY, "hard_limit": False}
    defaults.update(thresholds=[50, 80, 100], description="", start=None, end=None, amount=None)
    budget = Budget(tenant=tenant, cost_center=cost_center, name=name, **_check({**defaults, **fields}))
    _require_write(actor, budget)
    same_name = Budget.all_tenants.filter(name=name, tenant=tenant) if tenant else None
    if same_name is None:
        same_name = Budget.all_tenants.filter(name=name, tenant__isnull=True)
    if same_name.exists():
        where = f"tenant {tenant.slug}" if tenant else "the platform's cost center budgets"
        raise ValidationError({"name": f"a budget named {name!r} already exists in {where}"})
    try:
        with transaction.atomic():
            budget.save()
    except IntegrityError as exc:
        raise ValidationError({"name": f"a budget named {name!r} already exists"}) from exc
    _audit(actor, "budget.create", budget, None, snapshot(budget, Budget.AUDIT_FIELDS))
    _evaluate([budget], timezone.now())
    budget.refresh_from_db()
    return budget


@transaction.atomic
def budget_update(*, actor: Principal, budget: Budget, **changes: Any) -> Budget:
    """Change a budget's period, amount, currency, thresholds, hard limit or description; evaluated at once."""
    _reject_unknown(changes)
    budget = (
        Budget.all_tenants.select_for_update(of=("self",)).select_related("tenant", "cost_center").get(pk=budget.pk)
    )
    _require_write(actor, budget)
    current = {name: getattr(budget, name) for name in FIELDS}
    if changes.get("period") == BudgetPeriod.MONTHLY:  # leaving a custom period drops its window
        current.update(start=None, end=None)
    checked = _check({**current, **changes})
    before = snapshot(budget, Budget.AUDIT_FIELDS)
    for key, value in checked.items():
        setattr(budget, key, value)
    after = snapshot(budget, Budget.AUDIT_FIELDS)
    if after == before:
        return budget
    budget.generation += 1
    budget.save()
    _audit(actor, "budget.update", budget, before, after)
    _evaluate([budget], timezone.now())
    budget.refresh_from_db()
    return budget


@transaction.atomic
def budget_delete(*, actor: Principal, budget: Budget) -> None:
    """Remove a budget and its threshold events."""
    _require_write(actor, budget)
    _audit(actor, "budget.delete", budget, snapshot(budget, Budget.AUDIT_FIELDS), None)
    budget.delete()


# --- evaluation ----------------------------------------------------------------------------------------------------


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
    from apps.tenants.models import Tenant

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


def _evaluate(budgets: list[Budget], now: dt.datetime) -> int:
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
        return {"budgets": len(budgets), "events": _evaluate(budgets, now or timezone.now())}


def budgets_nudge() -> None:
    """Ask for an evaluation soon (usage closed while a hard budget may exist); costs no query."""
    if hard_budgets_maybe():
        nudge(EVALUATE)


# --- admission -----------------------------------------------------------------------------------------------------


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

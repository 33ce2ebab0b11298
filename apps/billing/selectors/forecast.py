"""Month-end cost forecast per tenant: what it spent so far this UTC month, plus what what runs now will add.

- `spent`: the month's spend so far (apps.billing.selectors.spend: final records, open ones priced up to now).
- `running`: each open record extrapolated at its rates from now until the earliest of the month's end and its
  own end: a job run's timeout (start + `timeout`), a reservation's window end. A job without a timeout runs
  until the month ends. Token and external usage is counted as it arrives, not extrapolated.
- `projected` = spent + running, per currency (never added across currencies). Each of the tenant's monthly
  budgets in that currency shows the projection against its amount.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from apps.queueing.selectors import reservation_ends

from ..choices import BudgetPeriod, UsageKind
from ..models import Budget, UsageRecord
from . import pricing
from .run_owners import job_timeouts
from .spend import month_of, usage_spend


@dataclass(frozen=True)
class RunForecast:
    """One open record, extrapolated: what it costs from now until `until`."""

    name: str
    kind: str
    job: str
    until: dt.datetime
    cost: Decimal


@dataclass(frozen=True)
class BudgetForecast:
    name: str
    amount: Decimal
    projected_percent: Decimal
    sufficient: bool  # the projection stays within the amount
    hard_limit: bool


@dataclass
class TenantForecast:
    """A tenant's month-end forecast in one currency."""

    tenant: str
    currency: str
    spent: Decimal = pricing.ZERO
    running: Decimal = pricing.ZERO
    projected: Decimal = pricing.ZERO
    runs: list[RunForecast] = field(default_factory=list)
    budgets: list[BudgetForecast] = field(default_factory=list)


@dataclass(frozen=True)
class Forecast:
    start: dt.datetime
    end: dt.datetime
    at: dt.datetime
    tenants: list[TenantForecast]


def _until(record: UsageRecord, *, month_end: dt.datetime, timeouts: dict[int, int | None], ends: dict[int, Any]):
    if record.kind == UsageKind.RESERVATION:
        end = ends.get(record.reservation_pk)
        return min(month_end, end) if end else month_end
    timeout = timeouts.get(record.job_pk)
    return min(month_end, record.start + dt.timedelta(seconds=timeout)) if timeout else month_end


def month_end_forecast(*, tenants: list[Any], now: dt.datetime) -> Forecast:
    """The forecast of each of `tenants` (Tenant rows) for the month holding `now` (a few queries in all)."""
    now = now.replace(microsecond=0)
    start, end = month_of(now)
    slugs = {tenant.pk: tenant.slug for tenant in tenants}
    spend = usage_spend(tenant_ids=slugs, start=start, end=end, now=now)
    out: dict[tuple[int, str], TenantForecast] = {}

    def entry(tenant_id: int, currency: str) -> TenantForecast:
        key = (tenant_id, currency)
        if key not in out:
            out[key] = TenantForecast(tenant=slugs[tenant_id], currency=currency)
        return out[key]

    for (tenant_id, currency), amount in spend.items():
        entry(tenant_id, currency).spent = amount
    records = list(UsageRecord.all_tenants.filter(tenant_id__in=slugs, final=False).select_related("sku"))
    timeouts = job_timeouts([r.job_pk for r in records if r.job_pk is not None])
    ends = reservation_ends([r.reservation_pk for r in records if r.reservation_pk is not None])
    for record in records:
        until = _until(record, month_end=end, timeouts=timeouts, ends=ends)
        if until <= now or record.sku is None:
            continue
        _hours, cost = pricing.cost_of(
            sku=record.sku,
            gpus=record.gpus - record.reserved_gpus,
            cpu_cores=record.cpu_cores,
            memory_gib=record.memory_gib,
            hours=pricing.hours_between(now, until),
        )
        forecast = entry(record.tenant_id, record.currency)
        forecast.running += cost
        run = RunForecast(name=record.name, kind=record.kind, job=record.job_name, until=until, cost=cost)
        forecast.runs.append(run)
    budgets = Budget.all_tenants.filter(tenant_id__in=slugs, period=BudgetPeriod.MONTHLY).order_by("name")
    for budget in budgets:
        entry(budget.tenant_id, budget.currency)
    for forecast in out.values():
        forecast.projected = forecast.spent + forecast.running
        forecast.runs.sort(key=lambda run: (-run.cost, run.name))
    for budget in budgets:
        forecast = out[(budget.tenant_id, budget.currency)]
        forecast.budgets.append(
            BudgetForecast(
                name=budget.name,
                amount=budget.amount,
                projected_percent=(forecast.projected * 100 / budget.amount).quantize(Decimal("0.01")),
                sufficient=forecast.projected <= budget.amount,
                hard_limit=budget.hard_limit,
            )
        )
    ordered = sorted(out.values(), key=lambda f: (f.tenant, f.currency))
    return Forecast(start=start, end=end, at=now, tenants=ordered)

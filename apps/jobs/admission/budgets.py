"""Admission's input from hard budgets: each tenant's budget rooms and the waiting jobs' forecast costs (the feeder
of `apps.jobs.admission.admit`'s `budgets`, beside apps.jobs.admission.inputs)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import defaultdict
from collections.abc import Sequence
from decimal import Decimal

from django.conf import settings

from apps.billing import selectors as billing

from .usage import BudgetRoom, Demand, Holding


def budget_rooms(
    demands: list[Demand], held: list[Holding], now: dt.datetime, *, ended: Sequence[Holding] = ()
) -> tuple[list[Demand], dict[int, list[BudgetRoom]]]:
    """The waiting jobs, each with its forecast cost where its tenant has a hard budget in force (not for a job a
    platform admin released), and each such tenant's budget rooms: the amount, less its spend at its last
    evaluation, less the usage that became final since (apps.billing.selectors.budgets), less what the admitted jobs
    of its tenants are forecast to cost after that evaluation (all of it for one admitted since), less what the
    `ended` jobs (whose workload ended this pass: their run closes only at the pass's end) actually cost after it,
    up to now. A job's cost is so counted somewhere at every moment: by its forecast while it runs, by what it ran
    from its end until its run is final, then by its final usage record. Two queries while a hard budget exists,
    none otherwise; prices from the cached catalog (apps.billing.selectors.Forecaster)."""
    hard = billing.hard_budgets_in_force(now)
    if not hard:
        return demands, {}
    price = billing.Forecaster(now)
    tenants = {tenant_id for budget in hard for tenant_id in budget.tenant_ids}
    default_s = settings.GRYVIA_BILLING_DEFAULT_DURATION_S
    # tenant -> (forecast cost, currency, start, forecast seconds, whether it ended)
    running: dict[int, list[tuple[Decimal, str, dt.datetime, int, bool]]] = defaultdict(list)
    for holding, done in [*((h, False) for h in held), *((h, True) for h in ended)]:
        # An evicted job's run closed when it was preempted: its final record counts it, not its forecast.
        if holding.tenant_id in tenants and not holding.evicting:
            cost, currency = price(holding.request, holding.timeout_s)
            if cost:
                seconds = holding.timeout_s or default_s
                running[holding.tenant_id].append((cost, currency, holding.admitted_at or now, seconds, done))
    rooms: dict[int, list[BudgetRoom]] = defaultdict(list)
    for budget in hard:
        committed = Decimal(0)
        for tenant_id in budget.tenant_ids:
            for cost, currency, start, seconds, done in running.get(tenant_id, ()):
                if currency == budget.currency:
                    since = max(start, budget.evaluated_at)
                    if done:  # what it ran after the evaluation, at its forecast's rate (it may have overrun)
                        after = max(int((now - since).total_seconds()), 0)
                    else:  # what its forecast has left after the evaluation
                        after = min(
                            max(int((start + dt.timedelta(seconds=seconds) - since).total_seconds()), 0), seconds
                        )
                    committed += cost * Decimal(after) / seconds
        room = BudgetRoom(
            key=budget.id,
            name=budget.name,
            left=budget.amount - budget.spent - budget.closed - committed,
            limit=budget.amount,
            currency=budget.currency,
        )
        for tenant_id in budget.tenant_ids:
            rooms[tenant_id].append(room)
    priced = []
    for demand in demands:
        if demand.tenant_id in rooms and not demand.budget_released:
            cost, currency = price(demand.request, demand.timeout_s)
            demand = dataclasses.replace(demand, cost=cost, currency=currency)
        priced.append(demand)
    return priced, dict(rooms)

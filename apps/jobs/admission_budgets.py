"""Admission's input from hard budgets: each tenant's budget rooms and the waiting jobs' forecast costs (the feeder
of `apps.jobs.admission.admit`'s `budgets`, beside apps.jobs.admission_inputs)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import defaultdict
from decimal import Decimal

from django.conf import settings

from apps.billing import selectors as billing

from .admission import BudgetRoom, Demand, Holding


def budget_rooms(
    demands: list[Demand], held: list[Holding], now: dt.datetime
) -> tuple[list[Demand], dict[int, list[BudgetRoom]]]:
    """The waiting jobs, each with its forecast cost where its tenant has a hard budget in force (not for a job a
    platform admin released), and each such tenant's budget rooms: the amount, less its spend at its last
    evaluation, less what the admitted jobs of its tenants are forecast to cost after that evaluation (all of it
    for one admitted since). One query while a hard budget exists, none otherwise; prices from the cached catalog
    (apps.billing.estimate.Forecaster)."""
    hard = billing.hard_budgets_in_force(now)
    if not hard:
        return demands, {}
    price = billing.Forecaster(now)
    tenants = {tenant_id for budget in hard for tenant_id in budget.tenant_ids}
    default_s = settings.GRYVIA_BILLING_DEFAULT_DURATION_S
    running: dict[int, list[tuple[Decimal, str, dt.datetime, int]]] = defaultdict(list)
    for holding in held:
        if holding.tenant_id in tenants:
            cost, currency = price(holding.request, holding.timeout_s)
            if cost:
                seconds = holding.timeout_s or default_s
                running[holding.tenant_id].append((cost, currency, holding.admitted_at or now, seconds))
    rooms: dict[int, list[BudgetRoom]] = defaultdict(list)
    for budget in hard:
        committed = Decimal(0)
        for tenant_id in budget.tenant_ids:
            for cost, currency, start, seconds in running.get(tenant_id, ()):
                if currency == budget.currency:
                    after = (start + dt.timedelta(seconds=seconds) - max(start, budget.evaluated_at)).total_seconds()
                    committed += cost * Decimal(min(max(int(after), 0), seconds)) / seconds
        room = BudgetRoom(
            key=budget.id,
            name=budget.name,
            left=budget.amount - budget.spent - committed,
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

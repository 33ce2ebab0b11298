"""Hard budgets in the admission function (pure): a job whose forecast cost would break one waits with the budget's
name; admitted jobs use up the room within the cycle; released, unpriced or other-currency jobs are not held."""

from __future__ import annotations

import dataclasses
import datetime as dt
from decimal import Decimal

from apps.jobs.admission import GPU, BudgetRoom, Demand, Holding, QueueQuota, admit

T0 = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


def demand(job_id, tenant=1, gpus=1, cost=None, at=0, queue="default", currency="USD", **extra) -> Demand:
    return Demand(
        job_id,
        tenant,
        queue,
        0,
        T0 + dt.timedelta(seconds=at),
        {GPU: gpus},
        cost=None if cost is None else Decimal(cost),
        currency=currency,
        **extra,
    )


def room(left, limit="500", key=1, name="team-a-monthly", currency="USD") -> BudgetRoom:
    return BudgetRoom(key=key, name=name, left=Decimal(left), limit=Decimal(limit), currency=currency)


def decide(waiting, budgets, holdings=(), capacity=64, queues=()):
    decisions = admit(
        waiting=waiting, holdings=holdings, queues=queues, ceilings={}, capacity={GPU: capacity}, budgets=budgets
    )
    return {d.job_id: d for d in decisions}


def test_a_job_whose_forecast_breaks_a_hard_budget_waits_naming_it():
    decisions = decide([demand(1, cost="12.40")], {1: [room("3.10")]})
    assert decisions[1].outcome == "wait" and decisions[1].reason == "BudgetExceeded"
    assert decisions[1].message == (
        "held by budget team-a-monthly: forecast 12.40 USD exceeds the 3.10 USD left of 500.00 USD"
    )


def test_without_budgets_the_same_job_is_admitted():
    assert decide([demand(1, cost="12.40")], {})[1].outcome == "admit"
    assert decide([demand(1, cost="12.40")], {2: [room("3.10")]})[1].outcome == "admit"  # another tenant's budget


def test_admitted_jobs_use_up_the_room_within_the_cycle():
    decisions = decide([demand(1, cost="6"), demand(2, cost="6", at=1), demand(3, cost="4", at=2)], {1: [room("10")]})
    assert decisions[1].outcome == "admit"
    assert decisions[2].outcome == "wait" and decisions[2].reason == "BudgetExceeded"
    assert decisions[2].message.endswith("forecast 6.00 USD exceeds the 4.00 USD left of 500.00 USD")
    # The held job holds nothing: the cheaper job after it in the same queue still fits the 4.00 left.
    assert decisions[3].outcome == "admit"


def test_exactly_the_room_left_fits():
    assert decide([demand(1, cost="10.000000")], {1: [room("10")]})[1].outcome == "admit"
    assert decide([demand(1, cost="10.000001")], {1: [room("10")]})[1].outcome == "wait"


def test_every_hard_budget_of_the_tenant_must_have_room():
    budgets = {1: [room("100", key=1, name="monthly"), room("5", key=2, name="sprint")]}
    decisions = decide([demand(1, cost="8")], budgets)
    assert decisions[1].outcome == "wait" and decisions[1].message.startswith("held by budget sprint:")


def test_an_exceeded_budget_says_how_much_over_and_free_jobs_still_run():
    decisions = decide([demand(1, cost="1"), demand(2, cost="0", at=1)], {1: [room("-0.09", limit="0.30")]})
    assert decisions[1].message == (
        "held by budget team-a-monthly: 0.09 USD over the hard limit of 0.30 USD (forecast 1.00 USD)"
    )
    assert decisions[2].outcome == "admit"  # costs nothing: it cannot break the budget
    spent = decide([demand(1, cost="1")], {1: [room("0")]})[1].message
    assert spent == "held by budget team-a-monthly: forecast 1.00 USD exceeds the 0.00 USD left of 500.00 USD"


def test_released_and_unpriced_jobs_are_not_checked():
    released = demand(1, cost=None, budget_released=True)
    assert decide([released], {1: [room("0")]})[1].outcome == "admit"


def test_a_budget_in_another_currency_does_not_hold_the_job():
    decisions = decide([demand(1, cost="50", currency="EUR")], {1: [room("10", currency="USD")]})
    assert decisions[1].outcome == "admit"


def test_a_cost_center_budget_is_one_room_shared_by_its_tenants():
    shared = room("10", key=7, name="research (cost center research)")
    decisions = decide([demand(1, tenant=1, cost="7"), demand(2, tenant=2, cost="7", at=1)], {1: [shared], 2: [shared]})
    outcomes = sorted(d.outcome for d in decisions.values())
    assert outcomes == ["admit", "wait"]
    held = next(d for d in decisions.values() if d.outcome == "wait")
    assert held.message == (
        "held by budget research (cost center research): forecast 7.00 USD exceeds the 3.00 USD left of 500.00 USD"
    )


def test_a_budget_hold_wins_over_a_resource_wait_and_never_preempts():
    # The queue is full with a lower-priority job: without its budget the newcomer would preempt it.
    queue = QueueQuota(tenant_id=1, name="q", nominal={GPU: 2})
    held = [Holding(10, 1, "q", {GPU: 2}, priority=0, admitted_at=T0)]
    newcomer = dataclasses.replace(demand(1, gpus=2, cost="9", queue="q"), priority=10)
    decisions = admit(
        waiting=[newcomer], holdings=held, queues=[queue], ceilings={}, capacity={GPU: 8}, budgets={1: [room("1")]}
    )
    assert [(d.job_id, d.outcome, d.reason) for d in decisions] == [(1, "wait", "BudgetExceeded")]
    decisions = admit(waiting=[newcomer], holdings=held, queues=[queue], ceilings={}, capacity={GPU: 8})
    assert {(d.job_id, d.outcome) for d in decisions} == {(1, "wait"), (10, "evict")}

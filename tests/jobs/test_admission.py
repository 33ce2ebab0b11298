"""The admission function (pure): order, fair share, gangs, borrowing, rejection, and a randomized
simulation that never exceeds any quota, ceiling or capacity."""

from __future__ import annotations

import dataclasses
import datetime as dt
import random

from apps.jobs.admission import GPU, Decision, Demand, Holding, QueueQuota, admit

T0 = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


def demand(job_id, tenant=1, queue="default", gpus=1, priority=0, at=0, **extra) -> Demand:
    request = {GPU: gpus, **extra} if gpus else dict(extra)
    return Demand(job_id, tenant, queue, priority, T0 + dt.timedelta(seconds=at), request)


def by_id(decisions: list[Decision]) -> dict[int, Decision]:
    return {d.job_id: d for d in decisions}


def test_higher_priority_goes_first_then_submission_time():
    decisions = by_id(
        admit(
            waiting=[demand(1, gpus=4, at=0), demand(2, gpus=4, priority=10, at=5), demand(3, gpus=4, at=1)],
            holdings=[],
            queues=[],
            ceilings={},
            capacity={GPU: 8},
        )
    )
    assert decisions[2].outcome == "admit" and decisions[1].outcome == "admit"
    assert decisions[3].outcome == "wait"
    assert decisions[3].message == f"waiting for 4 {GPU} free in the cluster"


def test_a_fresh_tenants_cpu_job_runs_without_any_queue():
    decisions = admit(waiting=[demand(1, tenant=7, gpus=0, cpu=2000)], holdings=[], queues=[], ceilings={}, capacity={})
    assert decisions == [Decision(1, "admit")]


def test_a_gang_is_admitted_whole_or_not_at_all():
    queue = QueueQuota(tenant_id=1, name="team-a", nominal={GPU: 8})
    held = [Holding(10, 1, "team-a", {GPU: 5})]
    decisions = by_id(
        admit(
            waiting=[demand(1, queue="team-a", gpus=4), demand(2, queue="team-a", gpus=3, at=1)],
            holdings=held,
            queues=[queue],
            ceilings={},
            capacity={GPU: 16},
        )
    )
    assert decisions[1].outcome == "wait"  # 3 of 4 are free in the queue: a 4-pod gang never gets 3
    assert decisions[1].message == f"waiting for 4 {GPU} in queue team-a"
    assert decisions[2].outcome == "admit"


def test_borrowing_from_an_idle_lender_in_the_cohort():
    a = QueueQuota(tenant_id=1, name="a", cohort="c", nominal={GPU: 4})
    b = QueueQuota(tenant_id=2, name="b", cohort="c", nominal={GPU: 4}, lending_limit={GPU: 3})
    decisions = by_id(
        admit(waiting=[demand(1, queue="a", gpus=6)], holdings=[], queues=[a, b], ceilings={}, capacity={GPU: 8})
    )
    assert decisions[1].outcome == "admit" and decisions[1].borrowing
    # The lender comes back and needs its nominal quota: it waits (for now) while the borrower holds it.
    decisions = by_id(
        admit(
            waiting=[demand(2, tenant=2, queue="b", gpus=4)],
            holdings=[Holding(1, 1, "a", {GPU: 6}, borrowing=True)],
            queues=[a, b],
            ceilings={},
            capacity={GPU: 8},
        )
    )
    assert decisions[2].outcome == "wait"
    # Limits hold: more than nominal + what the cohort may lend is never admitted.
    decisions = by_id(
        admit(waiting=[demand(3, queue="a", gpus=8)], holdings=[], queues=[a, b], ceilings={}, capacity={GPU: 16})
    )
    assert decisions[3].outcome == "reject"
    assert decisions[3].message == f"asks for 8 {GPU} but queue a can get at most 7 {GPU}, borrowing included"


def test_jobs_that_can_never_fit_are_rejected_with_the_reason():
    decisions = by_id(
        admit(
            waiting=[demand(1, gpus=16), demand(2, tenant=2, gpus=4)],
            holdings=[],
            queues=[],
            ceilings={2: {GPU: 2}},
            capacity={GPU: 8},
        )
    )
    assert decisions[1].outcome == "wait"  # more than the cluster has: nodes may be added
    assert decisions[1].message == f"waiting for 16 {GPU}: the cluster has 8 {GPU}"
    assert decisions[2].outcome == "reject"
    assert decisions[2].message == f"asks for 4 {GPU} but the tenant's ceiling is 2 {GPU}"


def test_typed_gpu_quota_in_a_queue():
    queue = QueueQuota(tenant_id=1, name="team-a", nominal={f"{GPU}:H100": 4})
    waiting = [demand(i, queue="team-a", gpus=4, at=i, **{f"{GPU}:H100": 4}) for i in range(1, 5)]
    decisions = admit(waiting=waiting, holdings=[], queues=[queue], ceilings={}, capacity={GPU: 32})
    assert [d.outcome for d in decisions] == ["admit", "wait", "wait", "wait"]
    assert decisions[2].message == f"waiting for 4 {GPU} (H100) in queue team-a"
    assert [d.job_id for d in decisions[1:]] == [
        2,
        3,
        4,
    ]  # the queue's order (positions: tests/jobs/test_queueing_flow)


def test_two_tenants_of_equal_weight_reach_equal_dominant_shares():
    queues = [QueueQuota(tenant_id=t, name="q", cohort="c", weight=1.0) for t in (1, 2)]
    running: list[tuple[int, Holding]] = []  # (cycles left, holding)
    waiting: list[Demand] = []
    next_id, shares = 1, []
    for cycle in range(200):
        for tenant, size in ((1, 1), (2, 2)):  # tenant 2 asks for bigger jobs: fairness is by share, not count
            while sum(1 for d in waiting if d.tenant_id == tenant) < 30:  # both always have a backlog
                waiting.append(demand(next_id, tenant=tenant, queue="q", gpus=size, at=cycle))
                next_id += 1
        decisions = by_id(
            admit(waiting=waiting, holdings=[h for _, h in running], queues=queues, ceilings={}, capacity={GPU: 24})
        )
        for d in list(waiting):
            if decisions[d.job_id].outcome == "admit":
                running.append((3, Holding(d.job_id, d.tenant_id, "q", d.request)))
                waiting.remove(d)
        used = {t: sum(h.request[GPU] for _, h in running if h.tenant_id == t) / 24 for t in (1, 2)}
        running = [(left - 1, h) for left, h in running if left > 1]
        if cycle >= 100:
            shares.append(used)
    mean = {t: sum(s[t] for s in shares) / len(shares) for t in (1, 2)}
    assert abs(mean[1] - mean[2]) <= 0.05, mean
    assert mean[1] + mean[2] > 0.9  # and the cluster stays busy


def test_randomized_cycles_never_exceed_quota_ceiling_or_capacity_and_never_preempt_in_a_cycle():
    rng = random.Random(42)
    queues = [
        QueueQuota(tenant_id=1, name="a", cohort="c", nominal={GPU: 6, "cpu": 8000}, lending_limit={GPU: 2}),
        QueueQuota(tenant_id=2, name="b", cohort="c", nominal={GPU: 6}, borrowing_limit={GPU: 2}),
        QueueQuota(tenant_id=3, name="c", nominal={GPU: 4}),
    ]
    nominal = {q.name: q.nominal[GPU] for q in queues}
    ceilings = {2: {GPU: 7}}
    capacity = {GPU: 16}
    holdings: list[Holding] = []
    waiting: list[Demand] = []
    preempted_by: dict[int, set[int]] = {}
    pairs: set[tuple[int, int]] = set()
    evictions = 0
    for step in range(1000):
        for _ in range(rng.randint(0, 2)):
            tenant, queue = rng.choice([(1, "a"), (2, "b"), (3, "c")])
            job = demand(step * 10 + len(waiting), tenant, queue, gpus=rng.randint(1, 5), priority=rng.randint(0, 3))
            waiting.append(job)
        for holding in list(holdings):
            if rng.random() < 0.2:
                holdings.remove(holding)
        decisions = admit(waiting=waiting, holdings=holdings, queues=queues, ceilings=ceilings, capacity=capacity)
        outcome = {d.job_id: d for d in decisions}
        preemptors = [d.job_id for d in decisions if d.reason == "WaitingForPreemption"]
        # As the reconciler reads it back: a job whose reason is WaitingForPreemption is preempting.
        waiting = [dataclasses.replace(j, preempting=j.job_id in preemptors) for j in waiting]
        for decision in decisions:
            if decision.outcome == "evict":  # the victim stops and is queued again
                evictions += 1
                victim = next(h for h in holdings if h.job_id == decision.job_id)
                holdings.remove(victim)
                preemptor = int(decision.message.split("preempted for job ")[1].split()[0])
                assert preemptor in preemptors
                assert victim.job_id not in preempted_by.get(preemptor, set()), "a preemption cycle"
                assert (preemptor, victim.job_id) not in pairs, "evicted again for the same job while it still waits"
                pairs.add((preemptor, victim.job_id))
                preempted_by.setdefault(victim.job_id, set()).add(preemptor)
                waiting.append(
                    Demand(victim.job_id, victim.tenant_id, victim.queue, victim.priority, T0, victim.request)
                )
        for job in list(waiting):
            if job.job_id not in outcome:
                continue
            if outcome[job.job_id].outcome == "admit":
                pairs = {pair for pair in pairs if pair[0] != job.job_id}  # it got what it preempted for
                borrowing = outcome[job.job_id].borrowing
                holdings.append(Holding(job.job_id, job.tenant_id, job.queue, job.request, borrowing, job.priority))
            if outcome[job.job_id].outcome in ("admit", "reject"):
                waiting.remove(job)
        used = {name: sum(h.request[GPU] for h in holdings if h.queue == name) for name in nominal}
        assert sum(used.values()) <= capacity[GPU]
        assert used["c"] <= nominal["c"]  # no cohort: never beyond nominal
        assert used["b"] <= nominal["b"] + 2  # borrowing limit
        assert used["a"] + used["b"] <= nominal["a"] + nominal["b"]  # a cohort never exceeds its pooled quota
        assert used["b"] <= ceilings[2][GPU]
    assert evictions > 0  # the simulation did exercise preemption


def test_a_higher_priority_job_preempts_a_lower_one_in_its_queue():
    queue = QueueQuota(tenant_id=1, name="q", nominal={GPU: 4})
    low = Holding(1, 1, "q", {GPU: 4}, priority=0)
    decisions = by_id(
        admit(
            waiting=[demand(2, queue="q", gpus=4, priority=5)],
            holdings=[low],
            queues=[queue],
            ceilings={},
            capacity={GPU: 8},
        )
    )
    assert decisions[1].outcome == "evict" and "higher-priority" in decisions[1].message
    assert decisions[2].reason == "WaitingForPreemption"
    # Equal priority never preempts; nor does a job whose priority class says Never.
    same = by_id(
        admit(waiting=[demand(3, queue="q", gpus=4)], holdings=[low], queues=[queue], ceilings={}, capacity={GPU: 8})
    )
    assert 1 not in same
    never = Demand(4, 1, "q", 9, T0, {GPU: 4}, can_preempt=False)
    assert 1 not in by_id(admit(waiting=[never], holdings=[low], queues=[queue], ceilings={}, capacity={GPU: 8}))
    # While a victim is still stopping, nothing else is preempted.
    stopping = Holding(1, 1, "q", {GPU: 4}, priority=0, evicting=True)
    again = by_id(
        admit(
            waiting=[demand(2, queue="q", gpus=4, priority=5)],
            holdings=[stopping],
            queues=[queue],
            ceilings={},
            capacity={GPU: 8},
        )
    )
    assert [d.outcome for d in again.values()] == ["wait"]


def test_the_lender_coming_back_reclaims_what_was_borrowed():
    a = QueueQuota(tenant_id=1, name="a", cohort="c", nominal={GPU: 4})
    b = QueueQuota(tenant_id=2, name="b", cohort="c", nominal={GPU: 4})
    borrower = Holding(1, 1, "a", {GPU: 6}, borrowing=True, priority=10)
    decisions = by_id(
        admit(
            waiting=[demand(2, tenant=2, queue="b", gpus=4)],
            holdings=[borrower],
            queues=[a, b],
            ceilings={},
            capacity={GPU: 8},
        )
    )
    assert decisions[1].outcome == "evict" and "borrowed quota reclaimed" in decisions[1].message
    # A borrower never preempts: b asking beyond its own nominal does not reclaim anything.
    a_within = Holding(3, 1, "a", {GPU: 4}, priority=0)
    decisions = by_id(
        admit(
            waiting=[demand(4, tenant=2, queue="b", gpus=6, priority=99)],
            holdings=[a_within],
            queues=[a, b],
            ceilings={},
            capacity={GPU: 8},
        )
    )
    assert 3 not in decisions


def test_a_reclaimed_borrower_does_not_borrow_the_same_quota_back_ahead_of_the_lender():
    a = QueueQuota(tenant_id=1, name="a", cohort="c", nominal={GPU: 4})
    b = QueueQuota(tenant_id=2, name="b", cohort="c", nominal={GPU: 4})
    lender = demand(2, tenant=2, queue="b", gpus=4, priority=0)
    # The borrower (higher priority) was evicted for the lender's job and is queued again: the lender goes first,
    # within its nominal quota, and the borrower waits instead of borrowing it back (and being evicted again).
    decisions = by_id(
        admit(
            waiting=[demand(1, tenant=1, queue="a", gpus=6, priority=10, at=-5), lender],
            holdings=[],
            queues=[a, b],
            ceilings={},
            capacity={GPU: 8},
        )
    )
    assert decisions[2].outcome == "admit" and not decisions[2].borrowing
    assert decisions[1].outcome == "wait"


def test_a_job_waiting_only_behind_a_holder_preempts_nothing():
    a = QueueQuota(tenant_id=1, name="a", cohort="c", nominal={GPU: 6})
    b = QueueQuota(tenant_id=2, name="b", cohort="c", nominal={GPU: 4})
    c = QueueQuota(tenant_id=3, name="c", cohort="c", nominal={GPU: 2})
    borrower = Holding(9, 2, "b", {GPU: 8}, borrowing=True)
    # 6 GPUs within its nominal quota but 2 short in the cohort, and not allowed to preempt: it holds the GPUs.
    # Queue c's 1-GPU job would fit but waits behind it; evicting the borrower for it would only serve the job
    # that may not preempt.
    big = Demand(1, 1, "a", 10, T0, {GPU: 6}, can_preempt=False)
    decisions = by_id(
        admit(
            waiting=[big, demand(2, tenant=3, queue="c", gpus=1, priority=5, at=1)],
            holdings=[borrower],
            queues=[a, b, c],
            ceilings={},
            capacity={GPU: 12},
        )
    )
    assert 9 not in decisions
    assert decisions[1].reason == "WaitingForQuota"
    assert decisions[2].outcome == "wait" and decisions[2].reason == "WaitingForJobsAhead"

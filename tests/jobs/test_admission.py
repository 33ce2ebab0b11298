"""The admission function (pure): order, fair share, gangs, borrowing, rejection, positions, and a randomized
simulation that never exceeds any quota, ceiling or capacity."""

from __future__ import annotations

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
    assert decisions[3].message == f"waiting for 4 {GPU} free in the cluster; position 1 of 1"


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
    assert decisions[1].message == f"waiting for 4 {GPU} in queue team-a; position 1 of 1"
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
    assert decisions[1].message == f"waiting for 16 {GPU}: the cluster has 8 {GPU}; position 1 of 1"
    assert decisions[2].outcome == "reject"
    assert decisions[2].message == f"asks for 4 {GPU} but the tenant's ceiling is 2 {GPU}"


def test_typed_gpu_quota_and_positions_in_a_queue():
    queue = QueueQuota(tenant_id=1, name="team-a", nominal={f"{GPU}:H100": 4})
    waiting = [demand(i, queue="team-a", gpus=4, at=i, **{f"{GPU}:H100": 4}) for i in range(1, 5)]
    decisions = admit(waiting=waiting, holdings=[], queues=[queue], ceilings={}, capacity={GPU: 32})
    assert [d.outcome for d in decisions] == ["admit", "wait", "wait", "wait"]
    assert decisions[2].message == f"waiting for 4 {GPU} (H100) in queue team-a; position 2 of 3"
    assert [d.position for d in decisions[1:]] == [1, 2, 3]


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


def test_randomized_cycles_never_exceed_quota_ceiling_or_capacity():
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
    for step in range(1000):
        for _ in range(rng.randint(0, 2)):
            tenant, queue = rng.choice([(1, "a"), (2, "b"), (3, "c")])
            job = demand(step * 10 + len(waiting), tenant, queue, gpus=rng.randint(1, 5), priority=rng.randint(0, 3))
            waiting.append(job)
        for holding in list(holdings):
            if rng.random() < 0.2:
                holdings.remove(holding)
        decisions = by_id(
            admit(waiting=waiting, holdings=holdings, queues=queues, ceilings=ceilings, capacity=capacity)
        )
        for job in list(waiting):
            outcome = decisions[job.job_id].outcome
            if outcome == "admit":
                holdings.append(Holding(job.job_id, job.tenant_id, job.queue, job.request))
            if outcome != "wait":
                waiting.remove(job)
        used = {name: sum(h.request[GPU] for h in holdings if h.queue == name) for name in nominal}
        assert sum(used.values()) <= capacity[GPU]
        assert used["c"] <= nominal["c"]  # no cohort: never beyond nominal
        assert used["b"] <= nominal["b"] + 2  # borrowing limit
        assert used["a"] + used["b"] <= nominal["a"] + nominal["b"]  # a cohort never exceeds its pooled quota
        assert used["b"] <= ceilings[2][GPU]
        assert max(used["a"] - nominal["a"], 0) <= 0 or used["b"] <= nominal["b"]  # both cannot be borrowing

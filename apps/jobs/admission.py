"""The one admission function: which waiting jobs may start now, and why the others wait.

Pure (no I/O): the job reconciler feeds it the waiting jobs, what admitted jobs hold, the queues and the free
capacity, and applies the decisions. Rules, in the spirit of Kueue's ClusterQueues and cohorts:

* Order: priority (high first), then jobs within their queue's nominal quota before jobs that would borrow,
  then the tenant's dominant resource share within its cohort divided by its queue's weight (low first: fair
  share), then submission time.
* A job is admitted whole (all its pods' resources at once: a gang never starts partly) when, for every resource
  it asks for, its queue has room within its nominal quota, or can borrow what the other queues of its cohort
  lend (within its borrowing limit and their lending limits), the tenant stays within its ceilings, and the
  cluster has the GPUs free.
* A job that could never fit (more than its queue could ever get, borrowing included, or more than the tenant's
  ceiling) is rejected with the reason. More than the cluster has now only waits: nodes may be added.
* Every other waiting job gets its position in its queue and a reason naming the missing resource and the queue.
* Preemption, for a waiting job that cannot fit: lower-priority jobs of its own queue, and jobs of other queues
  of its cohort admitted by borrowing when the waiting job stays within its own nominal quota (so borrowing never
  preempts and there is no preemption cycle). The fewest victims are chosen (borrowers first, then the lowest
  priority, then the newest); they are evicted (checkpoint request, grace, stop) and queued again.

Resource keys: `nvidia.com/gpu` (all GPUs), `nvidia.com/gpu:<TYPE>` (GPUs of one type), `cpu` (millicores),
`memory` (bytes). A queue without a quota for a key does not limit it; a tenant without queues has an implicit,
unlimited `default` queue.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

GPU = "nvidia.com/gpu"
DEFAULT_QUEUE = "default"
Vector = dict[str, int]


@dataclass(frozen=True)
class QueueQuota:
    """One queue's limits: nominal quota, and how much it may borrow from / lend to its cohort (None: no limit)."""

    tenant_id: int
    name: str
    cohort: str | None = None
    weight: float = 1.0
    nominal: Mapping[str, int] = field(default_factory=dict)
    borrowing_limit: Mapping[str, int | None] = field(default_factory=dict)
    lending_limit: Mapping[str, int | None] = field(default_factory=dict)

    @property
    def key(self) -> tuple[int, str]:
        return (self.tenant_id, self.name)


@dataclass(frozen=True)
class Demand:
    """A job asking to run: the whole gang's resources."""

    job_id: int
    tenant_id: int
    queue: str
    priority: int
    submitted_at: dt.datetime
    request: Mapping[str, int]
    can_preempt: bool = True  # its priority class's preemptionPolicy is not Never


@dataclass(frozen=True)
class Holding:
    """What an admitted (scheduling or running) job holds, and whether it was admitted by borrowing."""

    job_id: int
    tenant_id: int
    queue: str
    request: Mapping[str, int]
    borrowing: bool = False
    priority: int = 0
    admitted_at: dt.datetime | None = None
    evicting: bool = False  # being preempted: still holds its resources until its pods are gone


@dataclass(frozen=True)
class Decision:
    job_id: int
    outcome: str  # "admit" | "wait" | "reject" | "evict" (a holding preempted for a waiting job)
    reason: str = ""
    message: str = ""
    position: int | None = None
    queue_length: int | None = None
    borrowing: bool = False


def _add(into: dict[str, int], vector: Mapping[str, int], sign: int = 1) -> None:
    for key, amount in vector.items():
        into[key] = into.get(key, 0) + sign * amount


def _describe(key: str, amount: int) -> str:
    if key.startswith(GPU + ":"):
        return f"{amount} {GPU} ({key.split(':', 1)[1]})"
    if key == "cpu":
        return f"{amount / 1000:g} cpu"
    if key == "memory":
        return f"{amount / 2**30:.3g}Gi memory"
    return f"{amount} {key}"


class _State:
    """Usage bookkeeping for one cycle."""

    def __init__(
        self,
        queues: Iterable[QueueQuota],
        holdings: Iterable[Holding],
        ceilings: Mapping[int, Mapping[str, int]],
        capacity: Mapping[str, int],
    ) -> None:
        self.queues: dict[tuple[int, str], QueueQuota] = {q.key: q for q in queues}
        self.ceilings = ceilings
        self.free = dict(capacity)  # cluster-wide free amounts for the keys the cluster limits
        self.capacity = dict(capacity)
        self.used: dict[tuple[int, str], dict[str, int]] = defaultdict(dict)
        self.tenant_used: dict[int, dict[str, int]] = defaultdict(dict)
        for holding in holdings:
            key = self.queue_of(holding.tenant_id, holding.queue).key
            _add(self.used[key], holding.request)
            _add(self.tenant_used[holding.tenant_id], holding.request)
            for resource, amount in holding.request.items():
                if resource in self.free:
                    self.free[resource] -= amount

    def take(self, tenant_id: int, queue: str, request: Mapping[str, int], sign: int = 1) -> None:
        _add(self.used[self.queue_of(tenant_id, queue).key], request, sign)
        _add(self.tenant_used[tenant_id], request, sign)
        for resource, amount in request.items():
            if resource in self.free:
                self.free[resource] -= sign * amount

    def within_nominal(self, queue: QueueQuota, request: Mapping[str, int]) -> bool:
        used = self.used[queue.key]
        return all(used.get(r, 0) + amount <= queue.nominal[r] for r, amount in request.items() if r in queue.nominal)

    def queue_of(self, tenant_id: int, name: str) -> QueueQuota:
        found = self.queues.get((tenant_id, name))
        if found is None:  # a tenant without queues (or naming none) gets an unlimited implicit queue
            found = QueueQuota(tenant_id=tenant_id, name=name or DEFAULT_QUEUE)
            self.queues[found.key] = found
        return found

    def cohort_members(self, queue: QueueQuota) -> list[QueueQuota]:
        if queue.cohort is None:
            return []
        return [q for q in self.queues.values() if q.cohort == queue.cohort and q.key != queue.key]

    def lendable(self, queue: QueueQuota, resource: str) -> int | None:
        """What the rest of the cohort can lend now for `resource` (None: unlimited)."""
        total = 0
        for other in self.cohort_members(queue):
            if resource not in other.nominal:
                continue
            idle = max(other.nominal[resource] - self.used[other.key].get(resource, 0), 0)
            limit = other.lending_limit.get(resource)
            total += idle if limit is None else min(idle, limit)
        return total

    def max_lendable(self, queue: QueueQuota, resource: str) -> int:
        """What the cohort could lend at best (everyone idle)."""
        total = 0
        for other in self.cohort_members(queue):
            if resource in other.nominal:
                limit = other.lending_limit.get(resource)
                total += other.nominal[resource] if limit is None else min(other.nominal[resource], limit)
        return total

    def cohort_room(self, queue: QueueQuota, resource: str) -> int | None:
        """Room left in the cohort's pooled nominal quota for `resource` (None: not pooled)."""
        members = [queue, *self.cohort_members(queue)]
        if queue.cohort is None or not all(resource in m.nominal for m in members):
            return None
        pool = sum(m.nominal[resource] for m in members)
        return pool - sum(self.used[m.key].get(resource, 0) for m in members)

    def dominant_share(self, tenant_id: int, queue: QueueQuota) -> float:
        """The tenant's largest share of any resource its cohort (or queue) provides, over its queue's weight."""
        members = [queue, *self.cohort_members(queue)]
        pool: dict[str, int] = {}
        for member in members:
            _add(pool, member.nominal)
        if not pool:
            pool = {k: v for k, v in self.capacity.items() if v > 0}
        used = self.tenant_used.get(tenant_id, {})
        share = max((used.get(k, 0) / v for k, v in pool.items() if v > 0), default=0.0)
        return share / (queue.weight or 1.0)


def _never_fits(state: _State, demand: Demand, queue: QueueQuota) -> str | None:
    for resource, amount in demand.request.items():
        if resource in queue.nominal:
            limit = queue.borrowing_limit.get(resource)
            best = queue.nominal[resource] + (
                state.max_lendable(queue, resource)
                if limit is None
                else min(limit, state.max_lendable(queue, resource))
            )
            if amount > best:
                return (
                    f"asks for {_describe(resource, amount)} but queue {queue.name} can get at most "
                    f"{_describe(resource, best)}, borrowing included"
                )
        ceiling = state.ceilings.get(demand.tenant_id, {}).get(resource)
        if ceiling is not None and amount > ceiling:
            return f"asks for {_describe(resource, amount)} but the tenant's ceiling is {_describe(resource, ceiling)}"
    return None


def _missing(state: _State, demand: Demand, queue: QueueQuota) -> tuple[str | None, bool, bool]:
    """(what is missing, None when it fits now; whether admitting it borrows; whether a shared pool is short)."""
    borrowing = False
    used = state.used[queue.key]
    for resource, amount in demand.request.items():
        room = state.cohort_room(queue, resource)
        if room is not None and amount > room:
            # Nominal quota lent out to other queues of the cohort comes back as they finish.
            return (
                f"waiting for {_describe(resource, amount)} in cohort {queue.cohort} (queue {queue.name})",
                False,
                True,
            )
        if resource in queue.nominal:
            over = used.get(resource, 0) + amount - queue.nominal[resource]
            if over > 0:
                limit = queue.borrowing_limit.get(resource)
                already = max(used.get(resource, 0) - queue.nominal[resource], 0)
                can = state.lendable(queue, resource)
                if limit is not None:
                    can = min(can, limit - already)
                if over > can:
                    return f"waiting for {_describe(resource, amount)} in queue {queue.name}", False, can > 0
                borrowing = True
        ceiling = state.ceilings.get(demand.tenant_id, {}).get(resource)
        if ceiling is not None and state.tenant_used[demand.tenant_id].get(resource, 0) + amount > ceiling:
            return f"waiting for {_describe(resource, amount)} within the tenant's ceiling", False, False
        if resource in state.free and amount > state.free[resource]:
            if amount > state.capacity[resource]:  # nodes may still be added: wait, never reject for this
                has = _describe(resource, state.capacity[resource])
                return f"waiting for {_describe(resource, amount)}: the cluster has {has}", False, False
            return f"waiting for {_describe(resource, amount)} free in the cluster", False, True
    return None, borrowing, False


def _victims(state: _State, demand: Demand, holdings: list[Holding]) -> list[Holding] | None:
    """The fewest admitted jobs whose eviction lets `demand` fit, or None."""
    if not demand.can_preempt:
        return None
    queue = state.queue_of(demand.tenant_id, demand.queue)
    candidates = []
    for holding in holdings:
        if holding.evicting:
            continue
        own = state.queue_of(holding.tenant_id, holding.queue)
        if own.key == queue.key and holding.priority < demand.priority:
            candidates.append(holding)
        elif (
            holding.borrowing
            and queue.cohort is not None
            and own.cohort == queue.cohort
            and own.key != queue.key
            and state.within_nominal(queue, demand.request)
        ):
            candidates.append(holding)
    far_past = dt.datetime.min.replace(tzinfo=dt.UTC)
    candidates.sort(key=lambda h: (not h.borrowing, h.priority, -(h.admitted_at or far_past).timestamp()))
    chosen: list[Holding] = []
    for holding in candidates:
        if not set(holding.request) & set(demand.request):
            continue
        state.take(holding.tenant_id, holding.queue, holding.request, -1)
        chosen.append(holding)
        if _missing(state, demand, queue)[0] is None:
            for victim in chosen:  # the victims still hold their resources until their pods are gone
                state.take(victim.tenant_id, victim.queue, victim.request)
            return chosen
    for victim in chosen:
        state.take(victim.tenant_id, victim.queue, victim.request)
    return None


def _reason(missing: str | None) -> str:
    """A short machine-readable reason for a waiting job, from what it misses."""
    if missing is None:
        return "WaitingForJobsAhead"
    if "the cluster" in missing:
        return "InsufficientGPUs" if GPU in missing else "InsufficientCapacity"
    if "tenant's ceiling" in missing:
        return "TenantCeiling"
    return "WaitingForQuota"


def admit(
    *,
    waiting: Iterable[Demand],
    holdings: Iterable[Holding],
    queues: Iterable[QueueQuota],
    ceilings: Mapping[int, Mapping[str, int]],
    capacity: Mapping[str, int],
) -> list[Decision]:
    """One admission cycle. Returns a decision for every waiting job, in admission order."""
    holdings = list(holdings)
    state = _State(queues, holdings, ceilings, capacity)
    pending = list(waiting)
    rejected: dict[int, str] = {}
    for demand in pending:
        reason = _never_fits(state, demand, state.queue_of(demand.tenant_id, demand.queue))
        if reason:
            rejected[demand.job_id] = reason

    def order(demand: Demand) -> tuple[int, bool, float, dt.datetime, int]:
        # At equal priority, jobs within their queue's nominal quota go before jobs that would borrow, so a
        # lender is not kept waiting by a borrower it just reclaimed from.
        queue = state.queue_of(demand.tenant_id, demand.queue)
        borrows = not state.within_nominal(queue, demand.request)
        share = state.dominant_share(demand.tenant_id, queue)
        return (-demand.priority, borrows, share, demand.submitted_at, demand.job_id)

    decisions: dict[int, Decision] = {}
    remaining = [d for d in pending if d.job_id not in rejected]
    while remaining:
        # Shares change as jobs are admitted: pick the best next job each time. A job short of a shared resource
        # (cluster capacity, the cohort's pool) holds it: jobs after it in the order may not take that resource,
        # so small jobs cannot starve a big one and a tenant ahead in fair share is not overtaken.
        remaining.sort(key=order)
        progressed = False
        held: set[str] = set()
        for demand in list(remaining):
            if held & set(demand.request):
                continue
            queue = state.queue_of(demand.tenant_id, demand.queue)
            missing, borrowing, shared = _missing(state, demand, queue)
            if missing is not None and shared:
                held |= set(demand.request)
            if missing is None:
                _add(state.used[queue.key], demand.request)
                _add(state.tenant_used[demand.tenant_id], demand.request)
                for resource, amount in demand.request.items():
                    if resource in state.free:
                        state.free[resource] -= amount
                decisions[demand.job_id] = Decision(demand.job_id, "admit", borrowing=borrowing)
                remaining.remove(demand)
                progressed = True
                break
        if not progressed:
            break
    preempting: dict[int, list[Holding]] = {}
    evicted: set[int] = set()
    for demand in sorted(remaining, key=order):
        if any(h.evicting for h in holdings):
            break  # one preemption at a time: wait until the current victims are gone
        victims = _victims(state, demand, [h for h in holdings if h.job_id not in evicted])
        if victims:
            preempting[demand.job_id] = victims
            evicted |= {v.job_id for v in victims}
            break
    by_queue: dict[tuple[int, str], list[Demand]] = defaultdict(list)
    for demand in sorted(remaining, key=order):
        by_queue[state.queue_of(demand.tenant_id, demand.queue).key].append(demand)
    for demands in by_queue.values():
        for position, demand in enumerate(demands, start=1):
            queue = state.queue_of(demand.tenant_id, demand.queue)
            missing, _, _ = _missing(state, demand, queue)
            reason = _reason(missing)
            if demand.job_id in preempting:
                names = ", ".join(str(v.job_id) for v in preempting[demand.job_id])
                missing, reason = f"{missing}; preempting job(s) {names}", "WaitingForPreemption"
            message = f"{missing or 'waiting for jobs ahead of it'}; position {position} of {len(demands)}"
            decisions[demand.job_id] = Decision(
                demand.job_id, "wait", reason, message, position=position, queue_length=len(demands)
            )
    for job_id, reason in rejected.items():
        decisions[job_id] = Decision(job_id, "reject", "NeverFits", reason)
    out = [decisions[d.job_id] for d in pending]
    for preemptor, victims in preempting.items():
        for victim in victims:
            why = "borrowed quota reclaimed" if victim.borrowing else "a higher-priority job"
            out.append(Decision(victim.job_id, "evict", "Preempted", f"preempted for job {preemptor} ({why})"))
    return out

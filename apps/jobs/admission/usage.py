"""The admission function's records (its inputs and decisions) and its usage bookkeeping for one cycle: what each
queue, cohort and tenant holds, what a job misses to fit, and whether it could ever fit. Pure, no I/O; the rules
are apps.jobs.admission's."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal

GPU = "nvidia.com/gpu"
DEFAULT_QUEUE = "default"
Vector = dict[str, int]
# The inputs and decisions below are values, never changed once built. They are not frozen dataclasses: building a
# frozen one costs three times as much (every field set through object.__setattr__), and a cycle builds hundreds.


@dataclass(slots=True)
class QueueQuota:
    """One queue's limits: nominal quota, and how much it may borrow from / lend to its cohort (None: no limit)."""

    tenant_id: int
    name: str
    cohort: str | None = None
    weight: float = 1.0
    nominal: Mapping[str, int] = field(default_factory=dict)
    borrowing_limit: Mapping[str, int | None] = field(default_factory=dict)
    lending_limit: Mapping[str, int | None] = field(default_factory=dict)
    key: tuple[int, str] = field(init=False, repr=False, compare=False)  # (tenant id, name)

    def __post_init__(self) -> None:
        self.key = (self.tenant_id, self.name)


@dataclass(slots=True)
class Demand:
    """A job asking to run: the whole gang's resources."""

    job_id: int
    tenant_id: int
    queue: str
    priority: int
    submitted_at: dt.datetime
    request: Mapping[str, int]
    can_preempt: bool = True  # its priority class's preemptionPolicy is not Never
    preempting: bool = False  # jobs were evicted for it (it waits for them, or for what they freed)
    cost: Decimal | None = None  # forecast cost, checked against its tenant's hard budgets (None: not checked)
    currency: str = ""
    timeout_s: int | None = None  # what its forecast is for (the feeder prices it: apps.jobs.admission.inputs)
    budget_released: bool = False  # a platform admin released it from its budgets' hold


@dataclass(slots=True)
class BudgetRoom:
    """A hard budget: what is left of `limit` (spend and running jobs' forecasts taken off), in `currency`.

    `key` identifies it: a cost center's budget is in the list of each of its tenants, and one room is shared."""

    key: int
    name: str
    left: Decimal
    limit: Decimal
    currency: str


@dataclass(slots=True)
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
    timeout_s: int | None = None  # its forecast's duration, for what it will still cost (hard budgets)


@dataclass(slots=True)
class Decision:
    job_id: int
    outcome: str  # "admit" | "wait" | "reject" | "evict" (a holding preempted for a waiting job)
    reason: str = ""
    message: str = ""
    borrowing: bool = False


def add_vector(into: dict[str, int], vector: Mapping[str, int], sign: int = 1) -> None:
    for key, amount in vector.items():
        into[key] = into.get(key, 0) + sign * amount


def describe(key: str, amount: int) -> str:
    if key.startswith(GPU + ":"):
        return f"{amount} {GPU} ({key.split(':', 1)[1]})"
    if key == "cpu":
        return f"{amount / 1000:g} cpu"
    if key == "memory":
        return f"{amount / 2**30:.3g}Gi memory"
    return f"{amount} {key}"


class CycleUsage:
    """Usage bookkeeping for one cycle."""

    def __init__(
        self,
        queues: Iterable[QueueQuota],
        holdings: Iterable[Holding],
        ceilings: Mapping[int, Mapping[str, int]],
        capacity: Mapping[str, int],
    ) -> None:
        self.queues: dict[tuple[int, str], QueueQuota] = {q.key: q for q in queues}
        self.cohorts: dict[str, list[QueueQuota]] = defaultdict(list)
        for queue in self.queues.values():
            if queue.cohort is not None:
                self.cohorts[queue.cohort].append(queue)
        # Each cohort's pooled nominal quota, for the resources every member has one for, and its usage of them
        # (kept up to date by take(): cohort_room is asked for every job tried).
        self.cohort_pool: dict[str, dict[str, int]] = {}
        for name, members in self.cohorts.items():
            shared = set.intersection(*(set(m.nominal) for m in members))
            self.cohort_pool[name] = {r: sum(m.nominal[r] for m in members) for r in shared}
        self.cohort_used: dict[str, dict[str, int]] = defaultdict(dict)
        self._pools: dict[tuple[int, str], list[tuple[str, int]]] = {}  # queue -> (resource, cohort's amount)
        self._members: dict[tuple[int, str], list[QueueQuota]] = {}
        self._max_lendable: dict[tuple[tuple[int, str], str], int] = {}
        self.ceilings = ceilings
        self.free = dict(capacity)  # cluster-wide free amounts for the keys the cluster limits
        self.capacity = dict(capacity)
        self.used: dict[tuple[int, str], dict[str, int]] = defaultdict(dict)
        self.tenant_used: dict[int, dict[str, int]] = defaultdict(dict)
        held: dict[tuple[int, str], dict[str, int]] = {}  # usage is additive: one take() per queue, not per job
        for holding in holdings:
            into = held.setdefault((holding.tenant_id, holding.queue), {})
            for resource, amount in holding.request.items():  # (add_vector, inlined: once per admitted job)
                into[resource] = into.get(resource, 0) + amount
        for (tenant_id, queue), request in held.items():
            self.take(tenant_id, queue, request)

    def take(self, tenant_id: int, queue: str, request: Mapping[str, int], sign: int = 1) -> None:
        own = self.queue_of(tenant_id, queue)
        add_vector(self.used[own.key], request, sign)
        add_vector(self.tenant_used[tenant_id], request, sign)
        if own.cohort is not None:
            add_vector(self.cohort_used[own.cohort], request, sign)
        for resource, amount in request.items():
            if resource in self.free:
                self.free[resource] -= sign * amount

    def within_nominal(self, queue: QueueQuota, request: Mapping[str, int]) -> bool:
        used, nominal = self.used[queue.key], queue.nominal
        for resource, amount in request.items():  # (a loop: asked for every job tried and re-keyed)
            limit = nominal.get(resource)
            if limit is not None and used.get(resource, 0) + amount > limit:
                return False
        return True

    def queue_of(self, tenant_id: int, name: str) -> QueueQuota:
        found = self.queues.get((tenant_id, name))
        if found is None:  # a tenant without queues (or naming none) gets an unlimited implicit queue
            found = QueueQuota(tenant_id=tenant_id, name=name or DEFAULT_QUEUE)
            self.queues[found.key] = found
        return found

    def cohort_members(self, queue: QueueQuota) -> list[QueueQuota]:
        if queue.cohort is None:
            return []
        members = self._members.get(queue.key)
        if members is None:
            members = self._members[queue.key] = [q for q in self.cohorts[queue.cohort] if q.key != queue.key]
        return members

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
        cached = self._max_lendable.get((queue.key, resource))
        if cached is not None:
            return cached
        total = 0
        for other in self.cohort_members(queue):
            if resource in other.nominal:
                limit = other.lending_limit.get(resource)
                total += other.nominal[resource] if limit is None else min(other.nominal[resource], limit)
        self._max_lendable[(queue.key, resource)] = total
        return total

    def cohort_room(self, queue: QueueQuota, resource: str) -> int | None:
        """Room left in the cohort's pooled nominal quota for `resource` (None: not pooled)."""
        if queue.cohort is None:
            return None
        pool = self.cohort_pool[queue.cohort].get(resource)
        return None if pool is None else pool - self.cohort_used[queue.cohort].get(resource, 0)

    def dominant_share(self, tenant_id: int, queue: QueueQuota) -> float:
        """The tenant's largest share of any resource its cohort (or queue) provides, over its queue's weight."""
        pool = self._pools.get(queue.key)
        if pool is None:  # what the cohort provides does not change within a cycle
            total: dict[str, int] = {}
            for member in [queue, *self.cohort_members(queue)]:
                add_vector(total, member.nominal)
            if not total:
                total = dict(self.capacity)
            pool = self._pools[queue.key] = [(k, v) for k, v in total.items() if v > 0]
        used = self.tenant_used.get(tenant_id)
        share = 0.0
        if used:
            for resource, amount in pool:
                held = used.get(resource)
                if held and held / amount > share:
                    share = held / amount
        return share / (queue.weight or 1.0)


def never_fits(state: CycleUsage, demand: Demand, queue: QueueQuota) -> str | None:
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
                    f"asks for {describe(resource, amount)} but queue {queue.name} can get at most "
                    f"{describe(resource, best)}, borrowing included"
                )
        ceiling = state.ceilings.get(demand.tenant_id, {}).get(resource)
        if ceiling is not None and amount > ceiling:
            return f"asks for {describe(resource, amount)} but the tenant's ceiling is {describe(resource, ceiling)}"
    return None


def what_is_missing(state: CycleUsage, demand: Demand, queue: QueueQuota) -> tuple[str | None, bool, bool]:
    """(what is missing, None when it fits now; whether admitting it borrows; whether a shared pool is short)."""
    borrowing = False
    used = state.used[queue.key]
    for resource, amount in demand.request.items():
        room = state.cohort_room(queue, resource)
        if room is not None and amount > room:
            # Nominal quota lent out to other queues of the cohort comes back as they finish.
            return (
                f"waiting for {describe(resource, amount)} in cohort {queue.cohort} (queue {queue.name})",
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
                    return f"waiting for {describe(resource, amount)} in queue {queue.name}", False, can > 0
                borrowing = True
        ceiling = state.ceilings.get(demand.tenant_id, {}).get(resource)
        if ceiling is not None and state.tenant_used[demand.tenant_id].get(resource, 0) + amount > ceiling:
            return f"waiting for {describe(resource, amount)} within the tenant's ceiling", False, False
        if resource in state.free and amount > state.free[resource]:
            if amount > state.capacity[resource]:  # nodes may still be added: wait, never reject for this
                has = describe(resource, state.capacity[resource])
                return f"waiting for {describe(resource, amount)}: the cluster has {has}", False, False
            return f"waiting for {describe(resource, amount)} free in the cluster", False, True
    return None, borrowing, False

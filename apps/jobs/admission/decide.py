"""The one admission function: which waiting jobs may start now, and why the others wait.

Pure (no I/O): the job reconciler feeds it the waiting jobs, what admitted jobs hold, the queues and the free
capacity, and applies the decisions. Rules, in the spirit of Kueue's ClusterQueues and cohorts:

* Order: within a queue, priority (high first), then submission time. Across queues, the queues' next jobs:
  those within their queue's nominal quota before those that would borrow (as in Kueue, so a reclaimed borrower
  cannot borrow the same quota back ahead of the lender), then priority, then the tenant's dominant resource share
  within its cohort divided by its queue's weight (low first: fair share), then submission time.
  A job that does not fit is passed over for the rest of the cycle (usage only grows within one) and its queue's
  next job is tried (best-effort FIFO), except that a job short of a shared resource holds it (below).
* A job is admitted whole (all its pods' resources at once: a gang never starts partly) when, for every resource
  it asks for, its queue has room within its nominal quota, or can borrow what the other queues of its cohort
  lend (within its borrowing limit and their lending limits), the tenant stays within its ceilings, and the
  cluster has the GPUs free.
* A job that could never fit (more than its queue could ever get, borrowing included, or more than the tenant's
  ceiling) is rejected with the reason. More than the cluster has now only waits: nodes may be added.
* Every other waiting job gets a reason naming the missing resource and the queue (its position in the queue is
  read from the database when shown: apps.jobs.selectors).
* The caller may pass only the first jobs of each queue (the heads): the rest wait behind them anyway.
* Preemption, for the first job of a queue that is short of a resource (not one that fits but waits behind a job
  holding it): lower-priority jobs of its own queue, and jobs of
  other queues of its cohort admitted by borrowing when the waiting job stays within its own nominal quota (so
  borrowing never preempts and there is no preemption cycle). The fewest victims are chosen (borrowers first,
  then the lowest priority, then the newest); they are evicted (checkpoint request, grace, stop) and queued again.
  Until it is admitted, the preemptor keeps what it asks for within its queue (later jobs of the queue may not
  take it), so the victims cannot start again in its place only to be evicted for it once more.

* Hard budgets (`budgets`, per tenant): a job whose forecast cost (`Demand.cost`, in `Demand.currency`) is more
  than what is left of one of its tenant's hard budgets in that currency waits with reason `BudgetExceeded` and a
  message naming the budget; it holds nothing, and the jobs after it are tried. Each job admitted takes its
  forecast from what is left for the rest of the cycle. A job without a cost (a platform admin released it, or
  its tenant has no hard budget) is not checked.

Resource keys: `nvidia.com/gpu` (all GPUs), `nvidia.com/gpu:<TYPE>` (GPUs of one type), `cpu` (millicores),
`memory` (bytes). A queue without a quota for a key does not limit it; a tenant without queues has an implicit,
unlimited `default` queue.
"""

from __future__ import annotations

import datetime as dt
import heapq
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal

from .usage import (
    GPU,
    BudgetRoom,
    CycleUsage,
    Decision,
    Demand,
    Holding,
    QueueQuota,
    never_fits,
    what_is_missing,
)


class _Holdings:
    """Admitted jobs indexed the way preemption looks for victims: by queue, and borrowers by cohort."""

    def __init__(self, state: CycleUsage, holdings: list[Holding]) -> None:
        self.by_queue: dict[tuple[int, str], list[Holding]] = defaultdict(list)
        self.borrowing: dict[str, list[Holding]] = defaultdict(list)
        for holding in holdings:
            if holding.evicting:
                continue
            own = state.queue_of(holding.tenant_id, holding.queue)
            self.by_queue[own.key].append(holding)
            if holding.borrowing and own.cohort is not None:
                self.borrowing[own.cohort].append(holding)


def _victims(state: CycleUsage, demand: Demand, holdings: _Holdings) -> list[Holding] | None:
    """The fewest admitted jobs whose eviction lets `demand` fit, or None."""
    if not demand.can_preempt:
        return None
    queue = state.queue_of(demand.tenant_id, demand.queue)
    candidates = [h for h in holdings.by_queue.get(queue.key, ()) if h.priority < demand.priority]
    if queue.cohort is not None and state.within_nominal(queue, demand.request):
        candidates += [
            h for h in holdings.borrowing.get(queue.cohort, ()) if state.queue_of(h.tenant_id, h.queue).key != queue.key
        ]
    far_past = dt.datetime.min.replace(tzinfo=dt.UTC)
    candidates.sort(key=lambda h: (not h.borrowing, h.priority, -(h.admitted_at or far_past).timestamp()))
    chosen: list[Holding] = []
    for holding in candidates:
        if not set(holding.request) & set(demand.request):
            continue
        state.take(holding.tenant_id, holding.queue, holding.request, -1)
        chosen.append(holding)
        if what_is_missing(state, demand, queue)[0] is None:
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


def _over_budget(demand: Demand, rooms: Sequence[BudgetRoom], left: dict[int, Decimal]) -> str | None:
    """Why the demand's forecast cost breaks one of these hard budgets, or None."""
    if not demand.cost:
        return None
    for room in rooms:
        if room.currency == demand.currency and demand.cost > left[room.key]:
            if left[room.key] < 0:  # spent (or committed) past the limit already: by how much
                return (
                    f"held by budget {room.name}: {-left[room.key]:.2f} {room.currency} over the hard limit of "
                    f"{room.limit:.2f} {room.currency} (forecast {demand.cost:.2f} {room.currency})"
                )
            return (
                f"held by budget {room.name}: forecast {demand.cost:.2f} {room.currency} exceeds the "
                f"{left[room.key]:.2f} {room.currency} left of {room.limit:.2f} {room.currency}"
            )
    return None


class _Cycle:
    """One admission cycle, one method per thing it decides, called by `admit` in this order: which jobs could never
    fit (`reject_never_fitting`), who is admitted, in the cycle's order (`admit_in_order`), whom to preempt for the
    first job that waits (`choose_preemption`), why each of the others waits (`explain_waiting`)."""

    def __init__(
        self,
        state: CycleUsage,
        holdings: list[Holding],
        budgets: Mapping[int, Sequence[BudgetRoom]],
    ) -> None:
        self.state = state
        self.holdings = holdings
        self.budgets = budgets
        self.left = {room.key: room.left for rooms in budgets.values() for room in rooms}
        self.over: dict[int, str] = {}  # job id -> the budget that holds it
        self.rejected: dict[int, str] = {}
        self.lines: dict[tuple[int, str], list[Demand]] = defaultdict(list)  # each queue's jobs, in queue order
        self.decisions: dict[int, Decision] = {}
        self.admitted: list[int] = []
        self.passed: dict[tuple[int, str], list[Demand]] = defaultdict(list)

    def order(self, demand: Demand) -> tuple[bool, int, float, dt.datetime, int]:
        """The cycle's order across queues. As in Kueue's scheduler, jobs within their queue's nominal quota go
        before jobs that would borrow, at any priority: otherwise a borrower evicted to give a lender back its quota
        would borrow it again in the next cycle, ahead of the lender's lower-priority job, and be evicted again (a
        preemption loop)."""
        state = self.state
        queue = state.queue_of(demand.tenant_id, demand.queue)
        borrows = not state.within_nominal(queue, demand.request)
        share = state.dominant_share(demand.tenant_id, queue)
        return (borrows, -demand.priority, share, demand.submitted_at, demand.job_id)

    def reject_never_fitting(self, pending: list[Demand]) -> None:
        """Reject the jobs that could never fit; put the others in their queues' lines, in queue order."""
        state, lines = self.state, self.lines
        never: dict[tuple, str | None] = {}  # jobs of one tenant and queue asking for the same get the same answer
        for demand in pending:
            queue = state.queue_of(demand.tenant_id, demand.queue)
            ask = (queue.key, tuple(demand.request.items()))
            if ask not in never:
                never[ask] = never_fits(state, demand, queue)
            reason = never[ask]
            if reason:
                self.rejected[demand.job_id] = reason
            else:
                lines[queue.key].append(demand)
        for line in lines.values():
            line.sort(key=lambda d: (-d.priority, d.submitted_at, d.job_id))

    def admit_in_order(self, pending: list[Demand]) -> None:
        """Merge the queues' lines by `order` and admit each job that fits.

        A heap of each queue's next job, re-keyed when its tenant's share moves. Usage only grows within a cycle, so
        a job that does not fit now will not later in it: it is passed over. A job short of a shared resource
        (cluster capacity, the cohort's pool) holds it: jobs after it in the order may not take that resource, so
        small jobs cannot starve a big one and a tenant ahead in fair share is not overtaken."""
        state, lines, passed, order = self.state, self.lines, self.passed, self.order
        cursor = dict.fromkeys(lines, 0)
        version = dict.fromkeys(lines, 0)
        heap: list[tuple[tuple, tuple[int, str], int]] = []

        def push(key: tuple[int, str]) -> None:
            if cursor[key] < len(lines[key]):
                version[key] += 1
                heapq.heappush(heap, (order(lines[key][cursor[key]]), key, version[key]))

        tenant_queues: dict[int, list[tuple[int, str]]] = defaultdict(list)
        for key in lines:
            tenant_queues[key[0]].append(key)
            push(key)
        held: set[str] = set()
        asked = {r for demand in pending for r in demand.request}  # once all of it is held, every job left waits
        # A job that jobs were evicted for keeps what they free within its queue: the queue's later jobs may not
        # take it, or they would start in its place and be evicted for it again.
        kept: dict[tuple[int, str], set[str]] = defaultdict(set)
        while heap:
            _, key, seen = heapq.heappop(heap)
            if seen != version[key]:
                continue  # re-keyed since
            demand = lines[key][cursor[key]]
            cursor[key] += 1
            rooms = self.budgets.get(demand.tenant_id)
            if rooms and demand.cost and self._held_by_budget(demand, rooms):
                passed[key].append(demand)  # holding nothing: the queue's next job may cost less
                push(key)
                continue
            queue = state.queue_of(demand.tenant_id, demand.queue)
            blocked = (held | kept[key]) & set(demand.request)
            missing, borrowing, shared = ("held", False, False) if blocked else (None, False, False)
            if missing is None:
                missing, borrowing, shared = what_is_missing(state, demand, queue)
            if missing is None:
                self._take(demand, rooms, borrowing)
                for other in tenant_queues[key[0]]:  # the tenant's share moved: its queues' next jobs are re-keyed
                    if other != key:
                        push(other)
            else:
                if shared:
                    held |= set(demand.request)
                if demand.preempting:
                    kept[key] |= set(demand.request)
                passed[key].append(demand)
                if asked <= held:  # nothing left can be admitted: the rest wait, each queue's in its order
                    for rest in lines:
                        passed[rest] += lines[rest][cursor[rest] :]
                    break
            push(key)

    def _held_by_budget(self, demand: Demand, rooms: Sequence[BudgetRoom]) -> bool:
        """Whether one of its tenant's hard budgets holds the job (recorded in `over`)."""
        hold = _over_budget(demand, rooms, self.left)
        if hold is None:
            return False
        self.over[demand.job_id] = hold
        return True

    def _take(self, demand: Demand, rooms: Sequence[BudgetRoom] | None, borrowing: bool) -> None:
        """Admit the job: its resources are taken from its queue, its tenant and the cluster, its forecast from
        its tenant's budgets in its currency."""
        self.state.take(demand.tenant_id, demand.queue, demand.request)
        if rooms and demand.cost:
            for room in rooms:
                if room.currency == demand.currency:
                    self.left[room.key] -= demand.cost
        self.decisions[demand.job_id] = Decision(demand.job_id, "admit", borrowing=borrowing)
        self.admitted.append(demand.job_id)

    def choose_preemption(self, remaining: dict[tuple[int, str], list[Demand]]) -> dict[int, list[Holding]]:
        """The first waiting job (in the cycle's order) that evictions would let in, and its victims. One
        preemption at a time: none while the current victims are still going."""
        state = self.state
        preempting: dict[int, list[Holding]] = {}
        if any(h.evicting for h in self.holdings):
            return preempting
        index = _Holdings(state, self.holdings)
        for demand in sorted((line[0] for line in remaining.values()), key=self.order):
            if demand.job_id in self.over:
                continue  # evicting others would not let it in
            if what_is_missing(state, demand, state.queue_of(demand.tenant_id, demand.queue))[0] is None:
                continue  # it fits, and waits only behind a job that holds what it asks for: evicting frees nothing
            victims = _victims(state, demand, index)
            if victims:
                preempting[demand.job_id] = victims
                break
        return preempting

    def explain_waiting(
        self, remaining: dict[tuple[int, str], list[Demand]], preempting: dict[int, list[Holding]]
    ) -> None:
        """What each waiting job misses, at the end of the cycle (jobs of one tenant and queue asking for the same
        miss the same)."""
        state, decisions = self.state, self.decisions
        misses: dict[tuple, tuple[str | None, str]] = {}  # (queue, request) -> (what is missing, reason)
        for key, line in remaining.items():
            queue = state.queue_of(*key)
            for demand in line:
                if demand.job_id in self.over:
                    decisions[demand.job_id] = Decision(
                        demand.job_id, "wait", "BudgetExceeded", self.over[demand.job_id]
                    )
                    continue
                ask = (key, tuple(demand.request.items()))
                found = misses.get(ask)
                if found is None:
                    missing = what_is_missing(state, demand, queue)[0]
                    found = misses[ask] = (missing, _reason(missing))
                missing, reason = found
                if demand.job_id in preempting:
                    names = ", ".join(str(v.job_id) for v in preempting[demand.job_id])
                    missing, reason = f"{missing}; preempting job(s) {names}", "WaitingForPreemption"
                elif demand.preempting and missing is not None:
                    missing, reason = f"{missing}; what its preemption freed is kept for it", "WaitingForPreemption"
                message = missing or f"waiting for jobs ahead of it in queue {queue.name}"
                decisions[demand.job_id] = Decision(demand.job_id, "wait", reason, message)
        for job_id, reason in self.rejected.items():
            decisions[job_id] = Decision(job_id, "reject", "NeverFits", reason)

    def results(self, pending: list[Demand], preempting: dict[int, list[Holding]]) -> list[Decision]:
        """The admitted in admission order, then every other waiting job's decision, then the evictions."""
        decisions = self.decisions
        out = [decisions[job_id] for job_id in self.admitted]
        out += [decisions[d.job_id] for d in pending if decisions[d.job_id].outcome != "admit"]
        for preemptor, victims in preempting.items():
            for victim in victims:
                why = "borrowed quota reclaimed" if victim.borrowing else "a higher-priority job"
                out.append(Decision(victim.job_id, "evict", "Preempted", f"preempted for job {preemptor} ({why})"))
        return out


def admit(
    *,
    waiting: Iterable[Demand],
    holdings: Iterable[Holding],
    queues: Iterable[QueueQuota],
    ceilings: Mapping[int, Mapping[str, int]],
    capacity: Mapping[str, int],
    budgets: Mapping[int, Sequence[BudgetRoom]] | None = None,
) -> list[Decision]:
    """One admission cycle. Returns a decision for every waiting job given (admitted ones in admission order).
    `budgets`: each tenant's hard budgets (none: budgets are not checked)."""
    holdings = list(holdings)
    cycle = _Cycle(CycleUsage(queues, holdings, ceilings, capacity), holdings, budgets or {})
    pending = list(waiting)
    cycle.reject_never_fitting(pending)
    cycle.admit_in_order(pending)
    remaining = {key: line for key, line in cycle.passed.items() if line}
    preempting = cycle.choose_preemption(remaining)
    cycle.explain_waiting(remaining, preempting)
    return cycle.results(pending, preempting)

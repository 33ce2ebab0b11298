"""Feeds the admission function from the database: waiting jobs and what admitted jobs hold (the queues' quota
and the tenants' ceilings: apps.jobs.admission.limits).

A job's queue, priority and resource request are fixed when it is submitted (`admission_fields`, stored on the
row), so a cycle reads plain columns: the first jobs of each queue in queue order (one query with a window
function) and what the admitted jobs hold, never the specs of thousands of waiting jobs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from django.db import connection
from django.db.models import Case, Count, F, QuerySet, Sum, When, Window
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce, RowNumber

from apps.core.db.deferred import read_together
from apps.core.db.prepared import PreparedRead, json_from_db
from apps.core.quantities import QuantityError, cpu_millicores, memory_bytes
from apps.queueing import selectors as queueing

from ..choices import HOLDING_PHASES, WAITING_PHASES, JobPhase
from ..models import Job
from ..spec import JobSpec
from .usage import GPU, Demand, Holding

# The order of a queue's waiting jobs (admission's order within a queue, and the position a reader sees).
QUEUE_ORDER = (F("priority").desc(), F("created_at").asc(), F("id").asc())


def request_of(spec: dict[str, Any]) -> dict[str, int]:
    """The whole gang's resources, as admission keys, from a normalized spec."""
    typed = JobSpec.of(spec)
    nodes = typed.desired_nodes
    out: dict[str, int] = {}
    gpus = typed.total_gpus
    if gpus:
        out[GPU] = gpus
        gpu_type = spec.get("gpuType")
        if gpu_type and gpu_type != "any":
            out[f"{GPU}:{gpu_type}"] = gpus
    resources = spec.get("resources") or {}
    try:
        if resources.get("cpu"):
            out["cpu"] = cpu_millicores(resources["cpu"]) * nodes
        if resources.get("memory"):
            out["memory"] = memory_bytes(resources["memory"]) * nodes
    except QuantityError:
        pass  # validated at submission; an unreadable value asks for nothing rather than blocking admission
    return out


class Priorities:
    """A job's priority: its priority class's value (or the default class's), else `spec.priority`."""

    def __init__(self) -> None:
        self.classes = {pc.name: pc for pc in queueing.all_priority_classes()}
        self.default = next((pc for pc in self.classes.values() if pc.is_default), None)

    def of(self, spec: dict[str, Any]) -> tuple[int, bool]:
        """(priority, may preempt)."""
        named = self.classes.get(spec.get("priorityClassName") or "")
        if named is None and not spec.get("priority"):
            named = self.default
        if named is not None:
            return named.value, named.preemption_policy != "Never"
        return int(spec.get("priority") or 0), True


def admission_fields(spec: dict[str, Any], priorities: Priorities | None = None) -> dict[str, Any]:
    """The columns admission reads, for a job with this normalized spec (set at submission and on resize)."""
    priority, may_preempt = (priorities or Priorities()).of(spec)
    return {
        "queue_name": spec.get("queueName") or "default",
        "priority": priority,
        "may_preempt": may_preempt,
        "request": request_of(spec),
        "timeout_s": JobSpec.of(spec).timeout_seconds,
    }


class WaitingHeads(NamedTuple):
    demands: list[Demand]  # the first jobs of every queue, in queue order
    status: dict[int, tuple[str, str, str]]  # each one's (phase, reason, message) now
    counts: dict[tuple[int, str], int]  # (tenant id, queue name) -> how many jobs wait in it
    pending: int  # how many waiting jobs are still Pending (submitted, never queued)
    identity: dict[int, tuple[int, str, str]]  # each one's (tenant id, uid, name): what its token needs, unread


# What hard budgets need of a waiting job: its forecast's duration, and whether it was released from their hold.
_BUDGET_FIELDS = ("timeout_s", "budget_released_at")


def _waiting_heads_query(per_queue: int) -> QuerySet:
    fields = ("id", "tenant_id", "queue_name", "priority", "created_at", "request", "may_preempt")
    partition = [F("tenant_id"), F("queue_name")]
    return (
        Job.all_tenants.filter(finalized=False, phase__in=WAITING_PHASES, cancel_requested_at__isnull=True)
        .annotate(
            rank=Window(RowNumber(), partition_by=partition, order_by=QUEUE_ORDER),
            waiting=Window(Count("id"), partition_by=partition),
            pending=Window(Sum(Case(When(phase=JobPhase.PENDING, then=1), default=0)), partition_by=partition),
        )
        .filter(rank__lte=per_queue)
        .values_list(
            *fields, "phase", "reason", "message", "rank", "waiting", "pending", *_BUDGET_FIELDS, "uid", "name"
        )
    )


_WAITING_HEADS: dict[int, PreparedRead] = {}  # per_queue -> its read


def _head(
    pk, tenant_id, queue, priority, created_at, request, may_preempt, phase, reason, message, rank, n, p, timeout_s,
    released_at, uid, name,
) -> tuple[Demand, tuple[str, str, str], int, int, int, tuple[str, str]]:  # fmt: skip
    """One row of the heads' read: the job's demand, its (phase, reason, message), its rank in its queue, how many
    wait in the queue and how many of those are still Pending (the same for every row of a queue), and its (uid,
    name)."""
    demand, state, identity = _head_of_job(
        pk, tenant_id, queue, priority, created_at, request, may_preempt, phase, reason, message, timeout_s,
        released_at, uid, name,
    )  # fmt: skip
    return demand, state, rank, n, p, identity


def _head_of_job(
    pk, tenant_id, queue, priority, created_at, request, may_preempt, phase, reason, message, timeout_s, released_at,
    uid, name,
) -> tuple[Demand, tuple[str, str, str], tuple[str, str]]:  # fmt: skip
    """What a head is of its job's row alone (not its place in the queue): its demand, (phase, reason, message)
    and (uid, name)."""
    demand = Demand(
        job_id=pk,
        tenant_id=tenant_id,
        queue=queue,
        priority=priority,
        submitted_at=created_at,
        request=request,
        can_preempt=may_preempt,
        preempting=reason == "WaitingForPreemption",
        timeout_s=timeout_s,
        budget_released=released_at is not None,
    )
    return demand, (phase, reason, message), (str(uid), name)


# PostgreSQL: each queue's first jobs through the queue-order index (LATERAL ... LIMIT, in index order), and each
# queue's counts from one pass over the waiting rows, not a sort of every waiting job (at 15,000 jobs 10 ms of server
# time instead of 32). The same rows as _waiting_heads_query, ordered by queue and rank.
_TABLE = Job._meta.db_table
_PHASES = ", ".join(f"'{phase}'" for phase in WAITING_PHASES)  # literals: the queue-order index's condition
_WAITING = "NOT {t}.finalized AND {t}.cancel_requested_at IS NULL AND {t}.phase IN (" + _PHASES + ")"
_HEAD_COLUMNS = (
    "tenant_id", "queue_name", "priority", "created_at", "request", "may_preempt", "phase", "reason", "message",
    "timeout_s", "budget_released_at", "uid", "name",
)  # fmt: skip
_HEAD_SELECT = ", ".join(f"h.{c}::text" if c == "uid" else f"h.{c}" for c in _HEAD_COLUMNS)
_HEADS_SQL = f"""
WITH q AS (
    SELECT tenant_id, queue_name, count(*) AS waiting, count(*) FILTER (WHERE phase = '{JobPhase.PENDING}') AS pending
    FROM {_TABLE} WHERE {_WAITING.format(t=_TABLE)}
    GROUP BY tenant_id, queue_name
)
SELECT h.id, {_HEAD_SELECT}, h.rank, q.waiting, q.pending
FROM q CROSS JOIN LATERAL (
    SELECT j.id, {", ".join(f"j.{c}" for c in _HEAD_COLUMNS)},
           row_number() OVER (ORDER BY j.priority DESC, j.created_at, j.id) AS rank
    FROM {_TABLE} AS j
    WHERE j.tenant_id = q.tenant_id AND j.queue_name = q.queue_name AND {_WAITING.format(t="j")}
    ORDER BY j.priority DESC, j.created_at, j.id
    LIMIT %s
) AS h
ORDER BY h.tenant_id, h.queue_name, h.rank
"""


def _head_of_row(pk, tenant_id, queue, priority, created_at, request, *rest) -> tuple:
    """`_head_of_job` of `_HEADS_SQL`'s columns (the request as the driver gives it)."""
    return _head_of_job(pk, tenant_id, queue, priority, created_at, json_from_db(request), *rest)


def _heads_statement(per_queue: int) -> tuple[str, list[Any], Callable[[list[tuple]], list[tuple]]]:
    """`_HEADS_SQL` and what turns its rows into `_head`'s."""
    width = 1 + len(_HEAD_COLUMNS)

    def rows(fetched: list[tuple]) -> list[tuple]:
        out = []
        for row in fetched:
            demand, state, identity = _head_of_row(*row[:width])
            out.append((demand, state, *row[width:], identity))
        return out

    return _HEADS_SQL, [per_queue], rows


def waiting_heads(per_queue: int) -> WaitingHeads:
    """The first `per_queue` waiting jobs of every queue (the rest wait behind them), each one's status now (so that
    only what a cycle changes gets written), and how many wait in each queue: one query. On SQLite a head whose
    row is as the previous pass read it keeps the Demand built then (PreparedRead.built): treat them as read-only."""
    return heads_and_active(per_queue, with_active=False)[0]


def heads_and_active(per_queue: int, *, with_active: bool = True) -> tuple[WaitingHeads, list[Active]]:
    """`waiting_heads(per_queue)` and `active()` (empty unless `with_active`), on PostgreSQL read in one round
    trip (apps.core.db.deferred.read_together)."""
    active_rows: list[Active] = []
    if connection.vendor == "postgresql":
        heads_sql, heads_params, heads_finish = _heads_statement(per_queue)
        reads = [(heads_sql, heads_params)]
        if with_active:
            sql, params, finish = _active_statement()
            reads.append((sql, params))
        fetched = read_together(reads)
        rows = heads_finish(fetched[0])
        if with_active:
            active_rows = finish(fetched[1])
    else:
        read = _WAITING_HEADS.get(per_queue)
        if read is None:
            read = _WAITING_HEADS.setdefault(per_queue, PreparedRead(lambda: _waiting_heads_query(per_queue)))
        rows = read.built(_head)
        active_rows = active() if with_active else []
    return _heads_of(rows), active_rows


def _heads_of(rows: list[tuple[Demand, tuple[str, str, str], int, int, int, tuple[str, str]]]) -> WaitingHeads:
    demands, status, counts, pending, identity = [], {}, {}, 0, {}
    for demand, state, rank, n, p, uid_and_name in rows:
        demands.append(demand)
        status[demand.job_id] = state
        identity[demand.job_id] = (demand.tenant_id, *uid_and_name)
        if rank == 1:
            counts[(demand.tenant_id, demand.queue)] = n
            pending += p or 0
    return WaitingHeads(demands, status, counts, pending, identity)


class Active(NamedTuple):
    """An admitted or ended job not yet finalized, as one cycle reads it (admission and the reconciler's owners())."""

    pk: int
    uid: str
    tenant_id: int
    queue: str
    request: dict[str, int]
    borrowing: bool
    priority: int
    admitted_at: Any
    phase: str
    generation: int
    observed_generation: int
    cancel_requested_at: Any
    timeout_s: int | None  # its forecast's duration (hard budgets)
    completion_time: Any
    ttl: Any  # spec.ttlSecondsAfterFinished (None: the default)


def _active_query() -> QuerySet:
    fields = ("id", "tenant_id", "queue_name", "request", "admitted_borrowing", "priority", "admitted_at")
    more = ("phase", "generation", "observed_generation", "cancel_requested_at", "timeout_s", "completion_time")
    return (
        Job.all_tenants.filter(finalized=False)
        .exclude(phase__in=WAITING_PHASES)
        # When it started, else when its row last changed (admitted, not yet started): one timestamp per row.
        .annotate(admitted_at=Coalesce("start_time", "updated_at"), ttl=KT("spec__ttlSecondsAfterFinished"))
        .values_list("uid", *fields, *more, "ttl")
    )


_ACTIVE = PreparedRead(_active_query, key_from=1)  # (a row's uid is its id's)
# PostgreSQL: the same rows.
_ACTIVE_COLUMNS = (
    "uid::text", "tenant_id", "queue_name", "request", "admitted_borrowing", "priority",
    "COALESCE(j.start_time, j.updated_at)", "phase", "generation", "observed_generation", "cancel_requested_at",
    "timeout_s", "completion_time", "spec ->> 'ttlSecondsAfterFinished'",
)  # fmt: skip
_ACTIVE_SQL = f"""
SELECT j.id, {", ".join(c if c.startswith("COALESCE") else f"j.{c}" for c in _ACTIVE_COLUMNS)}
FROM {_TABLE} AS j
WHERE NOT j.finalized AND j.phase NOT IN ({_PHASES})
"""


def _active_of_row(pk: int, uid: str, tenant_id: int, queue: str, request: str, *rest: Any) -> Active:
    return Active(pk, uid, tenant_id, queue, json_from_db(request), *rest)


def _active_statement() -> tuple[str, list[Any], Callable[[list[tuple]], list[Active]]]:
    """`_ACTIVE_SQL` and what turns its rows into `active()`'s."""
    return _ACTIVE_SQL, [], lambda fetched: [_active_of_row(*row) for row in fetched]


def active() -> list[Active]:
    """Every job past admission and not yet finalized: one query a cycle shares between admission (what is held)
    and the reconciler (which jobs changed). On SQLite a row as the previous pass read it keeps the Active built
    then (PreparedRead.built)."""
    if connection.vendor == "postgresql":
        sql, params, finish = _active_statement()
        [fetched] = read_together([(sql, params)])
        return finish(fetched)
    return _ACTIVE.built(_active)


def _active(uid: Any, pk: int, *rest: Any) -> Active:
    return Active(pk, str(uid), *rest)


# id(Active) -> (that Active, its Holding), for the rows of the last call: an Active the read reused (its row did not
# change) keeps its Holding. Only ever a shortcut.
_HELD: dict[int, tuple[Active, Holding]] = {}


def holdings(rows: list[Active] | None = None) -> list[Holding]:
    """What admitted jobs hold (a preempted job holds its share until its pods are gone). A row unchanged since the
    previous call (the same Active: `active()` reuses them on SQLite) keeps the Holding built then: treat them as
    read-only."""
    global _HELD
    previous, kept, out = _HELD, {}, []
    for row in active() if rows is None else rows:
        if row.phase not in HOLDING_PHASES:
            continue
        hit = previous.get(id(row))
        if hit is not None and hit[0] is row:
            holding = hit[1]
        else:
            holding = Holding(
                row.pk,
                row.tenant_id,
                row.queue,
                row.request,
                row.borrowing,
                priority=row.priority,
                admitted_at=row.admitted_at,
                evicting=row.phase == JobPhase.PREEMPTED,
                timeout_s=row.timeout_s,
            )
        kept[id(row)] = (row, holding)
        out.append(holding)
    _HELD = kept
    return out

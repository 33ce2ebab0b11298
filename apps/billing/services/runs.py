"""Job-run usage: a record opens when a job is admitted and closes, priced and sealed into the ledger, when the run
ends. Called by the job service with each batch of lifecycle events, in its transaction (`usage_job_events`), when
a job is deleted while it runs (`usage_job_deleted`), and periodically (`usage_refresh`).

A run opens at Scheduled or Running and closes at Succeeded, Failed, Cancelled, Preempted, or eviction back to
Queued. This runs inside every reconcile pass, so it works on plain rows: the records of a batch are opened with one
lookup and one COPY, and closed from one query's rows (`OpenRun`), never from model instances.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import Count, Max, Q
from django.utils import timezone

from apps.core.db.bulk import bulk_set, bulk_set_statement, copy_insert_rows
from apps.core.db.deferred import read_together
from apps.core.db.prepared import Arg, PreparedRead
from apps.queueing.selectors import reserved_node_holders

from ..choices import UsageKind
from ..models import CPU_GPU_TYPE, GpuSku, UsageRecord
from ..selectors import pricing
from ..selectors.run_owners import job_timeouts
from . import ledger
from .budgets import budgets_nudge

ADMITTED_REASONS = frozenset({"Scheduled", "Running"})
ENDED_REASONS = frozenset(
    {"Succeeded", "Failed", "Cancelled", "Rejected", "Preempted", "Queued", "Evicted", "WorkloadLost"}
)
RUNNING_PHASES = frozenset({"Scheduling", "Running"})
MILLI = Decimal(1000)
GIB = Decimal(2**30)
THOUSANDTH = Decimal("0.001")
ZERO = Decimal(0)
# The columns a run record is opened with (every NOT NULL column: COPY gets no Django defaults).
_OPEN_COLUMNS = (
    "tenant_id", "uid", "name", "kind", "job_pk", "job_uid", "job_name", "run", "queue_name", "model",
    "input_tokens", "output_tokens", "sku_id", "sku_name", "gpu_type", "gpus", "reserved_gpus", "cpu_cores",
    "memory_gib", "start", "gpu_hours", "rate", "cost", "currency", "final", "refreshed_at", "created_at",
)  # fmt: skip
_OPEN_RUN_FIELDS = (
    "pk", "tenant_id", "tenant__slug", "uid", "name", "kind", "job_pk", "job_name", "sku_id", "sku_name",
    "gpu_type", "gpus", "reserved_gpus", "cpu_cores", "memory_gib", "start", "rate", "currency",
    "sku__hourly_rate", "sku__cpu_core_hour_rate", "sku__memory_gib_hour_rate",
)  # fmt: skip


@dataclass
class OpenRun:
    """An open usage record as closing needs it (what `pricing.price` and `ledger.Sealable.of` read), from one row."""

    pk: int
    tenant_id: int
    tenant_slug: str
    uid: Any
    name: str
    kind: str
    job_pk: int | None
    job_name: str
    sku: GpuSku | None
    sku_name: str
    gpu_type: str
    gpus: int
    reserved_gpus: int
    cpu_cores: Decimal
    memory_gib: Decimal
    start: dt.datetime
    rate: Decimal
    currency: str
    end: dt.datetime | None = None
    gpu_hours: Decimal = ZERO
    cost: Decimal = ZERO
    final: bool = False
    refreshed_at: dt.datetime | None = None


def open_runs(condition: Q) -> list[OpenRun]:
    """The open records matching `condition`, with their tenant's slug and their SKU's rates, in one query."""
    return _open_runs_of(UsageRecord.all_tenants.filter(condition, final=False).values_list(*_OPEN_RUN_FIELDS))


_OPEN_OF_JOBS = PreparedRead(
    lambda: UsageRecord.all_tenants.filter(job_pk__any_of=Arg("jobs"), final=False).values_list(*_OPEN_RUN_FIELDS)
)
# Per job uid: its last run number and how many of its records are open (what opening a run needs).
_RUN_STATS = PreparedRead(
    lambda: (
        UsageRecord.all_tenants.filter(job_uid__any_of=Arg("uids"))
        .values("job_uid")
        .annotate(last=Max("run"), open=Count("id", filter=Q(final=False)))
        .values_list("job_uid", "last", "open")
        .order_by()
    )
)


def open_runs_of_jobs(job_pks: list[int]) -> list[OpenRun]:
    """`open_runs` of these jobs: the statement every pass ending runs asks, compiled once (apps.core.db.prepared)."""
    return _open_runs_of(_OPEN_OF_JOBS.rows(jobs=job_pks))


def _open_runs_of(rows: Any) -> list[OpenRun]:
    out = []
    for *head, sku_id, sku_name, gpu_type, gpus, reserved, cores, memory, start, rate, currency, hr, cr, mr in rows:
        sku = None
        if sku_id is not None and hr is not None:
            sku = GpuSku(id=sku_id, name=sku_name, hourly_rate=hr, cpu_core_hour_rate=cr, memory_gib_hour_rate=mr)
        out.append(OpenRun(*head, sku, sku_name, gpu_type, gpus, reserved or 0, cores, memory, start, rate, currency))
    return out


def _whole(moment: dt.datetime) -> dt.datetime:
    return moment.replace(microsecond=0)


def _job_gpu_type(job: Any) -> str:
    if not job.request.get("nvidia.com/gpu"):
        return CPU_GPU_TYPE
    gpu_type = job.spec.get("gpuType") or "any"
    return gpu_type


def _reserved_gpus(jobs: list[Any]) -> dict[int, int]:
    """job pk -> GPUs of its pods placed on nodes its own tenant's reservation holds (one query, and only when a
    job was placed while its tenant had reserved nodes)."""
    placed = {job.pk: (job.placement or {}) for job in jobs if (job.placement or {}).get("reserved")}
    if not placed:
        return {}
    holders = reserved_node_holders({node for p in placed.values() for node in p.get("nodes") or ()})
    out = {}
    for job in jobs:
        nodes = placed.get(job.pk, {}).get("nodes") or []
        if nodes:
            per_pod = int((job.request or {}).get("nvidia.com/gpu") or 0) // len(nodes)
            out[job.pk] = per_pod * sum(1 for node in nodes if holders.get(node) == job.tenant.slug)
    return out


def _run_stats_and_open_runs(
    opening: list[Any], ending_pks: list[int]
) -> tuple[dict[Any, tuple[int, int]], list[OpenRun]]:
    """Per job being opened: job uid -> (its last run, how many of its records are open), for the jobs with records;
    and `open_runs_of_jobs(ending_pks)`: both read in one round trip."""
    reads = []
    if opening:
        reads.append(_RUN_STATS.statement(uids=[job.uid for job in opening]))
    if ending_pks:
        reads.append(_OPEN_OF_JOBS.statement(jobs=ending_pks))
    fetched = read_together([(sql, params) for sql, params, _finish in reads])
    results = [finish(rows) for (_sql, _params, finish), rows in zip(reads, fetched, strict=True)]
    stats = {uid: (last, open_) for uid, last, open_ in results[0]} if opening else {}
    runs = _open_runs_of(results[-1]) if ending_pks else []
    return stats, runs


def _open(jobs: list[Any], now: dt.datetime, stats: dict[Any, tuple[int, int]]) -> int:
    """Open a run record for each of these admitted jobs that has none open (`stats`: their run stats): run = the
    job's last run + 1, in one INSERT. Returns how many were opened."""
    fresh = [job for job in jobs if not stats.get(job.uid, (0, 0))[1]]
    if not fresh:
        return 0
    start = _whole(now)
    catalog = pricing.catalog()
    reserved = _reserved_gpus(fresh)
    rows = []
    raw = os.urandom(16 * len(fresh))
    for index, job in enumerate(fresh):
        run = stats.get(job.uid, (0, 0))[0] + 1
        request = job.request or {}
        gpu_type = _job_gpu_type(job)
        sku = catalog.in_force(gpu_type, start)
        kind = UsageKind.CPU.value if gpu_type == CPU_GPU_TYPE else UsageKind.GPU.value
        memory = (Decimal(int(request.get("memory") or 0)) / GIB).quantize(THOUSANDTH)
        uid = _uuid4(raw[16 * index : 16 * index + 16])
        rows.append(
            (
                job.tenant_id, uid, f"usage-{job.uid}" if run == 1 else f"usage-{job.uid}-{run}", kind, job.pk,
                job.uid, job.name, run, job.queue_name, "", 0, 0, sku.pk if sku else None, sku.name if sku else "",
                "" if gpu_type == CPU_GPU_TYPE else gpu_type, int(request.get("nvidia.com/gpu") or 0),
                reserved.get(job.pk, 0), Decimal(int(request.get("cpu") or 0)) / MILLI, memory, start, ZERO,
                sku.hourly_rate if sku else ZERO, ZERO, sku.currency if sku else pricing.DEFAULT_CURRENCY, False,
                start, now,
            )
        )  # fmt: skip
    return copy_insert_rows(UsageRecord, _OPEN_COLUMNS, rows)


def _uuid4(raw: bytes) -> str:
    """A version 4 UUID's text from 16 random bytes (what uuid.uuid4() gives)."""
    value = int.from_bytes(raw) & ~(0xF000 << 64) & ~(0xC000 << 48) | (0x4000 << 64) | (0x8000 << 48)
    text = f"{value:032x}"
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def close_records(records: Iterable[tuple[Any, dt.datetime]], now: dt.datetime) -> int:
    """Make open records (UsageRecord or OpenRun) final at the given ends (never before their start), price them,
    and seal them into the ledger, in the caller's transaction. Returns how many."""
    changes: dict[int, dict[str, Any]] = {}
    by_pk: dict[int, Any] = {}
    for record, at in records:
        end = max(_whole(at), record.start)
        changes[record.pk] = {"end": end, "final": True, "refreshed_at": _whole(now), **pricing.price(record, end=end)}
        by_pk[record.pk] = record
    if not changes:
        return 0
    # One UPDATE for all, each row only while still open: one closed meanwhile by someone else is sealed once, by them.
    # The ledger heads of the records' tenants are locked in the same round trip (a head whose tenant's records
    # were all closed meanwhile is locked for nothing: it stays as it is).
    update = bulk_set_statement(UsageRecord, changes, when={pk: {"final": False} for pk in changes})
    lock = ledger.lock_heads_statement(sorted({record.tenant_id for record in by_pk.values()}))
    updated, locked = read_together([update[:2], lock])
    done = update[2](updated)
    sealed = []
    for pk in sorted(done):
        record = by_pk[pk]
        for key, value in changes[pk].items():
            setattr(record, key, value)
        slug = record.tenant_slug if isinstance(record, OpenRun) else record.tenant.slug
        sealed.append(ledger.Sealable.of(record, slug))
    ledger.append(sealed, now=now, heads=ledger.locked_heads(locked))
    if sealed:
        budgets_nudge()  # spend moved: hard budgets are measured again soon
    return len(sealed)


def usage_job_events(events: list[tuple[Any, str, str, str]], *, now: dt.datetime | None = None) -> None:
    """Open and close run records from a batch of job lifecycle events `(job, reason, message, type)`."""
    now = now or timezone.now()
    opening = {
        job.pk: job for job, reason, _m, _t in events if reason in ADMITTED_REASONS and job.phase in RUNNING_PHASES
    }
    ending = {job.pk: job for job, reason, _m, _t in events if reason in ENDED_REASONS and job.pk not in opening}
    if not opening and not ending:
        return
    # No savepoint inside a caller's transaction (a reconcile pass's writes): a failure here fails all of it.
    with transaction.atomic(savepoint=False):
        # The reads first, together: one round trip, which inside a reconcile pass also carries the pass's writes
        # before them (apps.core.db.deferred). Opening reads other jobs' records than closing writes (`ending` leaves
        # them out), so reading them before the closes gives the same.
        pks = list(ending)
        stats, first = _run_stats_and_open_runs(list(opening.values()), pks[:1000])
        for start in range(0, len(pks), 1000):
            runs = first if start == 0 else open_runs_of_jobs(pks[start : start + 1000])
            # A finished run ends at the job's completion time; a preempted or evicted one now.
            closing = []
            for run in runs:
                job = ending[run.job_pk]
                at = now if job.phase == "Preempted" else getattr(job, "completion_time", None) or now
                closing.append((run, at))
            close_records(closing, now)
        if opening:
            _open(list(opening.values()), now, stats)


def usage_job_deleted(*, job: Any, now: dt.datetime | None = None) -> None:
    """The job is being deleted: its open run (if any) ends now and is sealed."""
    now = now or timezone.now()
    close_records([(run, now) for run in open_runs(Q(job_pk=job.pk))], now)


def usage_refresh(*, now: dt.datetime | None = None) -> int:
    """Bring open runs' hours and cost up to now; close runs whose job no longer exists (orphans). Periodic.
    (Reservations' records: usage_reservations_sync.)"""
    now = now or timezone.now()
    runs = open_runs(Q(job_pk__isnull=False))
    if not runs:
        return 0
    alive = set(job_timeouts([r.job_pk for r in runs]))  # the jobs that still exist (apps.jobs registers them)
    with transaction.atomic():
        close_records([(r, now) for r in runs if r.job_pk not in alive], now)
        changes = {
            r.pk: {**pricing.price(r, end=max(_whole(now), r.start)), "refreshed_at": _whole(now)}
            for r in runs
            if r.job_pk in alive
        }
        bulk_set(UsageRecord, changes, exclude={"final": [True]})
    return len(runs)


def usage_open_for(*, job_pks: list[int]) -> dict[int, UsageRecord]:
    """The open run record of each of these jobs (those that run)."""
    return {r.job_pk: r for r in UsageRecord.all_tenants.filter(job_pk__in=job_pks, final=False)}

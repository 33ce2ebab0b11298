"""Reading jobs."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

from django.db.models import Count, Q, QuerySet, Sum

from apps.core.db.deferred import read_together
from apps.core.db.epochs import EpochCached
from apps.core.db.prepared import Arg, PreparedRead, model_fields
from apps.core.principal import Principal
from apps.core.scoping import ALL_TENANTS, filter_to_scope
from apps.tenants.models import Tenant

from . import logs
from .choices import WAITING_PHASES, JobPhase
from .filtersets import JobFilterSet
from .models import Job, JobEvent
from .models.job import queue_position, with_queue_positions

__all__ = [
    "SUBMITTED_FIELDS",
    "gpus_in_use",
    "job_events_recent",
    "job_filterset",
    "job_get_readable",
    "job_phase_counts",
    "job_timeouts",
    "job_visible",
    "jobs_readable",
    "jobs_to_reconcile",
    "queue_position",
    "submitted_jobs",
    "tenants_by_id",
    "with_queue_positions",
    "with_tenants",
]


def gpus_in_use() -> int:
    """GPUs held by jobs that are placed (Scheduling) or running, across every tenant."""
    used = Job.all_tenants.filter(phase__in=[JobPhase.SCHEDULING, JobPhase.RUNNING]).aggregate(n=Sum("gpus_allocated"))
    return int(used["n"] or 0)


_TO_RECONCILE = PreparedRead(
    lambda: (
        Job.all_tenants.filter(
            Q(pk__any_of=Arg("pks"))
            | Q(phase__in=WAITING_PHASES) & (Q(cancel_requested_at__isnull=False) | Q(pk__any_of=Arg("waiting"))),
            finalized=False,
        )
        .order_by("pk")
        .values_list(*model_fields(Job))
    )
)
_TENANTS = PreparedRead(lambda: Tenant.objects.filter(pk__any_of=Arg("pks")).values_list(*model_fields(Tenant)))


_ALL_TENANTS = PreparedRead(lambda: Tenant.objects.values_list(*model_fields(Tenant)))
# Read again inside a reconcile pass only when a tenant changed (apps.core.db.epochs).
_TENANTS_BY_ID = EpochCached(("tenants_tenant",), lambda: {t.pk: t for t in _ALL_TENANTS.models(Tenant)})


def tenants_by_id() -> dict[int, Tenant]:
    """tenant id -> Tenant, for `jobs_to_reconcile` to attach (a copy the caller may add to; the instances are
    shared between passes: read-only)."""
    return dict(_TENANTS_BY_ID.get())


def jobs_to_reconcile(pks: list[int], waiting: list[int], tenants: dict[int, Tenant]) -> list[Job]:
    """The unfinalized jobs among `pks`, and the waiting ones among `waiting` or cancelled, in pk order, each with
    its tenant attached from `tenants` (tenant id -> Tenant; the ones missing are read and added). A pass sees
    thousands of jobs of tens of tenants: one Tenant per tenant, read once per pass, not one per job row as
    `select_related` would build. Two statements compiled once per process (apps.core.db.prepared), whatever the
    number of jobs; inside `apps.core.db.deferred.deferred_writes()` the writes kept before it go in the same round
    trip (a pass's tokens)."""
    sql, params, finish = _TO_RECONCILE.models_statement(Job, pks=pks, waiting=waiting)
    [fetched] = read_together([(sql, params)])
    return with_tenants(finish(fetched), tenants)


def with_tenants(jobs: list[Job], tenants: dict[int, Tenant]) -> list[Job]:
    """The jobs, each with its tenant attached from `tenants` (tenant id -> Tenant; the missing ones read in one
    query and added): one Tenant per tenant however many jobs."""
    missing = {job.tenant_id for job in jobs} - tenants.keys()
    if missing:
        tenants.update((tenant.pk, tenant) for tenant in _TENANTS.models(Tenant, pks=sorted(missing)))
    for job in jobs:
        Job.tenant.field.set_cached_value(job, tenants[job.tenant_id])
    return jobs


# Submitted jobs that admission did not admit or reject this cycle (the first cycle after a large submission reads
# thousands): the few columns queueing them needs.
SUBMITTED_FIELDS = model_fields(Job, only={"id", "uid", "name", "tenant_id", "queue_name"})
_SUBMITTED = PreparedRead(
    lambda: (
        Job.all_tenants.filter(phase=JobPhase.PENDING, finalized=False, cancel_requested_at__isnull=True)
        .exclude(pk__any_of=Arg("decided"))
        .order_by("pk")
        .values_list(*SUBMITTED_FIELDS)
    )
)


def submitted_jobs(*, decided: list[int], tenants: dict[int, Tenant]) -> list[Job]:
    """Pending jobs not among `decided`, as Job instances of `SUBMITTED_FIELDS` only (others load on access), each
    with its tenant: one query, no Tenant per row."""
    return with_tenants(_SUBMITTED.models(Job, decided=decided), tenants)


def job_visible(*, principal: Principal, object_id: str) -> list[int]:
    """The tenants in which `principal` may watch a job named `object_id` (websocket subscriptions; empty: none)."""
    tenants = principal.tenants_with("jobs:read")
    qs = Job.all_tenants.filter(name=object_id)
    if tenants is not ALL_TENANTS:
        qs = qs.filter(tenant_id__in=tenants)
    return sorted(set(qs.values_list("tenant_id", flat=True)))


def job_timeouts(pks: list[int]) -> dict[int, int | None]:
    """job pk -> its timeout in seconds (None: no timeout), for the jobs among `pks` that exist (billing's forecast)."""
    return dict(Job.all_tenants.filter(pk__in=pks).values_list("pk", "timeout_s"))


def jobs_readable(*, principal: Principal, tenant_id: int) -> QuerySet[Job]:
    """The jobs of tenant `tenant_id` as /api/v1/jobs/ lists them to `principal` (its read scope `jobs:read` in that
    tenant, the same tenant filter, queue positions, newest first); none when it lacks the scope there."""
    scope = frozenset({tenant_id}) if principal.has_scope("jobs:read", tenant_id) else frozenset()
    visible = filter_to_scope(Job.all_tenants.select_related("tenant"), scope)
    return with_queue_positions(visible).order_by("-created_at", "-id")


def job_filterset(*, principal: Principal, tenant_id: int, data: Mapping[str, str]) -> JobFilterSet:
    """The REST API's job filters (phase, type, queue, name) applied to `jobs_readable`; `.qs` is the list,
    `.form` the filter form with its errors."""
    return JobFilterSet(data=data, queryset=jobs_readable(principal=principal, tenant_id=tenant_id))


def job_get_readable(*, principal: Principal, tenant_id: int, name: str) -> Job | None:
    """The job `name` of tenant `tenant_id` if `principal` may read it there (None: the API's 404)."""
    return jobs_readable(principal=principal, tenant_id=tenant_id).filter(name=name).first()


def job_phase_counts(*, principal: Principal, tenant_id: int) -> dict[str, int]:
    """phase -> number of jobs of the tenant readable by `principal` (phases with none are absent)."""
    scope = frozenset({tenant_id}) if principal.has_scope("jobs:read", tenant_id) else frozenset()
    rows = filter_to_scope(Job.all_tenants.all(), scope).values_list("phase").annotate(n=Count("id")).order_by()
    return dict(rows)


def job_events_recent(*, job: Job, limit: int = 100) -> list[JobEvent]:
    """The job's last `limit` events, oldest first (the job was read through a scoped selector)."""
    return list(reversed(job.events.order_by("-created_at", "-id")[:limit]))


def job_log_text(*, job: Job, tail: int | None = None) -> str:
    """The job's log as /api/v1/jobs/<name>/logs/ serves it (every index, lines prefixed `[<index>] `)."""
    return logs.job_logs(job, tail=tail)


def job_log_follow(*, job: Job, tail: int | None = None) -> AsyncIterator[str]:
    """The job's log as it grows (the REST endpoint's `?follow=1`): new lines until the job ends and its pods drain."""
    return logs.follow_job_logs(job, tail=tail)

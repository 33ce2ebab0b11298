"""Reading jobs."""

from __future__ import annotations

from django.db.models import Count, IntegerField, OuterRef, Q, QuerySet, Subquery, Sum, Value
from django.db.models.functions import Coalesce

from apps.core.db.deferred import read_together
from apps.core.db.epochs import EpochCached
from apps.core.db.prepared import Arg, PreparedRead, model_fields
from apps.core.principal import Principal
from apps.core.scoping import ALL_TENANTS
from apps.tenants.models import Tenant

from .choices import WAITING_PHASES, JobPhase
from .models import Job


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


# --- queue positions, read (never stored: they move whenever a job ahead starts or leaves) ------------------------

_WAITING = Q(finalized=False, phase__in=WAITING_PHASES, cancel_requested_at__isnull=True)


def _same_queue() -> QuerySet[Job]:
    return Job.all_tenants.filter(_WAITING, tenant_id=OuterRef("tenant_id"), queue_name=OuterRef("queue_name"))


def _count(qs: QuerySet[Job]) -> Subquery:
    return Coalesce(
        Subquery(qs.order_by().values("tenant_id").annotate(n=Count("id")).values("n")[:1]),
        Value(0),
        output_field=IntegerField(),
    )


def with_queue_positions(qs: QuerySet[Job]) -> QuerySet[Job]:
    """Annotate each job with its position in its queue and the queue's length (both counts are read from the
    queue-order index; a job that is not waiting gets them but they are not shown)."""
    ahead = _same_queue().filter(
        Q(priority__gt=OuterRef("priority"))
        | Q(priority=OuterRef("priority"), created_at__lt=OuterRef("created_at"))
        | Q(priority=OuterRef("priority"), created_at=OuterRef("created_at"), pk__lt=OuterRef("pk"))
    )
    return qs.annotate(queue_ahead_read=_count(ahead), queue_length_read=_count(_same_queue()))


def queue_position(job: Job) -> tuple[int | None, int | None]:
    """(position from 1, queue length) of a waiting job; (None, None) for any other."""
    if not job.is_waiting:
        return None, None
    row = with_queue_positions(Job.all_tenants.filter(pk=job.pk)).values_list("queue_ahead_read", "queue_length_read")
    found = row.first()
    if found is None:
        return None, None
    return found[0] + 1, found[1]


def job_timeouts(pks: list[int]) -> dict[int, int | None]:
    """job pk -> its timeout in seconds (None: no timeout), for the jobs among `pks` that exist (billing's forecast)."""
    return dict(Job.all_tenants.filter(pk__in=pks).values_list("pk", "timeout_s"))

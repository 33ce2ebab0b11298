"""Billing: the SKU catalog, job-run usage records and the ledger. Every change goes through these functions.

Catalog writes are platform-only, transactional and audited. A SKU's price never changes once usage was priced by
it: to change a price, end its window (`effective_to`) and add a SKU after it. Windows of one GPU type never
overlap (checked under a lock on the type's rows).

Job runs (`usage_job_events`, called by the job service with each batch of lifecycle events, in its transaction):
a run opens when the job is admitted (Scheduled or Running) and closes when it ends (Succeeded, Failed,
Cancelled, Preempted, or evicted back to Queued); `usage_job_deleted` closes it when the job is deleted while it
runs. Closing makes the record final and seals it into the tenant's ledger in the same transaction.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from apps.core import scopes as S
from apps.core.audit import audit_record, snapshot
from apps.core.bulk import bulk_set
from apps.core.errors import Conflict
from apps.core.principal import Principal

from . import ledger, pricing
from .budgets import (  # noqa: F401 - part of this module's interface
    budget_create,
    budget_delete,
    budget_update,
    budgets_evaluate,
    budgets_nudge,
)
from .estimate import CostEstimate, cost_estimate  # noqa: F401 - part of this module's interface
from .metering import usage_events_ingest, usage_tokens_collect  # noqa: F401 - part of this module's interface
from .models import CPU_GPU_TYPE, GpuSku, UsageKind, UsageRecord
from .reservations import usage_reservation_deleted, usage_reservations_sync  # noqa: F401 - likewise

SKU_FIELDS = tuple(f for f in GpuSku.AUDIT_FIELDS if f != "name")
# Once usage was priced by a SKU, only these may change (its price is history).
SKU_FIELDS_AFTER_USE = ("effective_to", "description")
ADMITTED_REASONS = frozenset({"Scheduled", "Running"})
ENDED_REASONS = frozenset({"Succeeded", "Failed", "Cancelled", "Rejected", "Preempted", "Queued", "Evicted"})
RUNNING_PHASES = frozenset({"Scheduling", "Running"})


class SkuConflict(Conflict):
    """The SKU is referenced by usage: its price and window start are history."""


def _require_platform(actor: Principal) -> None:
    if not (actor.is_platform and S.ADMIN in actor.platform_scopes):
        raise PermissionError("only platform staff with admin can change the SKU catalog")


def _audit(actor: Principal, action: str, sku: GpuSku, before: Any, after: Any) -> None:
    audit_record(
        actor=actor,
        action=action,
        obj=sku,
        object_type="gpu_sku",
        object_id=sku.name,
        tenant_id=None,
        before=before,
        after=after,
    )


def _check_window(sku: GpuSku) -> None:
    """Refuse a window that overlaps another SKU of the same GPU type (the type's rows are locked first)."""
    if sku.effective_to is not None and sku.effective_to <= sku.effective_from:
        raise ValidationError({"effective_to": "must be after effective_from"})
    same = GpuSku.objects.select_for_update().filter(gpu_type__iexact=sku.gpu_type).exclude(pk=sku.pk)
    for other in same.order_by("effective_from"):
        starts_before_other_ends = other.effective_to is None or sku.effective_from < other.effective_to
        ends_after_other_starts = sku.effective_to is None or sku.effective_to > other.effective_from
        if starts_before_other_ends and ends_after_other_starts:
            until = other.effective_to.isoformat() if other.effective_to else "open-ended"
            raise ValidationError(
                {
                    "effective_from": f"overlaps SKU {other.name!r} of GPU type {other.gpu_type} "
                    f"({other.effective_from.isoformat()} to {until}): end that SKU's window first"
                }
            )


def sku_validate(sku: GpuSku) -> GpuSku:
    """Field checks and the window check for an unsaved SKU (admin forms call it before saving)."""
    return _validated(sku)


def _validated(sku: GpuSku) -> GpuSku:
    try:
        sku.full_clean(validate_unique=False, validate_constraints=False)
    except ValidationError as exc:
        raise ValidationError(exc.message_dict) from exc
    _check_window(sku)
    return sku


@transaction.atomic
def sku_create(*, actor: Principal, name: str, **fields: Any) -> GpuSku:
    """Add a price to the catalog. Raises ValidationError naming the field (an overlapping window is one)."""
    _require_platform(actor)
    unknown = sorted(set(fields) - set(SKU_FIELDS))
    if unknown:
        raise ValidationError({n: "unknown field" for n in unknown})
    if GpuSku.objects.filter(name=name).exists():
        raise ValidationError({"name": f"a SKU named {name!r} already exists"})
    sku = _validated(GpuSku(name=name, **fields))
    sku.save()
    _audit(actor, "gpu_sku.create", sku, None, snapshot(sku, GpuSku.AUDIT_FIELDS))
    return sku


@transaction.atomic
def sku_update(*, actor: Principal, sku: GpuSku, **changes: Any) -> GpuSku:
    """Change a SKU. Once usage was priced by it, only `effective_to` and `description` may change (409)."""
    _require_platform(actor)
    unknown = sorted(set(changes) - set(SKU_FIELDS))
    if unknown:
        raise ValidationError({n: "unknown field, or one that cannot be changed" for n in unknown})
    sku = GpuSku.objects.select_for_update().get(pk=sku.pk)
    changed = {k: v for k, v in changes.items() if getattr(sku, k) != v}
    if not changed:
        return sku
    frozen = sorted(set(changed) - set(SKU_FIELDS_AFTER_USE))
    if frozen and UsageRecord.all_tenants.filter(sku=sku).exists():
        raise SkuConflict(
            f"SKU {sku.name} has priced usage: {', '.join(frozen)} cannot change; "
            "set effective_to and add a new SKU for the new price"
        )
    before = snapshot(sku, GpuSku.AUDIT_FIELDS)
    for key, value in changed.items():
        setattr(sku, key, value)
    _validated(sku).save()
    _audit(actor, "gpu_sku.update", sku, before, snapshot(sku, GpuSku.AUDIT_FIELDS))
    return sku


@transaction.atomic
def sku_delete(*, actor: Principal, sku: GpuSku) -> None:
    """Remove a SKU that priced nothing yet (else 409: end its window instead)."""
    _require_platform(actor)
    if UsageRecord.all_tenants.filter(sku=sku).exists():
        raise SkuConflict(f"SKU {sku.name} has priced usage: set its effective_to instead of deleting it")
    _audit(actor, "gpu_sku.delete", sku, snapshot(sku, GpuSku.AUDIT_FIELDS), None)
    sku.delete()


# --- job runs ------------------------------------------------------------------------------------------------------


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
    from apps.queueing.selectors import reserved_node_holders

    holders = reserved_node_holders({node for p in placed.values() for node in p.get("nodes") or ()})
    out = {}
    for job in jobs:
        nodes = placed.get(job.pk, {}).get("nodes") or []
        if nodes:
            per_pod = int((job.request or {}).get("nvidia.com/gpu") or 0) // len(nodes)
            out[job.pk] = per_pod * sum(1 for node in nodes if holders.get(node) == job.tenant.slug)
    return out


def _open(jobs: list[Any], now: dt.datetime) -> list[UsageRecord]:
    pks = [job.pk for job in jobs]
    already = set(UsageRecord.all_tenants.filter(job_pk__in=pks, final=False).values_list("job_pk", flat=True))
    fresh = [job for job in jobs if job.pk not in already]
    if not fresh:
        return []
    runs = dict(
        UsageRecord.all_tenants.filter(job_uid__in=[j.uid for j in fresh])
        .values("job_uid")
        .annotate(last=Max("run"))
        .values_list("job_uid", "last")
    )
    start = _whole(now)
    catalog = pricing.Catalog()
    reserved = _reserved_gpus(fresh)
    rows = []
    for job in fresh:
        run = runs.get(job.uid, 0) + 1
        request = job.request or {}
        gpu_type = _job_gpu_type(job)
        sku = catalog.in_force(gpu_type, start)
        rows.append(
            UsageRecord(
                tenant_id=job.tenant_id,
                name=f"usage-{job.uid}" if run == 1 else f"usage-{job.uid}-{run}",
                kind=UsageKind.CPU if gpu_type == CPU_GPU_TYPE else UsageKind.GPU,
                job_pk=job.pk,
                job_uid=job.uid,
                job_name=job.name,
                run=run,
                queue_name=job.queue_name,
                sku=sku,
                sku_name=sku.name if sku else "",
                gpu_type="" if gpu_type == CPU_GPU_TYPE else gpu_type,
                gpus=int(request.get("nvidia.com/gpu") or 0),
                reserved_gpus=reserved.get(job.pk, 0),
                cpu_cores=Decimal(int(request.get("cpu") or 0)) / 1000,
                memory_gib=(Decimal(int(request.get("memory") or 0)) / 2**30).quantize(Decimal("0.001")),
                start=start,
                rate=sku.hourly_rate if sku else 0,
                currency=sku.currency if sku else pricing.DEFAULT_CURRENCY,
                refreshed_at=start,
            )
        )
    return UsageRecord.all_tenants.bulk_create(rows)


def _close(records: Iterable[UsageRecord], ends: dict[int, dt.datetime], now: dt.datetime) -> int:
    """Make open job-run records final at their job's end (`ends` by job pk; else now), price them, and seal them
    into the ledger. Returns how many."""
    return close_records([(record, ends.get(record.job_pk, now)) for record in records], now)


def close_records(records: Iterable[tuple[UsageRecord, dt.datetime]], now: dt.datetime) -> int:
    """Make open records final at the given ends (never before their start), price them, and seal them into the
    ledger, in the caller's transaction. Returns how many."""
    changes: dict[int, dict[str, Any]] = {}
    by_pk: dict[int, UsageRecord] = {}
    for record, at in records:
        end = max(_whole(at), record.start)
        changes[record.pk] = {"end": end, "final": True, "refreshed_at": _whole(now), **pricing.price(record, end=end)}
        by_pk[record.pk] = record
    # One UPDATE for all, each row only while still open: one closed meanwhile by someone else is sealed once, by them.
    done = bulk_set(UsageRecord, changes, when={pk: {"final": False} for pk in changes})
    sealed = []
    slugs: dict[int, str] = {}
    for pk in sorted(done):
        record = by_pk[pk]
        for key, value in changes[pk].items():
            setattr(record, key, value)
        if record.tenant_id not in slugs:
            slugs[record.tenant_id] = record.tenant.slug
        sealed.append(ledger.Sealable.of(record, slugs[record.tenant_id]))
    ledger.append(sealed, now=now)
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
    with transaction.atomic():
        pks = list(ending)
        for start in range(0, len(pks), 1000):
            chunk = pks[start : start + 1000]
            records = list(
                UsageRecord.all_tenants.filter(job_pk__in=chunk, final=False).select_related("tenant", "sku")
            )
            # A finished run ends at the job's completion time; a preempted or evicted one now.
            ends = {r.job_pk: getattr(ending[r.job_pk], "completion_time", None) or now for r in records}
            _close(records, {pk: end for pk, end in ends.items() if ending[pk].phase != "Preempted"}, now)
        if opening:
            _open(list(opening.values()), now)


def usage_job_deleted(*, job: Any, now: dt.datetime | None = None) -> None:
    """The job is being deleted: its open run (if any) ends now and is sealed."""
    now = now or timezone.now()
    records = UsageRecord.all_tenants.filter(job_pk=job.pk, final=False).select_related("tenant", "sku")
    _close(list(records), {}, now)


def usage_refresh(*, now: dt.datetime | None = None) -> int:
    """Bring open runs' hours and cost up to now; close runs whose job no longer exists (orphans). Periodic.
    (Reservations' records: usage_reservations_sync.)"""
    from apps.jobs.models import Job  # read only for the orphan sweep

    now = now or timezone.now()
    open_records = list(
        UsageRecord.all_tenants.filter(final=False, job_pk__isnull=False).select_related("tenant", "sku")
    )
    if not open_records:
        return 0
    alive = set(Job.all_tenants.filter(pk__in=[r.job_pk for r in open_records]).values_list("pk", flat=True))
    orphans = [r for r in open_records if r.job_pk not in alive]
    with transaction.atomic():
        _close(orphans, {}, now)
        changes = {
            r.pk: {**pricing.price(r, end=max(_whole(now), r.start)), "refreshed_at": _whole(now)}
            for r in open_records
            if r.job_pk in alive
        }
        bulk_set(UsageRecord, changes, exclude={"final": [True]})
    return len(open_records)


def usage_open_for(*, job_pks: list[int]) -> dict[int, UsageRecord]:
    """The open run record of each of these jobs (those that run)."""
    return {r.job_pk: r for r in UsageRecord.all_tenants.filter(job_pk__in=job_pks, final=False)}


def ledger_verify(*, tenant: Any) -> ledger.Verification:
    """Verify the tenant's chain (every problem found, with its sequence number)."""
    return ledger.verify(tenant_id=tenant.pk, tenant_slug=tenant.slug)

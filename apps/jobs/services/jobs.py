"""Jobs: submit, cancel, resize, resubmit, release, delete and checkpoint reports. Every change is transactional
and audited; the job reconciler turns the result into cluster objects and writes status.
"""

from __future__ import annotations

import re
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone
from rest_framework import serializers

from apps.billing import services as billing
from apps.core.audit import snapshot
from apps.core.errors import Conflict
from apps.core.periodic import nudge
from apps.core.principal import Principal
from apps.core.scopes import ADMIN
from apps.core.scoping import tenant_scope
from apps.tenants.models import Tenant
from apps.tenants.services import api_key_revoke_bound

from .. import choices as C
from ..admission.inputs import admission_fields, request_of
from ..models import Job, JobEvent
from ..spec import JobSpec, normalize_spec
from .events import job_audit, job_event

RECONCILE = "reconcile-jobs"
_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
_RESUBMITTED = re.compile(r"-r\d+$")  # the suffix job_resubmit adds: resubmitting `a-r2` makes `a-r3`
# Paths under /api/v1/jobs/ that are endpoints, not jobs.
RESERVED_NAMES = frozenset({"estimate"})


class JobConflict(Conflict):
    """The job is in a state that does not allow this (HTTP 409)."""


def validate_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise ValidationError({"name": "is required"})
    if len(name) > C.MAX_NAME_LENGTH:
        raise ValidationError({"name": f"must be at most {C.MAX_NAME_LENGTH} characters (got {len(name)})"})
    if not _NAME.match(name):
        raise ValidationError({"name": "must be a DNS label: lowercase letters, digits and '-'"})
    if name in RESERVED_NAMES:
        raise ValidationError({"name": f"{name!r} is reserved (/api/v1/jobs/{name}/ is an endpoint): pick another"})
    return name


def job_validate(*, name: Any, spec: Any, name_required: bool = True) -> dict[str, Any]:
    """What `job_create` checks before writing, every error at once: ValidationError naming each bad field of the
    name and the spec (`name`, `spec.image`, `spec.resources.cpu`, ...), else the normalized spec. A name of None
    is checked only when `name_required`."""
    errors: dict[str, list[str]] = {}
    if name is not None or name_required:
        try:
            validate_name(name)
        except ValidationError as exc:
            errors.update(exc.message_dict)
    try:
        normalized = _normalized(spec)
    except ValidationError as exc:
        errors.update(exc.message_dict)
    if errors:
        raise ValidationError(errors)
    return normalized


def _spec_errors(exc: serializers.ValidationError) -> ValidationError:
    def flatten(detail: Any, prefix: str) -> dict[str, str]:
        if isinstance(detail, dict):
            out: dict[str, str] = {}
            for key, value in detail.items():
                out.update(flatten(value, f"{prefix}.{key}" if key != "non_field_errors" else prefix))
            return out
        if isinstance(detail, list) and detail and all(isinstance(d, dict) for d in detail):
            out = {}
            for index, value in enumerate(detail):
                out.update(flatten(value, f"{prefix}[{index}]"))
            return out
        return {prefix: " ".join(str(d) for d in (detail if isinstance(detail, list) else [detail]))}

    return ValidationError(flatten(exc.detail, "spec"))


def _normalized(spec: Any) -> dict[str, Any]:
    try:
        return normalize_spec(spec)
    except serializers.ValidationError as exc:
        raise _spec_errors(exc) from exc


def job_estimate(*, spec: Any, name: str | None = None) -> billing.CostEstimate:
    """What the job would cost if submitted now, validated as `job_create` validates it (the same field errors);
    nothing is stored. Raises ValidationError naming the field."""
    normalized = job_validate(name=name, spec=spec, name_required=False)
    return billing.cost_estimate(
        request=request_of(normalized),
        gpu_type=normalized.get("gpuType") or "",
        timeout_seconds=JobSpec.of(normalized).timeout_seconds,
    )


def job_create(*, actor: Principal, tenant: Tenant, name: str, spec: Any) -> Job:
    """Submit a job: the job, its audit row and its `Submitted` event in one transaction (all or none). Raises
    ValidationError naming every bad field at once (`name`, `spec.distributed.nodes`, ...)."""
    normalized = job_validate(name=name, spec=spec)
    with transaction.atomic():
        try:
            with transaction.atomic(), tenant_scope(tenant):  # a savepoint: a name taken is a field error, not a 500
                job = Job.objects.create(
                    tenant=tenant,
                    name=name,
                    spec=normalized,
                    submitted_by=actor.label,
                    current_nodes=0,
                    **admission_fields(normalized),
                )
        except IntegrityError as exc:
            raise ValidationError({"name": f"a job named {name!r} already exists in tenant {tenant.slug}"}) from exc
        job_audit(actor, "job.create", job, None, snapshot(job, Job.AUDIT_FIELDS))
        JobEvent.objects.create(job=job, reason="Submitted", message=f"submitted by {actor.label}")
        nudge(RECONCILE)  # (after the commit)
    return job


@transaction.atomic
def job_cancel(*, actor: Principal, job: Job) -> Job:
    """Ask for the job to stop: its workload gets the checkpoint request, the grace period, then is stopped."""
    with tenant_scope(job.tenant_id):
        job = Job.objects.select_for_update().select_related("tenant").get(pk=job.pk)
    if job.is_terminal:
        raise JobConflict(f"job {job.name} is already {job.phase}")
    if job.cancel_requested_at is None:
        before = snapshot(job, Job.AUDIT_FIELDS)
        job.cancel_requested_at = timezone.now()
        job.save(update_fields=["cancel_requested_at", "updated_at"])
        job_audit(actor, "job.cancel", job, before, snapshot(job, Job.AUDIT_FIELDS))
        JobEvent.objects.create(job=job, reason="CancelRequested", message=f"cancel requested by {actor.label}")
        nudge(RECONCILE)
    return job


def _resubmit_name(job: Job) -> str:
    """`train` -> `train-r2`, `train-r2` -> `train-r3`: the first `-r<N>` free in the tenant (the name cut to fit)."""
    base = _RESUBMITTED.sub("", job.name)
    # Every candidate starts with this, whatever the suffix's length (up to "-r999999999").
    prefix = base[: C.MAX_NAME_LENGTH - 12].rstrip("-")
    with tenant_scope(job.tenant_id):
        taken = set(Job.objects.filter(name__startswith=prefix).values_list("name", flat=True))
    number = 2
    while True:
        suffix = f"-r{number}"
        candidate = base[: C.MAX_NAME_LENGTH - len(suffix)].rstrip("-") + suffix
        if candidate not in taken:
            return candidate
        number += 1


@transaction.atomic
def job_resubmit(*, actor: Principal, job: Job) -> Job:
    """Submit a finished job's spec again as a new job, named `<name>-r<N>` (the first free N from 2), through
    `job_create` (validated, audited); the finished job and its history stay. Raises JobConflict while the job
    is still active: cancel it first, or two of it would run."""
    with tenant_scope(job.tenant_id):
        job = Job.objects.select_related("tenant").get(pk=job.pk)
    if not job.is_terminal:
        raise JobConflict(f"job {job.name} is {job.phase}: only a finished job can be resubmitted (cancel it first)")
    created = job_create(actor=actor, tenant=job.tenant, name=_resubmit_name(job), spec=job.spec)
    JobEvent.objects.create(job=created, reason="Resubmitted", message=f"resubmitted from {job.name} by {actor.label}")
    return created


@transaction.atomic
def job_budget_release(*, actor: Principal, job: Job) -> Job:
    """Let a waiting job past its tenant's hard budgets: admission no longer checks its forecast against them
    (apps.jobs.admission). Platform admins only; audited with the actor. Raises PermissionError, JobConflict."""
    if not (actor.is_platform and ADMIN in actor.platform_scopes):
        raise PermissionError("only platform staff with admin can release a job from its budget hold")
    with tenant_scope(job.tenant_id):
        job = Job.objects.select_for_update().select_related("tenant").get(pk=job.pk)
    if job.is_terminal or job.cancel_requested_at is not None or job.phase not in C.WAITING_PHASES:
        raise JobConflict(f"job {job.name} is {job.phase}: only a job waiting for admission can be released")
    if job.budget_released_at is not None:
        return job
    held = job.reason == "BudgetExceeded"
    job.budget_released_at = timezone.now()
    job.save(update_fields=["budget_released_at", "updated_at"])
    message = f"released from its budget hold by {actor.label}" + (f" ({job.message})" if held else "")
    job_audit(
        actor,
        "job.budget_release",
        job,
        {"budget_released_at": None, "reason": job.reason, "message": job.message[:500]},
        {"budget_released_at": job.budget_released_at.isoformat()},
    )
    JobEvent.objects.create(job=job, reason="BudgetReleased", message=message[:2000])
    nudge(RECONCILE)
    return job


@transaction.atomic
def job_resize(*, actor: Principal, job: Job, nodes: Any) -> Job:
    """Set an elastic job's desired node count (minNodes..nodes); the reconciler starts or stops indexes."""
    with tenant_scope(job.tenant_id):
        job = Job.objects.select_for_update().select_related("tenant").get(pk=job.pk)
    spec = job.typed_spec
    if not spec.elastic:
        raise JobConflict(f"job {job.name} is not elastic: only elastic jobs can be resized")
    if job.is_terminal or job.cancel_requested_at:
        raise JobConflict(f"job {job.name} is {job.phase}: it can no longer be resized")
    if isinstance(nodes, bool) or not isinstance(nodes, int):
        raise ValidationError({"nodes": "must be an integer"})
    if not spec.min_nodes <= nodes <= spec.max_nodes:
        raise ValidationError({"nodes": f"must be between minNodes ({spec.min_nodes}) and nodes ({spec.max_nodes})"})
    if nodes == spec.desired_nodes:
        return job
    before = snapshot(job, Job.AUDIT_FIELDS)
    new_spec = dict(job.spec)
    distributed = dict(new_spec["distributed"])
    distributed["elastic"] = {**distributed["elastic"], "desiredNodes": nodes}
    new_spec["distributed"] = distributed
    old = spec.desired_nodes
    job.spec = new_spec
    job.request = request_of(new_spec)
    job.generation = F("generation") + 1
    job.save(update_fields=["spec", "request", "generation", "updated_at"])
    job.refresh_from_db()
    job_audit(actor, "job.resize", job, before, snapshot(job, Job.AUDIT_FIELDS))
    JobEvent.objects.create(job=job, reason="ResizeRequested", message=f"{old} -> {nodes} nodes by {actor.label}")
    nudge(RECONCILE)
    return job


@transaction.atomic
def job_delete(*, actor: Principal, job: Job) -> None:
    """Delete the job and its history; the reconciler removes its cluster objects (PVC included)."""
    job_audit(actor, "job.delete", job, snapshot(job, Job.AUDIT_FIELDS), None)
    api_key_revoke_bound(bound_to=f"job:{job.uid}")
    billing.usage_job_deleted(job=job)  # a run still going ends now and is sealed
    job.delete()
    nudge(RECONCILE)


@transaction.atomic
def job_report_checkpoint(*, principal: Principal, job: Job, step: Any, committed: Any) -> Job:
    """A trainer reports progress or a committed checkpoint (with the job's own token)."""
    if principal.bound_to != f"job:{job.uid}":
        raise PermissionError("this token may only report for the job it was issued to")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValidationError({"step": "must be a non-negative integer"})
    if not isinstance(committed, bool):
        raise ValidationError({"committed": "must be true or false"})
    with tenant_scope(job.tenant_id):
        job = Job.objects.select_for_update().select_related("tenant").get(pk=job.pk)
    if job.last_reported_step is None or step > job.last_reported_step or committed:
        job.last_reported_step = max(step, job.last_reported_step or 0)
    fields = ["last_reported_step", "updated_at"]
    if committed and (job.last_checkpoint_step is None or step > job.last_checkpoint_step):
        job.last_checkpoint_step = step
        job.last_checkpoint_at = timezone.now()
        fields += ["last_checkpoint_step", "last_checkpoint_at"]
        job.save(update_fields=fields)
        job_event(
            job=job, reason="CheckpointCommitted", message=f"step {step} committed by every rank", actor=principal
        )
    else:
        job.save(update_fields=fields)
    return job

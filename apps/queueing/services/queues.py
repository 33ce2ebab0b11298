"""Queues (a tenant's) and cohorts (platform-level): create, update, delete."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import F

from apps.core.audit import snapshot
from apps.core.principal import Principal
from apps.core.scoping import tenant_scope
from apps.tenants.models import Tenant

from ..models import Cohort, Queue
from ._common import _audit, _full_clean, _locked_and_changed, _reject_unknown, _require_platform
from .quotas import _check_weight, check_tenant_ceilings, validate_quotas

QUEUE_FIELDS = ("cohort", "weight", "quotas")
COHORT_FIELDS = ("description",)


# --- queues ----------------------------------------------------------------------------------------------------


@transaction.atomic
def queue_create(
    *,
    actor: Principal,
    tenant: Tenant,
    name: str,
    cohort: Cohort | None = None,
    weight: float = 1.0,
    quotas: list[dict[str, Any]] | None = None,
) -> Queue:
    """Create a queue in `tenant`. Its quota, with the tenant's other queues', must fit the tenant's ceilings."""
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)  # serializes ceiling checks per tenant
    queue = Queue(tenant=tenant, name=name, cohort=cohort, weight=_check_weight(weight), quotas=validate_quotas(quotas))
    _full_clean(queue, exclude=["tenant"])
    check_tenant_ceilings(tenant=tenant, quotas=queue.quotas)
    try:
        with transaction.atomic():
            queue.save()
    except IntegrityError as exc:
        raise ValidationError({"name": f"a queue named {name!r} already exists in tenant {tenant.slug}"}) from exc
    _audit(actor, "queue.create", queue, None, snapshot(queue, Queue.AUDIT_FIELDS))
    return queue


@transaction.atomic
def queue_update(*, actor: Principal, queue: Queue, **changes: Any) -> Queue:
    """Change `cohort`, `weight` or `quotas`; bumps `generation`. The name never changes."""
    _reject_unknown(changes, QUEUE_FIELDS)
    tenant = Tenant.objects.select_for_update().get(pk=queue.tenant_id)
    with tenant_scope(tenant):
        queue = Queue.objects.select_for_update(of=("self",)).select_related("cohort").get(pk=queue.pk)
    queue.tenant = tenant
    before = snapshot(queue, Queue.AUDIT_FIELDS)
    if "weight" in changes:
        queue.weight = _check_weight(changes["weight"])
    if "quotas" in changes:
        queue.quotas = validate_quotas(changes["quotas"])
        check_tenant_ceilings(tenant=tenant, quotas=queue.quotas, exclude_queue_id=queue.pk)
    if "cohort" in changes:
        queue.cohort = changes["cohort"]
    after = snapshot(queue, Queue.AUDIT_FIELDS)
    if after == before:
        return queue
    queue.generation = F("generation") + 1
    queue.save()
    queue.refresh_from_db()
    _audit(actor, "queue.update", queue, before, after)
    return queue


@transaction.atomic
def queue_delete(*, actor: Principal, queue: Queue) -> None:
    """Delete a queue (its workloads are the admission cycle's concern: they stay pending without it)."""
    _audit(actor, "queue.delete", queue, snapshot(queue, Queue.AUDIT_FIELDS), None)
    queue.delete()


# --- cohorts ---------------------------------------------------------------------------------------------------


@transaction.atomic
def cohort_create(*, actor: Principal, name: str, description: str = "") -> Cohort:
    _require_platform(actor, "cohorts")
    cohort = Cohort(name=name, description=description)
    _full_clean(cohort)
    try:
        with transaction.atomic():
            cohort.save()
    except IntegrityError as exc:
        raise ValidationError({"name": f"cohort {name!r} already exists"}) from exc
    _audit(actor, "cohort.create", cohort, None, snapshot(cohort, Cohort.AUDIT_FIELDS))
    return cohort


@transaction.atomic
def cohort_update(*, actor: Principal, cohort: Cohort, **changes: Any) -> Cohort:
    _require_platform(actor, "cohorts")
    _reject_unknown(changes, COHORT_FIELDS)
    cohort, before = _locked_and_changed(Cohort.objects, cohort.pk, Cohort.AUDIT_FIELDS, changes)
    _full_clean(cohort)
    after = snapshot(cohort, Cohort.AUDIT_FIELDS)
    if after != before:
        cohort.save()
        _audit(actor, "cohort.update", cohort, before, after)
    return cohort


@transaction.atomic
def cohort_delete(*, actor: Principal, cohort: Cohort) -> None:
    """Delete a cohort; its queues (of any tenant) keep their own quota and stop borrowing and lending."""
    _require_platform(actor, "cohorts")
    _audit(actor, "cohort.delete", cohort, snapshot(cohort, Cohort.AUDIT_FIELDS), None)
    cohort.delete()

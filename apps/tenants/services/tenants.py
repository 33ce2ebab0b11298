"""A tenant's lifecycle: create, change, archive, and the status its reconciler writes."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from apps.core import liveauth
from apps.core.audit import audit_record, snapshot
from apps.core.periodic import nudge
from apps.core.principal import Principal, system
from apps.core.scoping import tenant_scope

from ..choices import TenantPhase
from ..models import ApiKey, Tenant
from .audit import tenant_audit
from .hooks import access_changed

TENANT_SPEC_FIELDS = (
    "display_name",
    "labels",
    "suspended",
    "max_gpus",
    "gpu_type_ceilings",
    "max_cpu",
    "max_memory",
    "tokens_per_day",
)
RECONCILE = "reconcile-tenants"


@transaction.atomic
def tenant_create(*, actor: Principal, slug: str, **spec: Any) -> Tenant:
    """Create a tenant; its namespace, quota and policies follow through the tenant reconciler.

    Raises:
        ValidationError: a bad field (named), or the slug is taken.
    """
    unknown = sorted(set(spec) - set(TENANT_SPEC_FIELDS))
    if unknown:
        raise ValidationError({name: "unknown field" for name in unknown})
    tenant = Tenant(slug=slug, **spec)
    tenant.full_clean()
    try:
        with transaction.atomic():
            tenant.save()
    except IntegrityError as exc:
        raise ValidationError({"slug": f"tenant {slug!r} already exists"}) from exc
    tenant_audit(actor, "tenant.create", tenant, tenant, None, snapshot(tenant, Tenant.AUDIT_FIELDS))
    nudge(RECONCILE)
    return tenant


@transaction.atomic
def tenant_update(*, actor: Principal, tenant: Tenant, **changes: Any) -> Tenant:
    """Change spec fields; bumps `generation` so the reconciler re-applies."""
    unknown = sorted(set(changes) - set(TENANT_SPEC_FIELDS))
    if unknown:
        raise ValidationError({name: "unknown field" for name in unknown})
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
    before = snapshot(tenant, Tenant.AUDIT_FIELDS)
    for name, value in changes.items():
        setattr(tenant, name, value)
    tenant.full_clean()
    after = snapshot(tenant, Tenant.AUDIT_FIELDS)
    if after == before:
        return tenant
    tenant.generation = F("generation") + 1
    tenant.save()
    tenant.refresh_from_db()
    tenant_audit(actor, "tenant.update", tenant, tenant, before, after)
    nudge(RECONCILE)
    if any(before[f] != after[f] for f in ("suspended", "tokens_per_day")):
        access_changed()
    if after["suspended"] and not before["suspended"]:
        liveauth.credentials_changed(liveauth.tenant_group(tenant.pk))  # its open sockets stop (apps.core.liveauth)
    return tenant


@transaction.atomic
def tenant_archive(*, actor: Principal, tenant: Tenant) -> Tenant:
    """Archive a tenant: its keys stop working, its cluster objects are removed, its rows and history stay.

    Tenants are never hard-deleted: usage, invoices and the audit log keep pointing at them.
    """
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
    if tenant.is_archived:
        return tenant
    before = snapshot(tenant, Tenant.AUDIT_FIELDS)
    now = timezone.now()
    tenant.archived_at = now
    tenant.suspended = True
    tenant.generation = F("generation") + 1
    tenant.save()
    tenant.refresh_from_db()
    with tenant_scope(tenant):
        ApiKey.objects.filter(revoked_at__isnull=True).update(revoked_at=now)
    tenant_audit(actor, "tenant.archive", tenant, tenant, before, snapshot(tenant, Tenant.AUDIT_FIELDS))
    nudge(RECONCILE)
    access_changed()
    liveauth.credentials_changed(liveauth.tenant_group(tenant.pk))
    return tenant


def tenant_set_status(*, tenant_id: int, generation: int, phase: str, message: str, applied: dict[str, str]) -> bool:
    """Compare-and-swap status write by the reconciler: applies only if the spec did not change meanwhile."""
    return bool(
        Tenant.objects.filter(pk=tenant_id, generation=generation).update(
            observed_generation=generation,
            status_phase=phase,
            status_message=message[:2000],
            status_applied=applied,
            status_reconciled_at=timezone.now(),
        )
    )


def tenant_record_reconcile_error(*, tenant: Tenant, message: str) -> None:
    """Put a cluster error in the tenant's status, and in the audit log when it is a new error."""
    with transaction.atomic():
        changed = Tenant.objects.filter(pk=tenant.pk).exclude(status_message=message[:2000], status_phase="Error")
        if changed.update(
            status_phase=TenantPhase.ERROR, status_message=message[:2000], status_reconciled_at=timezone.now()
        ):
            audit_record(
                actor=system("tenant-reconciler"),
                action="tenant.reconcile_error",
                obj=tenant,
                object_type="tenant",
                object_id=tenant.slug,
                tenant_id=tenant.pk,
                tenant_slug=tenant.slug,
                before=None,
                after={"status_phase": "Error", "status_message": message[:2000]},
            )

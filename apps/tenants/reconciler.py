"""The tenant reconciler: each live tenant gets its namespace and policies; archived ones lose them."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from apps.cluster.services import (
    LIMIT_RANGE,
    MANAGED_BY,
    MANAGER,
    NAMESPACE,
    NETWORK_POLICY,
    RESOURCE_QUOTA,
    ROLE_BINDING,
    ClusterBackend,
    get_backend,
)
from apps.core.reconcile import OwnerReconciler, ReconcileStats

from . import manifests, services
from .choices import TenantPhase
from .models import Membership, Tenant


class TenantReconciler(OwnerReconciler[Tenant]):
    kind = "tenant"
    managed_kinds = (NAMESPACE, RESOURCE_QUOTA, LIMIT_RANGE, NETWORK_POLICY, ROLE_BINDING)
    label_selector = f"{MANAGED_BY}={MANAGER},{manifests.COMPONENT}=tenant"
    delete_order = ("RoleBinding", "NetworkPolicy", "LimitRange", "ResourceQuota", "Namespace")
    namespace_pass = None  # it makes the namespaces: each tenant's Namespace is applied before what goes in it

    def owners(self):
        return Tenant.objects.filter(archived_at__isnull=True).order_by("pk").iterator(chunk_size=2000)

    def owner_key(self, owner: Tenant) -> str:
        return owner.slug

    def owner_key_of(self, obj: dict[str, Any]) -> str | None:
        return ((obj.get("metadata") or {}).get("labels") or {}).get(manifests.TENANT_LABEL)

    def desired(self, owner: Tenant, live: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        members = Membership.all_tenants.filter(tenant=owner).order_by("pk")
        return manifests.tenant_manifests(owner, members)

    def generation(self, owner: Tenant) -> tuple[int, int]:
        return owner.generation, owner.observed_generation

    def applied(self, owner: Tenant) -> dict[str, str]:
        return owner.status_applied or {}

    def write_status(self, owner: Tenant, *, generation: int, applied: dict[str, str]) -> None:
        services.tenant_set_status(
            tenant_id=owner.pk,
            generation=generation,
            phase=TenantPhase.READY,
            message=f"applied {len(applied)} objects to namespace {owner.namespace}",
            applied=applied,
        )

    def record_error(self, owner: Tenant, message: str) -> None:
        services.tenant_record_reconcile_error(tenant=owner, message=message)


def reconcile_tenants(backend: ClusterBackend | None = None) -> ReconcileStats:
    """One bounded pass (the periodic entry point for the ticker and Celery beat)."""
    reconciler = TenantReconciler(
        backend or get_backend(),
        max_per_pass=settings.GRYVIA_RECONCILE_MAX_PER_PASS,
        budget_s=settings.GRYVIA_RECONCILE_BUDGET_S,
    )
    stats = reconciler.run_pass()
    if not stats.skipped and not stats.errors:
        _mark_archived()
    return stats


def _mark_archived() -> None:
    """After a clean pass every archived tenant's objects are gone (orphans are collected): say so."""
    pending = list(
        Tenant.objects.filter(archived_at__isnull=False)
        .exclude(status_phase=TenantPhase.ARCHIVED)
        .values_list("pk", flat=True)
    )
    if pending:
        Tenant.objects.filter(pk__in=pending).update(
            status_phase=TenantPhase.ARCHIVED, status_message="archived: cluster objects removed", status_applied={}
        )

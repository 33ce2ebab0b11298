"""Read access to inference services and model aliases: a principal sees its own tenants' and the shared ones.

Names are unique within a tenant and among shared objects, so a tenant's service may have the name of a shared
one. A name then resolves as routing does: in a request that acts in one tenant, that tenant's object first, then
the shared one; with no tenant named (platform staff, or a user of several tenants), the shared object first, then
the one tenant object of that name.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db.models import F, Q, QuerySet

from apps.core.principal import Principal
from apps.core.scoping import ALL_TENANTS, Scope

from .models import InferenceService, ModelAlias

MODELS_READ = "models:read"


def _visible(queryset: QuerySet, principal: Principal, tenants: Scope | None) -> QuerySet:
    tenants = principal.tenants_with(MODELS_READ) if tenants is None else tenants
    queryset = queryset.select_related("tenant")
    if tenants is ALL_TENANTS:
        return queryset
    if not tenants:
        return queryset.none()
    return queryset.filter(Q(tenant_id__in=tenants) | Q(tenant__isnull=True))


def inference_services_visible(*, principal: Principal, tenants: Scope | None = None) -> QuerySet[InferenceService]:
    """The services of the tenants in which `principal` holds `models:read` (or of `tenants`, a narrower set the
    request chose), and the shared ones. Platform staff see every service."""
    return _visible(InferenceService.objects.all(), principal, tenants)


def model_aliases_visible(*, principal: Principal, tenants: Scope | None = None) -> QuerySet[ModelAlias]:
    """Model aliases, visible as `inference_services_visible` says."""
    return _visible(ModelAlias.objects.all(), principal, tenants)


def resolve_name(queryset: QuerySet, *, name: str, tenant_id: int | None):
    """The object named `name` in `queryset` (see the module docstring), or None.

    Raises:
        ValidationError: no tenant was named and several tenants have an object of that name.
    """
    matches = queryset.filter(name=name)
    if tenant_id is not None:
        own_first = F("tenant_id").asc(nulls_last=True)
        return matches.filter(Q(tenant_id=tenant_id) | Q(tenant__isnull=True)).order_by(own_first).first()
    rows = list(matches.order_by(F("tenant_id").asc(nulls_first=True))[:2])
    if not rows:
        return None
    if rows[0].tenant_id is None or len(rows) == 1:
        return rows[0]
    raise ValidationError(
        {"tenant": [f"several tenants have one named {name!r}: name the tenant with X-Gryvia-Tenant"]}
    )


def inference_service_get_visible(
    *, principal: Principal, name: str, tenants: Scope | None = None, tenant_id: int | None = None
) -> InferenceService | None:
    """The service `name` as `principal` sees it (in `tenant_id` first, when the request acts in one tenant)."""
    return resolve_name(
        inference_services_visible(principal=principal, tenants=tenants), name=name, tenant_id=tenant_id
    )


def model_alias_get_visible(
    *, principal: Principal, name: str, tenants: Scope | None = None, tenant_id: int | None = None
) -> ModelAlias | None:
    return resolve_name(model_aliases_visible(principal=principal, tenants=tenants), name=name, tenant_id=tenant_id)

"""Read access to tenants, memberships and keys."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from django.db.models import QuerySet
from django.utils import timezone

from apps.core.principal import Principal
from apps.core.scoping import ALL_TENANTS

from .models import ApiKey, Membership, Tenant

__all__ = [
    "api_key_get_of_tenant",
    "api_key_next_expiry",
    "api_key_visible",
    "api_keys_of_tenant",
    "memberships_of_user",
    "tenant_get_by_id",
    "tenant_get_visible",
    "tenant_list_visible",
    "tenants_suspended",
]


def tenant_list_visible(*, principal: Principal, include_archived: bool = False) -> QuerySet[Tenant]:
    """The tenants this principal may see (every tenant for platform staff)."""
    qs = Tenant.objects.all()
    if not include_archived:
        qs = qs.filter(archived_at__isnull=True)
    visible = principal.tenants_with(None)
    if visible is ALL_TENANTS:
        return qs.order_by("slug")
    return qs.filter(pk__in=visible).order_by("slug")


def tenant_get_visible(*, principal: Principal, slug: str) -> Tenant | None:
    """The tenant `slug` if `principal` may see it (archived ones: platform staff only), else None."""
    return tenant_list_visible(principal=principal, include_archived=principal.is_platform).filter(slug=slug).first()


def tenant_get_by_id(*, tenant_id: int) -> Tenant:
    """The tenant with this id (Tenant.DoesNotExist if none)."""
    return Tenant.objects.get(pk=tenant_id)


def memberships_of_user(*, user_id: int) -> QuerySet[Membership]:
    """The user's memberships in tenants that are not archived."""
    return Membership.all_tenants.filter(user_id=user_id, tenant__archived_at__isnull=True)


def api_key_visible(*, principal: Principal, object_id: str) -> list[int]:
    """The tenant in which `principal` may watch the API key `object_id` (websocket subscriptions; empty: none)."""
    tenants = principal.tenants_with("keys:read")
    qs = ApiKey.all_tenants.filter(key_id=object_id)
    if tenants is not ALL_TENANTS:
        qs = qs.filter(tenant_id__in=tenants)
    return sorted(set(qs.values_list("tenant_id", flat=True)))


def api_keys_of_tenant(*, principal: Principal, tenant_id: int) -> QuerySet[ApiKey]:
    """The tenant's user-managed keys (not those bound to a job), newest first, as `GET /api/v1/keys/` lists them;
    none unless `principal` holds keys:read there."""
    if not principal.has_scope("keys:read", tenant_id):
        return ApiKey.all_tenants.none()
    return ApiKey.all_tenants.filter(tenant_id=tenant_id, bound_to="").order_by("-created_at", "-id")


def api_key_get_of_tenant(*, principal: Principal, tenant_id: int, key_id: str) -> ApiKey | None:
    """One key of the tenant by its id (None: no such key there, or no keys:read: the API's 404)."""
    return (
        api_keys_of_tenant(principal=principal, tenant_id=tenant_id)
        .select_related("tenant")
        .filter(key_id=key_id)
        .first()
    )


def api_key_next_expiry(*, key_pk: int) -> dt.datetime | None:
    """The next moment this key, or the secret it had before a rotation, stops authenticating by itself (None: none
    ahead): when an open websocket checks its key again (apps.core.liveauth)."""
    row = ApiKey.all_tenants.filter(pk=key_pk).values("expires_at", "previous_valid_until").first() or {}
    now = timezone.now()
    ahead = [moment for moment in row.values() if moment is not None and moment > now]
    return min(ahead, default=None)


def tenants_suspended(*, tenant_ids: Iterable[int]) -> frozenset[int]:
    """Those of `tenant_ids` that are suspended (live views stop serving them, apps.core.liveauth)."""
    return frozenset(Tenant.objects.filter(pk__in=list(tenant_ids), suspended=True).values_list("pk", flat=True))

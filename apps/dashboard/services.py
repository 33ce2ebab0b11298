"""The tenant a dashboard session works in: chosen among the tenants the user may see, kept in the session."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from apps.core.principal import Principal
from apps.tenants.models import Tenant
from apps.tenants.selectors import tenant_get_visible, tenant_list_visible

__all__ = ["SESSION_KEY", "TenantNotVisible", "session_tenant", "session_tenant_switch", "tenants_switchable"]

SESSION_KEY = "dashboard_tenant"


class TenantNotVisible(LookupError):
    """The user is not a member of that tenant (and not staff): the switch is refused."""


def tenants_switchable(*, principal: Principal) -> QuerySet[Tenant]:
    """The tenants the header's switcher offers: the user's memberships (not archived); every tenant for staff."""
    return tenant_list_visible(principal=principal)


def session_tenant(*, session: Any, principal: Principal) -> Tenant | None:
    """The session's tenant if the user may still see it, else their first visible tenant (remembered); None when
    they have none (the "no tenant yet" page)."""
    slug = session.get(SESSION_KEY)
    if slug:
        tenant = tenant_get_visible(principal=principal, slug=slug)
        if tenant is not None and tenant.archived_at is None:
            return tenant
    tenant = tenants_switchable(principal=principal).first()
    if tenant is None:
        session.pop(SESSION_KEY, None)
        return None
    session[SESSION_KEY] = tenant.slug
    return tenant


def session_tenant_switch(*, session: Any, principal: Principal, slug: str) -> Tenant:
    """Make `slug` the session's tenant. TenantNotVisible when the user may not see it (the API would 404)."""
    tenant = tenant_get_visible(principal=principal, slug=slug)
    if tenant is None or tenant.archived_at is not None:
        raise TenantNotVisible(f"tenant {slug!r} not found among yours")
    session[SESSION_KEY] = tenant.slug
    return tenant

"""Access checks: a credential is required, it must hold the scope the action needs, in the object's tenant."""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions, permissions
from rest_framework.request import Request

from apps.core.principal import Principal


def principal_of(request: Request) -> Principal | None:
    auth = getattr(request, "auth", None)
    return auth if isinstance(auth, Principal) else None


class ScopedAccess(permissions.BasePermission):
    """Requires a principal holding `view.required_scope()` in at least one tenant (or the object's tenant).

    Writes in a suspended tenant are refused, except by platform staff.
    """

    def has_permission(self, request: Request, view: Any) -> bool:
        principal = principal_of(request)
        if principal is None:
            raise exceptions.NotAuthenticated()
        needed = view.required_scope() if hasattr(view, "required_scope") else None
        if hasattr(view, "visible_tenants") and not view.visible_tenants(needed):
            raise exceptions.PermissionDenied(f"this credential lacks the scope {needed!r}")
        return True

    def has_object_permission(self, request: Request, view: Any, obj: Any) -> bool:
        principal = principal_of(request)
        if principal is None:
            raise exceptions.NotAuthenticated()
        tenant_id = view.tenant_id_of(obj) if hasattr(view, "tenant_id_of") else getattr(obj, "tenant_id", None)
        needed = view.required_scope() if hasattr(view, "required_scope") else None
        if not principal.has_scope(needed, tenant_id):
            raise exceptions.PermissionDenied(f"this credential lacks the scope {needed!r} in this tenant")
        if request.method not in permissions.SAFE_METHODS and not principal.is_platform:
            tenant = view.tenant_of(obj) if hasattr(view, "tenant_of") else getattr(obj, "tenant", None)
            if tenant is not None and tenant.suspended:
                raise exceptions.PermissionDenied(f"tenant {tenant.slug!r} is suspended: only reads are allowed")
        return True

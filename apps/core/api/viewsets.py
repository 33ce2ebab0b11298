"""`TenantScopedViewSet`: the base of every tenant-owned endpoint. It cannot drop the tenant filter.

The request's tenant scope comes from its credential only: the tenants in which it holds the scope the action
needs. `X-Gryvia-Tenant: <slug>` narrows it to one tenant (a tenant the credential cannot see answers 404).
Subclasses may shape the queryset with `scope_queryset()` but may not override `get_queryset`/`get_object`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import models
from rest_framework import exceptions, mixins, viewsets
from rest_framework.permissions import SAFE_METHODS
from rest_framework.request import Request

from apps.core.identity import provider
from apps.core.principal import Principal
from apps.core.scoping import ALL_TENANTS, Scope, filter_to_scope, reset_scope, set_scope

TENANT_HEADER = "HTTP_X_GRYVIA_TENANT"


class ScopedViewMixin:
    """Resolves the principal, the visible tenants and the one target tenant of a request."""

    scope_family: ClassVar[str | None] = None
    action_scopes: ClassVar[dict[str, str | None]] = {}

    def required_scope(self) -> str | None:
        action = getattr(self, "action", None)
        if action in self.action_scopes:
            return self.action_scopes[action]
        if self.scope_family is None:
            return None
        verb = "read" if self.request.method in SAFE_METHODS else "write"
        return f"{self.scope_family}:{verb}"

    @property
    def principal(self) -> Principal:
        return self.request.auth

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        # Views read some query parameters as they come (?gpu_type=, ?job=): PostgreSQL refuses a NUL in them (a
        # 500), SQLite matches nothing. Refused here once for every parameter, as the parsers refuse it in bodies.
        nul = sorted(name for name, values in request.query_params.lists() if "\x00" in name + "".join(values))
        if nul:
            raise exceptions.ValidationError({name: ["a NUL character (\\u0000) is not allowed"] for name in nul})

    def selected_tenant(self):
        """The tenant named by X-Gryvia-Tenant, if any (404 when this credential cannot see it)."""
        slug = self.request.META.get(TENANT_HEADER, "").strip()
        if not slug:
            return None
        tenant = provider().tenant_get_visible(principal=self.principal, slug=slug)
        if tenant is None:
            raise exceptions.NotFound(f"tenant {slug!r} not found")
        return tenant

    def visible_tenants(self, scope: str | None) -> Scope:
        tenants = self.principal.tenants_with(scope)
        selected = self.selected_tenant()
        if selected is None:
            return tenants
        if tenants is ALL_TENANTS or selected.pk in tenants:
            return frozenset({selected.pk})
        return frozenset()

    def target_tenant(self):
        """The single tenant a create acts in: the selected one, or the only one the credential can write in."""
        selected = self.selected_tenant()
        scope = self.required_scope()
        if selected is not None:
            if not self.principal.has_scope(scope, selected.pk):
                raise exceptions.PermissionDenied(f"this credential lacks the scope {scope!r} in this tenant")
            tenant = selected
        else:
            tenants = self.principal.tenants_with(scope)
            if tenants is ALL_TENANTS or len(tenants) != 1:
                raise exceptions.ValidationError(
                    {"tenant": ["this credential can act in several tenants: name one with X-Gryvia-Tenant"]}
                )
            tenant = provider().tenant_get_by_id(tenant_id=next(iter(tenants)))
        if tenant.suspended and not self.principal.is_platform:
            raise exceptions.PermissionDenied(f"tenant {tenant.slug!r} is suspended: only reads are allowed")
        return tenant


class TenantScopedViewSet(ScopedViewMixin, viewsets.GenericViewSet):
    """Base viewset for tenant-owned models (`model.objects` is a TenantScopedManager)."""

    model: ClassVar[type[models.Model]]
    ordering: ClassVar[tuple[str, ...]] = ("-created_at", "-id")
    _PROTECTED = ("get_queryset", "get_object", "dispatch")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in cls._PROTECTED:
            if name in cls.__dict__:
                raise TypeError(f"{cls.__name__} may not override {name}(); use scope_queryset() instead")

    def scope_queryset(self, queryset: models.QuerySet) -> models.QuerySet:
        """Hook for select_related/annotations. The tenant filter is applied again afterwards."""
        return queryset

    def dispatch(self, request: Request, *args: Any, **kwargs: Any):
        self._scope_token = None
        try:
            return super().dispatch(request, *args, **kwargs)
        finally:
            if self._scope_token is not None:
                reset_scope(self._scope_token)

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        # Authentication and permission checks passed: enter the tenants this request may see.
        self._scope_token = set_scope(self.visible_tenants(self.read_scope()))

    def read_scope(self) -> str | None:
        """Objects are visible with the family's read scope; writes are then checked per object (403)."""
        needed = self.required_scope()
        if needed and needed.endswith(":write"):
            return needed.removesuffix(":write") + ":read"
        return needed

    def get_queryset(self) -> models.QuerySet:
        if getattr(self, "swagger_fake_view", False):  # schema generation: no request, no tenant
            return self.model.all_tenants.none()
        base = self.scope_queryset(self.model.objects.all())
        return filter_to_scope(base).order_by(*self.ordering)

    def get_object(self) -> models.Model:
        return super().get_object()

    def tenant_of(self, obj: models.Model):
        return obj.tenant


class ReadOnlyTenantScopedViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    pass

"""REST: /api/v1/inference-services/ and /api/v1/model-aliases/, addressed by name.

A list shows the services (aliases) of the caller's tenant(s) and the shared ones (`shared: true`); reading needs
`models:read`, writing `models:write` in the object's tenant; shared objects are written by platform admins only.
Another tenant's object is a 404. See apps.llm.selectors for how a name resolves when a tenant's object and a
shared one have the same name.
"""

from __future__ import annotations

from typing import Any, ClassVar

from rest_framework import exceptions, mixins, viewsets
from rest_framework.permissions import SAFE_METHODS
from rest_framework.request import Request

from apps.core import scopes as S
from apps.core.api.errors import service_errors
from apps.core.api.viewsets import ScopedViewMixin
from apps.core.scoping import ALL_TENANTS

from .. import selectors, services
from ..models import InferenceService, ModelAlias
from .filters import InferenceServiceFilterSet, ModelAliasFilterSet
from .serializers import InferenceServiceSerializer, ModelAliasSerializer

_METHODS = ["get", "post", "patch", "delete", "head", "options"]


class _SharedOrTenantViewSet(
    ScopedViewMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """Objects owned by one tenant or shared by the platform (tenant null)."""

    scope_family = "models"
    lookup_field = "name"
    http_method_names = _METHODS
    model: ClassVar[type[InferenceService] | type[ModelAlias]]
    kind: ClassVar[str]  # "inference service"
    # (the visible selector, create, update, delete, the update/delete services' keyword for the object)
    calls: ClassVar[tuple[Any, Any, Any, Any, str]]

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation: no request
            return self.model.objects.none()
        visible = self.calls[0]
        tenants = self.visible_tenants(selectors.MODELS_READ)
        return visible(principal=self.principal, tenants=tenants).order_by(*self.ordering)

    def _acting_tenant_id(self) -> int | None:
        """The one tenant this request acts in (X-Gryvia-Tenant, or the credential's only tenant), if any."""
        selected = self.selected_tenant()
        if selected is not None:
            return selected.pk
        tenants = self.principal.tenants_with(selectors.MODELS_READ)
        if tenants is not ALL_TENANTS and len(tenants) == 1:
            return next(iter(tenants))
        return None

    def get_object(self):
        name = self.kwargs[self.lookup_url_kwarg or self.lookup_field]
        queryset = self.filter_queryset(self.get_queryset())
        with service_errors():
            obj = selectors.resolve_name(queryset, name=name, tenant_id=self._acting_tenant_id())
        if obj is None:
            raise exceptions.NotFound(f"{self.kind} {name!r} not found")
        self.check_object_permissions(self.request, obj)
        return obj

    def _platform_only(self) -> None:
        if not (self.principal.is_platform and S.ADMIN in self.principal.platform_scopes):
            raise exceptions.PermissionDenied(f"only platform staff can create, change or delete shared {self.kind}s")

    def check_object_permissions(self, request: Request, obj) -> None:
        if obj.tenant_id is None:  # shared: every credential with models:read reads it (checked on the way in)
            if request.method not in SAFE_METHODS:
                self._platform_only()
            return
        super().check_object_permissions(request, obj)

    def perform_create(self, serializer) -> None:
        data = dict(serializer.validated_data)
        if data.pop("shared", False):
            self._platform_only()
            tenant = None
        else:
            tenant = self.target_tenant()
        with service_errors():
            serializer.instance = self.calls[1](actor=self.principal, tenant=tenant, **data)

    def perform_update(self, serializer) -> None:
        with service_errors():
            serializer.instance = self.calls[2](
                actor=self.principal, **{self.calls[4]: serializer.instance}, **serializer.validated_data
            )

    def perform_destroy(self, instance) -> None:
        with service_errors():
            self.calls[3](actor=self.principal, **{self.calls[4]: instance})


class InferenceServiceViewSet(_SharedOrTenantViewSet):
    """Inference services: the caller's tenant's and the shared ones. The upstream credential is write-only."""

    model = InferenceService
    kind = "inference service"
    serializer_class = InferenceServiceSerializer
    filterset_class = InferenceServiceFilterSet
    lookup_value_regex = "[a-z0-9-]{1,63}"
    ordering = ("model_name", "name", "id")
    calls = (
        selectors.inference_services_visible,
        services.inference_service_create,
        services.inference_service_update,
        services.inference_service_delete,
        "service",
    )


class ModelAliasViewSet(_SharedOrTenantViewSet):
    """Model aliases: a model name standing for others, tried in order."""

    model = ModelAlias
    kind = "model alias"
    serializer_class = ModelAliasSerializer
    filterset_class = ModelAliasFilterSet
    lookup_value_regex = "[A-Za-z0-9][A-Za-z0-9._:/-]{0,99}"
    ordering = ("name", "id")
    calls = (
        selectors.model_aliases_visible,
        services.model_alias_create,
        services.model_alias_update,
        services.model_alias_delete,
        "alias",
    )

"""REST endpoints: /api/v1/tenants/, /api/v1/tenants/{slug}/members/, /api/v1/api-keys/."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from apps.core.api.errors import service_errors
from apps.core.api.viewsets import ScopedViewMixin, TenantScopedViewSet

from .. import selectors, services
from ..models import ApiKey, Membership, Tenant
from .filters import ApiKeyFilterSet, TenantFilterSet
from .serializers import (
    ApiKeyCreatedSerializer,
    ApiKeyRotateSerializer,
    ApiKeySerializer,
    ApiKeyUpdateSerializer,
    MembershipSerializer,
    TenantSerializer,
)

SELF_PARAMETER = OpenApiParameter(
    "self",
    OpenApiTypes.BOOL,
    description="true: revoke the key even if it is the one making this request (refused with 409 otherwise)",
)


class TenantViewSet(
    ScopedViewMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """Tenants: every credential sees its own; platform staff see and change all (DELETE archives)."""

    serializer_class = TenantSerializer
    filterset_class = TenantFilterSet
    lookup_field = "slug"
    queryset = Tenant.objects.none()  # for schema generation; get_queryset scopes by credential

    def required_scope(self) -> str | None:
        return None if self.request.method in ("GET", "HEAD", "OPTIONS") else "admin"

    def tenant_id_of(self, obj: Tenant) -> int:
        return obj.pk

    def tenant_of(self, obj: Tenant) -> Tenant:
        return obj

    def get_queryset(self):
        return selectors.tenant_list_visible(principal=self.principal, include_archived=self.principal.is_platform)

    def _platform_only(self) -> None:
        if not (self.principal.is_platform and "admin" in self.principal.platform_scopes):
            raise exceptions.PermissionDenied("only platform staff can create, change or archive tenants")

    def perform_create(self, serializer: TenantSerializer) -> None:
        self._platform_only()
        with service_errors():
            serializer.instance = services.tenant_create(actor=self.principal, **serializer.validated_data)

    def perform_update(self, serializer: TenantSerializer) -> None:
        self._platform_only()
        with service_errors():
            serializer.instance = services.tenant_update(
                actor=self.principal, tenant=serializer.instance, **serializer.validated_data
            )

    def perform_destroy(self, instance: Tenant) -> None:
        self._platform_only()
        services.tenant_archive(actor=self.principal, tenant=instance)


class MembershipViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    TenantScopedViewSet,
):
    """Members of one tenant. Reading needs any access to the tenant; changes need `admin`."""

    model = Membership
    serializer_class = MembershipSerializer
    lookup_field = "user__username"
    lookup_url_kwarg = "username"
    lookup_value_regex = r"[\w.@+-]+"
    ordering = ("user__username",)

    def required_scope(self) -> str | None:
        return None if self.request.method in ("GET", "HEAD", "OPTIONS") else "admin"

    def selected_tenant(self):
        tenant = selectors.tenant_get_visible(principal=self.principal, slug=self.kwargs.get("tenant_slug", ""))
        if tenant is None:
            raise exceptions.NotFound(f"tenant {self.kwargs.get('tenant_slug')!r} not found")
        return tenant

    def scope_queryset(self, queryset):
        return queryset.select_related("user", "tenant").filter(tenant__slug=self.kwargs.get("tenant_slug"))

    def perform_create(self, serializer: MembershipSerializer) -> None:
        data = serializer.validated_data
        with service_errors():
            serializer.instance = services.membership_add(
                actor=self.principal,
                tenant=self.target_tenant(),
                user=data["user"],
                role=data.get("role", "member"),
                cluster_identity=data.get("cluster_identity", ""),
            )

    def perform_update(self, serializer: MembershipSerializer) -> None:
        with service_errors():
            serializer.instance = services.membership_update(
                actor=self.principal, membership=serializer.instance, **serializer.validated_data
            )

    def perform_destroy(self, instance: Membership) -> None:
        with service_errors():
            services.membership_remove(actor=self.principal, membership=instance)


class ApiKeyViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    TenantScopedViewSet,
):
    """API keys of the caller's tenant(s). The plaintext is in the create and rotate responses only.

    DELETE revokes the key (the row stays for the audit trail).
    """

    model = ApiKey
    serializer_class = ApiKeySerializer
    filterset_class = ApiKeyFilterSet
    scope_family = "keys"
    lookup_field = "key_id"
    lookup_url_kwarg = "id"
    lookup_value_regex = "[A-Za-z0-9]{8,16}"

    def scope_queryset(self, queryset):
        return queryset.select_related("tenant").filter(bound_to="")

    @extend_schema(responses={201: ApiKeyCreatedSerializer})
    def create(self, request: Request, *args, **kwargs) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        with service_errors():
            key, plaintext = services.api_key_create(
                actor=self.principal,
                tenant=self.target_tenant(),
                scopes=data["scopes"],
                name=data.get("name", ""),
                is_platform=data.get("is_platform", False),
                expires_at=data.get("expires_at"),
                allowed_models=data.get("allowed_models"),
                requests_per_minute=data.get("requests_per_minute"),
                tokens_per_minute=data.get("tokens_per_minute"),
                tokens_per_day=data.get("tokens_per_day"),
            )
        key.key = plaintext
        return Response(ApiKeyCreatedSerializer(key).data, status=status.HTTP_201_CREATED)

    def get_serializer_class(self):
        return ApiKeyUpdateSerializer if self.action in ("update", "partial_update") else ApiKeySerializer

    def perform_update(self, serializer) -> None:
        with service_errors():
            serializer.instance = services.api_key_update(
                actor=self.principal, key=serializer.instance, **serializer.validated_data
            )

    def _revoke(self, key: ApiKey) -> ApiKey:
        # `?self=true`: the caller knows it revokes the key it is using (refused otherwise, 409).
        allow_self = self.request.query_params.get("self", "").lower() in ("true", "1")
        with service_errors():
            return services.api_key_revoke(actor=self.principal, key=key, allow_self=allow_self)

    @extend_schema(parameters=[SELF_PARAMETER])
    def destroy(self, request: Request, *args, **kwargs) -> Response:
        return super().destroy(request, *args, **kwargs)

    def perform_destroy(self, instance: ApiKey) -> None:
        self._revoke(instance)

    @extend_schema(request=None, responses={200: ApiKeySerializer}, parameters=[SELF_PARAMETER])
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, *args, **kwargs) -> Response:
        return Response(ApiKeySerializer(self._revoke(self.get_object())).data)

    @extend_schema(request=ApiKeyRotateSerializer, responses={200: ApiKeyCreatedSerializer})
    @action(detail=True, methods=["post"])
    def rotate(self, request: Request, *args, **kwargs) -> Response:
        key = self.get_object()
        body = ApiKeyRotateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        with service_errors():
            key, plaintext = services.api_key_rotate(
                actor=self.principal, key=key, grace_seconds=body.validated_data["grace_seconds"]
            )
        key.key = plaintext
        return Response(ApiKeyCreatedSerializer(key).data)

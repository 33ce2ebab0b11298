"""REST: /api/v1/queues/, /api/v1/reservations/ (tenant-owned), /api/v1/cohorts/, /api/v1/priority-classes/."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, mixins, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from apps.core.api.errors import service_errors
from apps.core.api.viewsets import ScopedViewMixin, TenantScopedViewSet

from .. import services
from ..models import Cohort, PriorityClass, Queue, Reservation
from .filters import CohortFilterSet, PriorityClassFilterSet, QueueFilterSet, ReservationFilterSet
from .serializers import CohortSerializer, PriorityClassSerializer, QueueSerializer, ReservationSerializer

_NAME = "[a-z0-9-]{1,63}"
_METHODS = ["get", "post", "patch", "delete", "head", "options"]


class _PlatformOnlyWrites:
    def _platform_only(self) -> None:
        if not (self.principal.is_platform and "admin" in self.principal.platform_scopes):
            raise exceptions.PermissionDenied(f"only platform staff can create, change or delete {self.plural}")


class QueueViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    TenantScopedViewSet,
):
    """Queues of the caller's tenant(s), addressed by name. Their quota together stays within the tenant's ceilings."""

    model = Queue
    serializer_class = QueueSerializer
    filterset_class = QueueFilterSet
    scope_family = "queues"
    lookup_field = "name"
    lookup_value_regex = _NAME
    http_method_names = _METHODS
    ordering = ("name", "id")

    def scope_queryset(self, queryset):
        return queryset.select_related("tenant", "cohort")

    def perform_create(self, serializer: QueueSerializer) -> None:
        data = serializer.validated_data
        with service_errors():
            serializer.instance = services.queue_create(
                actor=self.principal,
                tenant=self.target_tenant(),
                name=data["name"],
                cohort=data.get("cohort"),
                weight=data.get("weight", 1.0),
                quotas=data.get("quotas"),
            )

    def perform_update(self, serializer: QueueSerializer) -> None:
        with service_errors():
            serializer.instance = services.queue_update(
                actor=self.principal, queue=serializer.instance, **serializer.validated_data
            )

    def perform_destroy(self, instance: Queue) -> None:
        with service_errors():
            services.queue_delete(actor=self.principal, queue=instance)


class ReservationViewSet(
    _PlatformOnlyWrites,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    TenantScopedViewSet,
):
    """GPU reservations of the caller's tenant(s): readable with `queues:read`; set by platform staff only
    (a platform credential names the tenant with X-Gryvia-Tenant)."""

    model = Reservation
    serializer_class = ReservationSerializer
    filterset_class = ReservationFilterSet
    scope_family = "queues"
    lookup_field = "id"
    lookup_value_regex = "[0-9]+"
    http_method_names = _METHODS
    ordering = ("start_at", "id")
    plural = "reservations"

    def scope_queryset(self, queryset):
        return queryset.select_related("tenant")

    def check_object_permissions(self, request: Request, obj: Reservation) -> None:
        super().check_object_permissions(request, obj)  # another tenant's reservation is a 404 before this
        if request.method not in ("GET", "HEAD", "OPTIONS"):
            self._platform_only()  # before the body is validated

    @extend_schema(responses={201: ReservationSerializer})
    def create(self, request: Request, *args, **kwargs) -> Response:
        self._platform_only()  # before the body: a tenant learns nothing from validation errors
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        with service_errors():
            reservation = services.reservation_create(
                actor=self.principal, tenant=self.target_tenant(), **serializer.validated_data
            )
        return Response(ReservationSerializer(reservation).data, status=status.HTTP_201_CREATED)

    def perform_update(self, serializer: ReservationSerializer) -> None:
        self._platform_only()
        with service_errors():
            serializer.instance = services.reservation_update(
                actor=self.principal, reservation=serializer.instance, **serializer.validated_data
            )

    def perform_destroy(self, instance: Reservation) -> None:
        self._platform_only()
        with service_errors():
            services.reservation_delete(actor=self.principal, reservation=instance)


class _PlatformObjectViewSet(
    _PlatformOnlyWrites,
    ScopedViewMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """Platform-level objects: any credential reads them; only platform staff with `admin` change them."""

    lookup_field = "name"
    lookup_value_regex = _NAME
    http_method_names = _METHODS

    def required_scope(self) -> str | None:
        return None if self.request.method in ("GET", "HEAD", "OPTIONS") else "admin"

    def initial(self, request: Request, *args, **kwargs) -> None:
        super().initial(request, *args, **kwargs)
        if request.method not in ("GET", "HEAD", "OPTIONS"):
            self._platform_only()  # 403 before the body is read, and before a 404 for an unknown name

    def check_object_permissions(self, request: Request, obj) -> None:
        """These objects belong to no tenant: access was decided in `initial` (any credential reads)."""

    # (create, update, delete, the services' keyword for the object): each write goes through one service call.
    writes: tuple[Any, Any, Any, str]

    def perform_create(self, serializer) -> None:
        create, _update, _delete, _arg = self.writes
        with service_errors():
            serializer.instance = create(actor=self.principal, **serializer.validated_data)

    def perform_update(self, serializer) -> None:
        _create, update, _delete, arg = self.writes
        with service_errors():
            serializer.instance = update(
                actor=self.principal, **{arg: serializer.instance}, **serializer.validated_data
            )

    def perform_destroy(self, instance) -> None:
        _create, _update, delete, arg = self.writes
        with service_errors():
            delete(actor=self.principal, **{arg: instance})


class CohortViewSet(_PlatformObjectViewSet):
    """Cohorts: groups of queues that lend each other idle quota."""

    queryset = Cohort.objects.all()
    serializer_class = CohortSerializer
    filterset_class = CohortFilterSet
    plural = "cohorts"
    writes = (services.cohort_create, services.cohort_update, services.cohort_delete, "cohort")


class PriorityClassViewSet(_PlatformObjectViewSet):
    """Priority classes: admission order and preemption between workloads; at most one is the default."""

    queryset = PriorityClass.objects.all()
    serializer_class = PriorityClassSerializer
    filterset_class = PriorityClassFilterSet
    plural = "priority classes"
    writes = (
        services.priority_class_create,
        services.priority_class_update,
        services.priority_class_delete,
        "priority_class",
    )

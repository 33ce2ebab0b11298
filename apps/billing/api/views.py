"""REST: /api/v1/skus/ (the catalog), /api/v1/usage/ (+ events/, records/), /api/v1/ledger/{tenant}/verify/.

The catalog is read by every credential with `billing:read` and written by platform admins only. Usage and the
ledger are per tenant: a tenant credential sees its own tenant(s), platform staff every tenant; another tenant's
ledger is a 404. Posting usage events needs `billing:write` in the tenant they are for.
"""

from __future__ import annotations

import datetime as dt

from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, mixins, serializers, viewsets
from rest_framework.permissions import SAFE_METHODS
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core.api.errors import service_errors
from apps.core.api.exports import CsvExportMixin
from apps.core.api.fields import InstantField
from apps.core.api.viewsets import ScopedViewMixin
from apps.tenants.selectors import tenant_get_visible

from .. import selectors, services
from ..choices import UsageKind
from ..models import GpuSku
from .serializers import (
    BillingUsageReportSerializer,
    BillingUsageRowSerializer,
    GpuSkuSerializer,
    IngestResultSerializer,
    LedgerVerificationSerializer,
    UsageEventBatchDocSerializer,
    UsageEventBatchSerializer,
    UsageRecordSerializer,
)


class GpuSkuViewSet(
    ScopedViewMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """The GPU SKU catalog, addressed by name. Overlapping windows of one GPU type are refused (400)."""

    scope_family = "billing"
    serializer_class = GpuSkuSerializer
    lookup_field = "name"
    lookup_value_regex = "[a-z0-9.-]{1,63}"
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return GpuSku.objects.none()
        params = self.request.query_params
        at = None
        if params.get("at"):
            at = InstantField().run_validation(params["at"]) if params["at"] != "now" else timezone.now()
        return selectors.skus(gpu_type=params.get("gpu_type"), at=at).order_by("gpu_type", "effective_from", "name")

    def check_object_permissions(self, request: Request, obj) -> None:
        if request.method in SAFE_METHODS:
            return  # platform-level: every credential with billing:read (checked on the way in) reads it
        self._platform_only()

    def _platform_only(self) -> None:
        if not (self.principal.is_platform and "admin" in self.principal.platform_scopes):
            raise exceptions.PermissionDenied("only platform staff with admin can change the SKU catalog")

    def perform_create(self, serializer) -> None:
        self._platform_only()
        with service_errors():
            serializer.instance = services.sku_create(actor=self.principal, **serializer.validated_data)

    def perform_update(self, serializer) -> None:
        with service_errors():
            serializer.instance = services.sku_update(
                actor=self.principal, sku=serializer.instance, **serializer.validated_data
            )

    def perform_destroy(self, instance) -> None:
        with service_errors():
            services.sku_delete(actor=self.principal, sku=instance)


class UsageQuerySerializer(serializers.Serializer):
    start = InstantField(required=False)
    end = InstantField(required=False, end_of_day=True)
    group_by = serializers.CharField(required=False, allow_blank=True, default="day,sku")
    tenant = serializers.CharField(required=False, max_length=63)
    job = serializers.CharField(required=False, max_length=200)
    kind = serializers.ChoiceField(required=False, choices=UsageKind.values)


_PARAMETERS = [
    OpenApiParameter("start", str, description="ISO 8601 date or datetime (UTC). Default: the 1st of end's month"),
    OpenApiParameter("end", str, description="ISO 8601 date (included) or datetime (exclusive). Default: now"),
    OpenApiParameter(
        "group_by", str, description=f"Comma-separated, any of {', '.join(selectors.USAGE_GROUPS)}. Default: day,sku"
    ),
    OpenApiParameter("tenant", str, description="Only this tenant (slug), among those the credential can see"),
    OpenApiParameter("job", str, description="Only this job (name)"),
    OpenApiParameter("kind", str, enum=list(UsageKind.values), description="Only this kind of usage"),
    OpenApiParameter("format", str, enum=["json", "csv"], description="csv: every row, no pagination"),
    OpenApiParameter("limit", int, description="JSON rows per page"),
    OpenApiParameter("offset", int, description="JSON rows to skip"),
]


class UsageView(CsvExportMixin, ScopedViewMixin, APIView):
    """Priced usage (GPU and CPU runs, tokens, external events) of the caller's tenant(s), summed per group."""

    scope_family = "billing"
    http_method_names = ["get", "head", "options"]

    @extend_schema(
        operation_id="usage_retrieve",
        parameters=_PARAMETERS,
        responses={(200, "application/json"): BillingUsageReportSerializer, (200, "text/csv"): OpenApiTypes.STR},
    )
    def get(self, request: Request) -> Response:
        query = UsageQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        params = query.validated_data
        end = params.get("end") or timezone.now()
        first = (end - dt.timedelta(microseconds=1)).date().replace(day=1)
        start = params.get("start") or dt.datetime.combine(first, dt.time(), dt.UTC)
        with service_errors():
            report = selectors.usage_report(
                tenants=self.visible_tenants(self.required_scope()),
                start=start,
                end=end,
                group_by=[name.strip() for name in params["group_by"].split(",") if name.strip()],
                tenant_slug=params.get("tenant"),
                job=params.get("job"),
                kind=params.get("kind"),
            )
        if self.wants_csv(request):
            columns = [*report.group_by, *selectors.USAGE_METRICS]
            return self.csv_response(columns, BillingUsageRowSerializer(report.rows, many=True).data, "usage.csv")
        return Response(BillingUsageReportSerializer(self.report_page(request, report)).data)


class UsageEventsView(ScopedViewMixin, APIView):
    """POST a batch of usage events from an outside meter: idempotent on each event's id; a 200 means stored."""

    scope_family = "billing"
    http_method_names = ["post", "options"]

    @extend_schema(
        operation_id="usage_events_create", request=UsageEventBatchDocSerializer, responses=IngestResultSerializer
    )
    def post(self, request: Request) -> Response:
        body = UsageEventBatchSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        tenant = self.target_tenant()
        with service_errors():
            result = services.usage_events_ingest(tenant=tenant, events=body.validated_data["events"])
        return Response(IngestResultSerializer(result).data)


class UsageRecordViewSet(ScopedViewMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """The usage records themselves (newest first), by uid; another tenant's record is a 404."""

    scope_family = "billing"
    serializer_class = UsageRecordSerializer
    lookup_field = "uid"
    lookup_value_regex = "[0-9a-f-]{36}"

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return selectors.usage_records_visible(tenants=frozenset())
        tenants = self.visible_tenants(self.required_scope())
        queryset = selectors.usage_records_visible(tenants=tenants).order_by("-start", "-id")
        job = self.request.query_params.get("job")
        return queryset.filter(job_name=job) if job else queryset


class LedgerVerifyView(ScopedViewMixin, APIView):
    """Verify a tenant's ledger chain: numbering, links and hashes, every problem with its sequence number."""

    scope_family = "billing"
    http_method_names = ["get", "head", "options"]

    @extend_schema(operation_id="ledger_verify", responses=LedgerVerificationSerializer)
    def get(self, request: Request, tenant: str) -> Response:
        found = tenant_get_visible(principal=self.principal, slug=tenant)
        if found is None or not self.principal.has_scope(self.required_scope(), found.pk):
            raise exceptions.NotFound(f"tenant {tenant!r} not found")
        return Response(LedgerVerificationSerializer(services.ledger_verify(tenant=found).as_dict()).data)

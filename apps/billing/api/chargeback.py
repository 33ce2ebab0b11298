"""REST: /api/v1/cost-centers/ (CRUD, by code, with the tenants charged to each) and /api/v1/chargeback/ (the
report of a period, JSON or CSV).

Both are the platform's: reading needs a platform credential with `billing:read`, changing cost centers one with
`admin`; tenant credentials get 403.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, mixins, viewsets
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core.api.errors import service_errors
from apps.core.api.exports import CsvExportMixin
from apps.core.api.viewsets import ScopedViewMixin

from ..services import chargeback
from .invoice_serializers import ChargebackQuerySerializer, ChargebackReportSerializer, CostCenterSerializer

CSV_COLUMNS = (
    "cost_center",
    "cost_center_name",
    "tenant",
    "invoices",
    "amount",
    "overhead_percent",
    "overhead",
    "total",
    "currency",
)


class _PlatformOnly(ScopedViewMixin):
    scope_family = "billing"

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        if not (self.principal.is_platform and self.principal.has_scope(self.required_scope(), None)):
            raise exceptions.PermissionDenied("cost centers and chargeback are the platform's: platform staff only")


class CostCenterViewSet(
    _PlatformOnly,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """Cost centers, by code. `tenants` lists the tenants charged to each (a tenant is in at most one)."""

    serializer_class = CostCenterSerializer
    lookup_field = "code"
    lookup_value_regex = "[a-z0-9-]{1,63}"
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self):
        return chargeback.cost_centers()

    def perform_create(self, serializer) -> None:
        with service_errors():
            serializer.instance = chargeback.cost_center_create(actor=self.principal, **serializer.validated_data)

    def perform_update(self, serializer) -> None:
        with service_errors():
            serializer.instance = chargeback.cost_center_update(
                actor=self.principal, cost_center=serializer.instance, **serializer.validated_data
            )

    def perform_destroy(self, instance) -> None:
        with service_errors():
            chargeback.cost_center_delete(actor=self.principal, cost_center=instance)


def report_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The report as CSV rows: one per cost center, tenant and currency, then one TOTAL row per currency."""
    rows = [
        {
            "cost_center": row["cost_center"],
            "cost_center_name": row["name"],
            "tenant": charge["tenant"],
            "invoices": " ".join(charge["invoices"]),
            "amount": charge["amount"],
            "overhead_percent": row["overhead_percent"],
            "overhead": charge["overhead"],
            "total": charge["total"],
            "currency": charge["currency"],
        }
        for row in report["rows"]
        for charge in row["tenants"]
    ]
    rows += [
        {"cost_center": "TOTAL", "invoices": t["invoices"], "amount": t["amount"], "overhead": t["overhead"],
         "total": t["total"], "currency": t["currency"]}
        for t in report["totals"]
    ]  # fmt: skip
    return rows


class ChargebackView(CsvExportMixin, _PlatformOnly, APIView):
    """Per cost center: its tenants' invoiced amounts in the period, the platform overhead, and the total."""

    http_method_names = ["get", "head", "options"]

    @extend_schema(
        operation_id="chargeback_retrieve",
        parameters=[
            OpenApiParameter("month", str, description="YYYY-MM (instead of start and end)"),
            OpenApiParameter("start", str, description="ISO 8601 date or datetime (UTC)"),
            OpenApiParameter("end", str, description="ISO 8601 date (included) or datetime (exclusive)"),
            OpenApiParameter(
                "source",
                str,
                enum=list(chargeback.SOURCES),
                description="invoices (default): finalized and paid invoices whose period starts in the window; "
                "estimates: each tenant's estimate of the window",
            ),
            OpenApiParameter("format", str, enum=["json", "csv"]),
        ],
        responses={(200, "application/json"): ChargebackReportSerializer, (200, "text/csv"): OpenApiTypes.STR},
    )
    def get(self, request: Request) -> Response:
        query = ChargebackQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        params = query.validated_data
        with service_errors():
            report = chargeback.chargeback_report(start=params["start"], end=params["end"], source=params["source"])
        data = ChargebackReportSerializer(report).data
        if self.wants_csv(request):
            name = f"chargeback-{params['start']:%Y%m%d}-{params['end'] - dt.timedelta(seconds=1):%Y%m%d}"
            return self.csv_response(CSV_COLUMNS, report_rows(data), f"{name}.csv")
        return Response(data)

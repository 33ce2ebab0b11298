"""REST: /api/v1/invoices/ (list, show, create a draft, delete a draft), their finalize, mark-paid, void, stripe and
printable html actions, and /api/v1/invoices/estimate/ (any period, JSON or CSV).

Reading needs `billing:read` in the invoice's tenant; another tenant's invoice is a 404, and drafts are shown to
platform staff only. Creating, finalizing, marking paid, voiding, sending to Stripe and deleting need a platform
credential with `admin` (403 otherwise). A tenant credential estimates its own tenant; platform staff name one with
`?tenant=`.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, mixins, status
from rest_framework.decorators import action
from rest_framework.renderers import TemplateHTMLRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings

from apps.core.api.errors import service_errors
from apps.core.api.exports import CsvExportMixin, CsvRenderer
from apps.core.api.viewsets import TenantScopedViewSet
from apps.core.scoping import ALL_TENANTS
from apps.tenants.selectors import tenant_get_by_id, tenant_get_visible

from ..choices import InvoiceState
from ..models import Invoice
from ..services import invoicing, stripe_sync
from .invoice_serializers import (
    EstimateQuerySerializer,
    EstimateSerializer,
    InvoiceCreateSerializer,
    InvoiceSerializer,
    PaySerializer,
    VoidSerializer,
)
from .stripe import STRIPE_RESPONSES, stripe_errors

CSV_COLUMNS = (
    "invoice",
    "tenant",
    "period_start",
    "period_end",
    "line",
    "kind",
    "sku",
    "model",
    "description",
    "entries",
    "gpu_hours",
    "input_tokens",
    "output_tokens",
    "rate",
    "amount",
    "currency",
)
_PERIOD = [
    OpenApiParameter("month", str, description="YYYY-MM (instead of start and end)"),
    OpenApiParameter("start", str, description="ISO 8601 date or datetime (UTC). Default: the 1st of end's month"),
    OpenApiParameter("end", str, description="ISO 8601 date (included) or datetime (exclusive). Default: now"),
]
_FORMAT = OpenApiParameter("format", str, enum=["json", "csv"])


def csv_rows(*, label: str, tenant: str, start: dt.datetime, end: dt.datetime, document: dict) -> list[dict]:
    """An invoice's (or estimate's) lines as CSV rows, then one TOTAL row per currency."""
    base = {"invoice": label, "tenant": tenant, "period_start": start.isoformat(), "period_end": end.isoformat()}
    rows = [
        {**base, "line": line["position"], **{k: line[k] for k in CSV_COLUMNS[5:] if k in line}}
        for line in document["lines"]
    ]
    totals = document.get("totals") or [{"currency": document["currency"], "subtotal": document["subtotal"]}]
    rows += [{**base, "description": "TOTAL", "amount": t["subtotal"], "currency": t["currency"]} for t in totals]
    return rows


def _filename(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


class InvoiceViewSet(
    CsvExportMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin, TenantScopedViewSet
):
    """Invoices of the caller's tenant(s), newest period first. Finalized ones never change; void them."""

    model = Invoice
    serializer_class = InvoiceSerializer
    scope_family = "billing"
    lookup_field = "id"
    lookup_value_regex = "[0-9]+"
    http_method_names = ["get", "post", "delete", "head", "options"]
    ordering = ("-period_start", "-id")
    # CSV for retrieve and estimate only (get_renderers). Errors and OPTIONS answers are JSON also where CSV or the
    # HTML page was negotiated (apps.core.api.renderers).
    renderer_classes = api_settings.DEFAULT_RENDERER_CLASSES

    def scope_queryset(self, queryset):
        queryset = invoicing.invoices_readable(queryset, principal=self.principal)
        if self.action != "list":
            return queryset
        params = self.request.query_params
        if params.get("tenant"):
            queryset = queryset.filter(tenant__slug=params["tenant"])
        if params.get("state"):
            if params["state"] not in InvoiceState.values:
                raise exceptions.ValidationError({"state": [f"must be one of {', '.join(InvoiceState.values)}"]})
            queryset = queryset.filter(state=params["state"])
        if params.get("number"):
            queryset = queryset.filter(number=params["number"])
        return queryset

    def get_renderers(self):
        renderers = super().get_renderers()
        if self.action in ("retrieve", "estimate"):
            renderers.append(CsvRenderer())
        return renderers

    def _csv(self, rows: list[dict], name: str) -> Response:
        return self.csv_response(CSV_COLUMNS, rows, f"{_filename(name)}.csv")

    @extend_schema(
        parameters=[
            OpenApiParameter("tenant", str, description="Only this tenant (slug)"),
            OpenApiParameter("state", str, enum=list(InvoiceState.values)),
            OpenApiParameter("number", str, description="The invoice with this number"),
        ]
    )
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().list(request, *args, **kwargs)

    @extend_schema(
        parameters=[_FORMAT],
        responses={(200, "application/json"): InvoiceSerializer, (200, "text/csv"): OpenApiTypes.STR},
    )
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        invoice = self.get_object()
        data = InvoiceSerializer(invoice).data
        if self.wants_csv(request):
            label = invoice.number or f"draft-{invoice.pk}"
            rows = csv_rows(
                label=label,
                tenant=invoice.tenant.slug,
                start=invoice.period_start,
                end=invoice.period_end,
                document=data,
            )
            return self._csv(rows, label)
        return Response(data)

    @extend_schema(request=InvoiceCreateSerializer, responses={201: InvoiceSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """A draft for the period: its lines computed from the ledger now (finalizing computes them again)."""
        body = InvoiceCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        tenant = tenant_get_visible(principal=self.principal, slug=data["tenant"])
        if tenant is None:
            raise exceptions.ValidationError({"tenant": [f"no tenant {data['tenant']!r}"]})
        with service_errors():
            invoice = invoicing.invoice_create(
                actor=self.principal, tenant=tenant, start=data["start"], end=data["end"], note=data["note"]
            )
        return Response(InvoiceSerializer(invoice).data, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance: Invoice) -> None:
        with service_errors():
            invoicing.invoice_delete(actor=self.principal, invoice=instance)

    @extend_schema(request=None, responses={200: InvoiceSerializer})
    @action(detail=True, methods=["post"])
    def finalize(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Draft -> Finalized: lines recomputed from the ledger, the tenant's next number (409 naming what stops it)."""
        with service_errors():
            invoice = invoicing.invoice_finalize(actor=self.principal, invoice=self.get_object())
        return Response(InvoiceSerializer(invoice).data)

    @extend_schema(request=PaySerializer, responses={200: InvoiceSerializer})
    @action(detail=True, methods=["post"], url_path="mark-paid")
    def mark_paid(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Finalized -> Paid."""
        invoice = self.get_object()
        body = PaySerializer(data=request.data or {})
        body.is_valid(raise_exception=True)
        with service_errors():
            invoice = invoicing.invoice_mark_paid(
                actor=self.principal,
                invoice=invoice,
                paid_at=body.validated_data.get("paid_at"),
                reference=body.validated_data["reference"],
            )
        return Response(InvoiceSerializer(invoice).data)

    @extend_schema(request=VoidSerializer, responses={200: InvoiceSerializer})
    @action(detail=True, methods=["post"])
    def void(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Draft or Finalized -> Void, with a reason. The number stays used; the period can be invoiced again."""
        invoice = self.get_object()
        body = VoidSerializer(data=request.data or {})
        body.is_valid(raise_exception=True)
        with service_errors():
            invoice = invoicing.invoice_void(
                actor=self.principal, invoice=invoice, reason=body.validated_data["reason"]
            )
        return Response(InvoiceSerializer(invoice).data)

    @extend_schema(request=None, responses={200: InvoiceSerializer, **STRIPE_RESPONSES})
    @action(detail=True, methods=["post"])
    def stripe(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Send a finalized invoice to Stripe (test mode): customer, invoice, items, finalized there (503 without a
        test key, 502 when Stripe fails; sending again resumes and creates nothing twice)."""
        with stripe_errors():
            invoice = stripe_sync.invoice_send_to_stripe(actor=self.principal, invoice=self.get_object())
        return Response(InvoiceSerializer(invoice).data)

    @extend_schema(responses={(200, "text/html"): OpenApiTypes.STR})
    @action(detail=True, methods=["get"], renderer_classes=[TemplateHTMLRenderer])
    def html(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """The invoice as a page a person can read and print."""
        invoice = self.get_object()
        context = {"invoice": InvoiceSerializer(invoice).data, "tenant": invoice.tenant}
        return Response(context, template_name="billing/invoice.html")

    @extend_schema(
        parameters=[OpenApiParameter("tenant", str, description="The tenant (slug)"), *_PERIOD, _FORMAT],
        responses={(200, "application/json"): EstimateSerializer, (200, "text/csv"): OpenApiTypes.STR},
    )
    @action(detail=False, methods=["get"])
    def estimate(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """What an invoice of any period would hold now, from the ledger; nothing is written."""
        query = EstimateQuerySerializer(data=request.query_params, require=False)
        query.is_valid(raise_exception=True)
        params = query.validated_data
        end = params.get("end") or timezone.now().replace(microsecond=0)
        first = (end - dt.timedelta(microseconds=1)).date().replace(day=1)
        start = params.get("start") or dt.datetime.combine(first, dt.time(), dt.UTC)
        tenant = self._estimate_tenant(params.get("tenant"))
        with service_errors():
            estimate = invoicing.invoice_estimate(tenant=tenant, start=start, end=end)
        data = EstimateSerializer(estimate).data
        if self.wants_csv(request):
            rows = csv_rows(label="estimate", tenant=tenant.slug, start=start, end=end, document=data)
            return self._csv(rows, f"estimate-{tenant.slug}-{start:%Y%m%d}-{end:%Y%m%d}")
        return Response(data)

    def _estimate_tenant(self, slug: str | None):
        scope = self.required_scope()
        if slug:
            tenant = tenant_get_visible(principal=self.principal, slug=slug)
            if tenant is None or not self.principal.has_scope(scope, tenant.pk):
                raise exceptions.NotFound(f"tenant {slug!r} not found")
            return tenant
        selected = self.selected_tenant()
        if selected is not None:
            return selected
        tenants = self.principal.tenants_with(scope)
        if tenants is ALL_TENANTS or len(tenants) != 1:
            raise exceptions.ValidationError({"tenant": ["is required: this credential can read several tenants"]})
        return tenant_get_by_id(tenant_id=next(iter(tenants)))

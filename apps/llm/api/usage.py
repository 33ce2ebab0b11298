"""REST: GET /api/v1/usage/llm/, the LLM gateway's usage, summed per group over a time window, as JSON or CSV.

Reading needs `models:read`: a tenant credential sees its own tenant(s), platform staff every tenant (`?tenant=`
narrows to one). Usage is read from the hourly roll-ups, so an hour is the finest granularity. JSON is paginated
(`limit`/`offset`); CSV (`?format=csv` or `Accept: text/csv`) holds every row. Errors are always JSON.
"""

from __future__ import annotations

import datetime as dt

from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core.api.errors import service_errors
from apps.core.api.exports import CsvExportMixin
from apps.core.api.fields import InstantField
from apps.core.api.viewsets import ScopedViewMixin

from .. import selectors


class UsageQuerySerializer(serializers.Serializer):
    """The query parameters (the selector checks `group_by` and that `end` is after `start`)."""

    start = InstantField(required=False)
    end = InstantField(required=False, end_of_day=True)
    group_by = serializers.CharField(required=False, allow_blank=True, default="day,model")
    model = serializers.CharField(required=False, max_length=100)
    key = serializers.CharField(required=False, max_length=16)
    tenant = serializers.CharField(required=False, max_length=63)


class UsageMetricsSerializer(serializers.Serializer):
    requests = serializers.IntegerField()
    errors = serializers.IntegerField(help_text="Requests answered with a status of 400 or more")
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    total_tokens = serializers.IntegerField()
    estimated_requests = serializers.IntegerField(
        help_text="Requests whose tokens were estimated (no usage from the upstream, or the client hung up)"
    )


class UsageRowSerializer(UsageMetricsSerializer):
    """One group: the fields named in `group_by` (the others are absent), then the metrics."""

    tenant = serializers.CharField(source="tenant__slug", required=False, help_text="The tenant's slug")
    key = serializers.CharField(required=False, help_text="The API key's public id")
    model = serializers.CharField(required=False)
    hour = serializers.DateTimeField(required=False, default_timezone=dt.UTC, help_text="The hour's start, UTC")
    day = serializers.DateField(required=False, help_text="The UTC day")

    class Meta:
        fields = (*selectors.USAGE_GROUPS, *selectors.USAGE_METRICS)

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        return {name: fields[name] for name in self.Meta.fields}  # group fields first, as in CSV


class UsageReportSerializer(serializers.Serializer):
    start = serializers.DateTimeField(default_timezone=dt.UTC, help_text="The window's start (inclusive), UTC")
    end = serializers.DateTimeField(default_timezone=dt.UTC, help_text="The window's end (exclusive), UTC")
    group_by = serializers.ListField(child=serializers.ChoiceField(choices=selectors.USAGE_GROUPS))
    count = serializers.IntegerField(help_text="The number of rows")
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = UsageRowSerializer(many=True)
    totals = UsageMetricsSerializer(help_text="The metrics over the whole window (every row, not only this page)")


_PARAMETERS = [
    OpenApiParameter(
        "start",
        str,
        description="ISO 8601 date or datetime, UTC unless it has an offset; its hour counts whole. "
        "Default: the start of end's UTC day",
    ),
    OpenApiParameter(
        "end",
        str,
        description="ISO 8601 date (that day included) or datetime (exclusive; an hour that began before it counts "
        "whole). Default: now",
    ),
    OpenApiParameter(
        "group_by",
        str,
        description=f"Comma-separated, any of {', '.join(selectors.USAGE_GROUPS)}; rows are ordered by these fields. "
        "Default: day,model",
    ),
    OpenApiParameter("model", str, description="Only this model (as the client named it)"),
    OpenApiParameter("key", str, description="Only this API key (its public id)"),
    OpenApiParameter("tenant", str, description="Only this tenant (slug), among those the credential can see"),
    OpenApiParameter("format", str, enum=["json", "csv"], description="csv: every row, no pagination"),
    OpenApiParameter("limit", int, description="JSON rows per page (default 50, at most 1000)"),
    OpenApiParameter("offset", int, description="JSON rows to skip"),
]


class LlmUsageView(CsvExportMixin, ScopedViewMixin, APIView):
    """LLM gateway usage of the caller's tenant(s): requests, errors and tokens per group, and their totals."""

    scope_family = "models"
    http_method_names = ["get", "head", "options"]

    @extend_schema(
        operation_id="usage_llm_retrieve",
        parameters=_PARAMETERS,
        responses={(200, "application/json"): UsageReportSerializer, (200, "text/csv"): OpenApiTypes.STR},
    )
    def get(self, request: Request) -> Response:
        query = UsageQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        params = query.validated_data
        end = params.get("end") or timezone.now()
        start = params.get("start") or dt.datetime.combine(
            (end - dt.timedelta(microseconds=1)).date(), dt.time(), dt.UTC
        )
        with service_errors():
            report = selectors.llm_usage_report(
                tenants=self.visible_tenants(self.required_scope()),
                start=start,
                end=end,
                group_by=[name.strip() for name in params["group_by"].split(",") if name.strip()],
                model=params.get("model"),
                key_id=params.get("key"),
                tenant_slug=params.get("tenant"),
            )
        if self.wants_csv(request):
            columns = [*report.group_by, *selectors.USAGE_METRICS]
            return self.csv_response(columns, UsageRowSerializer(report.rows, many=True).data, "llm-usage.csv")
        return Response(UsageReportSerializer(self.report_page(request, report)).data)

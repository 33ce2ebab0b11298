"""REST: GET /api/v1/usage/llm/, the LLM gateway's usage, summed per group over a time window, as JSON or CSV.

Reading needs `models:read`: a tenant credential sees its own tenant(s), platform staff every tenant (`?tenant=`
narrows to one). Usage is read from the hourly roll-ups, so an hour is the finest granularity. JSON is paginated
(`limit`/`offset`); CSV (`?format=csv` or `Accept: text/csv`) holds every row. Errors are always JSON.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from typing import Any

from django.http import Http404
from django.utils import dateparse, timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, serializers
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from apps.core.api.errors import service_errors
from apps.core.api.viewsets import ScopedViewMixin

from .. import selectors

_DAY = dt.timedelta(days=1)


class UsageCsvRenderer(BaseRenderer):
    """`text/csv`: a header row, then one line per row. The data is `{"columns": [...], "rows": [{...}]}`."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> bytes:
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=data["columns"], lineterminator="\r\n")
        writer.writeheader()
        writer.writerows({k: _cell(v) for k, v in row.items()} for row in data["rows"])
        return out.getvalue().encode(self.charset)


def _cell(value: Any) -> Any:
    # A model name is chosen by the caller of the gateway: keep a spreadsheet from reading it as a formula.
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


class InstantField(serializers.Field):
    """An ISO 8601 date or datetime, in UTC unless it carries an offset. A date is its UTC midnight; with
    `end_of_day`, the midnight after it (so `end=2025-01-31` includes that day)."""

    default_error_messages = {"invalid": "not an ISO 8601 date or datetime (e.g. 2025-01-31 or 2025-01-31T12:00Z)"}

    def __init__(self, *, end_of_day: bool = False, **kwargs: Any) -> None:
        self.end_of_day = end_of_day
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> dt.datetime:
        text = str(data).strip()
        try:
            day = dateparse.parse_date(text)
            moment = None if day else dateparse.parse_datetime(text)
        except ValueError:  # well formed but impossible, e.g. 2025-02-30
            self.fail("invalid")
        if day is not None:
            midnight = dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)
            return midnight + _DAY if self.end_of_day else midnight
        if moment is None:
            self.fail("invalid")
        return moment.replace(tzinfo=dt.UTC) if timezone.is_naive(moment) else moment.astimezone(dt.UTC)

    def to_representation(self, value: dt.datetime) -> str:
        return value.isoformat()


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


class LlmUsageView(ScopedViewMixin, APIView):
    """LLM gateway usage of the caller's tenant(s): requests, errors and tokens per group, and their totals."""

    scope_family = "models"
    http_method_names = ["get", "head", "options"]
    renderer_classes = [*api_settings.DEFAULT_RENDERER_CLASSES, UsageCsvRenderer]
    pagination_class = api_settings.DEFAULT_PAGINATION_CLASS

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
        if isinstance(request.accepted_renderer, UsageCsvRenderer):
            columns = [*report.group_by, *selectors.USAGE_METRICS]
            response = Response({"columns": columns, "rows": UsageRowSerializer(report.rows, many=True).data})
            response["Content-Disposition"] = 'attachment; filename="llm-usage.csv"'
            return response
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(report.rows, request, view=self)
        body = {
            "start": report.start,
            "end": report.end,
            "group_by": list(report.group_by),
            "count": paginator.count,
            "next": paginator.get_next_link(),
            "previous": paginator.get_previous_link(),
            "results": page,
            "totals": report.totals,
        }
        return Response(UsageReportSerializer(body).data)

    def perform_content_negotiation(self, request: Request, force: bool = False):
        try:
            return super().perform_content_negotiation(request, force=force)
        except Http404 as exc:  # DRF answers an unknown ?format= with 404
            raise exceptions.ValidationError({"format": ["must be json or csv"]}) from exc

    def handle_exception(self, exc: Exception) -> Response:
        # Errors keep the JSON envelope, also when CSV was asked for.
        if isinstance(getattr(self.request, "accepted_renderer", None), UsageCsvRenderer):
            self.request.accepted_renderer, self.request.accepted_media_type = JSONRenderer(), "application/json"
        return super().handle_exception(exc)

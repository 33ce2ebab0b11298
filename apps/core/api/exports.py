"""Endpoints that answer JSON or CSV: the `text/csv` renderer and the view mixin built on it.

CSV is asked for with `?format=csv` or `Accept: text/csv` and holds every row; JSON reports are paginated
(`limit`/`offset`). An unknown `?format=` is a 400 naming the field. Errors and OPTIONS answers are JSON whatever
was asked for (apps.core.api.renderers).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from typing import Any

from django.http import Http404
from rest_framework import exceptions
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings


class CsvRenderer(BaseRenderer):
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


class CsvExportMixin:
    """For a view that answers JSON or CSV: picks the renderer, refuses an unknown `?format=` (400, not DRF's 404),
    and builds the CSV response and the JSON page of a usage report."""

    renderer_classes = [*api_settings.DEFAULT_RENDERER_CLASSES, CsvRenderer]
    pagination_class = api_settings.DEFAULT_PAGINATION_CLASS

    def wants_csv(self, request: Request) -> bool:
        """Whether the request negotiated CSV."""
        return isinstance(request.accepted_renderer, CsvRenderer)

    def csv_response(self, columns: Iterable[str], rows: list[dict], filename: str) -> Response:
        """The rows as a CSV attachment named `filename`, columns in this order."""
        response = Response({"columns": list(columns), "rows": rows})
        response["Content-Disposition"] = f'attachment; filename="{filename}"'
        return response

    def report_page(self, request: Request, report: Any) -> dict[str, Any]:
        """A report (`start`, `end`, `group_by`, `rows`, `totals`) as one page of its rows, with the count and the
        links to the next and previous pages."""
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(report.rows, request, view=self)
        return {
            "start": report.start,
            "end": report.end,
            "group_by": list(report.group_by),
            "count": paginator.count,
            "next": paginator.get_next_link(),
            "previous": paginator.get_previous_link(),
            "results": page,
            "totals": report.totals,
        }

    def perform_content_negotiation(self, request: Request, force: bool = False):
        try:
            return super().perform_content_negotiation(request, force=force)
        except Http404 as exc:  # DRF answers an unknown ?format= with 404
            raise exceptions.ValidationError({"format": ["must be json or csv"]}) from exc

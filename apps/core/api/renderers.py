"""Renderers and the content negotiation of /api/v1/.

Some renderers draw one view's own payload and nothing else: CSV (`{"columns", "rows"}`) and HTML pages
(a template). An error envelope or an OPTIONS description handed to them breaks them (a KeyError, a missing
template: a 500). So the negotiation answers OPTIONS in JSON, and the exception handler renders errors in JSON
whenever the renderer negotiated is not one of `ENVELOPE_RENDERERS`, for every view at once.
"""

from __future__ import annotations

import json
from typing import Any

from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer, BrowsableAPIRenderer, JSONRenderer
from rest_framework.request import Request


class PlainTextRenderer(BaseRenderer):
    """`text/plain` for endpoints that serve text (logs)."""

    media_type = "text/plain"
    format = "txt"
    charset = "utf-8"

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> bytes:
        if isinstance(data, bytes):
            return data
        if isinstance(data, str):
            return data.encode(self.charset)
        return json.dumps(data).encode(self.charset)


# Renderers that draw any data, so an error envelope or an OPTIONS description as well.
ENVELOPE_RENDERERS: tuple[type[BaseRenderer], ...] = (JSONRenderer, BrowsableAPIRenderer)


def render_as_json(request: Request) -> None:
    """Have the response to `request` rendered as JSON, unless what was negotiated draws any data."""
    if not isinstance(getattr(request, "accepted_renderer", None), ENVELOPE_RENDERERS):
        request.accepted_renderer, request.accepted_media_type = JSONRenderer(), JSONRenderer.media_type


class ApiContentNegotiation(DefaultContentNegotiation):
    """DRF's negotiation, except that an OPTIONS request is answered in JSON whatever `?format=` or `Accept` ask:
    the answer describes the endpoint, and a CSV or HTML renderer cannot draw that."""

    def select_renderer(self, request: Request, renderers: list[BaseRenderer], format_suffix: str | None = None):
        if request.method == "OPTIONS":
            return JSONRenderer(), JSONRenderer.media_type
        return super().select_renderer(request, renderers, format_suffix)

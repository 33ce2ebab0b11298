"""One error format for /api/v1/: `{"error": {"type", "message", "fields"?}}` with the usual status codes.

`message` names the offending fields so a person reading only the message can act on it. Errors are JSON also
where the view negotiated a format that cannot draw them (CSV, an HTML page): see apps.core.api.renderers.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.http import Http404
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from .renderers import render_as_json

_TYPES = {
    400: "invalid_request",
    401: "authentication_failed",
    403: "permission_denied",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "request_too_large",
    415: "unsupported_media_type",
    429: "rate_limited",
}


def _flatten(detail: Any, prefix: str = "") -> list[str]:
    if isinstance(detail, dict):
        out: list[str] = []
        for key, value in detail.items():
            name = f"{prefix}.{key}" if prefix else str(key)
            out.extend(_flatten(value, name))
        return out
    if isinstance(detail, list):
        out = []
        for index, value in enumerate(detail):
            if isinstance(value, dict | list) and not isinstance(value, str):
                out.extend(_flatten(value, f"{prefix}[{index}]" if prefix else str(index)))
            else:
                out.extend(_flatten(value, prefix))
        return out
    return [f"{prefix}: {detail}" if prefix and prefix != "non_field_errors" else str(detail)]


class RequestTooLarge(exceptions.APIException):
    status_code = 413
    default_code = "request_too_large"


def body_too_large() -> RequestTooLarge:
    """413 naming the limit and the setting that raises it (Django's own answer is a 400 with a traceback)."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return RequestTooLarge(
        f"the request body is larger than this server accepts: {limit} bytes ({limit / 2**20:.3g} MiB); "
        "an operator can raise GRYVIA_MAX_BODY_BYTES"
    )


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    elif isinstance(exc, RequestDataTooBig):
        exc = body_too_large()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if context.get("request") is not None:
        render_as_json(context["request"])
    status = response.status_code
    error: dict[str, Any] = {"type": _TYPES.get(status, "error")}
    if isinstance(exc, exceptions.ValidationError) and isinstance(exc.detail, dict | list):
        error["message"] = "; ".join(_flatten(exc.detail)) or "invalid input"
        error["fields"] = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
    elif isinstance(exc, exceptions.ParseError):
        error["message"] = f"body: {exc.detail}"
        error["fields"] = {"body": [str(exc.detail)]}
    else:
        error["message"] = str(getattr(exc, "detail", exc))
    response.data = {"error": error}
    return response

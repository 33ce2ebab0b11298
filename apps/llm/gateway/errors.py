"""OpenAI's error envelope, `{"error": {"message", "type", "param", "code"}}`, for every reply under /v1/."""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpResponse

# HTTP status -> OpenAI error type
TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    408: "timeout",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "api_error",
    504: "timeout",
}


class GatewayError(Exception):
    """A request the gateway answers itself, with this status and message."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param
        self.headers = headers or {}

    def response(self) -> HttpResponse:
        return error_response(self.status, self.message, code=self.code, param=self.param, headers=self.headers)


def envelope(status: int, message: str, *, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": TYPES.get(status, "api_error"), "param": param, "code": code}}


def error_response(
    status: int,
    message: str,
    *,
    code: str | None = None,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> HttpResponse:
    response = HttpResponse(
        json.dumps(envelope(status, message, code=code, param=param)), status=status, content_type="application/json"
    )
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def credential_in_url_response(message: str, param: str) -> HttpResponse:
    """A credential in a /v1/ URL refused in OpenAI's envelope, as its clients parse it (apps.core.security)."""
    return error_response(400, message, code="credential_in_url", param=param)

"""The /v1/ views: plain async Django views, no middleware (handler.py), every reply in OpenAI's shapes."""

from __future__ import annotations

import logging

from django.http import HttpRequest, HttpResponse, JsonResponse

from . import keys, proxy, routes
from .errors import GatewayError, error_response
from .request import CHAT, COMPLETIONS, EMBEDDINGS

logger = logging.getLogger(__name__)


def _method(request: HttpRequest, allowed: str) -> None:
    if request.method != allowed:
        raise GatewayError(405, f"{request.method} is not allowed on {request.path}; use {allowed}", code="method")


async def _post(request: HttpRequest, endpoint: str) -> HttpResponse:
    try:
        _method(request, "POST")
        return await proxy.handle(request.body, request.META.get("HTTP_AUTHORIZATION"), endpoint)
    except GatewayError as exc:
        return exc.response()
    except Exception:
        logger.exception("gateway: %s failed", request.path)
        return error_response(500, "the gateway failed to handle this request; it has been logged", code="internal")


async def chat_completions(request: HttpRequest) -> HttpResponse:
    return await _post(request, CHAT)


async def completions(request: HttpRequest) -> HttpResponse:
    return await _post(request, COMPLETIONS)


async def embeddings(request: HttpRequest) -> HttpResponse:
    return await _post(request, EMBEDDINGS)


def _model(name: str, tenant_slug: str, table: routes.Table, tenant_id: int) -> dict:
    own = name in table.by_tenant.get(tenant_id, {}) or name in table.aliases.get(tenant_id, {})
    return {"id": name, "object": "model", "created": 0, "owned_by": tenant_slug if own else "gryvia"}


async def _visible(request: HttpRequest) -> tuple[keys.KeyInfo, routes.Table, list[str]]:
    _method(request, "GET")
    key = await keys.authenticate(request.META.get("HTTP_AUTHORIZATION"))
    table = await routes.table()
    return key, table, [n for n in table.names(key.tenant_id) if key.may_call(n)]


async def models(request: HttpRequest) -> HttpResponse:
    """The models this key may call: its tenant's, the shared ones and aliases that lead to one."""
    try:
        key, table, names = await _visible(request)
    except GatewayError as exc:
        return exc.response()
    data = [_model(n, key.tenant_slug, table, key.tenant_id) for n in names]
    response = JsonResponse({"object": "list", "data": data})
    if not data and table.has_no_service(key.tenant_id):
        # The list keeps OpenAI's shape; the hint rides in a header that clients ignore and people can read.
        response["X-Gryvia-Hint"] = proxy.NO_SERVICE_HINT
    return response


async def model(request: HttpRequest, name: str) -> HttpResponse:
    try:
        key, table, names = await _visible(request)
        if name not in names:
            raise proxy.model_not_found(name, table, key.tenant_id)
    except GatewayError as exc:
        return exc.response()
    return JsonResponse(_model(name, key.tenant_slug, table, key.tenant_id))


async def not_found(request: HttpRequest, path: str = "") -> HttpResponse:
    return error_response(404, f"no such endpoint: {request.method} {request.path}", code="unknown_url")

"""The gateway's side of the upstream call: this event loop's connection pool, the request sent (the client's
body with the model name the service publishes upstream, only the service's own credential; no header of the
client's), the connection with failover, and reading a whole answer.

A connection that fails before any byte was sent is retried on the service's next replica, then the next service of
the name (by weight); the caller (proxy.py) moves on to the alias's next target.
"""

from __future__ import annotations

import asyncio
import json
import logging
import weakref

import httpx
from django.conf import settings

from . import metrics, routes
from .errors import GatewayError
from .request import PATHS, Call

logger = logging.getLogger(__name__)
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = weakref.WeakKeyDictionary()


def client() -> httpx.AsyncClient:
    """This event loop's upstream client (connection pool)."""
    loop = asyncio.get_running_loop()
    found = _clients.get(loop)
    if found is None:
        timeout = httpx.Timeout(settings.GRYVIA_LLM_UPSTREAM_TIMEOUT_S, connect=settings.GRYVIA_LLM_CONNECT_TIMEOUT_S)
        limits_ = httpx.Limits(max_connections=1000, max_keepalive_connections=200, keepalive_expiry=30)
        found = _clients[loop] = httpx.AsyncClient(timeout=timeout, limits=limits_, trust_env=False)
    return found


def request_headers(upstream: routes.Upstream) -> dict[str, str]:
    headers = {"content-type": "application/json", "accept": "application/json"}
    if upstream.credential:
        headers["authorization"] = f"Bearer {upstream.credential}"
    return headers


def request_body(call: Call, upstream: routes.Upstream) -> bytes:
    body = dict(call.body)
    body["model"] = upstream.upstream_model
    if call.stream:
        body["stream_options"] = {**(call.body.get("stream_options") or {}), "include_usage": True}
    return json.dumps(body, separators=(",", ":")).encode()


async def connect(call: Call, group: list[routes.Upstream]) -> tuple[routes.Upstream, httpx.Response] | None:
    """The first of the group's services (by weight) and replicas (in turn) that answers; a connection refused or
    timed out before anything was sent moves on to the next. None when none could be reached."""
    http = client()
    for upstream in routes.weighted_order(group):
        content, headers = request_body(call, upstream), request_headers(upstream)
        for base in upstream.endpoint_order():
            request = http.build_request("POST", base + PATHS[call.endpoint], content=content, headers=headers)
            try:
                return upstream, await http.send(request, stream=True)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                metrics.UPSTREAM_ERRORS.labels(call.model, upstream.service, "connect").inc()
                logger.warning("gateway: %s (%s) refused the connection: %s", upstream.service, base, exc)
            except httpx.TimeoutException:
                metrics.UPSTREAM_ERRORS.labels(call.model, upstream.service, "timeout").inc()
                raise timeout_error(upstream) from None
            except httpx.HTTPError as exc:
                metrics.UPSTREAM_ERRORS.labels(call.model, upstream.service, "protocol").inc()
                raise GatewayError(502, f"upstream {upstream.service} failed: {exc}", code="bad_gateway") from None
    return None


def timeout_error(upstream: routes.Upstream) -> GatewayError:
    return GatewayError(
        504,
        f"upstream {upstream.service} did not answer within {settings.GRYVIA_LLM_UPSTREAM_TIMEOUT_S:g} s",
        code="upstream_timeout",
    )


async def read_body(response: httpx.Response, upstream: routes.Upstream) -> bytes:
    """The whole body (the connection goes back to the pool)."""
    try:
        return await response.aread()
    except httpx.TimeoutException:
        raise timeout_error(upstream) from None
    except httpx.HTTPError as exc:
        raise GatewayError(502, f"upstream {upstream.service} broke off: {exc}", code="bad_gateway") from None
    finally:
        await response.aclose()

"""Prometheus metrics served at /metrics, and the middleware that counts HTTP requests by route."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from prometheus_client import CollectorRegistry, Counter, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

HTTP_REQUESTS = Counter(
    "gryvia_http_requests_total", "HTTP requests by route pattern and status code", ["route", "code"], registry=REGISTRY
)
RECONCILE_DURATION = Histogram(
    "gryvia_reconcile_duration_seconds",
    "Duration of one reconcile pass",
    ["kind"],
    registry=REGISTRY,
    buckets=(0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60),
)
RECONCILE_ERRORS = Counter(
    "gryvia_reconcile_errors_total", "Objects whose reconcile failed", ["kind"], registry=REGISTRY
)


def _route(request: HttpRequest) -> str:
    match = getattr(request, "resolver_match", None)
    if match is None:
        return "unmatched"
    return "/" + (match.route or "").lstrip("^").rstrip("$")


class MetricsMiddleware:
    """Counts each response under its URL pattern (not the raw path, which would explode label cardinality)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        HTTP_REQUESTS.labels(route=_route(request), code=str(response.status_code)).inc()
        return response

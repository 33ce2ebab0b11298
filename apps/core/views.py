"""Public probes and metrics: /healthz (the process answers), /readyz (its dependencies answer and the apps'
readiness checks pass, apps.core.lifecycle: in the embedded profile, the local models registered at start serve;
`/readyz?verbose` in the production profile also reports the Celery workers and beats seen lately), /metrics; and
the answer under /api/ to a path no endpoint has."""

from __future__ import annotations

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse, HttpResponsePermanentRedirect, JsonResponse
from django.urls import Resolver404, resolve
from django.views.decorators.csrf import csrf_exempt
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from . import heartbeats, lifecycle
from .metrics import REGISTRY


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


def _check_database() -> str | None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:
        return f"database: {exc}"
    return None


def _check_redis(*, verbose: bool) -> tuple[str | None, heartbeats.Background | None]:
    """Redis's answer and, when `verbose`, the background processes seen lately (production profile only)."""
    if not settings.REDIS_URL:
        return None, None
    try:
        client = heartbeats.connect()
        if verbose:  # the read is Redis's answer
            return None, heartbeats.background(client=client)
        client.ping()
    except Exception as exc:
        return f"redis: {exc}", None
    return None, None


def readyz(request: HttpRequest) -> JsonResponse:
    """503 when this server cannot serve: a dependency is down, or an app's readiness check fails (a local model
    registered at start is not Ready).

    `?verbose` adds, with REDIS_URL set, the Celery workers and beats seen lately (`background`) and what is missing
    (`warnings`). Missing ones leave the server ready: the API still serves, only periodic work waits, and a probe
    that failed then would take every web replica out of service for a fault of the background processes."""
    redis_problem, background = _check_redis(verbose="verbose" in request.GET)
    problems = [p for p in (_check_database(), redis_problem) if p]
    not_ready: list[lifecycle.NotReady] = []
    if not problems:  # the checks query the database
        not_ready = [found for check in lifecycle.readiness_checks() if (found := check()) is not None]
    problems += [found.problem for found in not_ready]
    body: dict = {"status": "ok" if not problems else "unavailable", "problems": problems}
    for found in not_ready:
        body[found.key] = found.items
    if background is not None:
        body["background"] = background.as_json()
        body["warnings"] = background.warnings()
    return JsonResponse(body, status=200 if not problems else 503)


def metrics(request: HttpRequest) -> HttpResponse:
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)


@csrf_exempt  # it changes nothing, and a POST to a wrong path deserves the 404, not a CSRF page
def api_not_found(request: HttpRequest, path: str = "") -> HttpResponse:
    """Any path under /api/ that no endpoint has: a 404 in the API's error envelope (Django's debug page is a few
    thousand lines of HTML). A path that exists with a trailing slash is redirected for GET and HEAD, as
    APPEND_SLASH would (this route matching every path keeps CommonMiddleware from doing it); other methods would
    lose their body on a redirect, so their 404 names the path to use."""
    with_slash = request.path_info + "/" if not request.path_info.endswith("/") else None
    if with_slash and _has_endpoint(with_slash):
        if request.method in ("GET", "HEAD"):
            return HttpResponsePermanentRedirect(request.get_full_path(force_append_slash=True))
        message = f"no endpoint at {request.path_info}: did you mean {with_slash} (with the trailing slash)?"
    else:
        message = f"no endpoint at {request.path_info}: the API's paths are in /api/v1/schema/ (or /api/v1/schema/ui/)"
    return JsonResponse({"error": {"type": "not_found", "message": message}}, status=404)


def _has_endpoint(path: str) -> bool:
    try:
        return resolve(path).func is not api_not_found
    except Resolver404:
        return False

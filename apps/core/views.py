"""Public probes and metrics: /healthz (the process answers), /readyz (its dependencies answer and, in the embedded
profile, the local models registered at start serve; `/readyz?verbose` in the production profile also reports the
Celery workers and beats seen lately), /metrics; and the answer under /api/ to a path no endpoint has."""

from __future__ import annotations

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse, HttpResponsePermanentRedirect, JsonResponse
from django.urls import Resolver404, resolve
from django.views.decorators.csrf import csrf_exempt
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from . import heartbeats
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


def _local_models_not_ready() -> list[dict[str, str]]:
    """The enabled local models registered at start (the packaged tiny-chat and minilm, shared, on this machine's
    backend) that are not Ready, with their phase and why. In a cluster profile there are none to wait for."""
    if settings.GRYVIA_BACKEND != "local":
        return []
    from apps.llm import local_models
    from apps.llm.models import InferenceService, ServicePhase

    rows = (
        InferenceService.objects.filter(
            tenant__isnull=True,
            enabled=True,
            replicas__gt=0,
            name__in=[m.name for m in local_models.MODELS],
            runtime__in=[local_models.LLAMACPP, local_models.SENTENCE_TRANSFORMERS],
        )
        .exclude(status_phase=ServicePhase.READY)
        .order_by("name")
        .values_list("name", "status_phase", "status_message")
    )
    return [{"name": name, "phase": phase, "message": message} for name, phase, message in rows]


def readyz(request: HttpRequest) -> JsonResponse:
    """503 when this server cannot serve: a dependency is down, or a local model it registered is not Ready.

    `?verbose` adds, with REDIS_URL set, the Celery workers and beats seen lately (`background`) and what is missing
    (`warnings`). Missing ones leave the server ready: the API still serves, only periodic work waits, and a probe
    that failed then would take every web replica out of service for a fault of the background processes."""
    redis_problem, background = _check_redis(verbose="verbose" in request.GET)
    problems = [p for p in (_check_database(), redis_problem) if p]
    waiting: list[dict[str, str]] = []
    if not problems:  # the query needs the database
        waiting = _local_models_not_ready()
    if waiting:
        names = ", ".join(f"{s['name']} ({s['phase']})" for s in waiting)
        problems.append(f"local inference services not ready: {names}")
    body: dict = {"status": "ok" if not problems else "unavailable", "problems": problems}
    if waiting:
        body["inference_services"] = waiting
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

"""Public probes and metrics: /healthz (the process answers), /readyz (its dependencies answer), /metrics."""

from __future__ import annotations

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

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


def _check_redis() -> str | None:
    if not settings.REDIS_URL:
        return None
    import redis

    try:
        redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2).ping()
    except Exception as exc:
        return f"redis: {exc}"
    return None


def readyz(request: HttpRequest) -> JsonResponse:
    problems = [p for p in (_check_database(), _check_redis()) if p]
    body = {"status": "ok" if not problems else "unavailable", "problems": problems}
    return JsonResponse(body, status=200 if not problems else 503)


def metrics(request: HttpRequest) -> HttpResponse:
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)

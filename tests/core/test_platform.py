"""Probes, metrics, OpenAPI, throttling and locks."""

from __future__ import annotations

import warnings

import pytest
from django.core.management import call_command
from django.urls import get_resolver
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from apps.core.locks import try_advisory_lock
from tests.factories import client_for, make_key

pytestmark = pytest.mark.django_db


def test_health_and_ready():
    client = APIClient()
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["problems"] == []


def test_metrics_count_requests_by_route_and_code(client_a):
    client_a.get("/api/v1/api-keys/")
    APIClient().get("/api/v1/api-keys/")
    text = APIClient().get("/metrics").content.decode()
    assert 'gryvia_http_requests_total{code="200",route="/api/v1/api-keys/"}' in text
    assert 'gryvia_http_requests_total{code="401",route="/api/v1/api-keys/"}' in text
    assert "gryvia_reconcile_duration_seconds" in text and "gryvia_reconcile_errors_total" in text


def _api_v1_paths() -> set[str]:
    """Every /api/v1/ URL pattern Django knows, in OpenAPI form."""
    import re

    paths = set()

    def walk(patterns, prefix=""):
        for p in patterns:
            route = prefix + str(p.pattern)
            if hasattr(p, "url_patterns"):
                walk(p.url_patterns, route)
            elif route.startswith("api/v1/") and "schema" not in route and "(?P<format>" not in route:
                path = re.sub(r"\(\?P<(\w+)>[^)]*\)", r"{\1}", route)
                path = re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", path).replace("^", "").replace("$", "")
                paths.add("/" + path)

    walk(get_resolver().url_patterns)
    return paths


def test_openapi_schema_generates_without_warnings_and_lists_every_endpoint(tmp_path):
    from drf_spectacular.drainage import GENERATOR_STATS

    GENERATOR_STATS.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        schema = SchemaGenerator().get_schema(request=None, public=True)
    assert not GENERATOR_STATS, f"drf-spectacular warnings/errors: {GENERATOR_STATS}"
    documented = set(schema["paths"])
    assert _api_v1_paths() <= documented, _api_v1_paths() - documented
    assert {"/api/v1/api-keys/{id}/rotate/", "/api/v1/tenants/{tenant_slug}/members/", "/api/v1/audit/"} <= documented
    call_command("spectacular", "--file", str(tmp_path / "schema.yaml"), "--fail-on-warn", "--validate")


def test_schema_is_public():
    response = APIClient().get("/api/v1/schema/")
    assert response.status_code == 200 and b"openapi" in response.content


def test_each_key_is_throttled_on_its_own(tenant_a):
    from apps.core.api.throttling import CredentialRateThrottle

    original = CredentialRateThrottle.THROTTLE_RATES
    CredentialRateThrottle.THROTTLE_RATES = {"credential": "3/min"}
    try:
        first, second = client_for(make_key(tenant_a)), client_for(make_key(tenant_a))
        codes = [first.get("/api/v1/tenants/").status_code for _ in range(4)]
        assert codes == [200, 200, 200, 429]
        assert second.get("/api/v1/tenants/").status_code == 200
    finally:
        CredentialRateThrottle.THROTTLE_RATES = original


def test_advisory_lock_is_not_reentrant_across_holders():
    with try_advisory_lock("t-lock") as first:
        assert first
        import threading

        seen = {}

        def other():
            from django.db import connection

            with try_advisory_lock("t-lock") as got:
                seen["got"] = got
            connection.close()

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        assert seen["got"] is False
    with try_advisory_lock("t-lock") as again:
        assert again


def test_reads_made_with_the_lock_reach_their_receivers_only_when_it_was_taken():
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    got_rows: list = []
    reads = [("SELECT %s + 1", [41], got_rows.append)]
    with CaptureQueriesContext(connection) as queries, try_advisory_lock("t-read", reads=reads) as got:
        assert got and got_rows == [[(42,)]]
        if connection.vendor == "postgresql":  # the lock attempt and the read: one execute
            assert len(queries) == 1 and "pg_try_advisory_lock" in queries[0]["sql"]
        import threading

        def other():
            with try_advisory_lock("t-read", reads=reads) as again:
                assert not again
            connection.close()

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
    assert got_rows == [[(42,)]]  # the other holder's attempt failed: its read reached nobody


@pytest.mark.postgres
def test_postgres_profile_uses_advisory_locks():
    from django.db import connection

    with try_advisory_lock("pg-lock") as got, connection.cursor() as cursor:
        assert got
        cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()")
        assert cursor.fetchone()[0] == 1

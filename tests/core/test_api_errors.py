"""Every answer of /api/ in the API's own format: bodies over the size limit (413), OPTIONS on every route (never a
5xx), paths no endpoint has (a JSON 404, DEBUG on or off), the rate limit's headers, and a wrong scope answered with
the right ones."""

from __future__ import annotations

import logging
import re
import time

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from tests.api_contract import load
from tests.factories import client_for, make_key

pytestmark = pytest.mark.django_db

JOB = {"name": "big", "spec": {"type": "training", "image": "busybox", "command": ["echo", "x" * 5000]}}
YAML_JOB = f"""apiVersion: gryvia.io/v1alpha1
kind: GryviaAIJob
metadata:
  name: big
spec:
  type: training
  image: busybox
  command: [echo, "{"x" * 5000}"]
"""


def envelope(response) -> dict:
    assert response["Content-Type"] == "application/json", response["Content-Type"]
    return response.json()["error"]


@pytest.mark.parametrize(
    "body, content_type",
    [(JOB, "application/json"), (YAML_JOB, "application/yaml")],
    ids=["json", "yaml"],
)
def test_a_body_over_the_limit_is_a_413_naming_the_limit_and_the_variable(
    body, content_type, client_a, settings, caplog
):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 4096
    caplog.set_level(logging.WARNING)
    if content_type == "application/json":
        response = client_a.post("/api/v1/jobs/", body, format="json")
    else:
        response = client_a.post("/api/v1/jobs/", body, content_type=content_type)
    assert response.status_code == 413
    error = envelope(response)
    assert error["type"] == "request_too_large"
    assert "4096 bytes" in error["message"] and "GRYVIA_MAX_BODY_BYTES" in error["message"]
    assert not [r for r in caplog.records if r.exc_info], "no traceback is logged for a client's error"
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024 * 1024  # the same document under the limit is accepted
    if content_type == "application/json":
        assert client_a.post("/api/v1/jobs/", body, format="json").status_code == 201
    else:
        assert client_a.post("/api/v1/jobs/", body, content_type=content_type).status_code == 201


# One path per URL pattern: each named group filled with the first sample its regex takes.
_GROUP = re.compile(r"\(\?P<(\w+)>((?:[^()]|\([^()]*\))*)\)")
_SAMPLES = ("csv", "1", "x1", "00000000-0000-0000-0000-000000000001")


def _routes(patterns, prefix: str = ""):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _routes(pattern.url_patterns, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern):
            yield prefix + str(pattern.pattern)


def _sample_path(route: str) -> str:
    def fill(match: re.Match) -> str:
        return next((s for s in _SAMPLES if re.fullmatch(match.group(2), s)), "1")

    path = _GROUP.sub(fill, route).replace("^", "").replace("$", "").replace("\\.", ".").replace("/?", "/")
    return "/" + re.sub(r"<(?:\w+:)?\w+>", "1", path)


def test_options_on_every_route_in_every_format_is_never_a_server_error(tenant_a, platform_key):
    client = client_for(platform_key)
    paths = {_sample_path(r) for r in _routes(get_resolver().url_patterns) if r.startswith("api/v1/")}
    for endpoint in load():  # and real objects of every kind, for the views that look theirs up
        paths |= {endpoint.list_path(tenant_a), endpoint.detail_path(tenant_a, endpoint.make(tenant_a))}
    assert len(paths) > 50
    asks = [("", {}), ("?format=csv", {}), ("", {"HTTP_ACCEPT": "text/csv"}), ("", {"HTTP_ACCEPT": "text/html"})]
    failures = []
    for path in sorted(paths):
        for query, headers in asks:
            response = client.options(path + query, **headers)
            if response.status_code >= 500:
                failures.append(f"OPTIONS {path}{query} {headers}: {response.status_code}")
            elif response.status_code < 300:
                assert response["Content-Type"] == "application/json", (path, query, headers)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("path", ["/api/v1/usage/?format=csv", "/api/v1/usage/llm/?format=csv", "/api/v1/usage/"])
def test_options_of_a_csv_report_describes_it_in_json(path, client_a):
    response = client_a.options(path, HTTP_ACCEPT="text/csv")
    assert response.status_code == 200
    assert response.json()["name"]


def test_options_of_the_printable_invoice_is_json(client_a):
    response = client_a.options("/api/v1/invoices/1/html/")
    assert response.status_code == 200
    assert "text/html" in response.json()["renders"]


@pytest.mark.parametrize("debug", [True, False], ids=["debug", "no-debug"])
def test_a_path_no_endpoint_has_is_a_json_404(debug, client_a, settings):
    settings.DEBUG = debug
    for path in ("/api/v1/no-such-thing/", "/api/v2/jobs/", "/api/v1/jobs/NOT_A_NAME/", "/api/"):
        response = client_a.get(path)
        assert response.status_code == 404, path
        error = envelope(response)
        assert error["type"] == "not_found" and path in error["message"] and "/api/v1/schema/" in error["message"]
    missing_slash = client_a.post("/api/v1/jobs", JOB, format="json")
    assert missing_slash.status_code == 404
    assert "did you mean /api/v1/jobs/" in envelope(missing_slash)["message"]
    redirected = client_a.get("/api/v1/jobs?limit=1")
    assert redirected.status_code == 301 and redirected["Location"] == "/api/v1/jobs/?limit=1"


def test_a_429_says_when_to_come_back_and_every_answer_says_where_the_credential_stands(tenant_a, key_a, monkeypatch):
    from apps.core.api.throttling import CredentialRateThrottle

    monkeypatch.setattr(CredentialRateThrottle, "THROTTLE_RATES", {"credential": "3/min"})
    client = client_for(key_a)
    before = time.time()
    answers = [client.get("/api/v1/tenants/") for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert [a["X-RateLimit-Limit"] for a in answers] == ["3"] * 4
    assert [a["X-RateLimit-Remaining"] for a in answers] == ["2", "1", "0", "0"]
    reset = int(answers[3]["X-RateLimit-Reset"])
    assert before + 60 <= reset <= time.time() + 61  # the first request leaves the one-minute window then
    assert 1 <= int(answers[3]["Retry-After"]) <= 60
    assert envelope(answers[3])["type"] == "rate_limited"
    other = client_for(make_key(tenant_a)).get("/api/v1/tenants/")
    assert other.status_code == 200 and other["X-RateLimit-Remaining"] == "2"


def test_a_wrong_scope_is_answered_with_the_scopes_there_are(client_a):
    from apps.core.scopes import ALL_SCOPES

    response = client_a.post("/api/v1/api-keys/", {"name": "k", "scopes": ["jobs:read", "read"]}, format="json")
    assert response.status_code == 400
    message = envelope(response)["message"]
    assert "'read' is not a scope" in message
    assert all(scope in message for scope in ALL_SCOPES)

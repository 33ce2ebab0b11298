"""GET /api/v1/usage/llm/: grouping, totals, the time window, CSV, tenant isolation, the platform view, errors."""

from __future__ import annotations

import csv
import datetime as dt
import io

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.llm.models import LlmUsageHourly
from tests.factories import client_for, make_key

pytestmark = pytest.mark.django_db
URL = "/api/v1/usage/llm/"
DAY1, DAY2 = dt.datetime(2025, 3, 10, tzinfo=dt.UTC), dt.datetime(2025, 3, 11, tzinfo=dt.UTC)
WINDOW = {"start": "2025-03-10", "end": "2025-03-11"}  # both days (a date `end` includes that day)
METRICS = ("requests", "errors", "input_tokens", "output_tokens", "total_tokens", "estimated_requests")


def hourly(tenant, hour, key_id, model, requests, errors=0, tokens=(0, 0), estimated=0) -> LlmUsageHourly:
    return LlmUsageHourly.objects.create(
        tenant=tenant,
        key_id=key_id,
        model=model,
        hour=hour,
        requests=requests,
        errors=errors,
        input_tokens=tokens[0],
        output_tokens=tokens[1],
        estimated_requests=estimated,
    )


@pytest.fixture
def usage(tenant_a, tenant_b):
    h9, h10 = DAY1 + dt.timedelta(hours=9), DAY1 + dt.timedelta(hours=10)
    hourly(tenant_a, h9, "ka1", "gpt", 3, errors=1, tokens=(100, 50))
    hourly(tenant_a, h9, "ka2", "gpt", 2, tokens=(40, 10), estimated=1)
    hourly(tenant_a, h10, "ka1", "llama", 1, tokens=(5, 5))
    hourly(tenant_a, DAY2, "ka1", "gpt", 4, tokens=(200, 100))
    hourly(tenant_b, h9, "kb1", "gpt", 7, errors=2, tokens=(700, 300), estimated=3)


@pytest.fixture
def platform(platform_key):
    return client_for(platform_key)


def _ok(response) -> dict:
    assert response.status_code == 200, response.content
    return response.json()


def _rows(body, *fields) -> list[tuple]:
    return [tuple(row[f] for f in fields) for row in body["results"]]


def _metrics(requests, errors, input_tokens, output_tokens, estimated) -> dict[str, int]:
    values = (requests, errors, input_tokens, output_tokens, input_tokens + output_tokens, estimated)
    return dict(zip(METRICS, values, strict=True))


def test_default_grouping_is_day_and_model_with_totals(usage, client_a):
    body = _ok(client_a.get(URL, WINDOW))
    assert body["group_by"] == ["day", "model"]
    assert body["start"] == "2025-03-10T00:00:00Z" and body["end"] == "2025-03-12T00:00:00Z"
    assert body["count"] == 3
    assert body["results"] == [
        {"day": "2025-03-10", "model": "gpt", **_metrics(5, 1, 140, 60, 1)},
        {"day": "2025-03-10", "model": "llama", **_metrics(1, 0, 5, 5, 0)},
        {"day": "2025-03-11", "model": "gpt", **_metrics(4, 0, 200, 100, 0)},
    ]
    assert body["totals"] == _metrics(10, 1, 345, 165, 1)


def test_group_by_hour_and_key_orders_rows_in_that_order(usage, client_a):
    body = _ok(client_a.get(URL, {**WINDOW, "group_by": "hour,key"}))
    assert body["group_by"] == ["hour", "key"]
    assert _rows(body, "hour", "key", "requests") == [
        ("2025-03-10T09:00:00Z", "ka1", 3),
        ("2025-03-10T09:00:00Z", "ka2", 2),
        ("2025-03-10T10:00:00Z", "ka1", 1),
        ("2025-03-11T00:00:00Z", "ka1", 4),
    ]
    assert all(set(row) == {"hour", "key", *METRICS} for row in body["results"])
    by_key_model = _ok(client_a.get(URL, {**WINDOW, "group_by": "key,model,key"}))  # a repeat counts once
    assert by_key_model["group_by"] == ["key", "model"]
    assert _rows(by_key_model, "key", "model", "requests") == [
        ("ka1", "gpt", 7),
        ("ka1", "llama", 1),
        ("ka2", "gpt", 2),
    ]


def test_filters_narrow_rows_and_totals(usage, client_a):
    by_model = _ok(client_a.get(URL, {**WINDOW, "model": "llama", "group_by": "model"}))
    assert _rows(by_model, "model", "requests") == [("llama", 1)] and by_model["totals"]["requests"] == 1
    by_key = _ok(client_a.get(URL, {**WINDOW, "key": "ka2", "group_by": "key"}))
    assert _rows(by_key, "key", "requests") == [("ka2", 2)] and by_key["totals"] == _metrics(2, 0, 40, 10, 1)


@pytest.mark.parametrize(
    ("window", "requests"),
    [
        # an hour counts whole when it overlaps [start, end): 09:30 takes the 09:00 hour, end is exclusive
        ({"start": "2025-03-10T09:30:00", "end": "2025-03-10T10:00:00"}, 5),
        ({"start": "2025-03-10T09:30:00Z", "end": "2025-03-10T10:00:01Z"}, 6),
        ({"start": "2025-03-10T10:00:00+01:00", "end": "2025-03-10T11:00:00+01:00"}, 5),  # offsets become UTC
        ({"start": "2025-03-10", "end": "2025-03-10"}, 6),  # one whole day
        ({"start": "2025-03-11", "end": "2025-03-11T00:59:59Z"}, 4),
        ({"end": "2025-03-10"}, 6),  # start: the start of end's day
        ({"start": "2025-03-12", "end": "2025-03-13"}, 0),
    ],
)
def test_time_window(usage, client_a, window, requests):
    body = _ok(client_a.get(URL, {**window, "group_by": "tenant"}))
    assert body["totals"]["requests"] == requests
    assert body["count"] == (1 if requests else 0)


def test_default_window_is_today_utc_so_far(tenant_a, client_a):
    this_hour = dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0)
    midnight = this_hour.replace(hour=0)
    hourly(tenant_a, this_hour, "ka1", "gpt", 2)
    hourly(tenant_a, midnight - dt.timedelta(hours=1), "ka1", "gpt", 30)  # yesterday
    body = _ok(client_a.get(URL))
    assert body["start"] == midnight.isoformat().replace("+00:00", "Z")
    assert body["totals"]["requests"] == 2
    assert _rows(body, "day", "model", "requests") == [(midnight.date().isoformat(), "gpt", 2)]


def _csv(response) -> list[dict[str, str]]:
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/csv")
    return list(csv.DictReader(io.StringIO(response.content.decode())))


def test_csv_has_a_header_and_the_same_rows(usage, client_a):
    json_rows = _ok(client_a.get(URL, {**WINDOW, "group_by": "day,model,key"}))["results"]
    for response in (
        client_a.get(URL, {**WINDOW, "group_by": "day,model,key", "format": "csv"}),
        client_a.get(URL, {**WINDOW, "group_by": "day,model,key"}, HTTP_ACCEPT="text/csv"),
    ):
        text = response.content.decode()
        assert text.splitlines()[0] == "day,model,key," + ",".join(METRICS)
        rows = _csv(response)
        assert rows == [{k: str(v) for k, v in row.items()} for row in json_rows]
        assert len(rows) == 4 and rows[0] == {
            "day": "2025-03-10",
            "model": "gpt",
            "key": "ka1",
            **{k: str(v) for k, v in _metrics(3, 1, 100, 50, 0).items()},
        }


def test_csv_is_not_paginated_and_an_empty_one_still_has_its_header(usage, client_a):
    assert len(_csv(client_a.get(URL, {**WINDOW, "group_by": "hour,key", "format": "csv", "limit": 1}))) == 4
    empty = client_a.get(URL, {"start": "2024-01-01", "end": "2024-01-02", "format": "csv", "group_by": "model"})
    assert _csv(empty) == [] and empty.content.decode().strip() == "model," + ",".join(METRICS)


def test_csv_cells_are_not_read_as_formulas(tenant_a, client_a):
    hourly(tenant_a, DAY1, "ka1", "=HYPERLINK(1)", 1)
    rows = _csv(client_a.get(URL, {**WINDOW, "group_by": "model", "format": "csv"}))
    assert rows[0]["model"] == "'=HYPERLINK(1)"


def test_a_tenant_never_sees_another_tenants_usage(usage, client_b):
    body = _ok(client_b.get(URL, {**WINDOW, "group_by": "tenant,key"}))
    assert _rows(body, "tenant", "key", "requests") == [("bravo", "kb1", 7)]
    assert body["totals"] == _metrics(7, 2, 700, 300, 3)
    for params in ({"tenant": "alpha"}, {"key": "ka1"}, {"tenant": "alpha", "key": "ka1", "model": "gpt"}):
        asked = _ok(client_b.get(URL, {**WINDOW, "group_by": "tenant", **params}))
        assert asked["results"] == [] and asked["count"] == 0 and asked["totals"]["requests"] == 0
        csv_rows = _csv(client_b.get(URL, {**WINDOW, "group_by": "tenant", "format": "csv", **params}))
        assert csv_rows == []


def test_platform_staff_see_every_tenant_or_one(usage, platform):
    body = _ok(platform.get(URL, {**WINDOW, "group_by": "tenant"}))
    assert _rows(body, "tenant", "requests") == [("alpha", 10), ("bravo", 7)]
    assert body["totals"]["requests"] == 17 and body["totals"]["errors"] == 3
    one = _ok(platform.get(URL, {**WINDOW, "group_by": "tenant,model", "tenant": "bravo"}))
    assert _rows(one, "tenant", "model", "requests") == [("bravo", "gpt", 7)] and one["totals"]["requests"] == 7
    assert _ok(platform.get(URL, {**WINDOW, "tenant": "nobody"}))["count"] == 0


def test_json_is_paginated_but_totals_cover_every_row(usage, client_a):
    body = _ok(client_a.get(URL, {**WINDOW, "group_by": "hour,key", "limit": 1, "offset": 1}))
    assert body["count"] == 4 and body["next"] and body["previous"]
    assert _rows(body, "key", "requests") == [("ka2", 2)] and body["totals"]["requests"] == 10


def test_queries_do_not_grow_with_rows(tenant_a, client_a):
    def queries() -> int:
        with CaptureQueriesContext(connection) as ctx:
            _ok(client_a.get(URL, {**WINDOW, "group_by": "tenant,hour,key,model"}))
        # The key's own lookups (and its last_used_at stamp, at most once a minute) are not the report's.
        return len([q for q in ctx.captured_queries if "tenants_apikey" not in q["sql"]])

    hourly(tenant_a, DAY1, "ka1", "gpt", 1)
    few = queries()
    for n in range(20):
        hourly(tenant_a, DAY1 + dt.timedelta(hours=n % 24), f"k{n}", f"m{n}", 1)
    after = queries()
    assert after == few, (after, few)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"group_by": "week"}, "group_by"),
        ({"group_by": "day,tenants"}, "group_by"),
        ({"group_by": ","}, "group_by"),
        ({"start": "yesterday"}, "start"),
        ({"start": "2025-02-30"}, "start"),
        ({"end": "2025-03-10T25:00"}, "end"),
        ({"start": "2025-03-11", "end": "2025-03-10"}, "end"),
        ({"start": "2025-03-10T10:00Z", "end": "2025-03-10T10:00Z"}, "end"),
        ({"format": "xml"}, "format"),
    ],
)
def test_bad_parameters_are_400_naming_the_parameter(usage, client_a, params, field):
    response = client_a.get(URL, params)
    assert response.status_code == 400, response.content
    assert response["Content-Type"].startswith("application/json")
    error = response.json()["error"]
    assert error["type"] == "invalid_request" and field in error["fields"]
    assert error["message"].startswith(f"{field}: ")


def test_an_error_asked_for_as_csv_is_still_json(usage, client_a):
    response = client_a.get(URL, {"group_by": "week"}, HTTP_ACCEPT="text/csv")
    assert response.status_code == 400 and response["Content-Type"].startswith("application/json")
    assert response.json()["error"]["fields"]["group_by"]


@pytest.mark.parametrize("params", [{}, {"format": "csv"}])
def test_no_credential_is_401(usage, params):
    response = client_for().get(URL, params)
    assert response.status_code == 401, response.content
    assert response.json()["error"]["type"] == "authentication_failed"
    assert response["WWW-Authenticate"] == 'Bearer realm="gryvia"'


def test_reading_needs_models_read(usage, tenant_a):
    assert client_for(make_key(tenant_a, ["jobs:read"])).get(URL, WINDOW).status_code == 403
    reader = _ok(client_for(make_key(tenant_a, ["models:read"])).get(URL, WINDOW))
    assert reader["totals"]["requests"] == 10

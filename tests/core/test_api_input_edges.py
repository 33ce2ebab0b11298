"""Input that parses but that PostgreSQL cannot take: a 400 naming it on both profiles, not a 500 on PostgreSQL.
Found by tests/test_fuzz_api.py."""

import pytest

from apps.queueing.models import Queue

pytestmark = pytest.mark.django_db


def test_a_nul_character_in_a_json_body_is_400_naming_where(client_a):
    payload = {"name": "q1", "cohort": "c\x00", "quotas": [{"resource": "cpu", "nominal": "4"}]}
    response = client_a.post("/api/v1/queues/", payload, format="json")
    assert response.status_code == 400, response.content
    assert "NUL" in response.json()["error"]["message"] and "body.cohort" in response.json()["error"]["message"]
    assert not Queue.all_tenants.exists()
    nested = {"name": "j1", "spec": {"type": "training", "image": "python:3.11-slim", "command": ["echo", "a\x00"]}}
    response = client_a.post("/api/v1/jobs/", nested, format="json")
    assert response.status_code == 400 and "body.spec.command[1]" in response.json()["error"]["message"]


def test_a_nul_character_in_a_yaml_body_is_400(client_a):
    body = 'name: q2\ncohort: "c\\0"\n'
    response = client_a.post("/api/v1/queues/", body, content_type="application/yaml")
    assert response.status_code == 400 and "NUL" in response.json()["error"]["message"]


def test_an_offset_postgresql_refuses_is_read_as_the_same_instant_in_utc(client_a):
    # +16:49 is valid ISO 8601 and past PostgreSQL's ±15:59.
    response = client_a.get("/api/v1/audit/", {"since": "1700-01-21T19:54:33+16:49"})
    assert response.status_code == 200, response.content
    assert response.json()["count"] >= 1  # the tenant's creation, after 1700


@pytest.mark.parametrize(
    ("path", "param"), [("/api/v1/audit/", "since"), ("/api/v1/usage/", "start"), ("/api/v1/usage/", "end")]
)
def test_an_instant_before_year_1_in_utc_is_400(client_a, path, param):
    response = client_a.get(path, {param: "0001-01-01T00:00:00+01:00"})
    assert response.status_code == 400, response.content
    assert param in response.json()["error"]["fields"]


@pytest.mark.parametrize(("path", "param"), [("/api/v1/skus/", "gpu_type"), ("/api/v1/usage/records/", "job")])
def test_a_nul_character_in_a_query_parameter_is_400_naming_it(client_a, path, param):
    response = client_a.get(path, {param: "a\x00"})
    assert response.status_code == 400, response.content
    assert "NUL" in response.json()["error"]["fields"][param][0]

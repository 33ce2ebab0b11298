"""A job document's errors come back all at once: the document's own (apiVersion, kind, metadata, unknown keys),
the name's, the spec's unknown fields and its fields' types, at every depth, in one 400."""

from __future__ import annotations

import pytest

from apps.jobs.models import Job

pytestmark = pytest.mark.django_db

BAD_SPEC = {
    "type": "training",
    "imagee": "busybox",  # misspelt: unknown, and image is then missing
    "gpus": "many",
    "resources": {"cpu": "lots", "gpu": 1},
}
SPEC_ERRORS = {"spec.imagee", "spec.image", "spec.gpus", "spec.resources.cpu", "spec.resources.gpu"}


def fields(response) -> set[str]:
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    for name in error["fields"]:
        assert name in error["message"], name
    return set(error["fields"])


def test_a_flat_document_reports_the_name_and_every_spec_error_at_once(client_a):
    response = client_a.post("/api/v1/jobs/", {"name": "Bad_Name", "spec": BAD_SPEC}, format="json")
    assert fields(response) == {"name"} | SPEC_ERRORS
    assert not Job.all_tenants.exists()


def test_a_manifest_reports_its_own_errors_with_the_name_and_the_spec(client_a):
    manifest = {
        "apiVersion": "v1",
        "kind": "GryviaAIJob",
        "metadata": {"name": "Bad_Name", "labels": {"a": "b"}},
        "spec": BAD_SPEC,
        "status": {},
    }
    response = client_a.post("/api/v1/jobs/", manifest, format="json")
    assert fields(response) == {"apiVersion", "metadata.labels", "status", "name"} | SPEC_ERRORS


def test_an_estimate_reports_every_error_at_once_too(client_a):
    response = client_a.post("/api/v1/jobs/estimate/", {"spec": BAD_SPEC}, format="json")
    assert fields(response) == SPEC_ERRORS


def test_unknown_fields_of_other_kinds_come_with_their_field_errors(client_a):
    body = {"name": "k", "scopes": ["jobs:read"], "expires_at": "never", "colour": "red"}
    response = client_a.post("/api/v1/api-keys/", body, format="json")
    assert fields(response) == {"colour", "expires_at"}

"""/api/v1/jobs/: submit as YAML or JSON, refuse bad specs naming the field, cancel, resize, events, reports."""

from __future__ import annotations

import pytest

from apps.core.models import AuditEntry
from apps.jobs import services
from apps.jobs.models import Job, JobEvent
from tests.factories import ACTOR, client_for
from tests.jobs.factories import HELLO_SPEC, HELLO_YAML, make_job, spec

pytestmark = pytest.mark.django_db


def test_the_hello_manifest_is_accepted_exactly_as_written(client_a):
    response = client_a.generic("POST", "/api/v1/jobs/", HELLO_YAML, content_type="application/yaml")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["apiVersion"] == "gryvia.io/v1alpha1" and body["kind"] == "GryviaAIJob"
    assert body["metadata"]["name"] == "hello" and body["metadata"]["tenant"] == "alpha"
    assert body["spec"]["distributed"] == {"enabled": True, "nodes": 2, "backend": "gloo"}
    assert body["status"]["phase"] == "Pending" and body["status"]["desiredNodes"] == 2
    assert client_a.get("/api/v1/jobs/hello/").json()["metadata"]["uid"] == body["metadata"]["uid"]


def test_flat_json_form(client_a):
    response = client_a.post("/api/v1/jobs/", {"name": "flat", "spec": HELLO_SPEC}, format="json")
    assert response.status_code == 201, response.content


BAD = [
    ({"gpus": -1}, "spec.gpus"),
    ({"type": "unknown"}, "spec.type"),
    ({"timeout": "soon"}, "spec.timeout"),
    ({"env": [{"name": "MASTER_ADDR", "value": "evil"}]}, "spec.env"),
]


@pytest.mark.parametrize(("overrides", "field"), BAD, ids=[b[1] for b in BAD])
def test_bad_specs_are_400_naming_the_field_and_create_nothing(client_a, overrides, field):
    audits = AuditEntry.all_tenants.count()
    response = client_a.post("/api/v1/jobs/", {"name": "bad", "spec": spec(**overrides)}, format="json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert field in error["fields"] and field in error["message"]
    assert not Job.all_tenants.exists() and AuditEntry.all_tenants.count() == audits


@pytest.mark.parametrize(
    ("name", "message"),
    [("x" * 53, "at most 52"), ("Bad_Name", "DNS label"), ("-x", "DNS label")],
)
def test_bad_names_are_refused(client_a, name, message):
    audits = AuditEntry.all_tenants.count()
    yaml = HELLO_YAML.replace("name: hello", f"name: {name}")
    response = client_a.generic("POST", "/api/v1/jobs/", yaml, content_type="application/yaml")
    error = response.json()["error"]
    assert response.status_code == 400 and message in error["message"] and "name" in error["fields"]
    assert not Job.all_tenants.exists() and AuditEntry.all_tenants.count() == audits


def test_duplicate_names_are_refused_per_tenant_only(client_a, client_b):
    assert client_a.generic("POST", "/api/v1/jobs/", HELLO_YAML, content_type="application/yaml").status_code == 201
    again = client_a.generic("POST", "/api/v1/jobs/", HELLO_YAML, content_type="application/yaml")
    assert again.status_code == 400 and "already exists" in again.json()["error"]["message"]
    assert client_b.generic("POST", "/api/v1/jobs/", HELLO_YAML, content_type="application/yaml").status_code == 201


def test_manifest_envelope_is_checked(client_a):
    wrong = client_a.generic(
        "POST", "/api/v1/jobs/", HELLO_YAML.replace("GryviaAIJob", "Deployment"), content_type="text/yaml"
    )
    assert wrong.status_code == 400 and "kind" in wrong.json()["error"]["fields"]


def test_cancel_and_conflicts(client_a, tenant_a):
    job = make_job(tenant_a, "c1")
    response = client_a.post("/api/v1/jobs/c1/cancel/")
    assert response.status_code == 202 and response.json()["status"]["cancelRequested"]
    Job.all_tenants.filter(pk=job.pk).update(phase="Cancelled")
    again = client_a.post("/api/v1/jobs/c1/cancel/")
    assert again.status_code == 409 and "already Cancelled" in again.json()["error"]["message"]


def test_resize_rules(client_a, tenant_a):
    make_job(tenant_a, "static")
    assert client_a.post("/api/v1/jobs/static/resize/", {"nodes": 1}, format="json").status_code == 409
    make_job(tenant_a, "elastic", distributed={"enabled": True, "nodes": 3, "elastic": {"minNodes": 1}})
    for nodes in (0, 4):
        assert client_a.post("/api/v1/jobs/elastic/resize/", {"nodes": nodes}, format="json").status_code == 400
    assert client_a.post("/api/v1/jobs/elastic/resize/", {"nodes": "two"}, format="json").status_code == 400
    ok = client_a.post("/api/v1/jobs/elastic/resize/", {"nodes": 2}, format="json")
    assert ok.status_code == 200 and ok.json()["status"]["desiredNodes"] == 2
    assert ok.json()["metadata"]["generation"] == 2
    reasons = [e["reason"] for e in client_a.get("/api/v1/jobs/elastic/events/").json()["results"]]
    assert reasons == ["Submitted", "ResizeRequested"]


def test_a_read_key_cannot_submit_or_cancel(tenant_a):
    from tests.factories import make_key

    reader = client_for(make_key(tenant_a, ["jobs:read"]))
    make_job(tenant_a, "r1")
    assert reader.get("/api/v1/jobs/r1/").status_code == 200
    assert reader.post("/api/v1/jobs/r1/cancel/").status_code == 403
    assert reader.generic("POST", "/api/v1/jobs/", HELLO_YAML, content_type="application/yaml").status_code == 403


def test_checkpoint_reports_need_the_jobs_own_token(client_a, tenant_a):
    from apps.tenants.services import api_key_issue_bound

    job = make_job(tenant_a, "ck")
    other = make_job(tenant_a, "other")
    token = api_key_issue_bound(tenant=tenant_a, bound_to=f"job:{job.uid}", scopes=["jobs:report"], name="t")
    trainer = client_for(token)
    ok = trainer.post("/api/v1/jobs/ck/checkpoints/", {"step": 10, "committed": True}, format="json")
    assert ok.status_code == 200 and ok.json()["status"]["lastCheckpointStep"] == 10
    assert (
        trainer.post("/api/v1/jobs/other/checkpoints/", {"step": 1, "committed": True}, format="json").status_code
        == 403
    )
    assert trainer.get("/api/v1/jobs/").status_code == 403  # the token can do nothing else
    assert (
        client_a.post("/api/v1/jobs/ck/checkpoints/", {"step": 11, "committed": True}, format="json").status_code == 403
    )
    trainer.post("/api/v1/jobs/ck/checkpoints/", {"step": 15, "committed": False}, format="json")
    job.refresh_from_db()
    assert job.last_checkpoint_step == 10 and job.last_reported_step == 15
    assert JobEvent.objects.filter(job=job, reason="CheckpointCommitted").count() == 1
    assert other.last_checkpoint_step is None
    # The token is revoked when the job ends.
    from apps.tenants.services import api_key_revoke_bound

    api_key_revoke_bound(bound_to=f"job:{job.uid}")
    assert (
        trainer.post("/api/v1/jobs/ck/checkpoints/", {"step": 20, "committed": True}, format="json").status_code == 401
    )


def test_delete_removes_the_job(client_a, tenant_a):
    make_job(tenant_a, "gone")
    assert client_a.delete("/api/v1/jobs/gone/").status_code == 204
    assert client_a.get("/api/v1/jobs/gone/").status_code == 404
    assert AuditEntry.all_tenants.filter(action="job.delete", object_id="gone").count() == 1


def test_service_refuses_resize_after_the_end(tenant_a):
    job = make_job(tenant_a, "done", distributed={"enabled": True, "nodes": 2, "elastic": {"minNodes": 1}})
    Job.all_tenants.filter(pk=job.pk).update(phase="Succeeded")
    with pytest.raises(services.JobConflict):
        services.job_resize(actor=ACTOR, job=job, nodes=1)


def test_the_reconciler_reads_each_tenant_once_per_pass(tenant_a, tenant_b):
    """`jobs_to_reconcile` attaches one shared Tenant per tenant, read once and kept for the pass's later chunks."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from apps.jobs import selectors

    made = [make_job(tenant, f"j{i}") for i, tenant in enumerate([tenant_a, tenant_b] * 3)]
    tenants: dict = {}
    with CaptureQueriesContext(connection) as queries:
        jobs = selectors.jobs_to_reconcile([job.pk for job in made], [], tenants)
    assert len(queries) == 2  # the jobs, then their two tenants together
    assert [job.pk for job in jobs] == sorted(job.pk for job in made)
    assert {job.tenant.slug for job in jobs[0::2]} == {tenant_a.slug} and jobs[0].tenant is jobs[2].tenant
    assert jobs[1].tenant.slug == tenant_b.slug and set(tenants) == {tenant_a.pk, tenant_b.pk}
    with CaptureQueriesContext(connection) as queries:
        again = selectors.jobs_to_reconcile([made[1].pk], [], tenants)
    assert len(queries) == 1 and again[0].tenant is jobs[1].tenant  # already known this pass

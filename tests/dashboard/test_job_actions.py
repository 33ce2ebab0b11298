"""The dashboard's job actions (apps/dashboard/views_job_actions.py): submit a YAML manifest, cancel, resubmit, and
what each role is offered and allowed, through the Django test client."""

from __future__ import annotations

import pytest
import yaml
from django.test import Client
from django.utils.html import escape

from apps.core.models import AuditEntry
from apps.jobs.models import Job
from apps.tenants import services as tenant_services
from tests.factories import ACTOR, make_user
from tests.jobs.factories import make_job, spec

pytestmark = pytest.mark.django_db


def _signed_in(tenant, role: str = "member", *, csrf: bool = False) -> tuple[Client, object]:
    user = make_user()
    tenant_services.membership_add(actor=ACTOR, tenant=tenant, user=user, role=role)
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client, user


def _manifest(name: str = "from-browser", **overrides) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "gryvia.io/v1alpha1",
            "kind": "GryviaAIJob",
            "metadata": {"name": name},
            "spec": spec(**overrides),
        }
    )


def _finish(job) -> None:
    Job.all_tenants.filter(pk=job.pk).update(phase="Failed")


def test_submitting_a_valid_manifest_creates_the_job_as_the_user_and_opens_its_page(tenant_a):
    client, user = _signed_in(tenant_a)
    form = client.get("/submit/")
    assert form.status_code == 200 and b'name="manifest"' in form.content
    response = client.post("/submit/", {"manifest": _manifest()})
    assert response.status_code == 302 and response["Location"] == "/jobs/from-browser/"
    job = Job.all_tenants.get(name="from-browser")
    assert job.tenant_id == tenant_a.pk and job.submitted_by == f"user:{user.username}"
    assert AuditEntry.all_tenants.filter(action="job.create", actor=f"user:{user.username}").exists()


def test_a_manifest_that_is_not_yaml_shows_the_error_and_creates_nothing(tenant_a):
    client, _ = _signed_in(tenant_a)
    response = client.post("/submit/", {"manifest": "spec: [unclosed"})
    assert response.status_code == 400
    assert b"<code>manifest</code>: YAML parse error" in response.content
    assert b"spec: [unclosed</textarea>" in response.content  # the text stays to be fixed
    assert not Job.all_tenants.exists()


def test_an_invalid_spec_shows_every_field_error_of_the_api_and_creates_nothing(tenant_a):
    client, _ = _signed_in(tenant_a)
    document = yaml.safe_load(_manifest(name="Bad_Name", gpus=-1))
    document["kind"] = "Job"
    del document["spec"]["image"]
    response = client.post("/submit/", {"manifest": yaml.safe_dump(document)})
    assert response.status_code == 400
    body = response.content.decode()
    fields = {"kind", "name", "spec.image", "spec.gpus"}
    for field in fields:
        assert f"<code>{field}</code>" in body, field
    # The same paths the REST API names for the same document.
    api_key = tenant_services.api_key_create(actor=ACTOR, tenant=tenant_a, scopes=["jobs:write"])[1]
    api = Client().post(
        "/api/v1/jobs/",
        yaml.safe_dump(document),
        content_type="application/yaml",
        HTTP_AUTHORIZATION=f"Bearer {api_key}",
    )
    assert api.status_code == 400
    api_fields = api.json()["error"]["fields"]
    assert set(api_fields) == fields
    for field, messages in api_fields.items():
        assert f"<code>{field}</code>: {escape(' '.join(messages))}" in body
    assert not Job.all_tenants.exists()


def test_a_taken_name_is_a_field_error(tenant_a):
    make_job(tenant_a, name="taken")
    client, _ = _signed_in(tenant_a)
    response = client.post("/submit/", {"manifest": _manifest(name="taken")})
    assert response.status_code == 400 and b"already exists" in response.content
    assert Job.all_tenants.count() == 1


def test_a_member_cancels_an_active_job_and_resubmits_a_finished_one(tenant_a):
    job = make_job(tenant_a, name="train")
    client, user = _signed_in(tenant_a)
    page = client.get("/jobs/train/")
    assert b'action="/jobs/train/cancel/"' in page.content and b"/resubmit/" not in page.content
    assert client.post("/jobs/train/cancel/")["Location"] == "/jobs/train/"
    job.refresh_from_db()
    assert job.cancel_requested_at is not None
    assert AuditEntry.all_tenants.filter(action="job.cancel", actor=f"user:{user.username}").exists()
    refused = client.post("/jobs/train/resubmit/", follow=True)
    assert b"only a finished job can be resubmitted" in refused.content
    _finish(job)
    page = client.get("/jobs/train/")
    assert b'action="/jobs/train/resubmit/"' in page.content and b"/cancel/" not in page.content
    response = client.post("/jobs/train/resubmit/")
    assert response.status_code == 302 and response["Location"] == "/jobs/train-r2/"
    assert Job.all_tenants.get(name="train-r2").submitted_by == f"user:{user.username}"


def test_cancelling_a_finished_job_is_reported_not_done(tenant_a):
    job = make_job(tenant_a, name="done")
    _finish(job)
    client, _ = _signed_in(tenant_a)
    response = client.post("/jobs/done/cancel/", follow=True)
    assert b"already Failed" in response.content
    job.refresh_from_db()
    assert job.cancel_requested_at is None


def test_a_viewer_is_offered_no_actions_and_their_posts_are_refused_as_the_api_refuses_them(tenant_a):
    job = make_job(tenant_a, name="train")
    client, _ = _signed_in(tenant_a, role="viewer")
    assert b"Submit job" not in client.get("/jobs/").content
    page = client.get("/jobs/train/")
    assert page.status_code == 200 and b"/cancel/" not in page.content and b"/resubmit/" not in page.content
    assert client.get("/submit/").status_code == 403
    assert client.post("/submit/", {"manifest": _manifest()}).status_code == 403
    assert client.post("/jobs/train/cancel/").status_code == 403
    _finish(job)
    assert client.post("/jobs/train/resubmit/").status_code == 403
    assert Job.all_tenants.count() == 1
    job.refresh_from_db()
    assert job.cancel_requested_at is None
    # The REST API answers a viewer's cancel with the same 403.
    viewer_key = tenant_services.api_key_create(actor=ACTOR, tenant=tenant_a, scopes=["jobs:read"])[1]
    api = Client().post("/api/v1/jobs/train/cancel/", HTTP_AUTHORIZATION=f"Bearer {viewer_key}")
    assert api.status_code == 403


def test_a_member_sees_the_submit_link(tenant_a):
    client, _ = _signed_in(tenant_a)
    assert b'href="/submit/"' in client.get("/jobs/").content


def test_another_tenants_job_cannot_be_cancelled(tenant_a, tenant_b):
    make_job(tenant_b, name="theirs")
    client, _ = _signed_in(tenant_a)
    assert client.post("/jobs/theirs/cancel/").status_code == 404
    assert client.post("/jobs/theirs/resubmit/").status_code == 404


def test_the_actions_require_the_csrf_token(tenant_a):
    make_job(tenant_a, name="train")
    client, _ = _signed_in(tenant_a, csrf=True)
    assert client.post("/submit/", {"manifest": _manifest()}).status_code == 403
    assert client.post("/jobs/train/cancel/").status_code == 403
    assert not Job.all_tenants.filter(name="from-browser").exists()
    assert Job.all_tenants.get(name="train").cancel_requested_at is None
    # With the token the page's form carries, the same post goes through.
    client.get("/jobs/train/")
    token = client.cookies["csrftoken"].value
    assert client.post("/jobs/train/cancel/", {"csrfmiddlewaretoken": token}).status_code == 302
    assert Job.all_tenants.get(name="train").cancel_requested_at is not None

"""The dashboard's login, tenant pages and tenant switch (apps/dashboard), through the Django test client."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from apps.dashboard.services import SESSION_KEY
from apps.jobs.models import Job
from apps.tenants import services as tenant_services
from tests.factories import ACTOR, make_tenant, make_user
from tests.jobs.factories import make_job

pytestmark = pytest.mark.django_db


def _member(tenant, role: str = "member", username: str | None = None):
    user = make_user(username)
    tenant_services.membership_add(actor=ACTOR, tenant=tenant, user=user, role=role)
    return user


def _client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize("path", ["/", "/jobs/", "/jobs/anything/"])
def test_an_anonymous_visitor_is_sent_to_the_login_page(client, path):
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/login/?next=")


def test_the_login_page_signs_a_member_in_and_lands_on_the_overview(client, tenant_a):
    _member(tenant_a, username="alice")
    page = client.get("/login/")
    assert page.status_code == 200
    assert b'name="username"' in page.content and b'name="password"' in page.content
    wrong = client.post("/login/", {"username": "alice", "password": "nope"})
    assert wrong.status_code == 200 and b"did not match" in wrong.content
    response = client.post("/login/", {"username": "alice", "password": "pw-for-tests-1"}, follow=True)
    assert response.redirect_chain[-1][0] == "/"
    assert b">Jobs</a>" in response.content
    assert b"alice" in response.content


def test_logout_ends_the_session(tenant_a):
    client = _client_for(_member(tenant_a))
    assert client.get("/").status_code == 200
    assert client.post("/logout/").status_code == 302
    assert client.get("/").status_code == 302


def test_overview_and_jobs_list_show_the_users_tenant_only(tenant_a, tenant_b):
    mine = make_job(tenant_a, name="mine-1")
    make_job(tenant_b, name="theirs-1")
    Job.all_tenants.filter(pk=mine.pk).update(phase="Failed")
    client = _client_for(_member(tenant_a))
    overview = client.get("/")
    assert overview.status_code == 200
    assert b"mine-1" in overview.content and b"theirs-1" not in overview.content
    failed_card = overview.content.split(b"?phase=Failed")[1].split(b"</a>")[0]
    assert b'<span class="count">1</span>' in failed_card
    jobs = client.get("/jobs/")
    assert b"mine-1" in jobs.content and b"theirs-1" not in jobs.content


def test_the_jobs_list_filters_by_phase_queue_and_name(tenant_a):
    make_job(tenant_a, name="train-a")
    other = make_job(tenant_a, name="eval-b")
    Job.all_tenants.filter(pk=other.pk).update(phase="Running", queue_name="fast")
    client = _client_for(_member(tenant_a))
    assert b"eval-b" in client.get("/jobs/?phase=Running").content
    assert b"train-a" not in client.get("/jobs/?phase=Running").content
    assert b"train-a" not in client.get("/jobs/?queue=fast").content
    by_name = client.get("/jobs/?name=train")
    assert b"train-a" in by_name.content and b"eval-b" not in by_name.content
    invalid = client.get("/jobs/?phase=Nonsense")
    assert invalid.status_code == 200 and b"train-a" not in invalid.content and b'role="alert"' in invalid.content


def test_an_htmx_request_gets_the_table_only(tenant_a):
    make_job(tenant_a, name="train-a")
    response = _client_for(_member(tenant_a)).get("/jobs/", headers={"HX-Request": "true"})
    assert b"train-a" in response.content
    assert b"<html" not in response.content


def test_the_jobs_list_paginates(tenant_a):
    for i in range(27):
        make_job(tenant_a, name=f"bulk-{i}")
    client = _client_for(_member(tenant_a))
    first = client.get("/jobs/")
    assert b"Page 1 of 2 (27 jobs)" in first.content
    second = client.get("/jobs/?page=2")
    assert second.content.count(b'href="/jobs/bulk-') == 2


def _list_queries(client) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get("/jobs/").status_code == 200
    return len(queries)


def test_the_jobs_list_query_count_does_not_grow_with_its_rows(tenant_a):
    client = _client_for(_member(tenant_a))
    for i in range(2):
        make_job(tenant_a, name=f"few-{i}")
    _list_queries(client)  # the first page of a session also stores its tenant in the session
    few = _list_queries(client)
    for i in range(18):
        make_job(tenant_a, name=f"many-{i}")
    assert _list_queries(client) == few


def test_job_detail_shows_spec_phase_and_events(tenant_a):
    job = make_job(tenant_a, name="detail-me")
    job.events.create(reason="Queued", message="waiting for 4 GPUs")
    response = _client_for(_member(tenant_a)).get("/jobs/detail-me/")
    assert response.status_code == 200
    assert b"image: python:3.11-slim" in response.content
    assert b"waiting for 4 GPUs" in response.content
    assert job.phase.encode() in response.content


def test_another_tenants_job_is_a_404(tenant_a, tenant_b):
    make_job(tenant_b, name="secret")
    client = _client_for(_member(tenant_a))
    assert client.get("/jobs/secret/").status_code == 404


def test_a_user_with_two_memberships_switches_tenant(tenant_a, tenant_b):
    user = _member(tenant_a)
    tenant_services.membership_add(actor=ACTOR, tenant=tenant_b, user=user, role="viewer")
    make_job(tenant_b, name="in-bravo")
    client = _client_for(user)
    page = client.get("/")
    assert b'name="tenant"' in page.content  # the switcher shows with two memberships
    assert b"in-bravo" not in page.content  # alpha comes first (by slug)
    response = client.post("/tenant/", {"tenant": "bravo", "next": "/jobs/x/"})
    assert response.status_code == 302 and response["Location"] == "/jobs/"
    assert client.session[SESSION_KEY] == "bravo"
    assert b"in-bravo" in client.get("/jobs/").content
    assert client.get("/jobs/in-bravo/").status_code == 200


def test_the_switch_refuses_a_tenant_the_user_is_not_a_member_of(tenant_a, tenant_b):
    make_job(tenant_b, name="in-bravo")
    client = _client_for(_member(tenant_a))
    assert client.post("/tenant/", {"tenant": "bravo"}).status_code == 404
    assert client.session[SESSION_KEY] == "alpha"
    assert b"in-bravo" not in client.get("/jobs/").content


def test_staff_may_pick_any_tenant(tenant_a, tenant_b):
    make_job(tenant_b, name="in-bravo")
    client = _client_for(make_user(staff=True))
    assert client.post("/tenant/", {"tenant": "bravo"}).status_code == 302
    assert client.get("/jobs/in-bravo/").status_code == 200


def test_a_user_without_a_tenant_gets_a_clear_page():
    make_tenant("lonely")
    response = _client_for(make_user()).get("/")
    assert response.status_code == 403
    assert b"not a member of any tenant" in response.content


def test_the_pages_load_their_css_and_htmx_from_this_origin(tenant_a):
    page = _client_for(_member(tenant_a)).get("/jobs/")
    assert b'src="/static/django_htmx/htmx-2.min.js"' in page.content
    assert b"<script>" not in page.content  # no inline script: the CSP forbids it
    assert "unsafe-inline" not in page["Content-Security-Policy"].split("script-src")[1].split(";")[0]


@pytest.mark.parametrize("path", ["/static/django_htmx/htmx-2.min.js", "/static/dashboard/dashboard.css"])
def test_the_app_serves_its_own_static_files(client, path):
    response = client.get(path)  # WhiteNoise, from the apps' static folders: no collectstatic, no CDN
    assert response.status_code == 200
    assert b"".join(response.streaming_content)


def test_the_overview_query_count_does_not_grow_with_the_jobs(tenant_a):
    client = _client_for(_member(tenant_a))
    make_job(tenant_a, name="few-0")
    client.get("/")
    with CaptureQueriesContext(connection) as few:
        client.get("/")
    for i in range(15):
        make_job(tenant_a, name=f"many-{i}")
    with CaptureQueriesContext(connection) as many:
        assert b"many-14" in client.get("/").content
    assert len(many) == len(few)

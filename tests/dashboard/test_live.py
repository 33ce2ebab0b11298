"""The job pages' live parts (apps/dashboard/live.py, docs/dashboard.md "Live views"): the status fragment, the log
the page follows, and the session-authenticated websocket the page subscribes with."""

from __future__ import annotations

import contextlib
import logging

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.test import Client

from apps.cluster.services import POD
from apps.core import events
from apps.jobs import choices as C
from apps.jobs import logs
from apps.jobs import services as job_services
from apps.jobs.models import Job
from apps.jobs.reconciler import reconcile_jobs
from apps.tenants import services as tenant_services
from gryvia_site.asgi import application
from tests.factories import ACTOR, make_user
from tests.jobs.factories import make_job

HEADERS = [(b"origin", b"http://testserver"), (b"host", b"testserver")]


def _member(tenant, username: str):
    user = make_user(username)
    tenant_services.membership_add(actor=ACTOR, tenant=tenant, user=user, role="member")
    return user


def _client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


# --- the status fragment -----------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_status_fragment_shows_the_current_phase_and_is_scoped_to_the_tenant(tenant_a, tenant_b):
    client = _client_for(_member(tenant_a, "stat-a"))
    job = make_job(tenant_a, name="live-1")
    make_job(tenant_b, name="theirs-1")
    page = client.get("/jobs/live-1/")
    assert b'data-status-url="/jobs/live-1/status/"' in page.content
    assert b"dashboard/live.js" in page.content and b'data-log-url="/jobs/live-1/log/"' in page.content
    listing = client.get("/jobs/")
    assert b'id="jobs-live" data-live-tenant="alpha"' in listing.content and b"dashboard/live.js" in listing.content

    first = client.get("/jobs/live-1/status/", HTTP_HX_REQUEST="true")
    assert first.status_code == 200 and first["Cache-Control"] == "no-store"
    assert f"<dd>{job.phase}</dd>".encode() in first.content
    assert b'id="job-phase-badge" hx-swap-oob="true"' in first.content  # the heading's badge comes along

    Job.all_tenants.filter(pk=job.pk).update(phase=C.JobPhase.RUNNING, reason="Started", message="2 of 2 ready")
    second = client.get("/jobs/live-1/status/")
    assert b"<dd>Running</dd>" in second.content and b"Started: 2 of 2 ready" in second.content
    assert b"phase-running" in second.content

    assert client.get("/jobs/theirs-1/status/").status_code == 404
    assert client.get("/jobs/nope/status/").status_code == 404
    assert Client().get("/jobs/live-1/status/").status_code == 302  # the login page first


# --- the log the page follows and downloads -----------------------------------------------------------------------


class _Pods:
    """A cluster backend with one finished pod per job, whose log is fixed (the log reader's view of a cluster)."""

    def list(self, kind, *, label_selector: str, namespace: str):
        assert kind == POD
        uid = label_selector.split("=", 1)[1]
        return [
            {
                "metadata": {"name": f"p-{uid}", "labels": {C.INDEX_LABEL: "0"}},
                "status": {"phase": "Succeeded"},
            }
        ]

    def pod_logs(self, *, namespace: str, pod: str, tail_lines=None) -> str:
        return f"hello from {namespace}\nstep 1\nstep 2\n"


async def _collect(response) -> bytes:
    """A followed log's whole stream (an async iterator: under ASGI it goes out chunk by chunk)."""
    return b"".join([chunk async for chunk in response.streaming_content])


@pytest.mark.django_db
def test_log_endpoint_serves_the_jobs_log_with_the_session_and_404s_across_tenants(tenant_a, tenant_b, monkeypatch):
    monkeypatch.setattr(logs, "get_backend", lambda: _Pods())
    client = _client_for(_member(tenant_a, "log-a"))
    job = make_job(tenant_a, name="logged-1")
    make_job(tenant_b, name="theirs-2")

    whole = client.get("/jobs/logged-1/log/")
    assert whole.status_code == 200 and whole["Content-Type"] == "text/plain; charset=utf-8"
    assert whole.content.decode() == f"[0] hello from {tenant_a.namespace}\n[0] step 1\n[0] step 2\n"
    assert client.get("/jobs/logged-1/log/?tail=1").content.decode() == "[0] step 2\n"

    download = client.get("/jobs/logged-1/log/?download=1")
    assert download["Content-Disposition"] == 'attachment; filename="logged-1.log"'

    # Following a finished job streams its tail, then ends.
    Job.all_tenants.filter(pk=job.pk).update(phase=C.JobPhase.SUCCEEDED)
    followed = async_to_sync(_collect)(client.get("/jobs/logged-1/log/?follow=1&tail=2"))
    assert followed.decode() == "[0] step 1\n[0] step 2\n"

    for path in ("/jobs/theirs-2/log/", "/jobs/theirs-2/log/?follow=1", "/jobs/theirs-2/log/?download=1"):
        assert client.get(path).status_code == 404
    assert Client().get("/jobs/logged-1/log/").status_code == 302


# --- the websocket the page subscribes with -----------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _socket(cookie: bytes):
    communicator = WebsocketCommunicator(application, "/ws/events/", headers=[*HEADERS, (b"cookie", cookie)])
    ok, code = await communicator.connect()
    assert ok, f"websocket refused (close code {code})"
    try:
        yield communicator
    finally:
        await communicator.disconnect()


@pytest.fixture
def _clean_channel_layer():
    """Nothing a socket test left in the channel layer reaches the next test (as in tests/core/test_events_ws.py)."""
    yield
    layer = get_channel_layer()
    if layer is not None:  # on the loop plain sync code sends on, whose connections a flush closes
        events.on_layer_loop(layer.flush)


@database_sync_to_async
def _session_cookie(username: str) -> bytes:
    browser = Client()
    assert browser.login(username=username, password="pw-for-tests-1")
    return f"sessionid={browser.cookies['sessionid'].value}".encode()


async def _next_event_for(ws: WebsocketCommunicator, name: str, wanted: str) -> dict:
    """The first event on `ws` for job `name` whose event is `wanted` (the job's other events come first)."""
    for _ in range(20):
        message = await ws.receive_json_from(timeout=5)
        if message.get("type") == "event" and message["id"] == name and message["event"] == wanted:
            return message
        assert message.get("type") == "event" and message["kind"] == "job" and message["id"] == name, message
    raise AssertionError(f"no {wanted} for {name}")


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("_clean_channel_layer")
async def test_the_session_socket_follows_the_users_job_through_the_reconciler(tenant_a, tenant_b, caplog):
    await database_sync_to_async(_member)(tenant_a, "ws-a")
    job = await database_sync_to_async(make_job)(tenant_a, name="watched-1")
    await database_sync_to_async(make_job)(tenant_b, name="foreign-1")

    async with _socket(await _session_cookie("ws-a")) as ws:
        with caplog.at_level(logging.WARNING, logger="apps.core.consumers"):
            await ws.send_json_to({"action": "subscribe", "kind": "job", "id": "foreign-1"})
            refused = await ws.receive_json_from(timeout=2)
        assert refused == {"type": "error", "message": "job 'foreign-1' not found"}
        assert any("refused: job 'foreign-1' for " in r.getMessage() for r in caplog.records)

        await ws.send_json_to({"action": "subscribe", "kind": "job", "id": "watched-1"})
        assert (await ws.receive_json_from(timeout=2))["type"] == "subscribed"

        # The page's path to a phase change: cancel (the service), then the reconciler ends the job.
        await database_sync_to_async(job_services.job_cancel)(actor=ACTOR, job=job)
        await _next_event_for(ws, "watched-1", "job.cancel")
        await database_sync_to_async(reconcile_jobs)()
        await _next_event_for(ws, "watched-1", "job.cancelled")

    await database_sync_to_async(job.refresh_from_db)()
    assert job.phase == C.JobPhase.CANCELLED

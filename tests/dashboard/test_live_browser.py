"""The job page's live views in Chromium against the real ASGI site (tests/dashboard/test_browser.py's fixtures):
the page subscribes on /ws/events/ with its session, the reconciler's phase change reaches the page over it, and
the log tail shows the followed log."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

from django.db import connection

from apps.jobs import logs
from apps.jobs import services as job_services
from apps.jobs.reconciler import reconcile_jobs
from tests.dashboard.test_browser import PASSWORD, _member, pytestmark, site, watched  # noqa: F401 - fixtures and marks
from tests.dashboard.test_live import _Pods
from tests.factories import ACTOR, make_tenant
from tests.jobs.factories import make_job


def _off_the_browser_loop(work) -> None:
    """Run `work` in a thread of its own: Playwright's sync API keeps an event loop in this one, and the events sent
    after commit refuse to block a running loop."""

    def run() -> None:
        try:
            work()
        finally:
            connection.close()

    with ThreadPoolExecutor(1) as pool:
        pool.submit(run).result()


def test_the_job_page_follows_its_phase_over_the_socket_and_tails_the_log(watched, monkeypatch):  # noqa: F811
    monkeypatch.setattr(logs, "get_backend", lambda: _Pods())  # the server thread reads logs through it too
    demo = make_tenant("live", display_name="Live lab")
    _member(demo, "lena")
    job = make_job(demo, name="live-train")
    view = watched()
    frames: list[dict] = []
    view.page.on("websocket", lambda ws: ws.on("framereceived", lambda payload: frames.append(json.loads(payload))))
    # Straight to the job page through the login page's ?next=: no navigation that could cut a request short later.
    view.goto("/jobs/live-train/")
    view.page.wait_for_load_state("load")
    view.page.fill("input[name=username]", "lena")
    view.page.fill("input[name=password]", PASSWORD)
    view.page.click("button[type=submit]")
    view.page.wait_for_url(view.base + "/jobs/live-train/")
    view.page.wait_for_selector("[data-log-lines]:has-text('[0] step 2')", timeout=5000)
    for _ in range(50):
        if {"type": "subscribed", "target": "job 'live-train'"} in frames:
            break
        view.page.wait_for_timeout(100)
    else:
        raise AssertionError(f"the page never subscribed: {frames}")
    assert view.page.is_hidden("[data-live-state]")  # live, not polling

    _off_the_browser_loop(lambda: (job_services.job_cancel(actor=ACTOR, job=job), reconcile_jobs()))
    # Pushed, not polled: the socket's event, then the fragment, well within the 3 s polling period.
    view.page.wait_for_selector("#job-phase-badge:has-text('Cancelled')", timeout=2500)
    assert any(f.get("type") == "event" and f.get("event") == "job.cancelled" for f in frames)
    assert "Cancelled" in view.page.inner_text("#job-status dl")

    view.page.click("[data-log-pause]")
    assert view.page.get_attribute("[data-log-pause]", "aria-pressed") == "true"
    assert view.problems == []

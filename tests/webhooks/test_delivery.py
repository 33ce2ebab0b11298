"""Delivery end to end against a real receiver on loopback: signatures that the `standardwebhooks` package
verifies, retries with the same webhook-id, a worker killed mid-delivery, the retry horizon, Slack text."""

from __future__ import annotations

import base64
import datetime as dt

import pytest
from django.db import transaction
from standardwebhooks import Webhook

from apps.jobs import services as jobs
from apps.webhooks import delivery as drain
from apps.webhooks.delivery import backoff, deliver_webhooks
from apps.webhooks.models import AttemptStatus, Delivery, DeliveryStatus, Event, WebhookEndpoint
from tests.jobs.factories import make_job

pytestmark = pytest.mark.django_db


def _fail(job, message="OOMKilled: 1/1 pod(s) failed"):
    jobs.job_events_record([(job, "Failed", message, "Warning")])


def test_a_delivery_verifies_with_standardwebhooks(tenant_a, receiver, make_endpoint):
    endpoint, secret = make_endpoint(tenant_a, receiver.url)
    assert secret.startswith("whsec_") and len(base64.b64decode(secret.removeprefix("whsec_"))) >= 24
    _fail(make_job(tenant_a, "train-1"))
    stats = deliver_webhooks()
    assert stats.succeeded == 1 and len(receiver.requests) == 1
    got = receiver.requests[0]
    payload = Webhook(secret).verify(got.body, got.headers)
    assert payload["type"] == "job.failed" and payload["tenant"] == "alpha"
    job = payload["data"]["job"]
    assert (job["name"], job["phase"], job["message"]) == ("train-1", "Failed", "OOMKilled: 1/1 pod(s) failed")
    assert got.headers["content-type"] == "application/json" and got.headers["user-agent"].startswith("gryvia")
    delivery = Delivery.all_tenants.get(endpoint=endpoint)
    assert delivery.status == DeliveryStatus.SUCCEEDED and got.headers["webhook-id"] == delivery.message_id
    attempt = delivery.attempt_log.get()
    assert (attempt.status, attempt.status_code, attempt.response_excerpt) == ("succeeded", 200, "ok")
    assert attempt.latency_ms is not None and attempt.address == "127.0.0.1"
    with pytest.raises(Exception, match="signature"):
        Webhook("whsec_" + base64.b64encode(b"x" * 32).decode()).verify(got.body, got.headers)


def test_500_three_times_then_200_arrives_on_the_fourth_attempt_with_the_same_id(
    tenant_a, receiver, make_endpoint, clock
):
    _endpoint, secret = make_endpoint(tenant_a, receiver.url)
    receiver.answer(500, times=3, body=b"upstream down")
    _fail(make_job(tenant_a, "train-2"))
    delivery = Delivery.all_tenants.get()
    for attempt in range(1, 4):
        assert deliver_webhooks(now=clock.now).retrying == 1
        delivery.refresh_from_db()
        wait = (delivery.next_attempt_at - clock.now).total_seconds()
        assert 10 * 2 ** (attempt - 1) * 0.75 <= wait <= 10 * 2 ** (attempt - 1) * 1.25  # doubling, with jitter
        assert deliver_webhooks(now=clock.advance(wait - 1)).claimed == 0  # not due yet
        clock.advance(1)
    assert deliver_webhooks(now=clock.now).succeeded == 1
    assert len(receiver.requests) == 4
    assert len({r.headers["webhook-id"] for r in receiver.requests}) == 1
    Webhook(secret).verify(receiver.requests[-1].body, receiver.requests[-1].headers)
    assert receiver.requests[0].body == receiver.requests[-1].body
    log = list(Delivery.all_tenants.get().attempt_log.values_list("number", "status", "status_code", "error_code"))
    assert log == [
        (1, "failed", 500, "http_status"),
        (2, "failed", 500, "http_status"),
        (3, "failed", 500, "http_status"),
        (4, "succeeded", 200, ""),
    ]
    assert Delivery.all_tenants.get().attempt_log.first().response_excerpt == "upstream down"


def test_a_worker_killed_mid_delivery_loses_nothing(settings, tenant_a, receiver, make_endpoint, clock):
    make_endpoint(tenant_a, receiver.url)
    _fail(make_job(tenant_a, "train-3"))
    claimed = drain.claim(now=clock.now, limit=10)  # the worker takes it ... and dies before sending
    assert len(claimed) == 1
    assert deliver_webhooks(now=clock.advance(5)).claimed == 0  # another worker leaves a leased delivery alone
    stats = deliver_webhooks(now=clock.advance(settings.GRYVIA_WEBHOOK_LEASE_S))  # the lease ran out
    assert (stats.claimed, stats.abandoned, stats.succeeded) == (1, 1, 1)
    assert len(receiver.requests) == 1
    delivery = Delivery.all_tenants.get()
    assert (
        delivery.status == DeliveryStatus.SUCCEEDED
        and receiver.requests[0].headers["webhook-id"] == delivery.message_id
    )
    log = list(delivery.attempt_log.values_list("number", "status", "error_code"))
    assert log == [(1, AttemptStatus.ABANDONED, "worker_lost"), (2, AttemptStatus.SUCCEEDED, "")]
    # The dead worker's late report, if it ever comes, does not move the delivery again.
    drain.record(
        claimed[0], drain.Outcome(status="failed", error_code="timeout"), now=clock.now, stats=drain.DrainStats()
    )
    assert Delivery.all_tenants.get().status == DeliveryStatus.SUCCEEDED


def test_failed_after_the_retry_horizon(settings, tenant_a, receiver, make_endpoint, clock):
    settings.GRYVIA_WEBHOOK_RETRY_HORIZON_S = 60
    endpoint, _ = make_endpoint(tenant_a, receiver.url)
    receiver.answer(503, times=100)
    _fail(make_job(tenant_a, "train-4"))
    for _ in range(20):
        deliver_webhooks(now=clock.now)
        delivery = Delivery.all_tenants.get()
        if delivery.status != DeliveryStatus.PENDING:
            break
        assert delivery.next_attempt_at <= delivery.first_attempt_at + dt.timedelta(seconds=60)
        clock.now = delivery.next_attempt_at
    assert delivery.status == DeliveryStatus.FAILED and delivery.finished_at is not None
    assert delivery.attempts == len(receiver.requests) == delivery.attempt_log.count() >= 3
    endpoint.refresh_from_db()
    assert endpoint.consecutive_failures == 1 and endpoint.enabled


def test_backoff_doubles_up_to_the_cap(settings):
    settings.GRYVIA_WEBHOOK_RETRY_MAX_DELAY_S = 100
    assert [round(backoff(n, rand=_Mid())) for n in range(1, 7)] == [10, 20, 40, 80, 100, 100]


class _Mid:
    def uniform(self, low, high):
        return (low + high) / 2


def test_a_rolled_back_phase_change_emits_nothing(tenant_a, make_endpoint):
    make_endpoint(tenant_a, "https://hooks.example.com/x")
    job = make_job(tenant_a, "train-5")
    with pytest.raises(RuntimeError), transaction.atomic():
        _fail(job)
        assert Delivery.all_tenants.count() == 1  # written in the caller's transaction ...
        raise RuntimeError("the change fails after its event was emitted")
    assert Event.all_tenants.count() == Delivery.all_tenants.count() == 0  # ... and gone with it
    _fail(job)
    assert Delivery.all_tenants.count() == 1


def test_slack_format_posts_text(tenant_a, receiver, make_endpoint):
    make_endpoint(tenant_a, receiver.url, ["job.failed", "job.succeeded"], format="slack")
    _fail(make_job(tenant_a, "train-6"), message="OOMKilled")
    deliver_webhooks()
    assert receiver.requests[0].json() == {"text": "Job alpha/train-6 failed: OOMKilled"}


def test_nothing_is_stored_for_events_nobody_receives(tenant_a, tenant_b, make_endpoint):
    make_endpoint(tenant_b, "https://hooks.example.com/b", ["job.failed"])
    make_endpoint(tenant_a, "https://hooks.example.com/a", ["job.succeeded"])
    _fail(make_job(tenant_a, "train-7"))
    assert Event.all_tenants.count() == 0
    WebhookEndpoint.all_tenants.filter(tenant=tenant_a).update(enabled=False, events=["job.failed"])
    _fail(make_job(tenant_a, "train-8"))
    assert Event.all_tenants.count() == 0


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_workers_claim_different_deliveries(tenant_a, make_endpoint, clock):
    """SELECT … FOR UPDATE SKIP LOCKED: a second worker skips what the first holds instead of waiting for it."""
    import threading

    from django.db import connection

    make_endpoint(tenant_a, "https://hooks.example.com/x")
    job = make_job(tenant_a, "busy")
    for n in range(4):
        jobs.job_events_record([(job, "Failed", f"failure {n}", "Warning")])
    held, release, first = threading.Event(), threading.Event(), []

    def worker() -> None:
        try:
            with transaction.atomic():
                first.extend(drain.claim(now=clock.now, limit=2))
                held.set()
                release.wait(10)
        finally:
            connection.close()

    thread = threading.Thread(target=worker, name="test-claimer")
    thread.start()
    assert held.wait(10)
    try:
        second = drain.claim(now=clock.now, limit=10)  # would block on the first worker's rows without SKIP LOCKED
    finally:
        release.set()
        thread.join(10)
    assert len(first) == 2 and len(second) == 2
    assert not {c.delivery_id for c in first} & {c.delivery_id for c in second}


def test_the_periodic_table_drains_deliveries(tenant_a, receiver, make_endpoint):
    """The same function runs from the embedded ticker and from Celery beat (apps.core.periodic)."""
    from apps.core.periodic import run_periodic

    make_endpoint(tenant_a, receiver.url)
    _fail(make_job(tenant_a, "scheduled"))
    stats = run_periodic("deliver-webhooks")
    assert stats.succeeded == 1 and len(receiver.requests) == 1

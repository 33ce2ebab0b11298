"""Which events reach which endpoint: job phase changes from the reconciler, job selectors, secret rotation's
two signatures, and the tenth consecutive failed delivery disabling the endpoint."""

from __future__ import annotations

import datetime as dt

import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from apps.core.models import AuditEntry
from apps.jobs import services as jobs
from apps.jobs.models import Job
from apps.jobs.reconciler import reconcile_jobs
from apps.queueing import services as queueing
from apps.webhooks import services
from apps.webhooks.delivery import deliver_webhooks
from apps.webhooks.models import Delivery, Event, WebhookEndpoint
from tests.factories import ACTOR
from tests.jobs.factories import make_job

pytestmark = pytest.mark.django_db


def _types(endpoint) -> list[str]:
    return list(Delivery.all_tenants.filter(endpoint=endpoint).order_by("id").values_list("event__type", flat=True))


def test_the_reconciler_emits_job_events_in_its_transaction(monkeypatch, tenant_a, make_endpoint):
    endpoint, _ = make_endpoint(tenant_a, "https://hooks.example.com/x", ["job.rejected", "job.queued"])
    queueing.queue_create(
        actor=ACTOR, tenant=tenant_a, name="team-a", quotas=[{"resource": "nvidia.com/gpu", "nominal": 2}]
    )
    make_job(tenant_a, "huge", gpus=4, queueName="team-a", distributed={"enabled": False})

    original = jobs.job_events_record

    def fails_after_recording(events, **kw):
        original(events, **kw)
        raise RuntimeError("the pass dies after writing its events")

    monkeypatch.setattr(jobs, "job_events_record", fails_after_recording)
    with pytest.raises(RuntimeError):
        reconcile_jobs()
    assert Job.all_tenants.get(name="huge").phase == "Pending"  # the phase change rolled back ...
    assert Event.all_tenants.count() == 0  # ... and so did its event

    monkeypatch.setattr(jobs, "job_events_record", original)
    reconcile_jobs()
    assert Job.all_tenants.get(name="huge").phase == "Rejected"
    assert _types(endpoint) == ["job.rejected"]
    event = Event.all_tenants.get()
    assert event.subject == "job/huge" and event.data["job"]["reason"] == "Rejected"
    assert "can get at most 2" in event.data["job"]["message"] and event.data["job"]["queue"] == "team-a"


def test_every_phase_event_type(tenant_a, make_endpoint):
    types = ["job.queued", "job.running", "job.succeeded", "job.failed", "job.cancelled", "job.preempted"]
    endpoint, _ = make_endpoint(tenant_a, "https://hooks.example.com/x", [*types, "job.rejected"])
    job = make_job(tenant_a, "lifecycle")
    reasons = ["Queued", "Running", "Succeeded", "Failed", "Cancelled", "Preempted", "Requeued", "Rejected"]
    jobs.job_events_record([(job, r, "", "Normal") for r in [*reasons, "Scheduled", "Restarted", "NodeLost"]])
    assert _types(endpoint) == [*types, "job.queued", "job.rejected"]


def test_job_selectors_deliver_only_matching_jobs(tenant_a, make_endpoint):
    by_name, _ = make_endpoint(tenant_a, "https://hooks.example.com/n", job_names=["train-*", "nightly-?"])
    by_label, _ = make_endpoint(tenant_a, "https://hooks.example.com/l", job_labels={"gryvia.io/type": "evaluation"})
    everything, _ = make_endpoint(tenant_a, "https://hooks.example.com/all")
    names = ["train-1", "nightly-7", "nightly-77", "eval-1"]
    made = {n: make_job(tenant_a, n, type="evaluation" if n.startswith("eval") else "training") for n in names}
    jobs.job_events_record([(job, "Failed", "boom", "Warning") for job in made.values()])

    def subjects(endpoint):
        return sorted(Delivery.all_tenants.filter(endpoint=endpoint).values_list("event__subject", flat=True))

    assert subjects(by_name) == ["job/nightly-7", "job/train-1"]
    assert subjects(by_label) == ["job/eval-1"]
    assert len(subjects(everything)) == 4
    assert Event.all_tenants.count() == 4  # one event, one delivery per receiving endpoint


def test_during_a_rotation_both_secrets_verify_and_after_it_only_the_new_one(tenant_a, receiver, make_endpoint, clock):
    endpoint, old = make_endpoint(tenant_a, receiver.url)
    endpoint, new = services.endpoint_rotate_secret(actor=ACTOR, endpoint=endpoint, grace_seconds=3600)
    assert new != old and new.startswith("whsec_")
    jobs.job_events_record([(make_job(tenant_a, "during"), "Failed", "x", "Warning")])
    deliver_webhooks(now=clock.now)
    during = receiver.requests[-1]
    assert len(during.headers["webhook-signature"].split(" ")) == 2
    Webhook(new).verify(during.body, during.headers)
    Webhook(old).verify(during.body, during.headers)

    jobs.job_events_record([(make_job(tenant_a, "after"), "Failed", "x", "Warning")])
    deliver_webhooks(now=endpoint.previous_secret_expires_at + dt.timedelta(seconds=1))
    after = receiver.requests[-1]
    assert len(after.headers["webhook-signature"].split(" ")) == 1
    Webhook(new).verify(after.body, after.headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(old).verify(after.body, after.headers)
    rotation = AuditEntry.all_tenants.get(action="webhook.rotate_secret")
    assert old not in str(rotation.after) and new not in str(rotation.after)


def test_the_tenth_consecutive_failure_disables_the_endpoint(settings, tenant_a, receiver, make_endpoint):
    settings.GRYVIA_WEBHOOK_RETRY_HORIZON_S = 0  # each delivery fails at its first attempt
    endpoint, _ = make_endpoint(tenant_a, receiver.url)
    watcher, _ = make_endpoint(tenant_a, "https://hooks.example.com/ops", ["webhook.disabled"])
    receiver.answer(500, times=20)
    job = make_job(tenant_a, "flaky")
    for n in range(1, 11):
        jobs.job_events_record([(job, "Failed", f"failure {n}", "Warning")])
        stats = deliver_webhooks()
        endpoint.refresh_from_db()
        assert endpoint.consecutive_failures == n
        assert endpoint.enabled == (n < 10), n
    assert stats.disabled == [endpoint.pk]
    assert "10 consecutive failed deliveries" in endpoint.disabled_reason
    audit = AuditEntry.all_tenants.get(action="webhook.disable")
    assert audit.tenant_id == tenant_a.pk and audit.actor == "system:webhooks" and audit.after["enabled"] is False
    assert _types(watcher) == ["webhook.disabled"]  # the event the tenant sees
    assert Event.all_tenants.get(type="webhook.disabled").data["endpoint"] == endpoint.pk
    jobs.job_events_record([(job, "Failed", "after", "Warning")])
    assert Delivery.all_tenants.filter(endpoint=endpoint).count() == 10  # a disabled endpoint gets nothing new

    services.endpoint_update(actor=ACTOR, endpoint=endpoint, enabled=True)
    endpoint.refresh_from_db()
    assert endpoint.consecutive_failures == 0 and endpoint.disabled_reason == ""


def test_a_success_ends_the_run_of_failures(settings, tenant_a, receiver, make_endpoint):
    settings.GRYVIA_WEBHOOK_RETRY_HORIZON_S = 0
    endpoint, _ = make_endpoint(tenant_a, receiver.url)
    receiver.answer(500, times=9)
    job = make_job(tenant_a, "flaky")
    for _ in range(10):
        jobs.job_events_record([(job, "Failed", "x", "Warning")])
        deliver_webhooks()
    endpoint.refresh_from_db()
    assert endpoint.enabled and endpoint.consecutive_failures == 0
    assert WebhookEndpoint.all_tenants.filter(enabled=False).count() == 0

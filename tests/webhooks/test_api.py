"""/api/v1/webhooks/: the secret shown once and stored encrypted, deliveries and redelivery (audited), ping,
rotation, and tenant isolation (another tenant's endpoint or delivery is a 404)."""

from __future__ import annotations

import pytest
from standardwebhooks import Webhook

from apps.core.models import AuditEntry
from apps.jobs import services as jobs
from apps.webhooks.delivery import deliver_webhooks
from apps.webhooks.models import Delivery, WebhookEndpoint
from tests.factories import client_for, make_key
from tests.jobs.factories import make_job

pytestmark = pytest.mark.django_db


def _create(client, url, **body):
    response = client.post("/api/v1/webhooks/", {"url": url, "events": ["job.failed"], **body}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def test_the_secret_is_shown_once_and_stored_encrypted(client_a, receiver):
    created = _create(client_a, receiver.url, job_names=["train-*"])
    secret = created["secret"]
    assert secret.startswith("whsec_") and created["format"] == "standard" and created["job_names"] == ["train-*"]
    shown = client_a.get(f"/api/v1/webhooks/{created['id']}/").json()
    assert "secret" not in shown and all(
        "secret" not in row for row in client_a.get("/api/v1/webhooks/").json()["results"]
    )
    stored = WebhookEndpoint.all_tenants.get(pk=created["id"])
    assert secret not in stored.secret_encrypted and secret.removeprefix("whsec_") not in stored.secret_encrypted
    audit = AuditEntry.all_tenants.get(action="webhook.create")
    assert audit.after["secret"] == "set" and secret not in str(audit.after)


def test_bad_input_is_a_400_naming_the_field(client_a):
    cases = [
        ({"url": "ftp://hooks.example.com/x"}, "url"),
        ({"url": "https://user:pw@hooks.example.com/x"}, "url"),
        ({"events": ["job.exploded"]}, "events"),
        ({"events": []}, "events"),
        ({"format": "teams"}, "format"),
        ({"job_labels": {"a": {"b": "c"}}}, "job_labels"),
    ]
    for change, field in cases:
        body = {"url": "https://hooks.example.com/x", "events": ["job.failed"], **change}
        response = client_a.post("/api/v1/webhooks/", body, format="json")
        assert response.status_code == 400 and field in response.json()["error"]["fields"], (change, response.content)
    assert WebhookEndpoint.all_tenants.count() == 0


def test_deliveries_and_redelivery_through_the_api(client_a, tenant_a, receiver):
    created = _create(client_a, receiver.url)
    jobs.job_events_record([(make_job(tenant_a, "train-1"), "Failed", "OOMKilled", "Warning")])
    deliver_webhooks()
    base = f"/api/v1/webhooks/{created['id']}/deliveries/"
    listed = client_a.get(base).json()
    assert listed["count"] == 1
    row = listed["results"][0]
    assert (row["type"], row["status"], row["attempts"], row["subject"]) == (
        "job.failed",
        "succeeded",
        1,
        "job/train-1",
    )
    assert row["attempt_log"][0]["status_code"] == 200 and client_a.get(f"{base}?status=failed").json()["count"] == 0

    response = client_a.post(f"{base}{row['id']}/redeliver/")
    assert response.status_code == 202 and response.json()["status"] == "pending"
    audit = AuditEntry.all_tenants.get(action="webhook.redeliver")
    assert audit.object_id == str(row["id"]) and audit.before["status"] == "succeeded"
    deliver_webhooks()
    assert len(receiver.requests) == 2
    assert receiver.requests[0].headers["webhook-id"] == receiver.requests[1].headers["webhook-id"] == row["message_id"]
    again = client_a.get(f"{base}{row['id']}/").json()
    assert again["status"] == "succeeded" and [a["number"] for a in again["attempt_log"]] == [1, 2]


def test_ping_and_rotation(client_a, receiver):
    created = _create(client_a, receiver.url)
    response = client_a.post(f"/api/v1/webhooks/{created['id']}/ping/")
    assert response.status_code == 200, response.content
    assert response.json()["type"] == "ping" and response.json()["status"] == "succeeded"
    assert Webhook(created["secret"]).verify(receiver.requests[0].body, receiver.requests[0].headers)["type"] == "ping"

    rotated = client_a.post(f"/api/v1/webhooks/{created['id']}/rotate-secret/", {"grace_seconds": 0}, format="json")
    assert rotated.status_code == 200 and rotated.json()["secret"] != created["secret"]
    assert rotated.json()["secret_rotation_ends_at"] is None
    client_a.post(f"/api/v1/webhooks/{created['id']}/ping/")
    Webhook(rotated.json()["secret"]).verify(receiver.requests[1].body, receiver.requests[1].headers)
    assert len(receiver.requests[1].headers["webhook-signature"].split()) == 1  # no grace: the old one is gone


def test_another_tenants_endpoint_and_deliveries_are_404(client_a, client_b, tenant_a, tenant_b):
    a_hook = _create(client_a, "https://hooks.example.com/a")
    b_hook = _create(client_b, "https://hooks.example.com/b")
    jobs.job_events_record([(make_job(tenant_a, "secret-project"), "Failed", "x", "Warning")])
    a_delivery = Delivery.all_tenants.get(endpoint_id=a_hook["id"]).pk
    for path in (
        f"/api/v1/webhooks/{a_hook['id']}/",
        f"/api/v1/webhooks/{a_hook['id']}/deliveries/",
        f"/api/v1/webhooks/{a_hook['id']}/deliveries/{a_delivery}/",
        f"/api/v1/webhooks/{b_hook['id']}/deliveries/{a_delivery}/",  # B's endpoint, A's delivery
    ):
        assert client_b.get(path).status_code == 404, path
    for path in (
        f"/api/v1/webhooks/{a_hook['id']}/deliveries/{a_delivery}/redeliver/",
        f"/api/v1/webhooks/{b_hook['id']}/deliveries/{a_delivery}/redeliver/",
        f"/api/v1/webhooks/{a_hook['id']}/ping/",
        f"/api/v1/webhooks/{a_hook['id']}/rotate-secret/",
    ):
        assert client_b.post(path).status_code == 404, path
    assert not AuditEntry.all_tenants.filter(action__in=["webhook.redeliver", "webhook.ping"]).exists()


def test_a_read_key_cannot_redeliver_ping_or_rotate(tenant_a, client_a):
    hook = _create(client_a, "https://hooks.example.com/a")
    jobs.job_events_record([(make_job(tenant_a), "Failed", "x", "Warning")])
    delivery = Delivery.all_tenants.get().pk
    reader = client_for(make_key(tenant_a, ["webhooks:read"]))
    assert reader.get(f"/api/v1/webhooks/{hook['id']}/deliveries/").status_code == 200
    for path in (f"deliveries/{delivery}/redeliver/", "ping/", "rotate-secret/"):
        assert reader.post(f"/api/v1/webhooks/{hook['id']}/{path}").status_code == 403, path

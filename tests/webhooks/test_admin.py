"""The admin of apps.webhooks: endpoints saved through the services (secret shown once, never stored in clear),
deliveries read-only with a redeliver action that is audited."""

from __future__ import annotations

import pytest

from apps.core.models import AuditEntry
from apps.jobs import services as jobs
from apps.webhooks.delivery import deliver_webhooks
from apps.webhooks.models import Delivery, WebhookEndpoint
from tests.jobs.factories import make_job

pytestmark = pytest.mark.django_db


def test_add_an_endpoint_in_the_admin(staff_client, tenant_a):
    form = {
        "tenant": tenant_a.pk,
        "url": "https://hooks.example.com/admin",
        "events": '["job.failed"]',
        "enabled": "on",
        "format": "standard",
        "description": "",
        "job_names": "[]",
        "job_labels": "{}",
    }
    response = staff_client.post("/admin/webhooks/webhookendpoint/add/", form, follow=True)
    assert response.status_code == 200
    endpoint = WebhookEndpoint.all_tenants.get()
    shown = [str(m) for m in response.context["messages"]]
    assert any("whsec_" in m for m in shown)
    assert AuditEntry.all_tenants.get(action="webhook.create").actor.startswith("user:")
    page = staff_client.get(f"/admin/webhooks/webhookendpoint/{endpoint.pk}/change/").content.decode()
    assert "whsec_" not in page and endpoint.secret_encrypted not in page

    bad = staff_client.post("/admin/webhooks/webhookendpoint/add/", {**form, "url": "https://10.0.0.1/x"})
    assert bad.status_code == 200 and WebhookEndpoint.all_tenants.count() == 1


def test_redeliver_from_the_admin_is_audited(staff_client, tenant_a, receiver, make_endpoint):
    make_endpoint(tenant_a, receiver.url)
    jobs.job_events_record([(make_job(tenant_a, "train-1"), "Failed", "x", "Warning")])
    deliver_webhooks()
    delivery = Delivery.all_tenants.get()
    assert staff_client.get("/admin/webhooks/delivery/").status_code == 200
    assert staff_client.get(f"/admin/webhooks/delivery/{delivery.pk}/change/").status_code == 200
    response = staff_client.post(
        "/admin/webhooks/delivery/", {"action": "redeliver", "_selected_action": [delivery.pk]}, follow=True
    )
    assert response.status_code == 200
    audit = AuditEntry.all_tenants.get(action="webhook.redeliver")
    assert audit.actor.startswith("user:root") and audit.object_id == str(delivery.pk)
    deliver_webhooks()
    assert len(receiver.requests) == 2 and Delivery.all_tenants.get().attempts == 2

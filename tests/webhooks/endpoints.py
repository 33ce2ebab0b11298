"""Contract registrations for /api/v1/webhooks/ and /api/v1/webhooks/{id}/deliveries/."""

import itertools

from apps.jobs import services as jobs
from apps.webhooks import services
from apps.webhooks.models import Delivery, WebhookEndpoint
from tests.api_contract import Endpoint, register
from tests.factories import ACTOR
from tests.jobs.factories import make_job

_seq = itertools.count(1)


def make_webhook(tenant) -> str:
    endpoint, _secret = services.endpoint_create(
        actor=ACTOR, tenant=tenant, url=f"https://hooks.example.com/{next(_seq)}", events=["job.failed"]
    )
    return str(endpoint.pk)


def _contract_endpoint(tenant) -> WebhookEndpoint:
    """The tenant's endpoint whose deliveries the contract lists (made on first use)."""
    found = WebhookEndpoint.all_tenants.filter(tenant=tenant, description="contract").first()
    if found is None:
        found, _ = services.endpoint_create(
            actor=ACTOR, tenant=tenant, url="https://hooks.example.com/c", events=["job.failed"], description="contract"
        )
    return found


def make_delivery(tenant) -> str:
    endpoint = _contract_endpoint(tenant)
    jobs.job_events_record([(make_job(tenant), "Failed", "contract", "Warning")])
    return str(Delivery.all_tenants.filter(endpoint=endpoint).latest("id").pk)


register(
    Endpoint(
        name="webhooks",
        model=WebhookEndpoint,
        list_path=lambda t: "/api/v1/webhooks/",
        detail_path=lambda t, i: f"/api/v1/webhooks/{i}/",
        make=make_webhook,
        read_scope="webhooks:read",
        write_scope="webhooks:write",
        create_payload=lambda t: {"url": "https://hooks.example.com/new", "events": ["job.failed", "job.succeeded"]},
        update_payload={"events": ["job.running"], "description": "changed"},
        deletes=True,
        read_only_scopes=["webhooks:read"],
    )
)

register(
    Endpoint(
        name="webhook-deliveries",
        model=Delivery,
        list_path=lambda t: f"/api/v1/webhooks/{_contract_endpoint(t).pk}/deliveries/",
        detail_path=lambda t, i: f"/api/v1/webhooks/{_contract_endpoint(t).pk}/deliveries/{i}/",
        make=make_delivery,
        read_scope="webhooks:read",
    )
)

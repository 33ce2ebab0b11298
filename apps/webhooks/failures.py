"""An endpoint's run of failed deliveries: counted by the delivery worker, and the endpoint disabled (audited, with a
`webhook.disabled` event) after GRYVIA_WEBHOOK_DISABLE_AFTER in a row. Re-exported by apps.webhooks.services."""

from __future__ import annotations

from django.conf import settings
from django.db.models import F
from django.utils import timezone

from apps.core import events as core_events

from .audit import SYSTEM, audit_change, endpoint_snapshot
from .models import WebhookEndpoint


def endpoint_failures_record(*, endpoint_id: int, failed: bool) -> bool:
    """Count a finished delivery in the endpoint's run of failures (a success ends the run). Returns whether
    this failure disabled the endpoint. Runs in the caller's transaction."""
    if not failed:
        WebhookEndpoint.all_tenants.filter(pk=endpoint_id, consecutive_failures__gt=0).update(consecutive_failures=0)
        return False
    WebhookEndpoint.all_tenants.filter(pk=endpoint_id).update(consecutive_failures=F("consecutive_failures") + 1)
    endpoint = WebhookEndpoint.all_tenants.select_related("tenant").get(pk=endpoint_id)
    limit = settings.GRYVIA_WEBHOOK_DISABLE_AFTER
    if not endpoint.enabled or endpoint.consecutive_failures < limit:
        return False
    reason = f"disabled after {endpoint.consecutive_failures} consecutive failed deliveries"
    if not WebhookEndpoint.all_tenants.filter(pk=endpoint_id, enabled=True).update(
        enabled=False, disabled_reason=reason, updated_at=timezone.now()
    ):
        return False
    before = endpoint_snapshot(endpoint)
    endpoint.enabled, endpoint.disabled_reason = False, reason
    audit_change(SYSTEM, "webhook.disable", endpoint, before, {**endpoint_snapshot(endpoint), "reason": reason})
    data = {"endpoint": endpoint.pk, "url": endpoint.url, "reason": reason, "consecutive_failures": limit}
    core_events.emit(tenant=endpoint.tenant, type="webhook.disabled", data=data, subject=f"webhook/{endpoint.pk}")
    return True

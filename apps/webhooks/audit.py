"""The webhooks app's audit entries: one helper for the services and the delivery worker's disabling."""

from __future__ import annotations

from typing import Any

from apps.core.audit import audit_record, snapshot
from apps.core.principal import Principal, system

from .models import Delivery, WebhookEndpoint

# Who acts when the app itself changes an endpoint (the delivery worker disabling one).
SYSTEM = system("webhooks")


def audit_change(actor: Principal, action: str, obj: WebhookEndpoint | Delivery, before: Any, after: Any) -> None:
    """Record `action` on an endpoint or a delivery in the audit log."""
    kind = "webhook_endpoint" if isinstance(obj, WebhookEndpoint) else "webhook_delivery"
    audit_record(
        actor=actor,
        action=action,
        obj=obj,
        object_type=kind,
        object_id=str(obj.pk),
        tenant_id=obj.tenant_id,
        tenant_slug=obj.tenant.slug,
        before=before,
        after=after,
    )


def endpoint_snapshot(endpoint: WebhookEndpoint) -> dict[str, Any]:
    """The endpoint's audited fields, as the audit log stores them."""
    return snapshot(endpoint, WebhookEndpoint.AUDIT_FIELDS)

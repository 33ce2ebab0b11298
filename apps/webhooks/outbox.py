"""The outbox behind apps.core.events.emit: Event and Delivery rows, in the caller's transaction.

Only events some enabled endpoint receives are stored. Once the transaction commits the delivery drain is
nudged (apps.webhooks.delivery); until then no worker can see the rows, and a rollback takes them away.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Q
from django.utils import timezone

from apps.core.db.epochs import EpochCached
from apps.core.db.prepared import PreparedRead
from apps.core.periodic import nudge

from .models import Delivery, Event, WebhookEndpoint
from .payloads import job_selected

DRAIN = "deliver-webhooks"


_ENABLED = PreparedRead(lambda: WebhookEndpoint.all_tenants.filter(enabled=True).values_list("tenant_id", "events"))


def _subscriptions() -> dict[int, frozenset[str]]:
    """tenant id -> the event types its enabled endpoints subscribe to."""
    out: dict[int, set[str]] = {}
    for tenant_id, events in _ENABLED.rows():
        out.setdefault(tenant_id, set()).update(events or ())
    return {tenant_id: frozenset(types) for tenant_id, types in out.items()}


# Read again inside a reconcile pass only when an endpoint changed (apps.core.db.epochs); every pass that changes a
# job's phase asks.
_SUBSCRIPTIONS = EpochCached(("webhooks_webhookendpoint",), _subscriptions)


def listening(*, tenant_ids: set[int], types: set[str]) -> set[tuple[int, str]]:
    """The (tenant, type) pairs some enabled endpoint subscribes to."""
    subscriptions = _SUBSCRIPTIONS.get()
    return {(tenant_id, t) for tenant_id in tenant_ids for t in subscriptions.get(tenant_id, ()) if t in types}


def write(items: list[dict[str, Any]]) -> int:
    """Store each event that has receivers, and one due delivery per receiver. Returns the deliveries queued."""
    tenant_ids = {item["tenant_id"] for item in items}
    explicit = {i for item in items for i in item.get("endpoint_ids") or ()}
    endpoints: dict[int, list[dict[str, Any]]] = {}
    rows = WebhookEndpoint.all_tenants.filter(tenant_id__in=tenant_ids).filter(Q(enabled=True) | Q(pk__in=explicit))
    for row in rows.values("id", "tenant_id", "events", "job_names", "job_labels"):
        endpoints.setdefault(row["tenant_id"], []).append(row)
    now = timezone.now()
    events: list[Event] = []
    targets: list[list[int]] = []
    for item in items:
        only = item.get("endpoint_ids")
        chosen = [
            ep["id"]
            for ep in endpoints.get(item["tenant_id"], [])
            if (ep["id"] in only if only is not None else item["type"] in ep["events"])
            and job_selected(names=ep["job_names"], labels=ep["job_labels"], match=item.get("match") or {})
        ]
        if not chosen:
            continue
        events.append(
            Event(
                tenant_id=item["tenant_id"],
                type=item["type"],
                subject=(item.get("subject") or "")[:200],
                data=item["data"],
                created_at=now,
            )
        )
        targets.append(chosen)
    if not events:
        return 0
    Event.all_tenants.bulk_create(events)
    deliveries = [
        Delivery(tenant_id=event.tenant_id, event_id=event.pk, endpoint_id=endpoint_id, next_attempt_at=now)
        for event, chosen in zip(events, targets, strict=True)
        for endpoint_id in chosen
    ]
    Delivery.all_tenants.bulk_create(deliveries)
    nudge(DRAIN)
    return len(deliveries)

"""Live events over Channels, sent only after the transaction that caused them commits.

Groups: `t<tenant_id>` for everything in a tenant, `o.<kind>.<id>` for one object, and `platform` for
platform-level changes. Consumers check access before joining any group (apps.core.consumers).
"""

from __future__ import annotations

import importlib
import logging
import re
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import transaction

logger = logging.getLogger(__name__)
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def tenant_group(tenant_id: int) -> str:
    return f"t{tenant_id}"


def object_group(kind: str, object_id: str) -> str:
    return _UNSAFE.sub("_", f"o.{kind}.{object_id}")[:99]


PLATFORM_GROUP = "platform"


def _send(deliveries: list[tuple[list[str], dict[str, Any]]]) -> None:
    """Send every (groups, message) in one trip to the channel layer's event loop."""
    layer = get_channel_layer()
    if layer is None or not deliveries:
        return

    async def send_all() -> None:
        for groups, message in deliveries:
            for group in groups:
                try:
                    await layer.group_send(group, {"type": "gryvia.event", "event": message})
                except Exception:  # a live view must never break the write that fed it
                    logger.exception("could not broadcast %s to %s", message.get("event"), group)

    async_to_sync(send_all)()


def read_scope(kind: str) -> str | None:
    """The scope a subscriber needs to receive events about objects of `kind` (None: any access to the tenant)."""
    return settings.GRYVIA_EVENT_READ_SCOPES.get(kind)


def _delivery(
    *, tenant_id: int | None, kind: str, object_id: str, event: str, data: dict[str, Any] | None
) -> tuple[list[str], dict[str, Any]]:
    groups = [tenant_group(tenant_id) if tenant_id is not None else PLATFORM_GROUP, object_group(kind, object_id)]
    message = {
        "event": event,
        "kind": kind,
        "id": object_id,
        "data": data,
        "_tenant_id": tenant_id,
        "_scope": read_scope(kind),
    }
    return groups, message


def broadcast(*, tenant_id: int | None, kind: str, object_id: str, event: str, data: dict[str, Any] | None) -> None:
    """Queue an event for delivery once the current transaction commits (at once outside one).

    The message carries its tenant and the scope needed to read it; consumers drop what their client may not see.
    """
    delivery = _delivery(tenant_id=tenant_id, kind=kind, object_id=object_id, event=event, data=data)
    transaction.on_commit(lambda: _send([delivery]))


def broadcast_many(events: list[dict[str, Any]]) -> None:
    """`broadcast` for many events (each a dict of its keyword arguments), delivered in one trip after commit."""
    deliveries = [_delivery(**event) for event in events]
    if deliveries:
        transaction.on_commit(lambda: _send(deliveries))


# --- domain events for outside receivers (webhooks), written to an outbox in the caller's transaction ------------

EVENT_TYPES = (
    "job.queued",
    "job.running",
    "job.succeeded",
    "job.failed",
    "job.cancelled",
    "job.preempted",
    "job.rejected",
    "budget.threshold_crossed",
    "invoice.finalized",
    "invoice.paid",
    "invoice.payment_failed",
    "webhook.disabled",
    "ping",
)
RESERVED_EVENT_TYPES = ("workflow.finished",)  # accepted in subscriptions; emitted once workflows exist


def _outboxes() -> list[Any]:
    return [importlib.import_module(path) for path in settings.GRYVIA_EVENT_OUTBOXES]


def listening(*, tenant_ids: set[int], types: set[str]) -> set[tuple[int, str]]:
    """The (tenant, type) pairs among these that some receiver subscribes to (one query per outbox), so a caller
    with many events builds payloads only for those."""
    out: set[tuple[int, str]] = set()
    if tenant_ids and types:
        for outbox in _outboxes():
            out |= outbox.listening(tenant_ids=tenant_ids, types=types)
    return out


def emit_many(items: list[dict[str, Any]]) -> int:
    """Record events for outside receivers in the caller's transaction: a rolled-back change emits nothing.

    Each item: `tenant_id`, `tenant_slug`, `type` (one of EVENT_TYPES), `data` (JSON-safe), and optionally
    `subject` ("job/<name>"), `match` (what subscriptions select on: {"name": ..., "labels": {...}}) and
    `endpoint_ids` (only these receivers, e.g. a ping). Returns how many deliveries were queued.
    """
    for item in items:
        if item["type"] not in EVENT_TYPES:
            raise ValueError(f"unknown event type {item['type']!r}; known: {', '.join(EVENT_TYPES)}")
    if not items:
        return 0
    return sum(outbox.write(items) for outbox in _outboxes())


def emit(
    *,
    tenant: Any,
    type: str,
    data: dict[str, Any],
    subject: str = "",
    match: dict[str, Any] | None = None,
    endpoint_ids: list[int] | None = None,
) -> int:
    """`emit_many` for one event of `tenant`."""
    item: dict[str, Any] = {"tenant_id": tenant.pk, "tenant_slug": tenant.slug, "type": type, "data": data}
    item.update(subject=subject, match=match or {}, endpoint_ids=endpoint_ids)
    return emit_many([item])

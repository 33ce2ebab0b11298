"""Live events over Channels, sent only after the transaction that caused them commits.

Groups: `t<tenant_id>` for everything in a tenant, `o.<kind>.<id>` for one object, and `platform` for
platform-level changes. Consumers check access before joining any group (apps.core.consumers).
"""

from __future__ import annotations

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

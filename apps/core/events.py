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


def _send(groups: list[str], message: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    for group in groups:
        try:
            async_to_sync(layer.group_send)(group, {"type": "gryvia.event", "event": message})
        except Exception:  # a live view must never break the write that fed it
            logger.exception("could not broadcast %s to %s", message.get("event"), group)


def read_scope(kind: str) -> str | None:
    """The scope a subscriber needs to receive events about objects of `kind` (None: any access to the tenant)."""
    return settings.GRYVIA_EVENT_READ_SCOPES.get(kind)


def broadcast(*, tenant_id: int | None, kind: str, object_id: str, event: str, data: dict[str, Any] | None) -> None:
    """Queue an event for delivery once the current transaction commits (at once outside one).

    The message carries its tenant and the scope needed to read it; consumers drop what their client may not see.
    """
    groups = [tenant_group(tenant_id) if tenant_id is not None else PLATFORM_GROUP, object_group(kind, object_id)]
    message = {
        "event": event,
        "kind": kind,
        "id": object_id,
        "data": data,
        "_tenant_id": tenant_id,
        "_scope": read_scope(kind),
    }
    transaction.on_commit(lambda: _send(groups, message))

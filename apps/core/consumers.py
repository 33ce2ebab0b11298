"""`/ws/events/`: live events. A client subscribes to a tenant or to one object; access is checked first.

{"action": "subscribe", "tenant": "<slug>"}
{"action": "subscribe", "kind": "api_key", "id": "<key id>"}
{"action": "unsubscribe", ...same...}
"""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.utils.module_loading import import_string

from . import events
from .principal import Principal


@database_sync_to_async
def _tenant_group(principal: Principal, slug: str) -> str | None:
    from apps.tenants.selectors import tenant_get_visible

    tenant = tenant_get_visible(principal=principal, slug=slug)
    return events.tenant_group(tenant.pk) if tenant is not None else None


@database_sync_to_async
def _object_group(principal: Principal, kind: str, object_id: str) -> str | None:
    path = settings.GRYVIA_WS_OBJECT_KINDS.get(kind)
    if path is None:
        return None
    visible = import_string(path)(principal=principal, object_id=object_id)
    return events.object_group(kind, object_id) if visible else None


class EventsConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        self.principal: Principal | None = self.scope.get("principal")
        if self.principal is None:
            await self.close(code=4401)
            return
        self.groups_joined: set[str] = set()
        await self.accept()

    async def disconnect(self, code: int) -> None:
        for group in getattr(self, "groups_joined", set()):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if not isinstance(content, dict) or content.get("action") not in ("subscribe", "unsubscribe"):
            await self.send_json({"type": "error", "message": "action must be 'subscribe' or 'unsubscribe'"})
            return
        if "tenant" in content:
            group = await _tenant_group(self.principal, str(content["tenant"]))
            what = f"tenant {content['tenant']!r}"
        elif "kind" in content and "id" in content:
            group = await _object_group(self.principal, str(content["kind"]), str(content["id"]))
            what = f"{content['kind']} {content['id']!r}"
        else:
            await self.send_json({"type": "error", "message": "name a 'tenant', or a 'kind' and an 'id'"})
            return
        if group is None:  # the same answer for absent and forbidden: no existence leak
            await self.send_json({"type": "error", "message": f"{what} not found"})
            return
        if content["action"] == "subscribe":
            await self.channel_layer.group_add(group, self.channel_name)
            self.groups_joined.add(group)
        else:
            await self.channel_layer.group_discard(group, self.channel_name)
            self.groups_joined.discard(group)
        await self.send_json({"type": content["action"] + "d", "target": what})

    async def gryvia_event(self, message: dict[str, Any]) -> None:
        await self._deliver(message["event"])

    async def gryvia_events(self, message: dict[str, Any]) -> None:
        """Several events for one group, sent together (apps.core.events): delivered one by one, in order."""
        for event in message["events"]:
            await self._deliver(event)

    async def _deliver(self, event: dict[str, Any]) -> None:
        event = dict(event)
        tenant_id, scope = event.pop("_tenant_id", None), event.pop("_scope", None)
        if not self.principal.has_scope(scope, tenant_id):
            return  # e.g. a jobs:read key watching its tenant sees no API key changes
        await self.send_json({"type": "event", **event})

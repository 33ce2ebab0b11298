"""`/ws/events/`: live events. A client subscribes to a tenant or to one object; access is checked first.

{"action": "subscribe", "tenant": "<slug>"}
{"action": "subscribe", "kind": "api_key", "id": "<key id>"}
{"action": "unsubscribe", ...same...}

The socket lives as long as its credential (apps.core.liveauth): it is checked again on every subscribe, at its
expiry and when a change to it is announced. Close codes: 4401, no credential or one that no longer authenticates;
4403, the credential may not act now (an API key of a suspended tenant) or lost access to something this socket
subscribed to. A refused credential's close reason is the message REST and the LLM gateway give for it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.utils import timezone

from . import events, liveauth
from .identity import provider
from .principal import Principal, Refusal

logger = logging.getLogger(__name__)
Target = tuple[str, ...]  # ("tenant", slug) or ("object", kind, id)
_EXPIRY_SLACK_S = 0.05  # past the expiry, so the check sees it expired


@database_sync_to_async
def _groups_for(principal: Principal, target: Target) -> frozenset[str]:
    """The groups `target` is delivered on, as far as `principal` may watch it (empty: absent or forbidden)."""
    if target[0] == "tenant":
        tenant = provider().tenant_get_visible(principal=principal, slug=target[1])
        return frozenset({events.tenant_group(tenant.pk)}) if tenant is not None else frozenset()
    _, kind, object_id = target
    visible = events.object_visibility(kind)
    if visible is None:
        return frozenset()
    tenant_ids = visible(principal=principal, object_id=object_id)
    return frozenset(events.object_group(tenant_id, kind, object_id) for tenant_id in tenant_ids)


_authenticate = database_sync_to_async(liveauth.authenticate)


class EventsConsumer(AsyncJsonWebsocketConsumer):
    """One client's live events: the groups it subscribed to, while its credential holds."""

    async def connect(self) -> None:
        self.principal: Principal | None = None
        self.auth_groups: frozenset[str] = frozenset()
        self.subscriptions: dict[Target, frozenset[str]] = {}
        self.expiry_timer: asyncio.Task | None = None
        self.ended = False
        # Accepted first: a socket closed before it is accepted is an HTTP 403 to the client, who would never see
        # the close code that says why (4401).
        await self.accept()
        if self.scope.get("credential") is None:
            await self._end(4401, liveauth.NOT_AUTHENTICATED.message)
            return
        refusal = await self._check_credential()
        if refusal is not None:
            await self._end(4000 + refusal.status, refusal.message)

    async def disconnect(self, code: int) -> None:
        self.ended = True
        if getattr(self, "expiry_timer", None) is not None:
            self.expiry_timer.cancel()
        joined = set(getattr(self, "auth_groups", ()))
        for groups in getattr(self, "subscriptions", {}).values():
            joined |= groups
        for group in joined:
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if self.ended:
            return
        if not isinstance(content, dict) or content.get("action") not in ("subscribe", "unsubscribe"):
            await self.send_json({"type": "error", "message": "action must be 'subscribe' or 'unsubscribe'"})
            return
        if "tenant" in content:
            target: Target = ("tenant", str(content["tenant"]))
            what = f"tenant {content['tenant']!r}"
        elif "kind" in content and "id" in content:
            target = ("object", str(content["kind"]), str(content["id"]))
            what = f"{content['kind']} {content['id']!r}"
        else:
            await self.send_json({"type": "error", "message": "name a 'tenant', or a 'kind' and an 'id'"})
            return
        if content["action"] == "unsubscribe":
            for group in self.subscriptions.pop(target, frozenset()):
                if not self._joined_elsewhere(group):
                    await self.channel_layer.group_discard(group, self.channel_name)
            await self.send_json({"type": "unsubscribed", "target": what})
            return
        if not await self.recheck():  # a credential that died since the last check subscribes to nothing
            return
        groups = await _groups_for(self.principal, target)
        if not groups:  # the same answer for absent and forbidden: no existence leak
            # Logged: a refused subscription may be someone probing another tenant's objects.
            logger.warning("websocket subscription refused: %s for %s", what, self.principal.label)
            await self.send_json({"type": "error", "message": f"{what} not found"})
            return
        for group in groups:
            await self.channel_layer.group_add(group, self.channel_name)
        self.subscriptions[target] = self.subscriptions.get(target, frozenset()) | groups
        await self.send_json({"type": "subscribed", "target": what})

    def _joined_elsewhere(self, group: str) -> bool:
        return any(group in groups for groups in self.subscriptions.values())

    # --- the credential, checked again -------------------------------------------------------------------------

    async def gryvia_credentials(self, message: dict[str, Any]) -> None:
        """A change to this socket's credential, tenant or memberships was announced (apps.core.liveauth)."""
        await self.recheck()

    async def recheck(self) -> bool:
        """Check the credential and every subscription again; end the socket if either no longer holds."""
        if self.ended:
            return False
        before = self.principal
        refusal = await self._check_credential()
        if refusal is not None:
            await self._end(4000 + refusal.status, refusal.message)
            return False
        if self.principal != before:
            for target, groups in list(self.subscriptions.items()):
                if not groups <= await _groups_for(self.principal, target):
                    await self._end(4403, "access to a subscription was withdrawn")
                    return False
        return True

    async def _check_credential(self) -> Refusal | None:
        """Check the credential now and follow its groups and expiry; why it is refused, or None."""
        found = await _authenticate(self.scope["credential"])
        if isinstance(found, Refusal):
            return found
        if self.ended:
            return liveauth.NOT_AUTHENTICATED
        self.principal = found.principal
        for group in found.groups - self.auth_groups:
            await self.channel_layer.group_add(group, self.channel_name)
        for group in self.auth_groups - found.groups:
            await self.channel_layer.group_discard(group, self.channel_name)
        self.auth_groups = found.groups
        self._schedule_expiry(found.expires_at)
        return None

    def _schedule_expiry(self, expires_at: Any) -> None:
        if self.expiry_timer is not None and self.expiry_timer is not asyncio.current_task():
            self.expiry_timer.cancel()
        self.expiry_timer = None
        if expires_at is not None:
            delay = max(0.0, (expires_at - timezone.now()).total_seconds()) + _EXPIRY_SLACK_S
            self.expiry_timer = asyncio.get_running_loop().create_task(self._at_expiry(delay))

    async def _at_expiry(self, delay: float) -> None:
        await asyncio.sleep(delay)
        await self.recheck()

    async def _end(self, code: int, reason: str) -> None:
        if not self.ended:
            self.ended = True  # nothing more is delivered, even what is queued already
            await self.close(code=code, reason=reason.encode()[:123].decode(errors="ignore"))  # RFC 6455's limit

    # --- events ------------------------------------------------------------------------------------------------

    async def gryvia_event(self, message: dict[str, Any]) -> None:
        await self._deliver(message["event"])

    async def gryvia_events(self, message: dict[str, Any]) -> None:
        """Several events for one group, sent together (apps.core.events): delivered one by one, in order."""
        for event in message["events"]:
            await self._deliver(event)

    async def _deliver(self, event: dict[str, Any]) -> None:
        if self.ended:
            return
        event = dict(event)
        tenant_id, scope = event.pop("_tenant_id", None), event.pop("_scope", None)
        if not self.principal.has_scope(scope, tenant_id):
            return  # e.g. a jobs:read key watching its tenant sees no API key changes
        await self.send_json({"type": "event", **event})

"""Live events over Channels, sent only after the transaction that caused them commits.

Groups are named by tenant: `t<tenant_id>` for everything in a tenant, `t<tenant_id>.o.<kind>.<id>` for one object
of it (two tenants' jobs of one name are two groups), and `platform` / `platform.o.<kind>.<id>` for platform-level
changes. Consumers check access before joining any group (apps.core.consumers).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import SyncToAsync, async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import transaction

logger = logging.getLogger(__name__)
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def tenant_group(tenant_id: int) -> str:
    return f"t{tenant_id}"


PLATFORM_GROUP = "platform"


def object_group(tenant_id: int | None, kind: str, object_id: str) -> str:
    """The group of one object, within its tenant's name (None: a platform-level object)."""
    owner = tenant_group(tenant_id) if tenant_id is not None else PLATFORM_GROUP
    name = f"{owner}.o.{kind}.{object_id}"
    safe = _UNSAFE.sub("_", name)
    if safe != name or len(safe) > 99:  # channel layers take [A-Za-z0-9._-], under 100: a digest keeps ids apart
        safe = f"{safe[:50]}.{hashlib.sha256(name.encode()).hexdigest()[:40]}"
    return safe


# Sends from plain sync threads (reconcilers, Celery tasks, management commands) run on one event loop per
# process, in a daemon thread: `async_to_sync` there would start a thread and a loop for every send (about 0.6 ms
# of CPU each), and channels_redis would open its connections again for every new loop.
_SEND_TIMEOUT_S = 30.0
_BATCH = 100  # events per group message at most (channel layers bound a message's size)
_loop_lock = threading.Lock()
_loop: tuple[int, asyncio.AbstractEventLoop] | None = None  # (pid, loop): a forked child starts its own


def _delivery_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _loop_lock:
        if _loop is None or _loop[0] != os.getpid() or _loop[1].is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="live-events-delivery", daemon=True).start()
            _loop = (os.getpid(), loop)
        return _loop[1]


def _in_async_context() -> bool:
    """Whether this thread runs an event loop, or runs sync code for one (sync_to_async): there async_to_sync
    sends on that loop, where consumers of the same process (and tests) live."""
    try:
        asyncio.get_running_loop()
        return True
    except RuntimeError:
        pass
    if getattr(SyncToAsync.threadlocal, "main_event_loop_pid", None) != os.getpid():
        return False
    loop = getattr(SyncToAsync.threadlocal, "main_event_loop", None)  # left behind once that call has returned
    return loop is not None and loop.is_running()


def _send(deliveries: list[tuple[list[str], dict[str, Any]]]) -> None:
    """Send every (groups, message) in one trip to the channel layer's event loop."""
    layer = get_channel_layer()
    if layer is None or not deliveries:
        return

    # One message per group (a batch, `gryvia.events`, when a trip has several for it): a pass that records forty
    # events for one tenant makes one group send for the tenant group, not forty. Order within a group is kept.
    by_group: dict[str, list[dict[str, Any]]] = {}
    for groups, message in deliveries:
        for group in groups:
            by_group.setdefault(group, []).append(message)
    if isinstance(layer, InMemoryChannelLayer):
        # An in-process layer's groups are all the listeners there are: a group nobody joined gets nothing, and a
        # trip with nobody listening is not made.
        members = layer.groups
        by_group = {group: messages for group, messages in by_group.items() if members.get(group)}
        if not by_group:
            return

    async def send_all() -> None:
        for group, messages in by_group.items():
            for start in range(0, len(messages), _BATCH):
                chunk = messages[start : start + _BATCH]
                if len(chunk) == 1:
                    payload = {"type": "gryvia.event", "event": chunk[0]}
                else:
                    payload = {"type": "gryvia.events", "events": chunk}
                try:
                    await layer.group_send(group, payload)
                except Exception:  # a live view must never break the write that fed it
                    logger.exception("could not broadcast %d event(s) to %s", len(chunk), group)

    on_layer_loop(send_all, timeout_s=_SEND_TIMEOUT_S, what=f"{len(deliveries)} event(s) dropped")


def on_layer_loop(call: Callable[[], Awaitable[Any]], *, timeout_s: float = _SEND_TIMEOUT_S, what: str = "") -> Any:
    """Run `call()` (a coroutine function using the channel layer) from sync code: on the event loop this thread
    runs sync code for, if any, else on the process's delivery loop. Whatever uses the layer from plain sync code
    (a channels_redis flush, say) goes this way, so it meets the connections of the loop they were made on."""
    if _in_async_context():
        return async_to_sync(call)()
    future = asyncio.run_coroutine_threadsafe(call(), _delivery_loop())
    try:
        return future.result(timeout=timeout_s)
    except TimeoutError:
        future.cancel()
        logger.warning("live events: the channel layer took over %ss%s", timeout_s, f"; {what}" if what else "")
        return None


# kind -> (the scope a subscriber needs to receive its events, the function that says which tenants' copy of one
# object a principal may watch, or None when a client cannot subscribe to one object of the kind). Each app
# registers the kinds it emits from its AppConfig.ready(): core knows no app.
_kinds: dict[str, tuple[str | None, Callable[..., Any] | None]] = {}


def register_kind(kind: str, *, read_scope: str | None, visible: Callable[..., Any] | None = None) -> None:
    """Declare an event kind: `read_scope` is what a subscriber needs to receive its events (None: any access to
    the tenant); `visible(principal=, object_id=)`, when given, lets a websocket client subscribe to one object of
    it and returns the ids of the tenants whose object of that id the principal may watch."""
    known = _kinds.get(kind)
    if known is not None and known != (read_scope, visible):
        raise ValueError(f"event kind {kind!r} is already registered differently")
    _kinds[kind] = (read_scope, visible)


def read_scope(kind: str) -> str | None:
    """The scope a subscriber needs to receive events about objects of `kind` (None: any access to the tenant)."""
    return _kinds.get(kind, (None, None))[0]


def object_visibility(kind: str) -> Callable[..., Any] | None:
    """The access check of one object of `kind` for a websocket subscription (None: not subscribable)."""
    return _kinds.get(kind, (None, None))[1]


def _delivery(
    *, tenant_id: int | None, kind: str, object_id: str, event: str, data: dict[str, Any] | None
) -> tuple[list[str], dict[str, Any]]:
    groups = [
        tenant_group(tenant_id) if tenant_id is not None else PLATFORM_GROUP,
        object_group(tenant_id, kind, object_id),
    ]
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


# Where emit() writes events for outside receivers: objects (modules) with `listening` and `write`, registered by
# the apps that deliver them in their AppConfig.ready() (apps.webhooks registers its outbox).
_outbox_registry: list[Any] = []


def register_outbox(outbox: Any) -> None:
    """Write every emitted event to `outbox` too (`outbox.listening(tenant_ids=, types=)`, `outbox.write(items)`)."""
    if outbox not in _outbox_registry:
        _outbox_registry.append(outbox)


def _outboxes() -> list[Any]:
    return list(_outbox_registry)


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

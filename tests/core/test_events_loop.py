"""Live events sent from plain sync code go through one delivery loop per process (apps.core.events), in batches
of one message per group."""

from __future__ import annotations

import asyncio
import threading

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer

from apps.core import events


async def _where() -> tuple[int, int]:
    return threading.get_ident(), id(asyncio.get_running_loop())


def test_sync_code_sends_on_one_loop_in_one_thread():
    first, second = events.on_layer_loop(_where), events.on_layer_loop(_where)
    assert first == second  # the same thread and loop every time, not a new one per send
    assert first[0] != threading.get_ident()
    names = {t.ident: t.name for t in threading.enumerate()}
    assert names[first[0]] == "live-events-delivery"


def test_sync_code_run_for_an_event_loop_sends_on_that_loop():
    async def outer() -> tuple[tuple[int, int], int]:
        inner = await sync_to_async(lambda: events.on_layer_loop(_where))()
        return inner, id(asyncio.get_running_loop())

    (thread, loop), outer_loop = async_to_sync(outer)()
    assert loop == outer_loop  # consumers of this loop (and tests) meet the same loop's connections
    assert thread != dict((t.name, t.ident) for t in threading.enumerate()).get("live-events-delivery")
    # Once that call has returned, this thread is plain sync code again: the delivery loop.
    assert events.on_layer_loop(_where) == events.on_layer_loop(_where) != (thread, loop)


@pytest.fixture
def layer():
    layer = get_channel_layer()
    if layer is None:
        pytest.skip("no channel layer configured")
    yield layer
    events.on_layer_loop(layer.flush)


def _delivery(tenant_id: int, object_id: str, event: str) -> tuple[list[str], dict]:
    return events._delivery(tenant_id=tenant_id, kind="job", object_id=object_id, event=event, data={"n": 1})


def test_several_events_for_a_group_make_one_message_in_order(layer):
    channel = events.on_layer_loop(lambda: layer.new_channel("test."))
    group = events.tenant_group(991)
    events.on_layer_loop(lambda: layer.group_add(group, channel))
    events._send([_delivery(991, "a", "job.running"), _delivery(991, "b", "job.running"), _delivery(991, "a", "x")])
    message = events.on_layer_loop(lambda: layer.receive(channel), timeout_s=5)
    assert message["type"] == "gryvia.events"
    assert [(e["id"], e["event"]) for e in message["events"]] == [
        ("a", "job.running"),
        ("b", "job.running"),
        ("a", "x"),
    ]

    events._send([_delivery(991, "c", "job.succeeded")])  # alone: the single-event message, as before
    message = events.on_layer_loop(lambda: layer.receive(channel), timeout_s=5)
    assert message["type"] == "gryvia.event"
    assert (message["event"]["id"], message["event"]["event"]) == ("c", "job.succeeded")


def test_an_in_process_layer_sends_only_to_groups_someone_joined(layer, monkeypatch):
    from channels.layers import InMemoryChannelLayer

    if not isinstance(layer, InMemoryChannelLayer):
        pytest.skip("only an in-process layer knows every listener")
    trips = []
    real = events.on_layer_loop
    monkeypatch.setattr(events, "on_layer_loop", lambda call, **kw: trips.append(call) or real(call, **kw))
    events._send([_delivery(992, "a", "job.running")])
    assert trips == []  # nobody listens: no trip to the loop at all

    channel = real(lambda: layer.new_channel("test."))
    real(lambda: layer.group_add(events.object_group(992, "job", "a"), channel))
    events._send([_delivery(992, "a", "job.running"), _delivery(992, "b", "job.running")])
    assert len(trips) == 1
    message = real(lambda: layer.receive(channel), timeout_s=5)
    assert (message["type"], message["event"]["id"]) == ("gryvia.event", "a")  # its object's group only


def test_groups_are_named_by_tenant_and_object():
    """Two tenants' jobs of one name travel on two groups, so a subscriber of one never joins the other's group and
    no per-event filter is all that stands between them; ids that differ only past the length a group name may have,
    or only in characters a group name may not hold, stay apart too."""
    alpha, _ = _delivery(1, "train", "job.running")
    bravo, _ = _delivery(2, "train", "job.running")
    assert not set(alpha) & set(bravo)
    long_one, _ = _delivery(1, "x" * 120 + "1", "job.running")
    long_two, _ = _delivery(1, "x" * 120 + "2", "job.running")
    odd_one, _ = _delivery(1, "a/b", "job.running")
    odd_two, _ = _delivery(1, "a:b", "job.running")
    objects = {long_one[1], long_two[1], odd_one[1], odd_two[1], alpha[1]}
    assert len(objects) == 5
    assert all(len(group) < 100 and group.startswith("t1.") for group in objects)

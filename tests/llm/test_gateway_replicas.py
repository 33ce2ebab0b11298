"""Two gateway replicas (`manage.py serve` processes on PostgreSQL and Redis) in front of the stand-in upstream,
driven by the official client: the quota holds under concurrency, a replica SIGKILLed mid-burst loses no answered
request's usage and leaves no reservation counted, a day counter lost mid-burst is rebuilt (issue 26, items 5-7)."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Iterator
from contextlib import contextmanager

import openai
import pytest
import redis
from django.conf import settings
from django.db.models import Sum

from apps.core.periodic import run_periodic
from apps.llm.gateway.quota import PREFIX, day_key
from apps.llm.models import LlmUsage
from tests.factories import make_key, make_tenant

from .gateway_env import Counter, ServerProcess, clear_counters, external

pytestmark = [pytest.mark.postgres, pytest.mark.redis]
SHORT = [{"role": "user", "content": "Say hello."}]  # 12 tokens with the stand-in's Gemma-like framing
LEASE_S = 1.5


@contextmanager
def replicas(*envs: dict[str, str]) -> Iterator[list[ServerProcess]]:
    servers = [ServerProcess(GRYVIA_LLM_REPLICA_TTL_S=str(LEASE_S), **env) for env in envs]
    try:
        yield [server.wait_up() for server in servers]
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
def shared(transactional_db, upstream):
    clear_counters()
    upstream.set(chat_framing=5)
    yield upstream
    clear_counters()


def _metered(tenant, count: int, timeout: float = 10.0) -> int:
    """The tenant's tokens in the database once `count` rows are written."""
    deadline = time.monotonic() + timeout
    while LlmUsage.objects.filter(tenant=tenant).count() < count and time.monotonic() < deadline:
        time.sleep(0.05)
    totals = LlmUsage.objects.filter(tenant=tenant).aggregate(i=Sum("input_tokens"), o=Sum("output_tokens"))
    return (totals["i"] or 0) + (totals["o"] or 0)


def _today(tenant) -> str:
    return day_key("tenant", tenant.pk, dt.datetime.now(dt.UTC))


async def _call(client: openai.AsyncOpenAI, *, stream: bool, max_tokens: int) -> str | None:
    """One chat completion read to its end; its request id, or None when refused (429)."""
    try:
        raw = await client.chat.completions.with_raw_response.create(
            model="gpt", messages=SHORT, max_tokens=max_tokens, stream=stream
        )
    except openai.RateLimitError:
        return None
    reply = raw.parse()
    if stream:
        async for _chunk in reply:
            pass
    return raw.headers["x-request-id"]


async def _burst(servers: list[ServerProcess], key: str, count: int, *, stream: bool, max_tokens: int) -> list:
    clients = [openai.AsyncOpenAI(base_url=s.url, api_key=key, max_retries=0, timeout=30) for s in servers]
    try:
        calls = (_call(clients[i % len(clients)], stream=stream, max_tokens=max_tokens) for i in range(count))
        return await asyncio.gather(*calls, return_exceptions=True)
    finally:
        for client in clients:
            await client.close()


def test_fifty_concurrent_requests_across_two_replicas_meter_at_most_the_quota(shared):
    tenant = make_tenant("pair", tokens_per_day=170)
    key = make_key(tenant, ["llm:invoke"])
    external(tenant, "gpt", shared.url)
    with replicas({}, {}) as servers:
        answered = asyncio.run(_burst(servers, key, 50, stream=False, max_tokens=5))
        assert not [a for a in answered if isinstance(a, BaseException)]
        served = [a for a in answered if a is not None]
        used = _metered(tenant, 50)
    assert served and LlmUsage.objects.filter(tenant=tenant).count() == 50
    assert used <= 170 and used == 17 * len(served)  # 12 prompt tokens (with framing) + 5 each
    assert Counter(_today(tenant)).value() == used
    assert len([r for r in shared.requests if r.path == "/v1/chat/completions"]) == len(served)


def test_a_replica_killed_mid_burst_loses_no_answered_usage_and_no_reservation_stays(shared):
    """Replica 0 never flushes its meter before it is SIGKILLed (GRYVIA_LLM_METER_FLUSH_S=60) with ten streams in
    flight: the settlement pass, run once after its lease ran out, writes every request it answered with the usage
    the client got, and settles the ten as estimated, so the counter holds exactly what is metered."""
    tenant = make_tenant("killed", tokens_per_day=100_000)
    key = make_key(tenant, ["llm:invoke"])
    external(tenant, "gpt", shared.url)
    with replicas({"GRYVIA_LLM_METER_FLUSH_S": "60"}, {}) as servers:
        answered = asyncio.run(_burst(servers, key, 40, stream=False, max_tokens=5))
        assert None not in answered and len(set(answered)) == 40
        shared.set(chunk_delay_s=0.5)

        async def in_flight() -> None:
            client = openai.AsyncOpenAI(base_url=servers[0].url, api_key=key, max_retries=0, timeout=30)
            streams = [
                await client.chat.completions.create(model="gpt", messages=SHORT, max_tokens=8, stream=True)
                for _ in range(10)
            ]
            for stream in streams:
                await anext(aiter(stream))  # each has its first chunk: mid-stream
            servers[0].kill()
            await client.close()

        asyncio.run(in_flight())
        time.sleep(LEASE_S + 0.2)
        run_periodic("settle-llm-reservations")
        rows = {r.request_id: r for r in LlmUsage.objects.filter(tenant=tenant)}
        assert set(answered) <= set(rows)
        assert {(rows[a].input_tokens, rows[a].output_tokens, rows[a].estimated) for a in answered} == {(12, 5, False)}
        died = [r for r in rows.values() if r.request_id not in answered]
        assert len(died) == 10 and all(r.estimated and r.status == 502 and r.stream for r in died)
        assert Counter(_today(tenant)).value() == _metered(tenant, 50)
        client = redis.Redis.from_url(settings.REDIS_URL, decode_responses=True)
        left = [v for name in client.scan_iter(f"{PREFIX}req:*") for v in client.hvals(name)]
        client.close()
        assert set(left) <= {"tomb"}  # nothing of the dead replica's left to settle


def test_a_day_counter_deleted_mid_burst_is_rebuilt_and_the_day_holds_its_quota(shared):
    """Issue 26, item 7: the counter goes (a Redis restart or eviction) while streams are in flight. Settling does
    not re-create it; the next reservation rebuilds it from the metered usage plus the open reservations."""
    tenant = make_tenant("lost", tokens_per_day=1000)
    key = make_key(tenant, ["llm:invoke"])
    external(tenant, "gpt", shared.url)
    shared.set(chunk_delay_s=0.05)
    with replicas({}, {}) as servers:

        async def burst_with_a_loss() -> list:
            first = asyncio.ensure_future(_burst(servers, key, 60, stream=True, max_tokens=8))
            while len(shared.requests) < 10:  # streams in flight
                await asyncio.sleep(0.01)
            client = redis.asyncio.Redis.from_url(settings.REDIS_URL)
            assert await client.delete(_today(tenant)) == 1
            await client.aclose()
            done = await first
            return done + await _burst(servers, key, 60, stream=True, max_tokens=8)

        answered = asyncio.run(burst_with_a_loss())
        assert not [a for a in answered if isinstance(a, BaseException)]
        served = [a for a in answered if a is not None]
        used = _metered(tenant, 120)
    assert used == 20 * len(served) <= 1000
    assert Counter(_today(tenant)).value() == used
    client = redis.Redis.from_url(settings.REDIS_URL)
    assert client.ttl(_today(tenant)) > 0  # rebuilt with its expiry
    client.close()

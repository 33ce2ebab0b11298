"""Token quotas and rate limits hold under concurrency in one server process (two: test_gateway_replicas.py)."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from pathlib import Path

import openai
import pytest
from django.db.models import Sum

from apps.llm.gateway.quota import day_key
from apps.llm.models import InferenceService, LlmUsage, LlmUsageHourly, ServicePhase
from tests.factories import ACTOR, make_key, make_tenant

from .gateway_env import Counter, external, metered

ROOT = Path(__file__).resolve().parents[2]
HELLO = [{"role": "user", "content": "Say hello to the gateway, please."}]  # 8 prompt tokens by the stand-in
PER_REQUEST = 8 + 8  # prompt + max_tokens 8 (the stand-in sends 8 chunks, one token each)
# The reservation's bound of HELLO: 8 for the BOS and primer, 8 of framing + "user" (4 bytes + 1) + 33 bytes + 1
RESERVED = 8 + 8 + 5 + 34 + 8
SHORT = [{"role": "user", "content": "Say hello."}]  # the prompt: 12 tokens with Gemma's chat template


def _today_key(tenant) -> str:
    return day_key("tenant", tenant.pk, dt.datetime.now(dt.UTC))


async def _burst(urls: list[str], key: str, count: int) -> tuple[int, list[int]]:
    """`count` concurrent chat completions spread over `urls`; how many succeeded, and the refusals' statuses."""
    clients = [openai.AsyncOpenAI(base_url=u, api_key=key, max_retries=0, timeout=30) for u in urls]

    async def one(i: int):
        try:
            await clients[i % len(clients)].chat.completions.create(model="gpt", messages=HELLO, max_tokens=8)
            return None
        except openai.APIStatusError as exc:
            return exc.status_code

    results = await asyncio.gather(*(one(i) for i in range(count)))
    for client in clients:
        await client.close()
    return sum(r is None for r in results), [r for r in results if r is not None]


def _used_in_db(tenant) -> int:
    totals = LlmUsage.objects.filter(tenant=tenant).aggregate(i=Sum("input_tokens"), o=Sum("output_tokens"))
    return (totals["i"] or 0) + (totals["o"] or 0)


def test_fifty_concurrent_requests_against_room_for_ten(gateway, upstream):
    """A room for ten reservations: the first ten fit whatever the timing, a few more when some settle (to 16 used
    of 63 reserved) before the last are reserved, and the day never holds more than its quota."""
    tenant = make_tenant("tight", tokens_per_day=10 * RESERVED)
    key = make_key(tenant, ["llm:invoke"])
    external(tenant, "gpt", upstream.url)
    upstream.set(first_byte_delay_s=0.3)
    succeeded, refused = asyncio.run(_burst([gateway.url], key, 50))
    assert succeeded >= 10 and refused == [429] * (50 - succeeded)
    rows = metered(50, tenant=tenant)
    assert len(rows) == 50 and sum(r.status == 200 for r in rows) == succeeded
    assert _used_in_db(tenant) == succeeded * PER_REQUEST <= 10 * RESERVED
    assert Counter(_today_key(tenant)).value() == succeeded * PER_REQUEST  # the counter (Redis or memory) agrees
    hourly = LlmUsageHourly.objects.filter(tenant=tenant).aggregate(i=Sum("input_tokens"), o=Sum("output_tokens"))
    assert hourly["i"] + hourly["o"] == succeeded * PER_REQUEST
    assert len(upstream.requests) == succeeded  # refused requests never reached the upstream


async def _short_burst(url: str, key: str, count: int) -> int:
    """`count` concurrent chat completions of the issue's short prompt with max_tokens=5; how many succeeded."""
    async with openai.AsyncOpenAI(base_url=url, api_key=key, max_retries=0, timeout=30) as client:

        async def one() -> bool:
            try:
                await client.chat.completions.create(model="gpt", messages=SHORT, max_tokens=5)
                return True
            except openai.RateLimitError:
                return False

        return sum(await asyncio.gather(*(one() for _ in range(count))))


@pytest.mark.parametrize("runtime", ["external", "vllm"])
def test_a_chat_templates_framing_never_overshoots_the_quota(gateway, upstream, runtime):
    """Issue 26, item 5: a runtime that frames each message (Gemma: "Say hello." is 12 tokens, not 10 bytes / 4)
    under 50 concurrent requests against a daily quota of 170. Without a tokenizer the reservation is a bound
    that includes the framing; a vLLM service counts exactly with its /tokenize at the quota's edge."""
    tenant = make_tenant(f"framed-{runtime}", tokens_per_day=170)
    key = make_key(tenant, ["llm:invoke"])
    upstream.set(chat_framing=5, first_byte_delay_s=0.05)
    if runtime == "external":
        external(tenant, "gpt", upstream.url)
    else:
        _vllm(tenant, upstream)
    succeeded = asyncio.run(_short_burst(gateway.url, key, 50))
    rows = metered(50, tenant=tenant)
    assert len(rows) == 50 and sum(r.status == 200 for r in rows) == succeeded >= 1
    assert {(r.input_tokens, r.output_tokens) for r in rows if r.status == 200} == {(12, 5)}
    assert _used_in_db(tenant) <= 170
    assert Counter(_today_key(tenant)).value() == _used_in_db(tenant)


def test_at_the_quotas_edge_the_runtimes_tokenizer_counts_the_prompt(gateway, upstream):
    """The bound (32 + 5 tokens for "Say hello.") does not fit in 17 tokens; the exact count (12 with the template)
    does, so the request is served, and the next one is refused naming what it needs by the exact count."""
    tenant = make_tenant("edge", tokens_per_day=17)
    key = make_key(tenant, ["llm:invoke"])
    upstream.set(chat_framing=5)
    _vllm(tenant, upstream)
    with openai.OpenAI(base_url=gateway.url, api_key=key, max_retries=0) as llm:
        reply = llm.chat.completions.create(model="gpt", messages=SHORT, max_tokens=5)
        assert reply.usage.prompt_tokens == 12
        with pytest.raises(openai.RateLimitError) as caught:
            llm.chat.completions.create(model="gpt", messages=SHORT, max_tokens=5)
    assert "17 of 17 tokens used, this request needs up to 17" in caught.value.body["message"]
    assert sum(r.path == "/tokenize" for r in upstream.requests) == 1  # the second count came from the cache


def _vllm(tenant, upstream) -> None:
    from apps.llm import routing, services

    service = services.inference_service_create(actor=ACTOR, tenant=tenant, name="gpt", runtime="vllm", model="gpt")
    InferenceService.objects.filter(pk=service.pk).update(
        status_phase=ServicePhase.READY, status_endpoint=upstream.url, status_endpoints=[upstream.url]
    )
    routing.routes_changed()


def test_the_reservation_settles_to_what_was_used(gateway, upstream):
    tenant = make_tenant("settle", tokens_per_day=1000)
    key = make_key(tenant, ["llm:invoke"])
    external(tenant, "gpt", upstream.url)
    with openai.OpenAI(base_url=gateway.url, api_key=key, max_retries=0) as llm:
        llm.chat.completions.create(model="gpt", messages=HELLO, max_tokens=500)  # reserves 555, uses 16
        metered(1, tenant=tenant)
        assert Counter(_today_key(tenant)).value() == PER_REQUEST
        llm.chat.completions.create(model="gpt", messages=HELLO, max_tokens=500)  # fits only because it settled
    metered(2, tenant=tenant)
    assert _used_in_db(tenant) == 2 * PER_REQUEST == Counter(_today_key(tenant)).value()


def test_the_days_counter_starts_from_what_was_metered(gateway, upstream):
    """A counter lost (a Redis restart, a new server process) starts again from the day's metered usage."""
    tenant = make_tenant("restart", tokens_per_day=100)
    key = make_key(tenant, ["llm:invoke"])
    external(tenant, "gpt", upstream.url)
    hour = dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0)
    LlmUsageHourly.objects.create(
        tenant=tenant, key_id="earlier", model="gpt", hour=hour, requests=3, input_tokens=50, output_tokens=40
    )
    with openai.OpenAI(base_url=gateway.url, api_key=key, max_retries=0) as llm, pytest.raises(openai.RateLimitError):
        llm.chat.completions.create(model="gpt", messages=HELLO, max_tokens=8)  # 90 + 63 > 100
    assert Counter(_today_key(tenant)).value() == 90


def test_key_limits_requests_per_minute_and_tokens(gateway, upstream):
    tenant = make_tenant("limits")
    external(tenant, "gpt", upstream.url)
    if dt.datetime.now(dt.UTC).second >= 55:  # keep the six requests inside one minute
        time.sleep(61 - dt.datetime.now(dt.UTC).second)
    rpm = make_key(tenant, ["llm:invoke"], requests_per_minute=5)
    with openai.OpenAI(base_url=gateway.url, api_key=rpm, max_retries=0) as llm:
        for _ in range(5):
            llm.chat.completions.create(model="gpt", messages=HELLO, max_tokens=1)
        with pytest.raises(openai.RateLimitError) as caught:
            llm.chat.completions.create(model="gpt", messages=HELLO, max_tokens=1)
    body = caught.value.body
    assert body["type"] == "rate_limit_error" and body["code"] == "requests_per_minute_exceeded"
    assert "5 of 5 requests" in body["message"] and 0 < int(caught.value.response.headers["retry-after"]) <= 61
    per_day = make_key(tenant, ["llm:invoke"], tokens_per_day=RESERVED)
    with openai.OpenAI(base_url=gateway.url, api_key=per_day, max_retries=0) as llm:
        llm.chat.completions.create(model="gpt", messages=HELLO, max_tokens=8)
        with pytest.raises(openai.RateLimitError) as caught:
            llm.chat.completions.create(model="gpt", messages=HELLO, max_tokens=8)
    assert caught.value.body["code"] == "tokens_per_day_exceeded" and "API key" in caught.value.body["message"]
    per_minute = make_key(tenant, ["llm:invoke"], tokens_per_minute=10)
    with openai.OpenAI(base_url=gateway.url, api_key=per_minute, max_retries=0) as llm:
        with pytest.raises(openai.RateLimitError) as caught:
            llm.chat.completions.create(model="gpt", messages=HELLO, max_tokens=8)
    assert caught.value.body["code"] == "tokens_per_minute_exceeded"

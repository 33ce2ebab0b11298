"""Token quotas and rate limits hold exactly under concurrency, in one server process and across two."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest
from django.conf import settings
from django.db import connection
from django.db.models import Sum

from apps.llm.gateway.quota import day_key
from apps.llm.models import LlmUsage, LlmUsageHourly
from tests.factories import make_key, make_tenant

from .gateway_env import Counter, external, free_port, metered

ROOT = Path(__file__).resolve().parents[2]
HELLO = [{"role": "user", "content": "Say hello to the gateway, please."}]  # 8 prompt tokens, estimated and real
PER_REQUEST = 8 + 8  # prompt + max_tokens 8 (the stand-in sends 8 chunks, one token each)


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
    tenant = make_tenant("tight", tokens_per_day=10 * PER_REQUEST)
    key = make_key(tenant, ["llm:invoke"])
    external(tenant, "gpt", upstream.url)
    succeeded, refused = asyncio.run(_burst([gateway.url], key, 50))
    assert succeeded == 10 and refused == [429] * 40
    rows = metered(50, tenant=tenant)
    assert len(rows) == 50 and sum(r.status == 200 for r in rows) == 10
    assert _used_in_db(tenant) == 10 * PER_REQUEST
    assert Counter(_today_key(tenant)).value() == 10 * PER_REQUEST  # the counter (Redis or memory) agrees
    hourly = LlmUsageHourly.objects.filter(tenant=tenant).aggregate(i=Sum("input_tokens"), o=Sum("output_tokens"))
    assert hourly["i"] + hourly["o"] == 10 * PER_REQUEST
    assert len(upstream.requests) == 10  # refused requests never reached the upstream


def test_the_reservation_settles_to_what_was_used(gateway, upstream):
    tenant = make_tenant("settle", tokens_per_day=1000)
    key = make_key(tenant, ["llm:invoke"])
    external(tenant, "gpt", upstream.url)
    with openai.OpenAI(base_url=gateway.url, api_key=key, max_retries=0) as llm:
        llm.chat.completions.create(model="gpt", messages=HELLO, max_tokens=500)  # reserves 508, uses 16
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
        llm.chat.completions.create(model="gpt", messages=HELLO, max_tokens=8)  # 90 + 16 > 100
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
    per_day = make_key(tenant, ["llm:invoke"], tokens_per_day=PER_REQUEST)
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


def _serve(port: int) -> subprocess.Popen:
    database = connection.settings_dict
    url = f"postgres://{database['USER']}@{database['HOST']}:{database['PORT']}/{database['NAME']}"
    env = {**os.environ, "DATABASE_URL": url, "REDIS_URL": settings.REDIS_URL, "GRYVIA_LLM_METER_FLUSH_S": "0.2"}
    return subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _wait_up(url: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError("the server did not start within 60 s")


@pytest.mark.postgres
@pytest.mark.redis
def test_two_server_processes_share_one_counter(transactional_db, upstream):
    """Two `manage.py serve` processes on the same database and Redis: the quota holds across both."""
    from .gateway_env import clear_counters

    clear_counters()
    tenant = make_tenant("pair", tokens_per_day=10 * PER_REQUEST)
    key = make_key(tenant, ["llm:invoke"])
    external(tenant, "gpt", upstream.url)
    ports = [free_port(), free_port()]
    procs = [_serve(port) for port in ports]
    try:
        for port, proc in zip(ports, procs, strict=True):
            _wait_up(f"http://127.0.0.1:{port}/healthz", proc)
        succeeded, refused = asyncio.run(_burst([f"http://127.0.0.1:{p}/v1" for p in ports], key, 50))
        assert succeeded == 10 and refused == [429] * 40
        deadline = time.monotonic() + 15
        while LlmUsage.objects.filter(tenant=tenant).count() < 50 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=30)
    assert LlmUsage.objects.filter(tenant=tenant).count() == 50
    assert _used_in_db(tenant) == 10 * PER_REQUEST == Counter(_today_key(tenant)).value()
    assert len(upstream.requests) == 10
    clear_counters()

"""Metering when the usage is not reported: a client that hangs up mid-stream, an upstream that sends no usage."""

from __future__ import annotations

import datetime as dt
import json

import httpx

from apps.llm import services as llm_services
from apps.llm.gateway.quota import day_key
from apps.llm.models import InferenceService, ServicePhase
from benchmarks.upstream_replies import prompt_tokens
from tests.factories import ACTOR, make_key, make_tenant

from .gateway_env import Counter, external, metered, wait_for

HELLO = [{"role": "user", "content": "Tell the gateway a long story, please."}]  # 38 bytes: 9 tokens by estimate


def test_a_client_that_drops_a_stream_after_three_chunks_is_metered_estimated(gateway, upstream):
    tenant = make_tenant("dropper", tokens_per_day=100_000)
    key = make_key(tenant, ["llm:invoke"])
    external(tenant, "gpt", upstream.url)
    upstream.set(chunks=200, chunk_delay_s=0.02)
    body = {"model": "gpt", "messages": HELLO, "stream": True, "max_tokens": 200}
    seen = []
    with (
        httpx.Client(base_url=gateway.url, headers={"authorization": f"Bearer {key}"}, timeout=10) as http,
        http.stream("POST", "/chat/completions", json=body) as reply,
    ):
        assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/event-stream")
        for line in reply.iter_lines():
            if line.startswith("data: {"):
                seen.append(json.loads(line[6:])["choices"][0]["delta"].get("content") or "")
            if len(seen) == 3:
                break  # hang up
    assert wait_for(lambda: upstream.streams_aborted == 1)  # the gateway stopped reading the upstream too
    (row,) = metered(1)
    assert row.status == 499 and row.stream and row.estimated
    assert row.input_tokens == 9  # the prompt by UTF-8 bytes / 4 (an external service has no tokenizer endpoint)
    assert 3 <= row.output_tokens < 200  # what was relayed before the hang-up, not the reservation
    today = day_key("tenant", tenant.pk, dt.datetime.now(dt.UTC))
    assert Counter(today).value() == row.input_tokens + row.output_tokens  # the reservation settled to it


def test_an_upstream_without_usage_is_metered_by_estimate_and_flagged(acme, llm, upstream):
    external(acme, "gpt", upstream.url)
    upstream.set(send_usage=False, chunks=6)
    reply = llm.chat.completions.create(model="gpt", messages=HELLO, max_tokens=6)
    text = reply.choices[0].message.content
    assert reply.usage is None and text
    streamed = list(llm.chat.completions.create(model="gpt", messages=HELLO, max_tokens=6, stream=True))
    rows = metered(2)
    assert [(r.stream, r.estimated, r.status) for r in rows] == [(False, True, 200), (True, True, 200)]
    assert rows[0].input_tokens == 9 and rows[0].output_tokens == max(len(text.encode()) // 4, 1)
    assert rows[1].output_tokens >= len([c for c in streamed if c.choices and c.choices[0].delta.content])


def test_a_runtime_with_a_tokenizer_endpoint_counts_with_it(acme, llm, upstream):
    """vLLM serves /tokenize: the estimate of a request without usage uses it, and downloads nothing."""
    service = llm_services.inference_service_create(
        actor=ACTOR, tenant=acme, name="llama", runtime="vllm", model="meta-llama/Llama-3.1-8B-Instruct"
    )
    InferenceService.objects.filter(pk=service.pk).update(
        status_phase=ServicePhase.READY, status_endpoint=upstream.url, status_endpoints=[upstream.url]
    )
    from apps.llm import routing

    routing.routes_changed()
    upstream.set(send_usage=False)
    llm.chat.completions.create(model="llama", messages=HELLO, max_tokens=4)
    (row,) = metered(1)
    assert row.estimated and row.input_tokens == prompt_tokens({"messages": HELLO})
    assert any(r.path == "/tokenize" for r in upstream.requests)

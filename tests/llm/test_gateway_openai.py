"""The gateway under /v1/ as the official `openai` client sees it: a running Gryvia, a stand-in upstream behind."""

from __future__ import annotations

import httpx
import openai
import pytest
from django.test import override_settings

from apps.llm.models import LlmUsageHourly
from tests.factories import make_key, make_tenant

from .gateway_env import external, metered

HELLO = [{"role": "user", "content": "Say hello to the gateway, please."}]  # 33 bytes: 8 tokens by bytes / 4


@pytest.fixture
def chat(acme, upstream):
    return external(acme, "gpt", upstream.url, upstream_model="up-chat", credential="sk-upstream-secret")


@pytest.fixture
def embed(acme, upstream):
    return external(acme, "embed", upstream.url, upstream_model="up-embed", task="embeddings")


def test_models_lists_what_the_key_may_call(llm, chat, embed, upstream, gateway):
    shared = external(None, "shared-chat", upstream.url)
    other = make_tenant("other")
    external(other, "private", upstream.url)
    page = llm.models.list()
    assert sorted(m.id for m in page.data) == ["embed", "gpt", "shared-chat"]
    owners = {m.id: m.owned_by for m in page.data}
    assert owners == {"embed": "acme", "gpt": "acme", "shared-chat": "gryvia"}
    assert llm.models.retrieve("gpt").id == "gpt"
    with pytest.raises(openai.NotFoundError):
        llm.models.retrieve("private")  # another tenant's model: not there
    assert shared.tenant is None


def test_chat_completion_is_relayed_and_metered(llm, chat, upstream, acme):
    reply = llm.chat.completions.create(model="gpt", messages=HELLO, max_tokens=5)
    assert reply.choices[0].message.content and reply.usage.completion_tokens == 5
    assert reply.usage.prompt_tokens == 8
    (sent,) = upstream.requests
    assert sent.body["model"] == "up-chat"  # the service's upstream name, not the client's
    assert sent.headers["authorization"] == "Bearer sk-upstream-secret"  # the service's credential, not the key
    (row,) = metered(1)
    assert (row.tenant_id, row.model, row.service, row.endpoint) == (acme.pk, "gpt", "gpt", "chat.completions")
    assert (row.input_tokens, row.output_tokens, row.estimated, row.stream, row.status) == (8, 5, False, False, 200)
    assert row.latency_ms > 0
    hourly = LlmUsageHourly.objects.get(tenant=acme, model="gpt")
    assert (hourly.requests, hourly.input_tokens, hourly.output_tokens, hourly.errors) == (1, 8, 5, 0)


def test_the_client_key_never_reaches_the_upstream(llm, acme, upstream, acme_key):
    external(acme, "plain", upstream.url)  # no credential
    llm.chat.completions.create(model="plain", messages=HELLO)
    (sent,) = upstream.requests
    assert "authorization" not in sent.headers
    assert acme_key not in str(sent.headers)


def test_streamed_chat_relays_every_chunk_and_the_usage_only_when_asked(llm, chat, upstream):
    chunks = list(llm.chat.completions.create(model="gpt", messages=HELLO, max_tokens=6, stream=True))
    assert all(c.choices for c in chunks)  # no usage-only chunk: the client did not ask
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text and chunks[-1].choices[0].finish_reason
    assert upstream.requests[-1].body["stream_options"] == {"include_usage": True}  # asked for the metering
    with_usage = list(
        llm.chat.completions.create(
            model="gpt", messages=HELLO, max_tokens=6, stream=True, stream_options={"include_usage": True}
        )
    )
    assert with_usage[-1].usage.completion_tokens == 6 and not with_usage[-1].choices
    rows = metered(2)
    assert [(r.input_tokens, r.output_tokens, r.estimated, r.stream) for r in rows] == [(8, 6, False, True)] * 2
    assert all(r.ttft_ms is not None and r.ttft_ms <= r.latency_ms for r in rows)


def test_completions_and_embeddings(llm, chat, embed):
    completion = llm.completions.create(model="gpt", prompt="Once upon a time", max_tokens=3)
    assert completion.choices[0].text and completion.usage.completion_tokens == 3
    streamed = list(llm.completions.create(model="gpt", prompt="Once upon a time", max_tokens=3, stream=True))
    assert "".join(c.choices[0].text for c in streamed if c.choices)
    vectors = llm.embeddings.create(model="embed", input=["GPU node is out of memory", "disk full"])
    assert len(vectors.data) == 2 and len(vectors.data[0].embedding) == 384
    rows = metered(3)
    assert [(r.endpoint, r.output_tokens) for r in rows] == [("completions", 3), ("completions", 3), ("embeddings", 0)]
    assert rows[2].input_tokens == vectors.usage.prompt_tokens > 0


def test_a_model_at_the_wrong_endpoint_is_a_400_naming_it(llm, chat, embed):
    with pytest.raises(openai.BadRequestError) as caught:
        llm.embeddings.create(model="gpt", input="x")
    assert caught.value.body["param"] == "model" and "embeddings" in caught.value.body["message"]


def test_errors_parse_as_the_client_expects(llm, gateway, chat, acme):
    bad = openai.OpenAI(base_url=gateway.url, api_key="gry_notakey_000000000000000000000000000000", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as caught:
        bad.models.list()
    assert caught.value.body["code"] == "invalid_api_key" and caught.value.status_code == 401
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=gateway.url, api_key="sk-whatever", max_retries=0).chat.completions.create(
            model="gpt", messages=HELLO
        )
    with pytest.raises(openai.NotFoundError) as caught:
        llm.chat.completions.create(model="nope", messages=HELLO)
    assert caught.value.body["code"] == "model_not_found" and caught.value.body["type"] == "invalid_request_error"
    with pytest.raises(openai.BadRequestError) as caught:
        llm.chat.completions.create(model="gpt", messages=[])
    assert caught.value.body["param"] == "messages"
    acme.tokens_per_day = 10
    acme.save()
    from apps.llm import routing

    routing.routes_changed()
    with pytest.raises(openai.RateLimitError) as caught:
        llm.chat.completions.create(model="gpt", messages=HELLO, max_tokens=50)
    body = caught.value.body
    assert body["type"] == "rate_limit_error" and body["code"] == "tokens_per_day_exceeded"
    assert "tokens per day of tenant acme" in body["message"] and "resets at" in body["message"]
    assert int(caught.value.response.headers["retry-after"]) > 0


def test_a_key_without_llm_invoke_is_refused(gateway, acme, chat):
    reader = make_key(acme, ["jobs:read"], name="reader")
    with pytest.raises(openai.PermissionDeniedError) as caught:
        openai.OpenAI(base_url=gateway.url, api_key=reader, max_retries=0).models.list()
    assert "llm:invoke" in caught.value.body["message"]


def test_envelope_for_paths_methods_bodies_and_sizes(gateway, acme_key, chat):
    auth = {"authorization": f"Bearer {acme_key}"}
    with httpx.Client(base_url=gateway.url, headers=auth, timeout=10) as http:
        missing = http.get("/nothing/here")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "unknown_url"
        wrong = http.get("/chat/completions")
        assert wrong.status_code == 405 and wrong.json()["error"]["type"] == "invalid_request_error"
        garbled = http.post("/chat/completions", content=b"{not json")
        assert garbled.status_code == 400 and "not valid JSON" in garbled.json()["error"]["message"]
        no_model = http.post("/chat/completions", json={"messages": HELLO})
        assert no_model.status_code == 400 and no_model.json()["error"]["param"] == "model"
        with override_settings(GRYVIA_LLM_MAX_BODY_BYTES=2048):
            big = http.post(
                "/chat/completions", json={"model": "gpt", "messages": [{"role": "user", "content": "x" * 4000}]}
            )
        assert big.status_code == 413 and big.json()["error"]["code"] == "request_too_large"


def test_upstream_timeout_is_a_504_and_a_5xx_is_relayed(llm, chat, upstream):
    upstream.set(first_byte_delay_s=2.0)
    with override_settings(GRYVIA_LLM_UPSTREAM_TIMEOUT_S=0.3):
        from apps.llm.gateway import upstream as gateway_upstream

        gateway_upstream._clients.clear()  # the pool takes the new timeout
        with pytest.raises(openai.APIStatusError) as caught:
            llm.chat.completions.create(model="gpt", messages=HELLO)
        gateway_upstream._clients.clear()
    assert caught.value.status_code == 504 and caught.value.body["code"] == "upstream_timeout"
    upstream.set(first_byte_delay_s=0.0, fail_status=503)
    with pytest.raises(openai.InternalServerError) as caught:
        llm.chat.completions.create(model="gpt", messages=HELLO)
    assert caught.value.status_code == 503
    rows = metered(2)
    assert [(r.status, r.input_tokens + r.output_tokens) for r in rows] == [(504, 0), (503, 0)]


def test_prometheus_metrics_per_model_and_tenant(gateway, upstream):
    tenant = make_tenant("metered")  # labels no other test uses: the registry lives as long as the process
    external(tenant, "gpt", upstream.url)
    with openai.OpenAI(base_url=gateway.url, api_key=make_key(tenant, ["llm:invoke"]), max_retries=0) as llm:
        llm.chat.completions.create(model="gpt", messages=HELLO, max_tokens=2)
        list(llm.chat.completions.create(model="gpt", messages=HELLO, max_tokens=2, stream=True))
        with pytest.raises(openai.NotFoundError):
            llm.chat.completions.create(model="missing", messages=HELLO)
    metered(3)
    text = httpx.get(gateway.url.removesuffix("/v1") + "/metrics", timeout=10).text
    for line in (
        'gryvia_llm_requests_total{code="200",endpoint="chat.completions",model="gpt",tenant="metered"} 2.0',
        'gryvia_llm_requests_total{code="404",endpoint="chat.completions",model="missing",tenant="metered"} 1.0',
        'gryvia_llm_tokens_total{direction="output",model="gpt",tenant="metered"} 4.0',
        'gryvia_llm_request_duration_seconds_count{model="gpt",tenant="metered"} 2.0',
        'gryvia_llm_time_to_first_token_seconds_count{model="gpt",tenant="metered"} 1.0',
    ):
        assert line in text, line

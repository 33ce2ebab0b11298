"""The stand-in OpenAI upstream (benchmarks.upstream), driven by the official openai client over loopback HTTP."""

from __future__ import annotations

import base64
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from benchmarks.upstream import Upstream
from benchmarks.upstream_replies import DEFAULT_MODELS, prompt_tokens

ROOT = Path(__file__).resolve().parents[2]
CHAT, EMBED = DEFAULT_MODELS
MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Say hello to the gateway, please."},
]


@pytest.fixture
def up() -> Iterator[Upstream]:
    with Upstream(name="alpha") as server:
        yield server


@pytest.fixture
def client(up: Upstream) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=up.url, api_key="sk-client", max_retries=0, timeout=10) as c:
        yield c


def test_models_are_listed_and_changeable_at_runtime(up, client):
    assert [m.id for m in client.models.list()] == list(DEFAULT_MODELS)
    up.set(model_ids=("tiny-chat",))
    assert [m.id for m in client.models.list()] == ["tiny-chat"]
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model=CHAT, messages=MESSAGES)
    assert caught.value.code == "model_not_found"


def test_chat_usage_is_predictable_and_the_replica_is_named(up, client):
    raw = client.chat.completions.with_raw_response.create(model=CHAT, messages=MESSAGES)
    completion = raw.parse()
    assert raw.headers["x-upstream-name"] == "alpha"
    assert completion.system_fingerprint == "fp_alpha" and "alpha" in completion.id
    assert completion.choices[0].message.content == "Hello from the stand-in upstream, one"
    assert completion.choices[0].finish_reason == "stop"
    # "Be brief." (9 bytes) + the user's 33 bytes = 42 bytes // 4
    assert completion.usage.model_dump(include={"prompt_tokens", "completion_tokens", "total_tokens"}) == {
        "prompt_tokens": 10,
        "completion_tokens": 8,
        "total_tokens": 18,
    }
    short = client.chat.completions.create(model=CHAT, messages=MESSAGES, max_tokens=3)
    assert (short.usage.completion_tokens, short.choices[0].finish_reason) == (3, "length")
    up.set(name="beta", chunks=2)
    raw = client.chat.completions.with_raw_response.create(model=CHAT, messages=MESSAGES)
    assert raw.headers["x-upstream-name"] == "beta" and raw.parse().usage.completion_tokens == 2


@pytest.mark.parametrize("include_usage", [True, False])
def test_chat_stream_sends_the_usage_chunk_exactly_when_asked(up, client, include_usage):
    options = {"stream_options": {"include_usage": True}} if include_usage else {}
    chunks = list(client.chat.completions.create(model=CHAT, messages=MESSAGES, stream=True, **options))
    content = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(content) == 8 and content[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content for c in content) == "Hello from the stand-in upstream, one"
    finished = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert [c.choices[0].finish_reason for c in finished] == ["stop"]
    with_usage = [c for c in chunks if c.usage is not None]
    if include_usage:
        assert with_usage == [chunks[-1]] and chunks[-1].choices == []
        assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (10, 8)
    else:
        assert with_usage == []
    assert up.wait_until(lambda u: u.streams_completed == 1) and up.streams_aborted == 0


def test_send_usage_false_never_sends_usage(up, client):
    up.set(send_usage=False)
    assert client.chat.completions.create(model=CHAT, messages=MESSAGES).usage is None
    stream = client.chat.completions.create(
        model=CHAT, messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert len(chunks) == 9 and all(c.usage is None for c in chunks)
    assert client.embeddings.create(model=EMBED, input="x").usage is None


def test_completions_streamed_and_not(client):
    completion = client.completions.create(model=CHAT, prompt="a" * 21, max_tokens=5)
    assert completion.choices[0].text == "Hello from the stand-in"
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (5, 5)
    chunks = list(
        client.completions.create(model=CHAT, prompt="a" * 21, stream=True, stream_options={"include_usage": True})
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "Hello from the stand-in upstream, one"
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == 13


def test_embeddings_have_the_configured_dimension_and_are_deterministic(up, client):
    first = client.embeddings.create(model=EMBED, input=["alpha", "bravo"])  # the client asks for base64
    assert [len(d.embedding) for d in first.data] == [384, 384]
    assert first.usage.prompt_tokens == 2 and first.data[0].embedding != first.data[1].embedding
    floats = client.embeddings.create(model=EMBED, input="alpha", encoding_format="float")
    assert floats.data[0].embedding == first.data[0].embedding
    assert abs(sum(v * v for v in floats.data[0].embedding) - 1.0) < 1e-5
    assert len(client.embeddings.create(model=EMBED, input="x", dimensions=16).data[0].embedding) == 16
    up.set(dimensions=8)
    raw = httpx.post(f"{up.url}/embeddings", json={"model": EMBED, "input": "alpha", "encoding_format": "base64"})
    assert len(struct.unpack("<8f", base64.b64decode(raw.json()["data"][0]["embedding"]))) == 8


def test_tokenize_counts_what_usage_reports(up, client):
    chat = client.chat.completions.create(model=CHAT, messages=MESSAGES)
    counted = httpx.post(f"{up.root_url}/tokenize", json={"model": CHAT, "messages": MESSAGES}).json()
    assert counted["count"] == chat.usage.prompt_tokens == prompt_tokens({"messages": MESSAGES})
    assert len(counted["tokens"]) == counted["count"] and counted["max_model_len"] == 4096
    prompt = "ünïcode bytes count, not characters"
    completion = client.completions.create(model=CHAT, prompt=prompt)
    counted = httpx.post(f"{up.root_url}/tokenize", json={"model": CHAT, "prompt": prompt}).json()
    assert counted["count"] == completion.usage.prompt_tokens == len(prompt.encode()) // 4


@pytest.mark.parametrize(
    ("status", "error_class"),
    [
        (400, openai.BadRequestError),
        (401, openai.AuthenticationError),
        (429, openai.RateLimitError),
        (500, openai.InternalServerError),
        (503, openai.InternalServerError),
    ],
)
def test_fail_status_raises_the_matching_client_error(up, client, status, error_class):
    up.set(fail_status=status)
    with pytest.raises(error_class) as caught:
        client.chat.completions.create(model=CHAT, messages=MESSAGES, stream=True)
    assert caught.value.status_code == status and "alpha" in caught.value.message
    assert caught.value.response.headers["x-upstream-name"] == "alpha"
    assert httpx.get(f"{up.root_url}/health").status_code == 200
    up.set(fail_status=None)
    assert client.chat.completions.create(model=CHAT, messages=MESSAGES).usage.total_tokens == 18


def test_close_before_response_is_a_connection_error_after_the_request_arrived(up, client):
    up.set(close_before_response=True)
    with pytest.raises(openai.APIConnectionError) as caught:
        client.chat.completions.create(model=CHAT, messages=MESSAGES)
    assert type(caught.value) is openai.APIConnectionError  # not a timeout
    assert [r.path for r in up.requests] == ["/v1/chat/completions"]


def test_first_byte_delay_times_out_a_short_client_timeout(up):
    up.set(first_byte_delay_s=3)
    started = time.monotonic()
    with openai.OpenAI(base_url=up.url, api_key="k", max_retries=0, timeout=0.3) as impatient:
        with pytest.raises(openai.APITimeoutError):
            impatient.chat.completions.create(model=CHAT, messages=MESSAGES)
    assert time.monotonic() - started < 2


def test_a_client_that_leaves_after_three_chunks_is_counted_as_aborted(up, client):
    up.set(chunks=50, chunk_delay_s=0.02)
    stream = client.chat.completions.create(model=CHAT, messages=MESSAGES, stream=True)
    received = [chunk for _, chunk in zip(range(3), stream, strict=False)]
    stream.close()
    assert len(received) == 3
    assert up.wait_until(lambda u: u.streams_aborted == 1, timeout=5)
    assert up.streams_completed == 0
    up.set(chunks=2, chunk_delay_s=0)
    assert len(list(client.chat.completions.create(model=CHAT, messages=MESSAGES, stream=True))) == 3
    assert up.wait_until(lambda u: u.streams_completed == 1) and up.streams_aborted == 1


def test_requests_are_recorded_with_lower_cased_headers_and_bounded():
    with Upstream(record_limit=3) as small:
        with openai.OpenAI(base_url=small.url, api_key="sk-secret", max_retries=0) as c:
            c.chat.completions.create(model=CHAT, messages=MESSAGES, extra_headers={"X-Trace-ID": "t-1"})
            for _ in range(4):
                c.models.list()
        assert small.request_count == 5
        recorded = small.requests
        assert [r.path for r in recorded] == ["/v1/models"] * 3
        small.clear()
        c = httpx.Client(base_url=small.url)
        c.post("/chat/completions", json={"model": CHAT, "messages": MESSAGES}, headers={"X-Trace-ID": "t-1"})
        c.close()
        (request,) = small.requests
        assert (request.method, request.path, request.body["model"]) == ("POST", "/v1/chat/completions", CHAT)
        assert request.headers["x-trace-id"] == "t-1" and "content-length" in request.headers


def test_keep_alive_serves_many_requests_on_one_connection(up):
    with httpx.Client(base_url=up.url, limits=httpx.Limits(max_connections=1)) as c:
        for _ in range(20):
            assert c.post("/completions", json={"model": CHAT, "prompt": "hi"}).status_code == 200
        assert c.post("/nowhere", json={}).json()["error"]["type"] == "invalid_request_error"
        assert c.get("/chat/completions").status_code == 405
        assert c.post("/completions", content=b"not json").status_code == 400
    assert up.request_count == 23


def test_the_standalone_process_serves_and_reports_its_cpu():
    command = [sys.executable, "-m", "benchmarks.upstream", "--port", "0", "--chunks", "3", "--name", "solo"]
    with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True) as proc:
        try:
            line = proc.stdout.readline()
            assert line.startswith("upstream listening on http://127.0.0.1:"), line
            url = line.split()[3]
            with openai.OpenAI(base_url=url, api_key="k", max_retries=0) as c:
                assert len(list(c.completions.create(model=CHAT, prompt="x", stream=True))) == 4
                assert c.chat.completions.create(model=CHAT, messages=MESSAGES).system_fingerprint == "fp_solo"
        finally:
            proc.send_signal(signal.SIGTERM)
            out = proc.communicate(timeout=10)[0]
    assert proc.returncode == 0
    assert "requests=2 streams_completed=1 streams_aborted=0 cpu_s=" in out

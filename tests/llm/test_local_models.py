"""The real packaged models behind their real servers, started as the local backend will start them (the argv and
environment from apps.llm.packaged), and called with the official openai client. Needs `make models`."""

from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from apps.llm import packaged
from apps.llm.packaged import MINILM, TINY_CHAT, LocalModel

pytestmark = pytest.mark.slow

READY_TIMEOUT_S = 180


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


# The servers this module has running: model name -> (process, log).
_RUNNING: dict[str, tuple[subprocess.Popen, Path]] = {}


def _exit_status(code: int) -> str:
    return f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"


@pytest.fixture(autouse=True)
def _servers_stay_up() -> Iterator[None]:
    """A server that died under a test (a crash at its first completion, say) fails that test with how it ended
    and its log, rather than with only the client's connection error."""
    yield
    dead = [
        f"{name} died ({_exit_status(proc.returncode)}):\n{_tail(log)}"
        for name, (proc, log) in _RUNNING.items()
        if proc.poll() is not None
    ]
    assert not dead, "\n".join(dead)


def _serve(model: LocalModel, tmp: Path) -> Iterator[str]:
    if model not in packaged.installed():
        missing = [m for m in model.modules if not packaged._importable(m)]
        why = f"{model.name} needs the models extra (`make models`); missing modules: {', '.join(missing)}"
        if os.environ.get("GRYVIA_REQUIRE_MODELS") == "1":  # CI installs the extra: a skip there is a failure
            pytest.fail(why)
        pytest.skip(why)
    port = _free_port()
    argv = packaged.server_command(model, host="127.0.0.1", port=port, data_dir=tmp / "data")
    log = tmp / f"{model.name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv, env=packaged.server_env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    base = f"http://127.0.0.1:{port}"
    _RUNNING[model.name] = (proc, log)
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            assert proc.poll() is None, f"{model.name} exited ({_exit_status(proc.returncode)}):\n{_tail(log)}"
            assert time.monotonic() < deadline, f"{model.name} not ready in {READY_TIMEOUT_S} s:\n{_tail(log)}"
            try:
                if httpx.get(base + model.health_path, timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.25)
        yield base
    finally:
        _RUNNING.pop(model.name, None)
        # The server's whole process group: nothing it started outlives the test.
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


@pytest.fixture(scope="module")
def chat(tmp_path_factory) -> Iterator[openai.OpenAI]:
    for base in _serve(TINY_CHAT, tmp_path_factory.mktemp("tiny-chat")):
        yield openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def embeddings(tmp_path_factory) -> Iterator[openai.OpenAI]:
    for base in _serve(MINILM, tmp_path_factory.mktemp("minilm")):
        yield openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=60)


def test_each_server_lists_its_model(chat, embeddings):
    assert [m.id for m in chat.models.list()] == ["tiny-chat"]
    assert [m.id for m in embeddings.models.list()] == ["minilm"]


def test_tiny_chat_completes_with_usage(chat):
    result = chat.chat.completions.create(
        model="tiny-chat", messages=[{"role": "user", "content": "Name three colours."}], max_tokens=16
    )
    assert result.choices[0].message.content.strip()
    assert result.choices[0].finish_reason in ("stop", "length")
    usage = result.usage
    assert usage.prompt_tokens > 0
    assert 0 < usage.completion_tokens <= 16
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_tiny_chat_streams_chunks(chat):
    stream = chat.chat.completions.create(
        model="tiny-chat", messages=[{"role": "user", "content": "Say hello."}], max_tokens=16, stream=True
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(chunks) > 2
    assert text.strip()


def test_minilm_embeds_384_dimensions_that_mean_something(embeddings):
    texts = ["GPU node is out of memory", "accelerator ran out of VRAM", "invoice paid by credit card"]
    result = embeddings.embeddings.create(model="minilm", input=texts)  # the client asks for base64
    vectors = [d.embedding for d in result.data]
    assert [len(v) for v in vectors] == [384, 384, 384]
    assert result.usage.prompt_tokens > len(texts)

    def cos(a, b):
        return sum(x * y for x, y in zip(a, b, strict=True)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))

    assert cos(vectors[0], vectors[1]) > cos(vectors[0], vectors[2]) + 0.2
    floats = embeddings.embeddings.create(model="minilm", input=texts[0], encoding_format="float")
    assert floats.data[0].embedding == pytest.approx(vectors[0], abs=1e-6)


def test_minilm_counts_tokens_with_its_own_tokenizer(embeddings):
    base = str(embeddings.base_url).removesuffix("/v1/")
    r = httpx.post(f"{base}/tokenize", json={"model": "minilm", "prompt": "GPU node is out of memory"})
    assert r.status_code == 200
    body = r.json()
    assert body["count"] == len(body["tokens"]) == 9  # [CLS] gp ##u node is out of memory [SEP]
    assert body["max_model_len"] == 256

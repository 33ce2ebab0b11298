"""A small OpenAI-compatible embeddings server over sentence-transformers: `python -m apps.llm.embedding_server`.

The local cluster backend runs it for the `minilm` model (see packaged.py). It is a plain ASGI callable under
uvicorn, imports no Django, and reads nothing from the network (the model is a folder on disk).

    GET  /health          200 once the model is loaded
    GET  /v1/models       OpenAI list shape; GET /v1/models/<name> for one
    POST /v1/embeddings   OpenAI request and response (`encoding_format` float or base64, `dimensions`, usage)
    POST /tokenize        vLLM style: {"model", "prompt"} -> {"count", "tokens", "max_model_len"}

Errors use OpenAI's envelope. Model work (tokenizing and encoding) runs one request at a time on a worker thread:
the event loop stays free for /health, and a fast tokenizer is not safe to share between threads.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import struct
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 8 * 1024 * 1024
MAX_INPUTS = 2048  # OpenAI's limit on the number of strings in one embeddings request

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class Encoder(Protocol):
    """What the server needs from a model; `SentenceTransformerEncoder` is the real one, tests pass a fake."""

    dimension: int
    max_length: int  # tokens, special tokens included

    def tokenize(self, texts: Sequence[str], *, add_special_tokens: bool = True) -> list[list[int]]: ...

    def encode(self, texts: Sequence[str]) -> Sequence[Sequence[float]]: ...


class SentenceTransformerEncoder:
    """A sentence-transformers model folder on CPU. Importing torch and sentence-transformers takes seconds."""

    def __init__(self, model_path: str | Path, *, threads: int | None = None) -> None:
        import torch
        from sentence_transformers import SentenceTransformer

        if threads:
            torch.set_num_threads(threads)
        self._model = SentenceTransformer(str(model_path), device="cpu", local_files_only=True)
        self._tokenizer = self._model.tokenizer
        # sentence-transformers 6 renamed the method; older releases only have the first name.
        dimension = (
            getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        )
        self.dimension = int(dimension())
        self.max_length = int(self._model.max_seq_length)

    def tokenize(self, texts: Sequence[str], *, add_special_tokens: bool = True) -> list[list[int]]:
        batch = self._tokenizer(list(texts), add_special_tokens=add_special_tokens, truncation=False)
        return [list(ids) for ids in batch["input_ids"]]

    def encode(self, texts: Sequence[str]) -> Sequence[Sequence[float]]:
        return self._model.encode(list(texts), convert_to_numpy=True, show_progress_bar=False).tolist()


class RequestError(Exception):
    """An error the client caused or can act on, sent in OpenAI's envelope."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code


def error_body(message: str, *, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}


def float32_base64(vector: Sequence[float]) -> str:
    """OpenAI's `encoding_format: base64`: the vector as little-endian float32 bytes."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


class EmbeddingApp:
    """The ASGI application. Give it a loaded `encoder`, or a `load` callable that lifespan startup runs on a thread
    (uvicorn opens the port only after it returns, and exits if it raises)."""

    def __init__(
        self,
        *,
        name: str,
        encoder: Encoder | None = None,
        load: Callable[[], Encoder] | None = None,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        self.name = name
        self.encoder = encoder
        self._load = load
        self.max_body_bytes = max_body_bytes
        self.created = int(time.time())
        self._lock: asyncio.Lock | None = None
        self._routes: dict[str, dict[str, Callable[[Any], Awaitable[tuple[int, dict[str, Any]]]]]] = {
            "/health": {"GET": self._health},
            "/v1/models": {"GET": self._models},
            f"/v1/models/{name}": {"GET": self._model},
            "/v1/embeddings": {"POST": self._embeddings},
            "/tokenize": {"POST": self._tokenize},
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    if self.encoder is None and self._load is not None:
                        started = time.monotonic()
                        self.encoder = await asyncio.to_thread(self._load)
                        logger.info("%s loaded in %.1f s", self.name, time.monotonic() - started)
                except Exception as exc:
                    logger.exception("could not load %s", self.name)
                    await send({"type": "lifespan.startup.failed", "message": f"could not load {self.name}: {exc}"})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        method, path = scope["method"], scope["path"]
        headers: list[tuple[bytes, bytes]] = []
        try:
            methods = self._routes.get(path.rstrip("/") or "/")
            if methods is None:
                raise RequestError(404, f"Unknown request URL: {method} {path}.", code="unknown_url")
            handler = methods.get(method)
            if handler is None:
                headers.append((b"allow", ", ".join(methods).encode()))
                raise RequestError(405, f"Method {method} is not allowed on {path}; use {', '.join(methods)}.")
            body = await self._read_body(scope, receive) if method == "POST" else None
            status, payload = await handler(body)
        except RequestError as exc:
            status, payload = exc.status, error_body(exc.message, param=exc.param, code=exc.code)
        except Exception:
            logger.exception("%s %s failed", method, path)
            status, payload = 500, error_body("The embeddings server failed on this request; see its log.")
            payload["error"]["type"] = "server_error"
        await self._respond(send, status, payload, headers)

    async def _read_body(self, scope: Scope, receive: Receive) -> Any:
        too_big = RequestError(
            413, f"The request body is over the {self.max_body_bytes} byte limit; send fewer inputs."
        )
        for key, value in scope.get("headers", ()):
            if key == b"content-length" and value.isdigit() and int(value) > self.max_body_bytes:
                raise too_big
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise RequestError(400, "The client disconnected before sending the whole body.")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise too_big
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        try:
            body = json.loads(b"".join(chunks))
        except (UnicodeDecodeError, ValueError) as exc:
            raise RequestError(400, f"The body is not valid JSON ({exc}); send a JSON object.") from None
        if not isinstance(body, dict):
            raise RequestError(400, "The body must be a JSON object.")
        return body

    @staticmethod
    async def _respond(send: Send, status: int, payload: dict[str, Any], headers: list[tuple[bytes, bytes]]) -> None:
        data = json.dumps(payload, separators=(",", ":")).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()), *headers]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})

    def _ready(self) -> Encoder:
        if self.encoder is None:
            raise RequestError(503, f"{self.name} is still loading; retry when GET /health answers 200.")
        return self.encoder

    async def _run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        # One request's model work at a time: encodes use every core anyway.
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            return await asyncio.to_thread(fn, *args, **kwargs)

    def _check_model(self, body: dict[str, Any], *, required: bool) -> None:
        model = body.get("model")
        if model is None and not required:
            return
        if model is None:
            raise RequestError(400, "Missing required parameter: 'model'.", param="model")
        if model != self.name:
            raise RequestError(
                404, f"The model '{model}' does not exist; this server serves '{self.name}'.", code="model_not_found"
            )

    async def _health(self, _body: None) -> tuple[int, dict[str, Any]]:
        if self.encoder is None:
            return 503, {"status": "loading", "model": self.name}
        return 200, {"status": "ok", "model": self.name}

    def _model_card(self) -> dict[str, Any]:
        return {"id": self.name, "object": "model", "created": self.created, "owned_by": "gryvia"}

    async def _models(self, _body: None) -> tuple[int, dict[str, Any]]:
        return 200, {"object": "list", "data": [self._model_card()]}

    async def _model(self, _body: None) -> tuple[int, dict[str, Any]]:
        return 200, self._model_card()

    async def _embeddings(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if "input" not in body:
            raise RequestError(400, "Missing required parameter: 'input'.", param="input")
        self._check_model(body, required=True)
        texts = _texts(body["input"])
        encoding = body.get("encoding_format") or "float"
        if encoding not in ("float", "base64"):
            raise RequestError(
                400, f"encoding_format must be 'float' or 'base64', not {encoding!r}.", param="encoding_format"
            )
        encoder = self._ready()
        dimensions = body.get("dimensions")
        if dimensions is not None and (type(dimensions) is not int or dimensions != encoder.dimension):
            raise RequestError(
                400,
                f"{self.name} gives {encoder.dimension}-dimension embeddings and cannot shorten them; "
                f"omit 'dimensions' or set it to {encoder.dimension}.",
                param="dimensions",
            )
        vectors, prompt_tokens = await self._run(self._encode, encoder, texts)
        to_wire = float32_base64 if encoding == "base64" else list
        data = [{"object": "embedding", "index": i, "embedding": to_wire(v)} for i, v in enumerate(vectors)]
        usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}
        return 200, {"object": "list", "data": data, "model": self.name, "usage": usage}

    def _encode(self, encoder: Encoder, texts: list[str]) -> tuple[Sequence[Sequence[float]], int]:
        lengths = [len(ids) for ids in encoder.tokenize(texts)]
        for i, n in enumerate(lengths):
            if n > encoder.max_length:
                where = "input" if len(texts) == 1 else f"input[{i}]"
                raise RequestError(
                    400,
                    f"{where} is {n} tokens; {self.name} reads at most {encoder.max_length}. "
                    "Split it into shorter texts.",
                    param="input",
                    code="context_length_exceeded",
                )
        return encoder.encode(texts), sum(lengths)

    async def _tokenize(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        self._check_model(body, required=False)
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            raise RequestError(400, "'prompt' is required and must be a string.", param="prompt")
        add_special = body.get("add_special_tokens", True)
        if not isinstance(add_special, bool):
            raise RequestError(400, "'add_special_tokens' must be true or false.", param="add_special_tokens")
        encoder = self._ready()
        tokens = (await self._run(encoder.tokenize, [prompt], add_special_tokens=add_special))[0]
        return 200, {"count": len(tokens), "tokens": tokens, "max_model_len": encoder.max_length}


def _texts(value: Any) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise RequestError(400, "'input' must be a string or a non-empty list of strings.", param="input")
    if len(value) > MAX_INPUTS:
        raise RequestError(400, f"'input' has {len(value)} items; send at most {MAX_INPUTS}.", param="input")
    for item in value:
        if isinstance(item, int | list):
            raise RequestError(400, "Token-id input is not supported; send the text as strings.", param="input")
        if not isinstance(item, str):
            raise RequestError(400, "'input' must be a string or a list of strings.", param="input")
        if not item:
            raise RequestError(400, "'input' cannot contain an empty string.", param="input")
    return value


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m apps.llm.embedding_server", description=__doc__.split("\n")[0])
    parser.add_argument("--model-path", required=True, help="a sentence-transformers model folder")
    parser.add_argument("--name", required=True, help="the model id clients send (e.g. minilm)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8082)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's own)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    import uvicorn

    app = EmbeddingApp(name=args.name, load=lambda: SentenceTransformerEncoder(args.model_path, threads=args.threads))
    uvicorn.run(app, host=args.host, port=args.port, lifespan="on", access_log=False, log_level="info")


if __name__ == "__main__":
    main()

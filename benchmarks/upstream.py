"""A fast stand-in OpenAI-compatible upstream on loopback, for the LLM gateway's tests and `make bench-gateway`.

Raw `asyncio.start_server` HTTP/1.1 with keep-alive, no framework: cheap, so the benchmark can measure the proxies
and not it. `GET /v1/models`; `POST /v1/chat/completions`, `/v1/completions` (`stream: true` as OpenAI streams:
chunked `text/event-stream`, the usage chunk only with `stream_options.include_usage`, then `data: [DONE]`);
`POST /v1/embeddings`; vLLM's `POST /tokenize`; `GET /health`. Prompt tokens: see `prompt_tokens`; completion
tokens: `min(max_tokens, chunks)`, one per streamed chunk. A stream whose client leaves before its last chunk is
written (a timeout during `first_byte_delay_s` included) counts as aborted; with no `chunk_delay_s` a short stream
may already sit in the socket buffers when the client leaves, and then it counts as completed.

    with Upstream(name="a", chunks=4) as up:        # a background thread on 127.0.0.1, a free port
        openai.OpenAI(base_url=up.url, api_key="x").models.list()
        up.set(fail_status=503)                      # thread-safe; the next request sees it

    python -m benchmarks.upstream --port 8400 --chunks 8    # a process; prints its CPU seconds on SIGTERM
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import dataclasses
import functools
import http
import itertools
import json
import logging
import math
import signal
import struct
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any, NamedTuple

log = logging.getLogger(__name__)

DEFAULT_MODELS = ("stand-in-chat", "stand-in-embed")
ANY_MODEL = "*"  # in model_ids: serve any model name (not listed by /v1/models)
WORDS = ("Hello", " from", " the", " stand", "-in", " upstream", ",", " one", " token", " per", " chunk", ".")
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error"}
ERROR_TYPES |= {404: "invalid_request_error", 411: "invalid_request_error", 429: "rate_limit_error"}
_PHRASES = {status.value: status.phrase.encode() for status in http.HTTPStatus}
_dumps = json.JSONEncoder(separators=(",", ":")).encode


def _piece(choice: dict[str, Any]) -> bytes:
    """`,"choices":[…]` bytes, spliced after a chunk's per-request prefix."""
    return b"," + _dumps({"choices": [choice]})[1:-1].encode()


def _delta(delta: dict[str, Any], finish: str | None = None) -> bytes:
    return _piece({"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish})


def _text_piece(text: str, finish: str | None = None) -> bytes:
    return _piece({"text": text, "index": 0, "logprobs": None, "finish_reason": finish})


# Stream chunks are templates: per request only the id/created/model prefix is built, never a json.dumps per chunk.
_CHAT_FIRST = _delta({"role": "assistant", "content": WORDS[0]})
_MIDS = {True: tuple(_delta({"content": w}) for w in WORDS), False: tuple(_text_piece(w) for w in WORDS)}
_FINISH = {
    (chat, why): _delta({}, why) if chat else _text_piece("", why)
    for chat in (True, False)
    for why in ("stop", "length")
}
_DONE = b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"  # the last event, then the chunked body's terminator


def _frame(event: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(event), event)


@functools.lru_cache(maxsize=64)
def _text(tokens: int) -> str:
    return "".join(WORDS[i % len(WORDS)] for i in range(tokens))


@functools.lru_cache(maxsize=8)
def _vector_table(dim: int) -> tuple[list[float], bytes]:
    """A unit vector of `dim` float32 values, twice over, so each input's rotation of it is one slice."""
    raw = [math.sin(i * 0.7 + 1.0) for i in range(dim)]
    norm = math.sqrt(sum(v * v for v in raw)) or 1.0
    packed = struct.pack(f"<{dim}f", *(v / norm for v in raw))
    return list(struct.unpack(f"<{dim}f", packed)) * 2, packed * 2  # float32 values: `float` and `base64` agree


def _error(status: int, message: str, code: str | None = None, param: str | None = None) -> tuple[int, bytes]:
    """A status and OpenAI's error envelope."""
    kind = ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return status, _dumps({"error": {"message": message, "type": kind, "param": param, "code": code}}).encode()


def text_tokens(value: Any) -> int:
    """Tokens of a prompt or embedding input: UTF-8 bytes // 4 (at least 1), a token array's length, a list's sum."""
    if isinstance(value, str):
        return max(1, len(value.encode()) // 4)
    if isinstance(value, list):
        return len(value) if value and isinstance(value[0], int) else sum(text_tokens(item) for item in value)
    return 0


def prompt_tokens(body: dict[str, Any]) -> int:
    """The prompt tokens that usage and /tokenize report: a chat's message texts count as one text."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return text_tokens(body.get("prompt", body.get("input", "")))
    size = 0
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            size += len(content.encode())
        elif isinstance(content, list):
            size += sum(len(p["text"].encode()) for p in content if isinstance(p, dict) and "text" in p)
    return max(1, size // 4)


class RecordedRequest(NamedTuple):
    """One request as received: header names lower-cased, the body parsed (None when empty or not JSON)."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclasses.dataclass(frozen=True)
class Knobs:
    """How the stand-in behaves. `Upstream.set(**changes)` swaps in a new instance; each request reads one."""

    name: str = "upstream"  # in the x-upstream-name header, the completion id and system_fingerprint
    chunks: int = 8  # completion tokens when max_tokens does not cut them short
    chunk_delay_s: float = 0.0  # sleep between streamed chunks
    first_byte_delay_s: float = 0.0  # sleep before the response headers (not on /health)
    send_usage: bool = True  # False: never any usage, streamed or not
    fail_status: int | None = None  # answer every request but /health with this status and an error envelope
    close_before_response: bool = False  # read the request, then close the connection without a byte
    model_ids: tuple[str, ...] = DEFAULT_MODELS  # others get 404 model_not_found
    dimensions: int = 384  # embedding size when the request sets no `dimensions`
    max_model_len: int = 4096  # reported by /tokenize

    def __post_init__(self) -> None:
        object.__setattr__(self, "model_ids", tuple(self.model_ids))
        if min(self.chunks, self.chunk_delay_s, self.first_byte_delay_s) < 0 or self.dimensions < 1:
            raise ValueError(f"chunks and delays must be >= 0 and dimensions >= 1: {self}")


class _Prepared:
    """What depends only on the knobs, built once per `set` instead of once per request."""

    def __init__(self, knobs: Knobs) -> None:
        self.knobs = knobs
        self.name_header = f"x-upstream-name: {knobs.name}\r\n".encode()
        self.fingerprint = f"fp_{knobs.name}"
        self.models = frozenset(knobs.model_ids)
        ids = [m for m in knobs.model_ids if m != ANY_MODEL]
        data = [{"id": m, "object": "model", "created": 1_700_000_000, "owned_by": knobs.name} for m in ids]
        self.models_body = _dumps({"object": "list", "data": data}).encode()
        self.sse_head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
        self.sse_head += b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n" + self.name_header

    def model_error(self, body: dict[str, Any], required: bool = True) -> tuple[int, bytes] | None:
        model = body.get("model")
        if model is None and not required:
            return None
        if not isinstance(model, str):
            return _error(400, "you must provide a model parameter", param="model")
        if ANY_MODEL in self.models or model in self.models:
            return None
        message = f"The model `{model}` does not exist or you do not have access to it."
        return _error(404, message, code="model_not_found", param="model")


def _new_loop(use_uvloop: bool = True) -> asyncio.AbstractEventLoop:
    try:
        import uvloop  # optional; uvicorn[standard] installs it
    except ImportError:
        use_uvloop = False
    return uvloop.new_event_loop() if use_uvloop else asyncio.new_event_loop()


class Upstream:
    """The stand-in server: `with Upstream(**knobs) as up:` runs it in a thread; `main` runs it as a process."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, record_limit: int = 10_000, **knobs: Any) -> None:
        self.host, self.port = host, port
        self._prepared = _Prepared(Knobs(**knobs))
        self._lock = threading.Lock()
        self._records: collections.deque[RecordedRequest] = collections.deque(maxlen=record_limit)
        self._seq = itertools.count(1)
        self._tasks: set[asyncio.Task] = set()
        self._server: asyncio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.request_count = self.streams_completed = self.streams_aborted = 0
        self._routes: dict[tuple[str, str], Callable[[dict[str, Any], _Prepared], Any]] = {
            ("GET", "/v1/models"): lambda body, prep: (200, prep.models_body),
            ("POST", "/v1/chat/completions"): functools.partial(self._completion, chat=True),
            ("POST", "/v1/completions"): functools.partial(self._completion, chat=False),
            ("POST", "/v1/embeddings"): self._embeddings,
            ("POST", "/tokenize"): self._tokenize,
        }

    @property
    def url(self) -> str:
        """The OpenAI base URL, `http://127.0.0.1:PORT/v1`."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def root_url(self) -> str:
        """Without `/v1`: where `/tokenize` and `/health` are."""
        return f"http://{self.host}:{self.port}"

    @property
    def knobs(self) -> Knobs:
        return self._prepared.knobs

    @property
    def requests(self) -> list[RecordedRequest]:
        """The last `record_limit` requests, oldest first."""
        with self._lock:
            return list(self._records)

    def set(self, **changes: Any) -> None:
        """Change knobs from any thread; a request that arrives later sees all of the changes at once."""
        with self._lock:
            self._prepared = _Prepared(dataclasses.replace(self._prepared.knobs, **changes))

    def clear(self) -> None:
        """Forget the recorded requests and zero the counters."""
        with self._lock:
            self._records.clear()
            self.request_count = self.streams_completed = self.streams_aborted = 0

    def wait_until(self, predicate: Callable[[Upstream], bool], timeout: float = 5.0) -> bool:
        """Poll `predicate(self)` until it holds (True) or `timeout` seconds pass (False)."""
        deadline = time.monotonic() + timeout
        while not predicate(self):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    def start(self, use_uvloop: bool = True) -> Upstream:
        """Serve from a background thread's own event loop; returns once bound (a bind error raises here)."""
        loop = self._loop = _new_loop(use_uvloop)
        self._thread = threading.Thread(target=loop.run_forever, name=f"upstream-{self.knobs.name}", daemon=True)
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self.listen(), loop).result(timeout=10)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Close the listener and every open connection, then end the thread and its loop."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        asyncio.run_coroutine_threadsafe(self.close(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
        self._loop = self._thread = None

    def __enter__(self) -> Upstream:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def listen(self) -> None:
        self._server = await asyncio.start_server(self._handle, self.host, self.port, backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        try:
            while await self._exchange(reader, writer):
                pass
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, asyncio.CancelledError):
            pass  # the client left, or close() ends the connection: nothing to answer, nothing to log
        except Exception:
            log.exception("stand-in upstream: a request failed")
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Read one request and answer it; True when the connection stays open for the next one."""
        lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        prep = self._prepared
        parts = lines[0].split(" ")
        headers = {}
        for line in lines[1:-2]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = headers.get("content-length", "0")
        if len(parts) != 3 or not length.isdigit():
            return await self._send(writer, prep, *_error(400, "malformed request line or header"), keep=False)
        if "transfer-encoding" in headers:  # OpenAI clients send Content-Length; refusing chunked keeps this small
            return await self._send(writer, prep, *_error(411, "send a Content-Length request body"), keep=False)
        method, target, version = parts
        if headers.get("expect", "").lower() == "100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        raw = await reader.readexactly(int(length))
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        connection = headers.get("connection", "").lower()
        keep = "close" not in connection if version == "HTTP/1.1" else "keep-alive" in connection
        path = target.partition("?")[0]
        self.request_count += 1
        if self._records.maxlen:
            with self._lock:
                self._records.append(RecordedRequest(method, path, headers, body))
        knobs = prep.knobs
        if knobs.close_before_response:
            return False
        if path == "/health":
            return await self._send(writer, prep, 200, b'{"status":"ok"}', keep)
        if knobs.first_byte_delay_s:
            await asyncio.sleep(knobs.first_byte_delay_s)
        route = self._routes.get((method, path))
        if knobs.fail_status:
            result = _error(knobs.fail_status, f"stand-in upstream {knobs.name} is set to fail with this status")
        elif route is None:
            status = 405 if any(p == path for _, p in self._routes) else 404
            result = _error(status, f"no route {method} {path}")
        elif method == "POST" and not isinstance(body, dict):
            result = _error(400, "the request body must be a JSON object")
        else:
            result = route(body, prep)
        if isinstance(result, tuple):
            return await self._send(writer, prep, *result, keep)
        return await self._stream(reader, writer, prep, keep, *result)

    async def _send(self, writer: asyncio.StreamWriter, prep: _Prepared, status: int, payload: bytes, keep: bool):
        head = b"HTTP/1.1 %d %b\r\ncontent-type: application/json\r\ncontent-length: %d\r\n" % (
            status,
            _PHRASES.get(status, b"Error"),
            len(payload),
        )
        writer.write(head + prep.name_header + (b"\r\n" if keep else b"connection: close\r\n\r\n") + payload)
        await writer.drain()
        return keep

    def _completion(self, body: dict[str, Any], prep: _Prepared, *, chat: bool) -> tuple[int, bytes] | list:
        """A (status, JSON) answer, or a list of `_stream`'s arguments when the request asks for a stream."""
        if error := prep.model_error(body):
            return error
        field = "messages" if chat else "prompt"
        if not isinstance(body.get(field), list if chat else (str, list)):
            return _error(400, f"{field} is required", param=field)
        knobs = prep.knobs
        limit = body.get("max_completion_tokens", body.get("max_tokens")) if chat else body.get("max_tokens")
        tokens = max(0, min(limit, knobs.chunks)) if isinstance(limit, int) else knobs.chunks
        finish = "length" if tokens < knobs.chunks else "stop"
        usage = None
        if knobs.send_usage:
            prompt = prompt_tokens(body)
            usage = {"prompt_tokens": prompt, "completion_tokens": tokens, "total_tokens": prompt + tokens}
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{knobs.name}-{next(self._seq)}"
        model = body["model"]
        if body.get("stream") is True:
            options = body.get("stream_options")
            if not (isinstance(options, dict) and options.get("include_usage") is True):
                usage = None
            kind = "chat.completion.chunk" if chat else "text_completion"
            head = f'data: {{"id":"{rid}","object":"{kind}","created":{int(time.time())},"model":{_dumps(model)},'
            head += f'"system_fingerprint":{_dumps(prep.fingerprint)}'
            return [head.encode(), chat, tokens, finish, usage]
        if chat:
            message = {"role": "assistant", "content": _text(tokens), "refusal": None}
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
        else:
            choice = {"text": _text(tokens), "index": 0, "logprobs": None, "finish_reason": finish}
        kind = "chat.completion" if chat else "text_completion"
        payload = {"id": rid, "object": kind, "created": int(time.time()), "model": model, "choices": [choice]}
        payload["system_fingerprint"] = prep.fingerprint
        if usage:
            payload["usage"] = usage
        return 200, _dumps(payload).encode()

    async def _stream(self, reader, writer, prep, keep, head, chat, tokens, finish, usage) -> bool:
        """Content chunks, the finish chunk, the usage chunk when asked for, [DONE]; stop when the client left."""
        tail = b',"usage":null}\n\n' if usage else b"}\n\n"  # OpenAI's other chunks carry usage: null when asked
        mids, delay, transport = _MIDS[chat], prep.knobs.chunk_delay_s, writer.transport
        pending = prep.sse_head + (b"\r\n" if keep else b"connection: close\r\n\r\n")
        try:
            for i in range(tokens + 1):
                if i and delay:
                    await asyncio.sleep(delay)
                if reader.at_eof() or transport.is_closing():
                    raise ConnectionResetError("the client closed the stream")
                if i < tokens:
                    writer.write(
                        pending + _frame(head + (_CHAT_FIRST if chat and not i else mids[i % len(mids)]) + tail)
                    )
                    pending = b""
                else:
                    last = pending + _frame(head + _FINISH[chat, finish] + tail)
                    if usage:
                        last += _frame(head + b',"choices":[],"usage":' + _dumps(usage).encode() + b"}\n\n")
                    writer.write(last + _DONE)
                await writer.drain()
        except ConnectionError:
            self.streams_aborted += 1
            return False
        self.streams_completed += 1
        return keep

    def _embeddings(self, body: dict[str, Any], prep: _Prepared) -> tuple[int, bytes]:
        if error := prep.model_error(body):
            return error
        inputs = body.get("input")
        if isinstance(inputs, str) or (isinstance(inputs, list) and inputs and isinstance(inputs[0], int)):
            inputs = [inputs]
        dim = body.get("dimensions") or prep.knobs.dimensions
        if not isinstance(inputs, list) or not inputs or not isinstance(dim, int) or dim < 1:
            return _error(400, "input must be a non-empty string or list, dimensions a positive integer", param="input")
        floats, packed = _vector_table(dim)
        as_base64 = body.get("encoding_format") == "base64"
        data = []
        for index, item in enumerate(inputs):
            at = zlib.crc32(str(item).encode()) % dim  # the same input always gets the same vector
            vector = base64.b64encode(packed[at * 4 : (at + dim) * 4]).decode() if as_base64 else floats[at : at + dim]
            data.append({"object": "embedding", "index": index, "embedding": vector})
        payload: dict[str, Any] = {"object": "list", "data": data, "model": body["model"]}
        if prep.knobs.send_usage:
            payload["usage"] = {"prompt_tokens": text_tokens(inputs), "total_tokens": text_tokens(inputs)}
        return 200, _dumps(payload).encode()

    def _tokenize(self, body: dict[str, Any], prep: _Prepared) -> tuple[int, bytes]:
        if error := prep.model_error(body, required=False):
            return error
        if not isinstance(body.get("messages"), list) and not isinstance(body.get("prompt"), str):
            return _error(400, "send prompt (a string) or messages (a list)", param="prompt")
        count = prompt_tokens(body)
        payload = {"count": count, "max_model_len": prep.knobs.max_model_len, "tokens": list(range(count))}
        return 200, _dumps(payload).encode()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.upstream", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8400, help="0 picks a free port (printed)")
    parser.add_argument("--record-limit", type=int, default=0, help="requests kept in memory (none by default)")
    parser.add_argument("--uvloop", action=argparse.BooleanOptionalAction, default=True)
    for field in dataclasses.fields(Knobs):  # one flag per knob: --chunks, --chunk-delay-s, --no-send-usage, …
        flag = "--" + field.name.replace("_", "-")
        if isinstance(field.default, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=field.default)
        elif field.name == "model_ids":
            parser.add_argument("--models", dest="model_ids", default=",".join(DEFAULT_MODELS), help="'*': any")
        else:
            parser.add_argument(flag, type=int if field.default is None else type(field.default), default=field.default)
    args = vars(parser.parse_args(argv))
    host, port, record_limit, use_uvloop = (args.pop(k) for k in ("host", "port", "record_limit", "uvloop"))
    args["model_ids"] = tuple(m for m in args["model_ids"].split(",") if m)
    upstream = Upstream(host=host, port=port, record_limit=record_limit, **args)

    async def run() -> None:
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        await upstream.listen()
        loop_name = type(asyncio.get_running_loop()).__module__.split(".")[0]
        print(f"upstream listening on {upstream.url} loop={loop_name}", flush=True)
        await stop.wait()
        await upstream.close()

    with asyncio.Runner(loop_factory=functools.partial(_new_loop, use_uvloop)) as runner:
        runner.run(run())
    counts = f"streams_completed={upstream.streams_completed} streams_aborted={upstream.streams_aborted}"
    print(f"upstream stopped requests={upstream.request_count} {counts} cpu_s={time.process_time():.3f}", flush=True)


if __name__ == "__main__":
    main()

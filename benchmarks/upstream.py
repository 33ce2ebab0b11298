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

This module is the server (connections, HTTP/1.1, streaming, the process); benchmarks.upstream_replies has the knobs
and what the routes answer.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import functools
import http
import itertools
import json
import logging
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from .upstream_replies import (
    CHAT_FIRST,
    DEFAULT_MODELS,
    FINISH,
    MIDS,
    STREAM_END,
    Knobs,
    Prepared,
    RecordedRequest,
    completion,
    dumps,
    embeddings,
    error_reply,
    frame,
    tokenize,
)

log = logging.getLogger(__name__)

_PHRASES = {status.value: status.phrase.encode() for status in http.HTTPStatus}


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
        self._prepared = Prepared(Knobs(**knobs))
        self._lock = threading.Lock()
        self._records: collections.deque[RecordedRequest] = collections.deque(maxlen=record_limit)
        self._seq = itertools.count(1)
        self._tasks: set[asyncio.Task] = set()
        self._server: asyncio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.request_count = self.streams_completed = self.streams_aborted = 0
        self._routes: dict[tuple[str, str], Callable[[dict[str, Any], Prepared], Any]] = {
            ("GET", "/v1/models"): lambda body, prep: (200, prep.models_body),
            ("POST", "/v1/chat/completions"): functools.partial(completion, chat=True, seq=self._seq),
            ("POST", "/v1/completions"): functools.partial(completion, chat=False, seq=self._seq),
            ("POST", "/v1/embeddings"): embeddings,
            ("POST", "/tokenize"): tokenize,
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
            self._prepared = Prepared(dataclasses.replace(self._prepared.knobs, **changes))

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
            return await self._send(writer, prep, *error_reply(400, "malformed request line or header"), keep=False)
        if "transfer-encoding" in headers:  # OpenAI clients send Content-Length; refusing chunked keeps this small
            return await self._send(writer, prep, *error_reply(411, "send a Content-Length request body"), keep=False)
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
            result = error_reply(knobs.fail_status, f"stand-in upstream {knobs.name} is set to fail with this status")
        elif route is None:
            status = 405 if any(p == path for _, p in self._routes) else 404
            result = error_reply(status, f"no route {method} {path}")
        elif method == "POST" and not isinstance(body, dict):
            result = error_reply(400, "the request body must be a JSON object")
        else:
            result = route(body, prep)
        if isinstance(result, tuple):
            return await self._send(writer, prep, *result, keep)
        return await self._stream(reader, writer, prep, keep, *result)

    async def _send(self, writer: asyncio.StreamWriter, prep: Prepared, status: int, payload: bytes, keep: bool):
        head = b"HTTP/1.1 %d %b\r\ncontent-type: application/json\r\ncontent-length: %d\r\n" % (
            status,
            _PHRASES.get(status, b"Error"),
            len(payload),
        )
        writer.write(head + prep.name_header + (b"\r\n" if keep else b"connection: close\r\n\r\n") + payload)
        await writer.drain()
        return keep

    async def _stream(self, reader, writer, prep, keep, head, chat, tokens, finish, usage) -> bool:
        """Content chunks, the finish chunk, the usage chunk when asked for, [DONE]; stop when the client left."""
        tail = b',"usage":null}\n\n' if usage else b"}\n\n"  # OpenAI's other chunks carry usage: null when asked
        mids, delay, transport = MIDS[chat], prep.knobs.chunk_delay_s, writer.transport
        pending = prep.sse_head + (b"\r\n" if keep else b"connection: close\r\n\r\n")
        try:
            for i in range(tokens + 1):
                if i and delay:
                    await asyncio.sleep(delay)
                if reader.at_eof() or transport.is_closing():
                    raise ConnectionResetError("the client closed the stream")
                if i < tokens:
                    writer.write(pending + frame(head + (CHAT_FIRST if chat and not i else mids[i % len(mids)]) + tail))
                    pending = b""
                else:
                    last = pending + frame(head + FINISH[chat, finish] + tail)
                    if usage:
                        last += frame(head + b',"choices":[],"usage":' + dumps(usage).encode() + b"}\n\n")
                    writer.write(last + STREAM_END)
                await writer.drain()
        except ConnectionError:
            self.streams_aborted += 1
            return False
        self.streams_completed += 1
        return keep


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

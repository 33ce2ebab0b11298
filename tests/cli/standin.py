"""A stand-in for the Gryvia API on loopback: canned answers per (method, path), every request recorded.

Answers for a route are served in order; the last one repeats. An answer may stream its body in chunks
(chunked transfer encoding) with a pause before each, recording when each chunk went out.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Answer:
    status: int = 200
    json: Any = None
    text: str | None = None
    chunks: list[str] | None = None
    delay: float = 0.0
    content_type: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    sent_at: list[float] = field(default_factory=list)


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def form(self) -> dict[str, str]:
        return {k: v[-1] for k, v in parse_qs(self.body.decode()).items()}


def error(status: int, message: str, fields: dict[str, Any] | None = None) -> Answer:
    body: dict[str, Any] = {"type": {400: "invalid_request", 401: "authentication_failed"}.get(status, "error")}
    body["message"] = message
    if fields:
        body["fields"] = fields
    return Answer(status, json={"error": body})


Responder = Answer | Callable[[Recorded], Answer]


class StandIn:
    """The server; `add` routes, `requests` is what arrived, `url` its base URL."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], list[Responder]] = {}
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def add(self, method: str, path: str, *answers: Responder) -> None:
        self.routes[(method.upper(), path)] = list(answers)

    def seen(self, method: str | None = None, path: str | None = None) -> list[Recorded]:
        return [r for r in self.requests if (method is None or r.method == method) and (path is None or r.path == path)]

    def start(self) -> StandIn:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _answer(self, recorded: Recorded) -> Answer:
        with self._lock:
            self.requests.append(recorded)
            queue = self.routes.get((recorded.method, recorded.path))
            if not queue:
                return error(404, f"no stand-in route for {recorded.method} {recorded.path}")
            responder = queue.pop(0) if len(queue) > 1 else queue[0]
        return responder(recorded) if callable(responder) else responder

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                parts = urlsplit(self.path)
                recorded = Recorded(
                    self.command,
                    parts.path,
                    {k: v[-1] for k, v in parse_qs(parts.query).items()},
                    {k.lower(): v for k, v in self.headers.items()},
                    self.rfile.read(length) if length else b"",
                )
                answer = standin._answer(recorded)
                self.send_response(answer.status)
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                if answer.chunks is not None:
                    self.send_header("Content-Type", answer.content_type or "text/plain; charset=utf-8")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    self._stream(answer)
                    return
                if answer.json is not None:
                    body, kind = json.dumps(answer.json).encode(), "application/json"
                else:
                    body, kind = (answer.text or "").encode(), "text/plain; charset=utf-8"
                if answer.status != 204:
                    self.send_header("Content-Type", answer.content_type or kind)
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if answer.status != 204:
                    self.wfile.write(body)

            def _stream(self, answer: Answer) -> None:
                try:
                    for chunk in answer.chunks or []:
                        time.sleep(answer.delay)
                        data = chunk.encode()
                        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                        self.wfile.flush()
                        answer.sent_at.append(time.monotonic())
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _serve

        return Handler

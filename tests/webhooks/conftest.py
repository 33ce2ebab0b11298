"""Fixtures for webhook tests: a real HTTP receiver on loopback (allow-listed), endpoints, and a clock."""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.utils import timezone

from apps.webhooks import services
from tests.factories import ACTOR


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self):
        return json.loads(self.body)


@dataclass
class Receiver:
    """Answers each POST with the next queued (status, headers, body), then 200; records every request."""

    server: ThreadingHTTPServer
    requests: list[Received] = field(default_factory=list)
    answers: list[tuple[int, dict[str, str], bytes]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/hook"

    def answer(self, status: int, times: int = 1, *, headers: dict[str, str] | None = None, body: bytes = b"") -> None:
        self.answers += [(status, headers or {}, body)] * times


def _handler(receiver_ref: list[Receiver]):
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            receiver = receiver_ref[0]
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with receiver.lock:
                receiver.requests.append(Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                status, headers, answer = receiver.answers.pop(0) if receiver.answers else (200, {}, b"ok")
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args) -> None:
            pass

    return Handler


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    ref: list[Receiver] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(ref))
    ref.append(Receiver(server))
    thread = threading.Thread(target=server.serve_forever, name="test-webhook-receiver", daemon=True)
    thread.start()
    yield ref[0]
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.fixture(autouse=True)
def allow_loopback(settings):
    """The test settings' operator allow-list: loopback, over plain http (the guard's own tests clear it)."""
    settings.GRYVIA_WEBHOOK_ALLOW_CIDRS = ["127.0.0.0/8"]
    settings.GRYVIA_WEBHOOK_TIMEOUT_S = 5.0
    return settings


@pytest.fixture
def make_endpoint():
    def make(tenant, url: str, events: list[str] | None = None, **kw):
        return services.endpoint_create(actor=ACTOR, tenant=tenant, url=url, events=events or ["job.failed"], **kw)

    return make


class Clock:
    """Time the drain is told it is (`now=`): tests move it instead of sleeping. It starts at its first reading."""

    def __init__(self) -> None:
        self._now: dt.datetime | None = None

    @property
    def now(self) -> dt.datetime:
        if self._now is None:
            self._now = timezone.now()
        return self._now

    @now.setter
    def now(self, value: dt.datetime) -> None:
        self._now = value

    def advance(self, seconds: float) -> dt.datetime:
        self.now = self.now + dt.timedelta(seconds=seconds)
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()

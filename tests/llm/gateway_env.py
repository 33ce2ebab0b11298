"""A running Gryvia for the gateway's tests: the site's real ASGI application under uvicorn on loopback, in a thread
of the test process (so it shares the test database), with the stand-in upstream (benchmarks.upstream) behind it;
or, for the production profile's replicas, `manage.py serve` processes on the test database and Redis."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import uvicorn
from django.conf import settings
from django.db import connection

from apps.llm import services as llm_services
from apps.llm.gateway import counters, keys, quota, routes
from apps.llm.gateway.meter import meter
from apps.llm.models import LlmUsage
from tests.factories import ACTOR


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerThread:
    """uvicorn serving gryvia_site.asgi:application, in a thread with its own event loop."""

    def __init__(self) -> None:
        from gryvia_site.asgi import application

        self.port = free_port()
        config = uvicorn.Config(application, host="127.0.0.1", port=self.port, lifespan="off", log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self._run, name="gateway-server", daemon=True)

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        loop.run_until_complete(self.server.serve())
        loop.close()

    def start(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the gateway's test server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


class ServerProcess:
    """`manage.py serve` in a process of its own, on the test database and Redis (production profile replicas)."""

    ROOT = Path(__file__).resolve().parents[2]

    def __init__(self, **env: str) -> None:
        database = connection.settings_dict
        url = f"postgres://{database['USER']}@{database['HOST']}:{database['PORT']}/{database['NAME']}"
        env = {
            **os.environ,
            "DATABASE_URL": url,
            "REDIS_URL": settings.REDIS_URL,
            "GRYVIA_LLM_METER_FLUSH_S": "0.2",
            "GRYVIA_LLM_CACHE_TTL_S": "0.5",
            **env,
        }
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "manage.py", "serve", "--host", "127.0.0.1", "--port", str(self.port)],
            cwd=self.ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def wait_up(self, timeout: float = 60) -> ServerProcess:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"the server exited: {self.proc.stderr.read().decode()[-2000:]}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"the server did not start within {timeout:g} s")

    def kill(self) -> None:
        """SIGKILL: no shutdown, no last flush."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


def clear_counters() -> None:
    """Forget every cached key and route and every quota counter (in Redis: only the gateway's keys)."""
    keys.forget()
    routes.forget()
    counters.reset()
    if settings.REDIS_URL:
        import redis

        client = redis.Redis.from_url(settings.REDIS_URL)
        names = list(client.scan_iter(f"{quota.PREFIX}*"))
        if names:
            client.delete(*names)
        client.close()


def external(tenant, name: str, url: str, **fields):
    """An external inference service of `tenant` (None: shared) at `url`."""
    fields.setdefault("model", name)
    return llm_services.inference_service_create(
        actor=ACTOR, tenant=tenant, name=name, runtime="external", url=url, **fields
    )


def metered(count: int, timeout: float = 10.0, **filters) -> list[LlmUsage]:
    """Wait until `count` usage rows matching `filters` are written (flushing the meter), and return them."""
    deadline = time.monotonic() + timeout
    while True:
        meter.flush()
        rows = list(LlmUsage.objects.filter(**filters).order_by("created_at", "id"))
        if len(rows) >= count or time.monotonic() > deadline:
            return rows
        time.sleep(0.05)


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@dataclass
class Counter:
    """A quota counter's value where the gateway keeps it (Redis, or this process's memory)."""

    key: str

    def value(self) -> int | None:
        if not settings.REDIS_URL:
            return counters.counters()._get(self.key)
        import redis

        client = redis.Redis.from_url(settings.REDIS_URL)
        try:
            raw = client.get(self.key)
        finally:
            client.close()
        return None if raw is None else int(raw)

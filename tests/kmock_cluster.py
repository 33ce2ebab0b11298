"""A kmock-based Kubernetes API emulator on loopback, for synchronous tests of cluster backends and reconcilers.

Not a conftest: import what you need, e.g. in tests/conftest.py::

    from tests.kmock_cluster import kmock_cluster  # noqa: F401  (a function-scoped fixture)

or build differently named/scoped fixtures with `kmock_cluster_fixture(name=..., scope=...)`, or use the
`running_kmock()` context manager directly. What the emulator does beyond kmock: tests/kmock_emulator.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import threading
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import kmock
import pytest

from apps.cluster.backends.base import KINDS
from tests.kmock_emulator import GryviaEmulator, group_version

T = TypeVar("T")


@dataclass(frozen=True)
class RecordedRequest:
    """One request the emulator received. Header names are lower-case; `body` is parsed JSON when it parses."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any
    raw_body: bytes

    @classmethod
    def of(cls, request: kmock.Request) -> RecordedRequest:
        try:
            body: Any = json.loads(request.body) if request.body else None
        except ValueError:
            body = request.body.decode("utf-8", "replace")
        return cls(
            method=str(request.method.value).upper(),
            path=request.url.path,
            query=dict(request.params),
            headers={k.lower(): v for k, v in request.headers.items()},
            body=body,
            raw_body=request.body,
        )

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip()


class KmockCluster:
    """A running emulator: its `url`, the `emulator` itself, recorded requests and thread-safe helpers."""

    def __init__(self, emulator: GryviaEmulator, url: str, loop: asyncio.AbstractEventLoop) -> None:
        self.emulator = emulator
        self.url = url
        self.loop = loop

    def call(self, fn: Callable[[], T], timeout: float = 10.0) -> T:
        """Run `fn()` on the emulator's event loop thread and return its result."""

        async def runner() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(runner(), self.loop).result(timeout)

    def requests(self, method: str | None = None, path: str | None = None) -> list[RecordedRequest]:
        """Requests received so far, oldest first, optionally filtered by method and exact path."""
        recorded = [RecordedRequest.of(r) for r in self.call(lambda: list(self.emulator))]
        return [
            r for r in recorded if (method is None or r.method == method.upper()) and (path is None or r.path == path)
        ]

    def last_request(self, method: str | None = None, path: str | None = None) -> RecordedRequest:
        matching = self.requests(method, path)
        if not matching:
            raise AssertionError(f"no request matched method={method!r} path={path!r}")
        return matching[-1]

    def clear_requests(self) -> None:
        self.call(self.emulator._requests.clear)

    def react(self, criteria: Any, *payloads: Any) -> Any:
        """Declare a kmock reaction, e.g. `react("get /api/v1/namespaces/a/pods/p/log", b"hello")` or
        `react(("post", kmock.resource("v1", "configmaps")), 403, {"kind": "Status", "message": "no"})`.
        User reactions take precedence over the emulator's default behaviour (but writes are still stored)."""

        def install() -> Any:
            view = self.emulator[criteria]
            for payload in payloads:
                view = view << payload
            return view

        return self.call(install)

    def seed(self, manifest: dict[str, Any]) -> None:
        """Store an object directly (no request recorded, no watch event), e.g. Events or Pods a test reads.

        Like any write to an API server, it gets a new `resourceVersion` (clients rely on it to notice changes).
        """
        group, version = group_version(manifest["apiVersion"])
        kind = next(k for k in KINDS.values() if k.api_version == manifest["apiVersion"] and k.kind == manifest["kind"])
        manifest = copy.deepcopy(manifest)
        meta = manifest["metadata"]
        namespace = meta.get("namespace") if kind.namespaced else None
        key = (kmock.resource(group, version, kind.plural), namespace, meta["name"])

        def store() -> None:
            meta["resourceVersion"] = self.emulator._next_revision()
            self.emulator.objects[key] = manifest

        self.call(store)

    @contextlib.contextmanager
    def outage(self) -> Iterator[None]:
        """The API server down while in the block: every request's connection is closed unanswered (clients see
        a closed connection; nothing is recorded); the stored objects stay, as in etcd."""
        self.call(lambda: setattr(self.emulator, "down", True))
        try:
            yield
        finally:
            self.call(lambda: setattr(self.emulator, "down", False))

    def write_status(self, kind: Any, name: str, namespace: str | None, status: dict[str, Any]) -> dict[str, Any]:
        """Play the object's controller: a merge PATCH of its `/status` over HTTP, as the Job or StatefulSet
        controller writes status (a recorded request, a watch event, a new `resourceVersion`). Returns the object."""
        path = kind.path(namespace=namespace, name=name) + "/status"
        body = json.dumps({"status": status}).encode()
        headers = {"Content-Type": "application/merge-patch+json", "Accept": "application/json"}
        request = urllib.request.Request(self.url + path, data=body, method="PATCH", headers=headers)
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def unseed(self, kind: Any, name: str, namespace: str | None = None) -> None:
        """Remove a stored object directly (e.g. a Pod whose grace period has ended)."""
        group, version = group_version(kind.api_version)
        key = (kmock.resource(group, version, kind.plural), namespace, name)
        self.call(lambda: self.emulator.objects[key].delete())

    def stored(self, kind: Any, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """The stored object for a ResourceKind (or anything with `api_version`, `plural`), None when absent."""
        group, version = group_version(kind.api_version)
        key = (kmock.resource(group, version, kind.plural), namespace, name)

        def read() -> dict[str, Any] | None:
            if key not in self.emulator.objects or self.emulator.objects[key].deleted:
                return None
            return copy.deepcopy(self.emulator.objects[key].last.raw)

        return self.call(read)


@contextlib.contextmanager
def running_kmock(
    *, honor_watch_timeout: bool = True, require_namespaces: bool = False, startup_timeout: float = 10.0
) -> Iterator[KmockCluster]:
    """Run a GryviaEmulator + kmock.Server on 127.0.0.1 (random port) on a background thread and event loop.
    With `require_namespaces`, a write into a namespace that does not exist is refused with 404, as a real API
    server refuses it."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    state: dict[str, Any] = {}

    async def main() -> None:
        stop = asyncio.Event()
        async with (
            GryviaEmulator(honor_watch_timeout=honor_watch_timeout, require_namespaces=require_namespaces) as emulator,
            kmock.Server(emulator) as srv,
        ):
            state.update(emulator=emulator, url=str(srv.url).rstrip("/"), stop=stop)
            ready.set()
            await stop.wait()
            # Abort open watches and in-flight requests: aiohttp would otherwise wait for them (up to 60 s).
            current = asyncio.current_task()
            aborted = [task for task in asyncio.all_tasks() if task is not current and not task.done()]
            for task in aborted:
                task.cancel()
            await asyncio.gather(*aborted, return_exceptions=True)

    def serve() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(main())
        except BaseException as exc:  # surfaced to the caller below
            state["error"] = exc
        finally:
            ready.set()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    thread = threading.Thread(target=serve, name="kmock-cluster", daemon=True)
    thread.start()
    if not ready.wait(startup_timeout) or "error" in state or "url" not in state:
        raise RuntimeError(f"kmock did not start: {state.get('error')!r}")
    try:
        yield KmockCluster(state["emulator"], state["url"], loop)
    finally:
        loop.call_soon_threadsafe(state["stop"].set)
        thread.join(timeout=10)


def kmock_cluster_fixture(*, name: str = "kmock_cluster", scope: str = "function", **options: Any) -> Any:
    """Build a pytest fixture yielding a KmockCluster; assign it at module level in a conftest or test module."""

    @pytest.fixture(name=name, scope=scope)  # type: ignore[call-overload]
    def _fixture() -> Iterator[KmockCluster]:
        with running_kmock(**options) as cluster:
            yield cluster

    return _fixture


kmock_cluster = kmock_cluster_fixture()

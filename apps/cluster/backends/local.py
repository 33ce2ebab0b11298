"""The `local` backend: the embedded default. It keeps the cluster objects Gryvia applies in this process, with
the same API as Kubernetes (apply, list by label, watch, ...), so every reconciler runs unchanged on a laptop.

Objects have no effect outside Gryvia (a Namespace is a record); the workload kinds gain local processes with the
jobs issue. After a restart the store is empty and the reconcilers rebuild it on their first pass.
"""

from __future__ import annotations

import copy
import itertools
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .base import (
    ConflictError,
    NotFoundError,
    ObjectRef,
    ResourceKind,
    WatchEvent,
    kind_of,
    labels_match,
)


class LocalBackend:
    """An in-process object store with Kubernetes semantics and call counters (`calls`)."""

    name = "local"

    def __init__(self, *, log_dir: Path | None = None) -> None:
        self._objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._cond = threading.Condition()
        self._log: list[tuple[int, WatchEvent, ResourceKind]] = []
        self._versions = itertools.count(1)
        self.log_dir = log_dir
        self.calls: dict[str, int] = {}

    def _count(self, verb: str) -> None:
        self.calls[verb] = self.calls.get(verb, 0) + 1

    @staticmethod
    def _key(ref: ObjectRef) -> tuple[str, str, str]:
        return (f"{ref.kind.api_version}/{ref.kind.kind}", ref.namespace or "", ref.name)

    def _store(self, ref: ObjectRef, manifest: dict[str, Any], event: str) -> dict[str, Any]:
        obj = copy.deepcopy(manifest)
        meta = obj.setdefault("metadata", {})
        previous = self._objects.get(self._key(ref))
        old_meta = (previous or {}).get("metadata", {})
        meta["uid"] = old_meta.get("uid") or str(uuid.uuid4())
        meta["creationTimestamp"] = old_meta.get("creationTimestamp") or datetime.now(UTC).strftime(
            "%Y-%m-%dT%H:%M:%SZ"
        )
        version = next(self._versions)
        meta["resourceVersion"] = str(version)
        self._objects[self._key(ref)] = obj
        self._log.append((version, WatchEvent(event, copy.deepcopy(obj)), ref.kind))
        self._cond.notify_all()
        return copy.deepcopy(obj)

    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        ref = ObjectRef.of(manifest)
        with self._cond:
            self._count("apply")
            self._require_namespace(ref)
            exists = self._key(ref) in self._objects
            return self._store(ref, manifest, "MODIFIED" if exists else "ADDED")

    def create(self, manifest: dict[str, Any]) -> dict[str, Any]:
        ref = ObjectRef.of(manifest)
        with self._cond:
            self._count("create")
            self._require_namespace(ref)
            if self._key(ref) in self._objects:
                raise ConflictError(f"{ref} already exists")
            return self._store(ref, manifest, "ADDED")

    def _require_namespace(self, ref: ObjectRef) -> None:
        if ref.kind.namespaced and ref.namespace:
            if ("v1/Namespace", "", ref.namespace) not in self._objects:
                raise NotFoundError(f'namespaces "{ref.namespace}" not found')

    def get(self, ref: ObjectRef) -> dict[str, Any]:
        with self._cond:
            self._count("get")
            obj = self._objects.get(self._key(ref))
            if obj is None:
                raise NotFoundError(f"{ref} not found")
            return copy.deepcopy(obj)

    def list(self, kind: ResourceKind, *, label_selector: str = "", namespace: str | None = None) -> list[dict]:
        type_key = f"{kind.api_version}/{kind.kind}"
        with self._cond:
            self._count("list")
            return [
                copy.deepcopy(obj)
                for (t, ns, _name), obj in sorted(self._objects.items())
                if t == type_key
                and (namespace is None or ns == namespace)
                and labels_match((obj.get("metadata") or {}).get("labels") or {}, label_selector)
            ]

    def delete(self, ref: ObjectRef) -> bool:
        with self._cond:
            self._count("delete")
            obj = self._objects.pop(self._key(ref), None)
            if obj is None:
                return False
            self._log.append((next(self._versions), WatchEvent("DELETED", obj), ref.kind))
            if ref.kind.kind == "Namespace":  # as in a cluster, the namespace takes its objects with it
                for key in [k for k in self._objects if k[1] == ref.name]:
                    self._objects.pop(key)
            self._cond.notify_all()
            return True

    def watch(
        self,
        kind: ResourceKind,
        *,
        label_selector: str = "",
        namespace: str | None = None,
        timeout_s: float = 30.0,
    ) -> Iterator[WatchEvent]:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._count("watch")
            seen = self._log[-1][0] if self._log else 0
            current = self.list(kind, label_selector=label_selector, namespace=namespace)
        for obj in current:
            yield WatchEvent("ADDED", obj)
        while True:
            with self._cond:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                fresh = [entry for entry in self._log if entry[0] > seen]
                if not fresh:
                    self._cond.wait(remaining)
                    continue
                seen = fresh[-1][0]
            for _version, event, event_kind in fresh:
                meta = event.object.get("metadata") or {}
                if event_kind != kind or (namespace is not None and meta.get("namespace") != namespace):
                    continue
                if labels_match(meta.get("labels") or {}, label_selector):
                    yield event

    def pod_logs(self, *, namespace: str, pod: str, container: str | None = None, tail_lines: int | None = None) -> str:
        if self.log_dir is None:
            raise NotFoundError(f"no logs for pod {namespace}/{pod}")
        path = self.log_dir / namespace / f"{pod}.log"
        if not path.exists():
            raise NotFoundError(f"no logs for pod {namespace}/{pod}")
        lines = path.read_text(errors="replace").splitlines(keepends=True)
        return "".join(lines[-tail_lines:] if tail_lines else lines)

    def events(self, *, namespace: str, involved_name: str | None = None) -> list[dict[str, Any]]:
        return [
            obj
            for obj in self.list(_EVENT, namespace=namespace)
            if involved_name is None or (obj.get("involvedObject") or {}).get("name") == involved_name
        ]

    def close(self) -> None:
        with self._cond:
            self._cond.notify_all()


_EVENT = kind_of({"apiVersion": "v1", "kind": "Event"})

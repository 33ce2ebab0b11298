"""The `local` backend: the embedded default. It keeps the cluster objects Gryvia applies in this process, with
the same API as Kubernetes (apply, list by label, watch, ...), so every reconciler runs unchanged on a laptop.

Most objects are records (a Namespace has no effect outside Gryvia). Workloads run: a `batch/v1 Job`, `apps/v1
StatefulSet` or `apps/v1 Deployment` becomes local processes, with Pods and `status` kept as a cluster would (see
workloads.py and replicas.py). One Ready Node, `local`, offers this machine's GPUs (apps.cluster.gpus); an apply to
it sets only its labels, annotations and taints, as one field manager's (what a later apply omits goes again), so
reservation claims work as on a cluster.
Files live under `data_dir`: `logs/<ns>/<pod>.log`, `volumes/<ns>/<claim>` (PVCs), `work/<ns>/<workload>`.

The installation's backend (`get_backend()`, `node=True`) runs workloads in one process of the installation, the
node (node.py): other processes read what it publishes and write nothing. After a restart the store is empty:
the reconcilers rebuild it on their first pass, and the job reconciler runs again, or fails, the jobs whose
workloads were lost.
"""

from __future__ import annotations

import copy
import itertools
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from apps.cluster.gpus import gpu_inventory

from ..base import (
    DEPLOYMENT,
    JOB,
    NODE,
    POD,
    STATEFUL_SET,
    ConflictError,
    NotFoundError,
    ObjectRef,
    ResourceKind,
    WatchEvent,
    kind_of,
    labels_match,
)
from .logs import FINISHED, PodLogsMixin
from .node import LocalNode
from .objects import NODE_NAME, node_object
from .workloads import WorkloadSupervisor

_WORKLOADS = (JOB, STATEFUL_SET, DEPLOYMENT)


def _unversioned(obj: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in obj["metadata"].items() if k not in ("resourceVersion", "creationTimestamp")}
    return {**obj, "metadata": meta}


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class LocalBackend(PodLogsMixin):
    """An in-process object store with Kubernetes semantics and call counters (`calls`) that runs workloads.

    `data_dir` holds logs, volumes and working directories (a temporary directory, removed by `close()`, when
    neither it nor `log_dir` is given); `log_dir` alone (the older form) means `data_dir = log_dir.parent`.
    `node`: this is the installation's backend, shared by every process that uses `data_dir` (node.py): the
    first write claims the node for this process, or is refused while another process holds it; until then, and
    in any process that never writes, reads show the objects the node publishes.
    """

    name = "local"

    def __init__(self, *, data_dir: Path | None = None, log_dir: Path | None = None, node: bool = False) -> None:
        self._objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._cond = threading.Condition()
        self._log: list[tuple[int, WatchEvent, ResourceKind]] = []
        self._versions = itertools.count(1)
        self._data_dir = Path(data_dir) if data_dir else Path(log_dir).parent if log_dir else None
        self._log_dir = Path(log_dir) if log_dir else None
        self._tmp_dir: Path | None = None
        self._supervisor: WorkloadSupervisor | None = None
        self._started = _now()
        self._node_applied: dict[str, Any] = {"labels": {}, "annotations": {}, "taints": None}
        self.calls: dict[str, int] = {}
        self._node = LocalNode(self.data_dir) if node else None

    @property
    def data_dir(self) -> Path:
        if self._data_dir is None:
            self._data_dir = self._tmp_dir = Path(tempfile.mkdtemp(prefix="gryvia-local-"))
        return self._data_dir

    @property
    def log_dir(self) -> Path:
        return self._log_dir or self.data_dir / "logs"

    def _workloads(self) -> WorkloadSupervisor:
        if self._supervisor is None:
            self._supervisor = WorkloadSupervisor(self, data_dir=self.data_dir, log_dir=self.log_dir, groups=self._node)
        return self._supervisor

    def _count(self, verb: str) -> None:
        self.calls[verb] = self.calls.get(verb, 0) + 1

    def claim(self) -> None:
        """Become the installation's node now rather than at the first write (NodeBusyError names the one that is).
        A backend that is not an installation's (`node=False`) runs its workloads without asking anyone."""
        if self._node is not None and not self._node.owned:
            self._node.claim(self._published_objects)

    _claim = claim  # before every write

    def _published_objects(self) -> bytes:
        with self._cond:  # serialized under the lock: the supervisor's threads write the store meanwhile
            return orjson.dumps(list(self._objects.values()))

    def _view(self) -> dict[tuple[str, str, str], dict[str, Any]]:
        """The objects reads see: this process's own, or (not the node) those the live node published."""
        if self._node is None or self._node.owned:
            return self._objects
        published = self._node.published()
        return self._objects if published is None else published

    @staticmethod
    def _key(ref: ObjectRef) -> tuple[str, str, str]:
        return (f"{ref.kind.api_version}/{ref.kind.kind}", ref.namespace or "", ref.name)

    def _store(self, ref: ObjectRef, manifest: dict[str, Any], event: str, *, uid: str | None = None) -> dict[str, Any]:
        obj = copy.deepcopy(manifest)
        meta = obj.setdefault("metadata", {})
        previous = self._objects.get(self._key(ref))
        old_meta = (previous or {}).get("metadata", {})
        meta["uid"] = uid or old_meta.get("uid") or str(uuid.uuid4())
        meta["creationTimestamp"] = old_meta.get("creationTimestamp") or _now()
        version = next(self._versions)
        meta["resourceVersion"] = str(version)
        self._objects[self._key(ref)] = obj
        self._log.append((version, WatchEvent(event, copy.deepcopy(obj)), ref.kind))
        self._cond.notify_all()
        if self._node is not None:
            self._node.changed()
        return copy.deepcopy(obj)

    def _put(self, ref: ObjectRef, manifest: dict[str, Any], event: str) -> dict[str, Any]:
        """Store a client's write; `status` is a subresource, so a manifest without one keeps the live status."""
        previous = self._objects.get(self._key(ref))
        if previous is not None and "status" not in manifest and "status" in previous:
            manifest = {**manifest, "status": previous["status"]}
        obj = self._store(ref, manifest, event)
        if ref.kind in _WORKLOADS:
            self._workloads().sync(obj)
        return obj

    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        ref = ObjectRef.of(manifest)
        self._claim()
        with self._cond:
            self._count("apply")
            if ref.kind == NODE:
                return self._apply_node(ref, manifest)
            self._require_namespace(ref)
            previous = self._objects.get(self._key(ref))
            self._check_version(ref, previous, manifest)
            return self._put(ref, manifest, "MODIFIED" if previous is not None else "ADDED")

    @staticmethod
    def _check_version(ref: ObjectRef, current: dict[str, Any] | None, manifest: dict[str, Any]) -> None:
        """A `metadata.resourceVersion` in a write is a precondition, as on an API server."""
        wanted = (manifest.get("metadata") or {}).get("resourceVersion")
        actual = ((current or {}).get("metadata") or {}).get("resourceVersion")
        if wanted and current is not None and wanted != actual:
            raise ConflictError(f"{ref}: the object has been modified (resourceVersion {wanted}, now {actual})")

    def _apply_node(self, ref: ObjectRef, manifest: dict[str, Any]) -> dict[str, Any]:
        """The one Node stays this machine's: an apply sets only its labels, annotations and `spec.taints`."""
        if ref.name != NODE_NAME:
            raise NotFoundError(f'nodes "{ref.name}" not found (the local backend has one Node, "{NODE_NAME}")')
        self._ensure_node()
        self._check_version(ref, self._objects.get(self._key(ref)), manifest)
        meta = manifest.get("metadata") or {}
        spec = manifest.get("spec") or {}
        self._node_applied = {
            "labels": dict(meta.get("labels") or {}),
            "annotations": dict(meta.get("annotations") or {}),
            "taints": copy.deepcopy(spec["taints"]) if "taints" in spec else None,
        }
        self._ensure_node()
        return copy.deepcopy(self._objects[self._key(ref)])

    def create(self, manifest: dict[str, Any]) -> dict[str, Any]:
        ref = ObjectRef.of(manifest)
        self._claim()
        with self._cond:
            self._count("create")
            self._require_namespace(ref)
            if self._key(ref) in self._objects:
                raise ConflictError(f"{ref} already exists")
            return self._put(ref, manifest, "ADDED")

    def _require_namespace(self, ref: ObjectRef) -> None:
        if ref.kind.namespaced and ref.namespace:
            if ("v1/Namespace", "", ref.namespace) not in self._objects:
                raise NotFoundError(f'namespaces "{ref.namespace}" not found')

    def _ensure_node(self) -> None:
        """The one Node, `local`, (re)written when this machine's GPU inventory or what was applied to it changed."""
        node = node_object(gpu_inventory(), since=self._started)
        applied = self._node_applied
        node["metadata"]["labels"].update(applied["labels"])
        if applied["annotations"]:
            node["metadata"]["annotations"] = dict(applied["annotations"])
        if applied["taints"] is not None:
            node["spec"]["taints"] = copy.deepcopy(applied["taints"])
        ref = ObjectRef(NODE, NODE_NAME)
        current = self._objects.get(self._key(ref))
        if (
            current is None
            or any(current.get(part) != node.get(part) for part in ("status", "spec"))
            or any(current["metadata"].get(part) != node["metadata"].get(part) for part in ("labels", "annotations"))
        ):
            self._store(ref, node, "MODIFIED" if current else "ADDED")

    def get(self, ref: ObjectRef) -> dict[str, Any]:
        with self._cond:
            self._count("get")
            if ref.kind == NODE:
                self._ensure_node()
            obj = self._view().get(self._key(ref))
            if obj is None:
                raise NotFoundError(f"{ref} not found")
            return copy.deepcopy(obj)

    def list(self, kind: ResourceKind, *, label_selector: str = "", namespace: str | None = None) -> list[dict]:
        type_key = f"{kind.api_version}/{kind.kind}"
        with self._cond:
            self._count("list")
            if kind == NODE:
                self._ensure_node()
            return [
                copy.deepcopy(obj)
                for (t, ns, _name), obj in sorted(self._view().items())
                if t == type_key
                and (namespace is None or ns == namespace)
                and labels_match((obj.get("metadata") or {}).get("labels") or {}, label_selector)
            ]

    def delete(self, ref: ObjectRef, *, grace_period_s: int | None = None, uid: str | None = None) -> bool:
        """Delete; False when already gone. Workloads stop in the background (their pods go through the termination
        sequence, `grace_period_s` overriding their grace); a deleted Pod's process is killed and its index comes
        back; a Namespace takes its objects and workloads with it. `uid` is a precondition (ConflictError)."""
        self._claim()
        with self._cond:
            self._count("delete")
            key = self._key(ref)
            obj = self._objects.get(key)
            if obj is None:
                return False
            actual = (obj.get("metadata") or {}).get("uid")
            if uid is not None and actual != uid:
                raise ConflictError(f"{ref}: precondition failed: UID in precondition: {uid}, UID in object: {actual}")
            self._drop(key, ref.kind)
            if ref.kind.kind == "Namespace":  # as in a cluster, the namespace takes its objects with it
                for other in [k for k in self._objects if k[1] == ref.name]:
                    self._drop(other, kind_of(self._objects[other]))
                if self._supervisor is not None:
                    self._supervisor.stop_namespace(ref.name, grace_s=grace_period_s)
            elif ref.kind in _WORKLOADS:
                self.remove_owned(ref.namespace or "", actual or "", finished_only=True)
                if self._supervisor is not None:
                    self._supervisor.stop(obj, grace_s=grace_period_s)
            elif ref.kind == POD and self._supervisor is not None:
                self._supervisor.pod_deleted(obj, grace_s=grace_period_s)
            self._cond.notify_all()
            return True

    def _drop(self, key: tuple[str, str, str], kind: ResourceKind) -> dict[str, Any] | None:
        obj = self._objects.pop(key, None)
        if obj is not None:
            self._log.append((next(self._versions), WatchEvent("DELETED", obj), kind))
            if self._node is not None:
                self._node.changed()
        return obj

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

    def events(self, *, namespace: str, involved_name: str | None = None) -> list[dict[str, Any]]:
        return [
            obj
            for obj in self.list(_EVENT, namespace=namespace)
            if involved_name is None or (obj.get("involvedObject") or {}).get("name") == involved_name
        ]

    # -- the supervisor's side (WorkloadStore): not API calls, so not counted -----------------------------------

    def read_object(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        with self._cond:
            obj = self._objects.get((f"v1/{kind}", namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def write_pod(self, pod: dict[str, Any], *, create: bool, owner_uid: str) -> None:
        """Create (only while the owning workload, with that uid, exists) or update (only while the Pod exists)."""
        ref = ObjectRef.of(pod)
        meta = pod["metadata"]
        with self._cond:
            current = self._objects.get(self._key(ref))
            if current is not None and current["metadata"].get("uid") != meta["uid"]:
                if not create:
                    return  # another pod of that name now: this one is gone
                current = None
            if current is None and not create:
                return
            if create:
                owner = (meta.get("ownerReferences") or [{}])[0]
                owner_kind = kind_of({"apiVersion": owner.get("apiVersion"), "kind": owner.get("kind")})
                live = self._objects.get(self._key(ObjectRef(owner_kind, owner.get("name", ""), ref.namespace)))
                if live is None or live["metadata"].get("uid") != owner_uid:
                    return
            if current is not None and _unversioned(current) == _unversioned(pod):
                return
            self._store(ref, pod, "ADDED" if current is None else "MODIFIED", uid=meta["uid"])

    def write_status(self, kind: ResourceKind, namespace: str, name: str, uid: str, status: dict[str, Any]) -> None:
        ref = ObjectRef(kind, name, namespace)
        with self._cond:
            current = self._objects.get(self._key(ref))
            if current is None or current["metadata"].get("uid") != uid or current.get("status") == status:
                return
            self._store(ref, {**current, "status": status}, "MODIFIED")

    def remove_object(self, kind: ResourceKind, namespace: str, name: str, uid: str | None) -> None:
        ref = ObjectRef(kind, name, namespace)
        with self._cond:
            current = self._objects.get(self._key(ref))
            if current is not None and (uid is None or current["metadata"].get("uid") == uid):
                self._drop(self._key(ref), kind)
                self._cond.notify_all()

    def remove_owned(self, namespace: str, owner_uid: str, *, finished_only: bool) -> None:
        """Garbage-collect the Pods a workload owns (only those that have finished, with `finished_only`)."""
        with self._cond:
            for key, obj in list(self._objects.items()):
                if key[0] != "v1/Pod" or key[1] != namespace:
                    continue
                owners = {o.get("uid") for o in obj["metadata"].get("ownerReferences") or []}
                if owner_uid in owners and (not finished_only or (obj.get("status") or {}).get("phase") in FINISHED):
                    self._drop(key, POD)
            self._cond.notify_all()

    def close(self) -> None:
        """Stop every local workload (no process outlives this), wake watchers, drop a temporary data dir."""
        if self._supervisor is not None:
            self._supervisor.close()  # outside the lock: stopping pods write to the store
        if self._node is not None:
            self._node.release()
        with self._cond:
            self._cond.notify_all()
        if self._tmp_dir is not None:
            shutil.rmtree(self._tmp_dir, ignore_errors=True)


_EVENT = kind_of({"apiVersion": "v1", "kind": "Event"})

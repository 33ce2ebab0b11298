"""A simulated cluster for benchmarks: LocalBackend's object store without processes, on a simulated clock.

It implements the ClusterBackend protocol (apply, create, get, list by label, delete, watch, logs, events). A
`batch/v1 Job` starts the moment it is applied (all its pods active and ready, `startTime` = the simulated now) and
completes `runtime_of(job)` simulated seconds later, when the driver calls `advance_to()`: `status` then says
succeeded with a Complete=True condition, as a real Job controller would write it. One Ready Node offers `gpus`
`nvidia.com/gpu`. Nothing runs, no pods are created, and there is no API server: every call is a dictionary
operation. Objects are stored once and never mutated afterwards (a change replaces the stored dict), so `list()`
and `get()` return the stored dicts without copying; callers must treat them as read-only, as the reconcilers do.
"""

from __future__ import annotations

import datetime as dt
import functools
import heapq
import itertools
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from functools import lru_cache
from typing import Any

from apps.cluster.backends.base import (
    JOB,
    NODE,
    ConflictError,
    NotFoundError,
    ObjectRef,
    ResourceKind,
    WatchEvent,
    parse_label_selector,
)

NODE_NAME = "sim-gpu-pool"
GPU = "nvidia.com/gpu"


@lru_cache(maxsize=64)
def _selector(selector: str) -> tuple[tuple[str, str, str | None], ...]:
    return tuple(parse_label_selector(selector))


def _matches(labels: dict[str, str], terms: tuple[tuple[str, str, str | None], ...]) -> bool:
    for key, op, value in terms:
        if op == "=":
            if labels.get(key) != value:
                return False
        elif op == "!=":
            if key in labels and labels[key] == value:
                return False
        elif op == "exists":
            if key not in labels:
                return False
        elif key in labels:  # "!": absent
            return False
    return True


def _timed(method: Callable[..., Any]) -> Callable[..., Any]:
    """Adds the call's duration to `busy_s`: what the cluster's side of the calls costs (a real API server's work,
    done in this process here; the calls never block, so their wall time is their CPU time)."""

    @functools.wraps(method)
    def timed(self: SimulatedCluster, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return method(self, *args, **kwargs)
        finally:
            self.busy_s += time.perf_counter() - started

    return timed


def _type_key(kind: ResourceKind) -> str:
    return f"{kind.api_version}/{kind.kind}"


class SimulatedCluster:
    """An in-process object store with a simulated clock; see the module docstring."""

    name = "simulated"

    def __init__(self, *, gpus: int, runtime_of: Callable[[dict[str, Any]], float]) -> None:
        self.now = 0.0  # simulated seconds since `epoch`
        self.epoch = dt.datetime.now(dt.UTC)
        self.runtime_of = runtime_of
        self.calls: Counter[str] = Counter()
        self.jobs_started = 0
        self.jobs_completed = 0
        self.jobs_deleted = 0  # batch Jobs deleted (evictions, collection)
        self.busy_s = 0.0  # time spent inside apply/create/get/list/delete (see _timed)
        self._objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
        self._versions = itertools.count(1)
        self._finishes: list[tuple[float, int, str, str, str]] = []  # (finish, seq, namespace, name, uid)
        self._seq = itertools.count()
        # Object uids: version 4 UUIDs, as an API server gives; not uuid4(), whose os.urandom is a system call per
        # object (a cost of this stand-in's, not of the control plane it serves).
        self._random = random.Random(0)
        self._stamp: tuple[float, str] = (-1.0, "")  # (sim_s, its timestamp): the clock stands still in a cycle
        since = self.timestamp(0.0)
        self._put(
            ObjectRef(NODE, NODE_NAME),
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": NODE_NAME, "labels": {"kubernetes.io/hostname": NODE_NAME}},
                "status": {
                    "capacity": {GPU: str(gpus)},
                    "allocatable": {GPU: str(gpus)},
                    "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": since}],
                },
            },
        )

    # -- the clock ------------------------------------------------------------------------------------------------

    def timestamp(self, sim_s: float) -> str:
        if self._stamp[0] != sim_s:
            self._stamp = (sim_s, (self.epoch + dt.timedelta(seconds=sim_s)).isoformat())
        return self._stamp[1]

    def _uid(self) -> str:
        value = self._random.getrandbits(128) & ~(0xF000 << 64) & ~(0xC000 << 48) | (0x4000 << 64) | (0x8000 << 48)
        text = f"{value:032x}"
        return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"

    def clock(self) -> dt.datetime:
        """The simulated now as an aware datetime: what the benchmark gives the control plane as its clock."""
        return self.epoch + dt.timedelta(seconds=self.now)

    def next_finish(self) -> float | None:
        """The simulated time at which the next running Job completes (None: none runs)."""
        while self._finishes:
            finish, _seq, namespace, name, uid = self._finishes[0]
            live = self._objects.get(_type_key(JOB), {}).get((namespace, name))
            if live is not None and live["metadata"]["uid"] == uid:
                return finish
            heapq.heappop(self._finishes)  # deleted meanwhile
        return None

    def advance_to(self, sim_s: float) -> int:
        """Move the clock to `sim_s` and complete every Job due by then; returns how many completed."""
        self.now = max(self.now, sim_s)
        done = 0
        jobs = self._objects.get(_type_key(JOB), {})
        while self._finishes and self._finishes[0][0] <= self.now:
            finish, _seq, namespace, name, uid = heapq.heappop(self._finishes)
            live = jobs.get((namespace, name))
            if live is None or live["metadata"]["uid"] != uid:
                continue
            size = int((live.get("spec") or {}).get("parallelism") or 1)
            at = self.timestamp(finish)
            status = {
                "active": 0,
                "ready": 0,
                "succeeded": size,
                "startTime": (live.get("status") or {}).get("startTime"),
                "completionTime": at,
                "conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": at}],
            }
            self._replace(JOB, namespace, name, {**live, "status": status})
            done += 1
        self.jobs_completed += done
        return done

    # -- storage --------------------------------------------------------------------------------------------------

    def _replace(self, kind: ResourceKind, namespace: str, name: str, obj: dict[str, Any]) -> None:
        meta = {**obj["metadata"], "resourceVersion": str(next(self._versions))}
        self._objects[_type_key(kind)][(namespace, name)] = {**obj, "metadata": meta}

    def _put(self, ref: ObjectRef, manifest: dict[str, Any]) -> dict[str, Any]:
        bucket = self._objects.setdefault(_type_key(ref.kind), {})
        key = (ref.namespace or "", ref.name)
        previous = bucket.get(key)
        old_meta = (previous or {}).get("metadata") or {}
        meta = {
            **(manifest.get("metadata") or {}),
            "uid": old_meta.get("uid") or self._uid(),
            "creationTimestamp": old_meta.get("creationTimestamp") or self.timestamp(self.now),
            "resourceVersion": str(next(self._versions)),
        }
        obj = {**manifest, "metadata": meta}
        obj.pop("stringData", None)  # write-only, as in a cluster
        if previous is not None and "status" not in manifest and "status" in previous:
            obj["status"] = previous["status"]  # status is a subresource: a client's apply keeps it
        elif previous is None and ref.kind == JOB:
            obj["status"] = self._start(ref, obj)
        bucket[key] = obj
        return obj

    def _start(self, ref: ObjectRef, obj: dict[str, Any]) -> dict[str, Any]:
        size = int((obj.get("spec") or {}).get("parallelism") or 1)
        finish = self.now + float(self.runtime_of(obj))
        heapq.heappush(self._finishes, (finish, next(self._seq), ref.namespace or "", ref.name, obj["metadata"]["uid"]))
        self.jobs_started += 1
        return {"active": size, "ready": size, "startTime": self.timestamp(self.now)}

    # -- ClusterBackend -------------------------------------------------------------------------------------------

    @_timed
    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        ref = ObjectRef.of(manifest)
        self.calls[f"apply {ref.kind.kind}"] += 1
        return self._put(ref, manifest)

    @_timed
    def create(self, manifest: dict[str, Any]) -> dict[str, Any]:
        self.calls["create"] += 1
        ref = ObjectRef.of(manifest)
        if (ref.namespace or "", ref.name) in self._objects.get(_type_key(ref.kind), {}):
            raise ConflictError(f"{ref} already exists")
        return self._put(ref, manifest)

    @_timed
    def get(self, ref: ObjectRef) -> dict[str, Any]:
        self.calls["get"] += 1
        obj = self._objects.get(_type_key(ref.kind), {}).get((ref.namespace or "", ref.name))
        if obj is None:
            raise NotFoundError(f"{ref} not found")
        return obj

    @_timed
    def list(self, kind: ResourceKind, *, label_selector: str = "", namespace: str | None = None) -> list[dict]:
        self.calls["list"] += 1
        terms = _selector(label_selector)
        return [
            obj
            for (ns, _name), obj in self._objects.get(_type_key(kind), {}).items()
            if (namespace is None or ns == namespace) and _matches(obj["metadata"].get("labels") or {}, terms)
        ]

    @_timed
    def delete(self, ref: ObjectRef, *, grace_period_s: int | None = None, uid: str | None = None) -> bool:
        self.calls[f"delete {ref.kind.kind}"] += 1
        bucket = self._objects.get(_type_key(ref.kind), {})
        key = (ref.namespace or "", ref.name)
        obj = bucket.get(key)
        if obj is None:
            return False
        actual = obj["metadata"].get("uid")
        if uid is not None and actual != uid:
            raise ConflictError(f"{ref}: precondition failed: UID in precondition: {uid}, UID in object: {actual}")
        del bucket[key]
        self.jobs_deleted += ref.kind == JOB
        if ref.kind.kind == "Namespace":
            for other in self._objects.values():
                for gone in [k for k in other if k[0] == ref.name]:
                    del other[gone]
        return True

    def watch(
        self,
        kind: ResourceKind,
        *,
        label_selector: str = "",
        namespace: str | None = None,
        timeout_s: float = 30.0,
    ) -> Iterator[WatchEvent]:
        """The current objects as ADDED, then the end of the stream (nothing changes while nobody calls)."""
        self.calls["watch"] += 1
        for obj in self.list(kind, label_selector=label_selector, namespace=namespace):
            yield WatchEvent("ADDED", obj)

    def pod_logs(self, *, namespace: str, pod: str, container: str | None = None, tail_lines: int | None = None) -> str:
        raise NotFoundError(f"no logs for pod {namespace}/{pod}: the simulated cluster runs no pods")

    def stream_pod_logs(self, *, namespace: str, pod: str, follow: bool, poll_s: float = 0.2) -> Iterator[str]:
        raise NotFoundError(f"no logs for pod {namespace}/{pod}: the simulated cluster runs no pods")

    def events(self, *, namespace: str, involved_name: str | None = None) -> list[dict[str, Any]]:
        return []

    def close(self) -> None:
        self._objects.clear()
        self._finishes.clear()

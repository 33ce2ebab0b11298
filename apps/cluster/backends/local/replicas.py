"""The long-running local workloads: an `apps/v1 StatefulSet` (Parallel) or `apps/v1 Deployment`, whose pods
restart in place (restartPolicy Always) with a backoff and are ready when their readiness probe passes.

Both keep replicas 0..replicas-1, each a process group with a port of its own on the loopback address when the
container has a `PORT` variable (its value is replaced by that port, and `$(PORT)` in the command expands to it).
The readiness probe (`tcpSocket`, or `httpGet` with its path and headers) is tried against that port; like the
kubelet, a ready pod becomes unready only after `failureThreshold` failures in a row. What differs: a StatefulSet's
pods are `<name>-<ordinal>` and its status carries `endpoint` (ordinal 0's address); a Deployment's pods are
`<name>-<pod-template-hash>-<suffix>`, a new pod template replaces every pod (the Recreate strategy: on one machine
the new pods need the old ones' ports and GPUs), and its status carries `endpoints`, one per ready replica.
"""

from __future__ import annotations

import http.client
import random
import socket
import time
from typing import Any

from ..base import DEPLOYMENT, STATEFUL_SET
from .controller import BUSY_TICK_S, IDLE_TICK_S, Supervisor, WorkloadController
from .env import LOOPBACK
from .objects import condition, deployment_status, stateful_set_status, template_hash
from .pods import PodProcess, now_iso

BACKOFF_S = (1.0, 30.0)  # a pod's restart delay: first, longest
HTTP_PROBE_TIMEOUT_CAP_S = 2.0  # probes run on the controller's thread: a hung server must not stall it long
_SUFFIX = "bcdfghjklmnpqrstvwxz2456789"  # the alphabet of the API server's generated name suffixes


class ReplicaController(WorkloadController):
    """What a StatefulSet and a Deployment share: replicas by index, in-place restarts with a backoff, probes."""

    restarts_in_place = True

    def __init__(self, sup: Supervisor, obj: dict[str, Any]) -> None:
        super().__init__(sup, obj)
        self.restart_at: dict[int, float] = {}
        self.next_probe = 0.0
        self.probe_failures: dict[PodProcess, int] = {}

    def next_wakeup(self) -> float:
        tick = IDLE_TICK_S
        if self.restart_at:
            tick = min(tick, min(self.restart_at.values()) - time.monotonic())
        if self.probe and any(p.alive and not p.ready for p in self.pods.values()):
            tick = min(tick, BUSY_TICK_S)
        return tick

    def pod_exited(self, pod: PodProcess) -> None:
        delay = min(BACKOFF_S[0] * 2**pod.restart_count, BACKOFF_S[1])
        self.restart_at[pod.index] = time.monotonic() + delay
        self.write_pod(pod)

    def reconcile(self) -> None:
        replicas = int(self.spec.get("replicas", 1))
        for i, pod in list(self.pods.items()):
            if i >= replicas:
                self.stop(pod, None, "ScaledDown", "remove")
        for i in [i for i in self.restart_at if i not in self.pods or not self.pods[i].finished]:
            del self.restart_at[i]
        now = time.monotonic()
        for i in range(replicas):
            if any(p.index == i for p in self.stopping):
                continue  # a replica's name and port are free again only once the old pod is gone
            pod = self.pods.get(i)
            if pod is None:
                self.new_pod(i)
            elif pod.finished and now >= self.restart_at.get(i, 0):
                self.restart_at.pop(i, None)
                self.new_pod(i, restart_of=pod)
        if self.probe and now >= self.next_probe:
            self.probe_failures = {p: n for p, n in self.probe_failures.items() if p in self.pods.values()}
            for pod in self.pods.values():
                ready = self._ready_after_probe(pod)
                if ready != pod.ready:
                    pod.ready = ready
                    self.write_pod(pod)
            slow = any(p.alive and not p.ready for p in self.pods.values())
            self.next_probe = now + (BUSY_TICK_S if slow else IDLE_TICK_S)

    def _ready_after_probe(self, pod: PodProcess) -> bool:
        if not pod.alive:
            return False
        if self._probe(pod):
            self.probe_failures.pop(pod, None)
            return True
        failures = self.probe_failures[pod] = self.probe_failures.get(pod, 0) + 1
        return pod.ready and failures < int(self.readiness.get("failureThreshold") or 3)

    def _probe(self, pod: PodProcess) -> bool:
        probe = self.probe or {}
        port = pod.port if pod.port is not None else probe.get("port")
        try:
            if self.probe_kind == "httpGet":
                timeout = min(float(self.readiness.get("timeoutSeconds") or 1), HTTP_PROBE_TIMEOUT_CAP_S)
                connection = http.client.HTTPConnection(LOOPBACK, int(port), timeout=timeout)  # type: ignore[arg-type]
                try:
                    headers = {h.get("name", ""): h.get("value", "") for h in probe.get("httpHeaders") or []}
                    connection.request("GET", probe.get("path") or "/", headers=headers)
                    return 200 <= connection.getresponse().status < 400  # what the kubelet counts as success
                finally:
                    connection.close()
            with socket.create_connection((LOOPBACK, int(port)), timeout=0.2):  # type: ignore[arg-type]
                return True
        except (OSError, ValueError, TypeError, http.client.HTTPException):
            return False


class StatefulSetController(ReplicaController):
    """An apps/v1 StatefulSet (Parallel): ordinals 0..replicas-1; `status.endpoint` is ordinal 0's address."""

    resource = STATEFUL_SET

    def __init__(self, sup: Supervisor, obj: dict[str, Any]) -> None:
        super().__init__(sup, obj)
        self.service = self.spec.get("serviceName")

    def pod_name(self, index: int, attempt: int) -> str:
        return f"{self.name}-{index}"

    def status(self) -> dict[str, Any]:
        port = self.http_ports.get(0)
        return stateful_set_status(pods=self.pods.values(), endpoint=f"http://{LOOPBACK}:{port}" if port else None)


class DeploymentController(ReplicaController):
    """An apps/v1 Deployment: replicas 0..replicas-1, pods named as a ReplicaSet names them, a new template rolled
    out by Recreate, conditions Available and Progressing, and `status.endpoints` (ready replicas' addresses)."""

    resource = DEPLOYMENT

    def __init__(self, sup: Supervisor, obj: dict[str, Any]) -> None:
        super().__init__(sup, obj)
        self.template_hash = template_hash(self.template)
        self.transitions: dict[str, tuple[str, str]] = {}  # condition type -> (status + reason, since)

    def pod_name(self, index: int, attempt: int) -> str:
        return f"{self.name}-{self.template_hash}-{''.join(random.choices(_SUFFIX, k=5))}"  # noqa: S311 - a name

    def _handle(self, kind: str, *args: Any) -> None:
        if kind == "spec" and (args[0].get("template") or {}) != self.template:
            self.use_template(dict(args[0].get("template") or {}))
            self.template_hash = template_hash(self.template)
            self.restart_at.clear()
            self.stop_all(None, "Rollout", "remove")  # the new pods start once these are gone (reconcile())
        super()._handle(kind, *args)

    def _condition(self, kind: str, status: bool, reason: str, message: str) -> dict[str, Any]:
        key = f"{status}/{reason}"
        previous = self.transitions.get(kind)
        since = previous[1] if previous and previous[0] == key else now_iso()
        self.transitions[kind] = (key, since)
        out = condition(kind, status, reason=reason, message=message)
        out.update(lastUpdateTime=since, lastTransitionTime=since)
        return out

    def status(self) -> dict[str, Any]:
        replicas = int(self.spec.get("replicas", 1))
        current = sorted((p for p in self.pods.values() if not p.stopping), key=lambda p: p.index)
        ready = sum(1 for p in current if p.ready)
        # Available as the API server means it with the default maxUnavailable of 25 % (rounded down).
        available = ready >= replicas - replicas // 4
        settled = ready >= replicas and not self.stopping
        conditions = [
            self._condition(
                "Available",
                available,
                "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
                "Deployment has minimum availability."
                if available
                else "Deployment does not have minimum availability.",
            ),
            self._condition(
                "Progressing",
                True,
                "NewReplicaSetAvailable" if settled else "ReplicaSetUpdated",
                f'ReplicaSet "{self.name}-{self.template_hash}" '
                + ("has successfully progressed." if settled else "is progressing."),
            ),
        ]
        endpoints = [f"http://{LOOPBACK}:{p.port}" for p in current if p.ready and p.port is not None]
        return deployment_status(pods=current, replicas=replicas, endpoints=endpoints, conditions=conditions)

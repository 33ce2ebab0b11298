"""WorkloadSupervisor: the local backend's kubelet and workload controllers. A `batch/v1 Job`, `apps/v1
StatefulSet` or `apps/v1 Deployment` stored in the LocalBackend runs as local processes, one process group per
index (replica), and the supervisor keeps their Pod objects and the workload's `status` as Kubernetes would report
them. JobController is here; the long-running kinds are in replicas.py.

Threads, no asyncio: one controller thread per workload owns its state (controller.py); one thread per
process waits for it; each termination runs on its own thread so grace periods overlap. The backend only posts
messages to controllers, and controllers call the backend without holding a supervisor lock, so locks never nest
the wrong way.
"""

from __future__ import annotations

import atexit
import copy
import logging
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..base import JOB
from . import pods
from .controller import IDLE_TICK_S, Supervisor, WorkloadController, WorkloadStore
from .node import LocalNode
from .objects import condition, job_status
from .pods import PodProcess, kill_group, now_iso
from .replicas import DeploymentController, StatefulSetController

__all__ = ["DeploymentController", "JobController", "StatefulSetController", "WorkloadSupervisor"]

logger = logging.getLogger(__name__)

RESTART_GRACE_S = 2.0  # the others' grace when a static group restarts
CLOSE_GRACE_S = 10.0  # at most this much checkpoint grace at shutdown


class JobController(WorkloadController):
    """An Indexed batch/v1 Job: indexes 0..parallelism-1 run; completion, success policy, backoff limit (static
    groups restart together, elastic ones per index), deadline, resize."""

    resource = JOB

    def __init__(self, sup: Supervisor, obj: dict[str, Any]) -> None:
        super().__init__(sup, obj)
        self.service = self.pod_spec.get("subdomain")
        elastic_env = str(self.env.get("GRYVIA_ELASTIC", "")).lower() == "true"
        self.elastic = bool(self.spec.get("successPolicy")) or elastic_env
        self.succeeded: set[int] = set()
        self.failed = 0
        self.outcome: tuple[str, str, str] | None = None
        self.conditions: list[dict[str, Any]] = []
        self.completion_time: str | None = None

    def pod_name(self, index: int, attempt: int) -> str:
        return f"{self.name}-{index}-{attempt}"

    def _deadline_left(self) -> float | None:
        deadline = self.spec.get("activeDeadlineSeconds")
        return None if deadline is None else float(deadline) - (time.monotonic() - self.started_mono)

    def next_wakeup(self) -> float:
        left = self._deadline_left()
        return IDLE_TICK_S if left is None or self.outcome is not None else min(IDLE_TICK_S, left)

    def _completions(self) -> int:
        value = self.spec.get("completions")
        return int(self.spec.get("parallelism", 1) if value is None else value)

    def pod_exited(self, pod: PodProcess) -> None:
        self.write_pod(pod)
        if self.outcome is not None:
            return
        if pod.exit_code == 0:
            self.succeeded.add(pod.index)
            return
        retry = self.failed < int(self.spec.get("backoffLimit", 6))
        self.failed += 1
        if not retry:
            self._decide("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
        elif not self.elastic:  # a static group must form again: every index restarts as the next attempt
            for other in list(self.pods.values()):
                if other is not pod:
                    self.stop(other, min(self.grace, RESTART_GRACE_S), "GroupRestart", "keep")
            self.succeeded.clear()
            self.group_floor = max(self.attempts.values(), default=0)

    def _decide(self, kind: str, reason: str, message: str) -> None:
        """The outcome is known: record the interim condition and stop what still runs."""
        self.outcome = (kind, reason, message)
        interim = "SuccessCriteriaMet" if kind == "Complete" else "FailureTarget"
        self.conditions.append(condition(interim, True, reason=reason, message=message, at=now_iso()))
        self.stop_all(None, reason, "keep")

    def reconcile(self) -> None:
        left = self._deadline_left()
        completions = self._completions()
        if self.outcome is None and left is not None and left <= 0:
            self._decide("Failed", "DeadlineExceeded", "Job was active longer than specified deadline")
        if self.outcome is None:
            done = len({i for i in self.succeeded if i < completions})
            rules = (self.spec.get("successPolicy") or {}).get("rules") or [{}]
            wanted = int(rules[0].get("succeededCount") or 0)
            if wanted and done >= wanted:
                self._decide("Complete", "SuccessPolicy", "Matched rules at index 0")
            elif done >= completions:
                self._decide("Complete", "CompletionsReached", "Reached expected number of succeeded pods")
        if self.outcome is not None:
            if not self.busy() and not self.final:  # every pod has terminated: the final condition
                kind, reason, message = self.outcome
                at = now_iso()
                self.conditions.append(condition(kind, True, reason=reason, message=message, at=at))
                self.completion_time = at if kind == "Complete" else None
                self.final = True
            return
        parallelism = 0 if self.spec.get("suspend") else int(self.spec.get("parallelism", 1))
        running = sorted(i for i, p in self.pods.items() if not p.finished)
        keep = [i for i in running if i < completions][:parallelism]
        for i in running:
            if i not in keep:
                self.stop(self.pods[i], None, "ScaledDown", "remove")
        if self.stopping:
            return  # replacements start once the old processes are gone (ports, GPUs, the group's rendezvous)
        active = len(keep)
        for i in range(completions):
            if active >= parallelism:
                break
            if i not in self.succeeded and i not in keep:
                self.new_pod(i)
                active += 1

    def status(self) -> dict[str, Any]:
        completions = self._completions()
        return job_status(
            start_time=self.start_time,
            pods=self.pods.values(),
            terminating=len(self.stopping),
            succeeded={i for i in self.succeeded if i < completions},
            failed=self.failed,
            conditions=self.conditions,
            completion_time=self.completion_time,
        )


class WorkloadSupervisor:
    """Runs the workloads of one LocalBackend as local processes; `close()` stops every one of them."""

    def __init__(self, store: WorkloadStore, *, data_dir: Path, log_dir: Path, groups: LocalNode | None = None) -> None:
        self.store = store
        self.groups = groups  # the installation's node, which records each pod's process group (node.py)
        self.data_dir, self.log_dir = data_dir, log_dir
        self.closed = False
        self._lock = threading.RLock()
        self._workloads: dict[str, WorkloadController] = {}
        self._threads: list[threading.Thread] = []
        self._live: set[PodProcess] = set()
        atexit.register(self._kill_all)

    def spawn(self, target: Callable[[], None], name: str) -> threading.Thread:
        """Start a daemon thread that `close()` will join."""
        thread = threading.Thread(target=target, name=name, daemon=True)
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
        thread.start()
        return thread

    def track(self, pod: PodProcess) -> None:
        with self._lock:
            self._live.add(pod)

    def started(self, pod: PodProcess) -> None:
        if self.groups is not None and pod.pid is not None:
            self.groups.record_group(pod.pid)

    def untrack(self, pod: PodProcess) -> None:
        with self._lock:
            self._live.discard(pod)
        if self.groups is not None and pod.pid is not None:
            self.groups.forget_group(pod.pid)

    def sync(self, obj: dict[str, Any]) -> None:
        """A workload was stored: start it, or pass on its new spec (sizes and deadline; a Deployment's template)."""
        uid = obj["metadata"]["uid"]
        with self._lock:
            if self.closed:
                logger.warning("local backend closed: %s/%s will not run", obj["kind"], obj["metadata"]["name"])
                return
            workload = self._workloads.get(uid)
            if workload is None:
                cls = {"Job": JobController, "Deployment": DeploymentController}.get(obj["kind"], StatefulSetController)
                self._workloads[uid] = controller = cls(self, obj)
                controller.start()
                return
        workload.post(("spec", copy.deepcopy(obj.get("spec") or {})))

    def stop(self, obj: dict[str, Any], *, grace_s: float | None = None) -> None:
        """The workload object was deleted: terminate its pods (in the background), then remove them."""
        with self._lock:
            workload = self._workloads.pop(obj["metadata"].get("uid", ""), None)
        if workload is not None:
            workload.post(("delete", grace_s))

    def stop_namespace(self, namespace: str, *, grace_s: float | None = None) -> None:
        """The namespace was deleted: every workload in it stops."""
        with self._lock:
            doomed = [uid for uid, w in self._workloads.items() if w.namespace == namespace]
            workloads = [self._workloads.pop(uid) for uid in doomed]
        for workload in workloads:
            workload.post(("delete", grace_s))

    def pod_deleted(self, pod: dict[str, Any], *, grace_s: float | None = None) -> None:
        """A Pod object was deleted: its process is killed and its index comes back."""
        owners = [o.get("uid") for o in (pod.get("metadata") or {}).get("ownerReferences") or []]
        with self._lock:
            workload = next((self._workloads[uid] for uid in owners if uid in self._workloads), None)
        if workload is not None:
            workload.post(("pod_deleted", pod["metadata"]["name"], grace_s))

    def close(self) -> None:
        """Stop every workload (checkpoint grace capped at CLOSE_GRACE_S), join every thread, leave no process."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            workloads = list(self._workloads.values())
        for workload in workloads:
            workload.post(("close", CLOSE_GRACE_S))
        if not self._join(time.monotonic() + CLOSE_GRACE_S + pods.SIGTERM_WAIT_S + 5):
            with self._lock:
                live = list(self._live)
            for pod in live:
                pod.hurry()
            self._join(time.monotonic() + 15)
        self._kill_all()
        atexit.unregister(self._kill_all)

    def _join(self, deadline: float) -> bool:
        while True:
            with self._lock:
                pending = [t for t in self._threads if t.is_alive() and t is not threading.current_thread()]
            if not pending:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            pending[0].join(min(left, 1.0))

    def _kill_all(self) -> None:
        """Last resort (interpreter exit without close(), or threads that would not stop): SIGKILL every group."""
        with self._lock:
            live = list(self._live)
        for pod in live:
            if pod.pid is not None and not pod.finished:
                kill_group(pod.pid, signal.SIGKILL)

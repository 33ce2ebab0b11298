"""The part every local workload controller shares: a thread that owns one workload's pods and reacts to messages
(spec changed, deleted, a pod deleted, a process exited, shutdown), starting pods and stopping them through the
termination sequence. JobController (workloads.py), StatefulSetController and DeploymentController
(replicas.py) add what their kinds mean.
"""

from __future__ import annotations

import copy
import logging
import queue
import signal
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from apps.cluster.gpus import gpu_allocator, gpu_inventory

from ..base import POD, ResourceKind
from .env import PodConfigError, PodContext, build_launch, container_of, gpus_wanted, grace_of
from .objects import render_pod
from .pods import PodProcess, free_port, kill_group, now_iso

logger = logging.getLogger(__name__)

IDLE_TICK_S = 2.0
BUSY_TICK_S = 0.25
RESIZED_FIELDS = ("parallelism", "completions", "replicas", "activeDeadlineSeconds", "suspend")


class WorkloadStore(Protocol):
    """What the supervisor needs from the object store (LocalBackend implements it; none of it counts as a call)."""

    def read_object(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None: ...

    def write_pod(self, pod: dict[str, Any], *, create: bool, owner_uid: str) -> None: ...

    def write_status(self, kind: ResourceKind, namespace: str, name: str, uid: str, status: dict[str, Any]) -> None: ...

    def remove_object(self, kind: ResourceKind, namespace: str, name: str, uid: str | None) -> None: ...

    def remove_owned(self, namespace: str, owner_uid: str, *, finished_only: bool) -> None: ...


class Supervisor(Protocol):
    """What a controller needs from the supervisor that runs it (WorkloadSupervisor, workloads.py, implements it):
    declared here so that the controllers do not import the module that creates them."""

    store: WorkloadStore
    data_dir: Path
    log_dir: Path
    closed: bool

    def spawn(self, target: Callable[[], None], name: str) -> threading.Thread: ...

    def track(self, pod: PodProcess) -> None: ...

    def started(self, pod: PodProcess) -> None: ...

    def untrack(self, pod: PodProcess) -> None: ...


class WorkloadController(ABC):
    """One workload: its current pod per index (`pods`), the pods being terminated (`stopping`), and a thread.

    Only the controller's thread touches its state; other threads `post()` messages. Subclasses implement
    `reconcile()`, `publish()`, `pod_exited()` and `pod_name()`.
    """

    resource: ResourceKind
    # restartPolicy Always (StatefulSet, Deployment): an exited process runs again in the same Pod, and readiness
    # waits for the readiness probe; a Job's pods run once and are ready while they run.
    restarts_in_place = False

    def __init__(self, sup: Supervisor, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        self.sup = sup
        self.kind, self.name, self.namespace, self.uid = obj["kind"], meta["name"], meta["namespace"], meta["uid"]
        self.owner = {"apiVersion": obj["apiVersion"], "kind": self.kind, "metadata": dict(meta)}
        self.spec = copy.deepcopy(obj.get("spec") or {})
        self.service: str | None = None
        self.master_port, self.rdzv_port = free_port(), free_port()
        self.http_ports: dict[int, int] = {}
        self.use_template(copy.deepcopy(self.spec.get("template") or {}))
        self.inbox: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.done = self.final = self.deleted = self.closing = False
        self.pods: dict[int, PodProcess] = {}
        self.stopping: list[PodProcess] = []
        self.attempts: dict[int, int] = {}
        self.group_floor = 0
        self.last_status: dict[str, Any] | None = None
        self.start_time, self.started_mono = now_iso(), time.monotonic()

    def use_template(self, template: dict[str, Any]) -> None:
        """Take what the pods are made of from a pod template: command, environment, grace and readiness probe
        (`probe`: the readinessProbe's tcpSocket or httpGet handler, `probe_kind` which). A container with a `PORT`
        variable serves HTTP: each index gets a port of its own on the loopback address."""
        self.template = template
        self.pod_spec = self.template.get("spec") or {}
        container = container_of(self.pod_spec)
        self.env = {e.get("name"): e.get("value") for e in container.get("env") or []}
        self.grace = grace_of(self.pod_spec)
        self.readiness = container.get("readinessProbe") or {}
        self.probe_kind = next((k for k in ("httpGet", "tcpSocket") if k in self.readiness), None)
        self.probe = self.readiness.get(self.probe_kind) if self.probe_kind else None
        if "PORT" in self.env and not self.http_ports:
            self.http_ports[0] = free_port()

    def start(self) -> None:
        self.inbox.put(("start",))  # the first pass runs at once
        self.sup.spawn(self._run, f"gryvia-workload-{self.namespace}/{self.name}")

    # -- what each workload kind (Job, StatefulSet) defines ----------------------------------------------------

    @abstractmethod
    def reconcile(self) -> None:
        """Decide, start and stop pods (called after every batch of messages and every tick)."""

    @abstractmethod
    def status(self) -> dict[str, Any]:
        """The workload's status, in the Kubernetes shape of its kind."""

    @abstractmethod
    def pod_exited(self, pod: PodProcess) -> None:
        """A current pod's process ended on its own."""

    @abstractmethod
    def pod_name(self, index: int, attempt: int) -> str:
        """The Pod object's name for an index and attempt."""

    def next_wakeup(self) -> float:
        """Seconds until the controller must look again without a message (deadlines, backoffs, probes)."""
        return IDLE_TICK_S

    # -- messages ---------------------------------------------------------------------------------------------

    def post(self, message: tuple[Any, ...]) -> bool:
        """Queue a message for the controller thread; False when it has finished for good."""
        with self.lock:
            if self.done:
                return False
            self.inbox.put(message)
            return True

    def _run(self) -> None:
        try:
            self._loop()
        except Exception:
            logger.exception("local workload %s/%s: controller failed; killing its pods", self.namespace, self.name)
            for pod in [*self.pods.values(), *self.stopping]:
                if pod.alive and pod.pid is not None:
                    pod.hurry()
                    kill_group(pod.pid, signal.SIGKILL)
        finally:
            with self.lock:
                self.done = True

    def _loop(self) -> None:
        while True:
            tick = self.next_wakeup()
            if any(not p.started and not p.finished for p in self.pods.values()):
                tick = min(tick, BUSY_TICK_S)
            try:
                messages = [self.inbox.get(timeout=max(tick, 0.05))]
            except queue.Empty:
                messages = []
            while not self.inbox.empty():
                messages.append(self.inbox.get_nowait())
            for message in messages:
                self._handle(*message)
            if self.deleted or self.closing:
                if not self.busy():
                    if self.deleted:
                        self.sup.store.remove_owned(self.namespace, self.uid, finished_only=False)
                    return
                continue
            self.reconcile()
            for pod in list(self.pods.values()):
                if not pod.started and not pod.finished:
                    self.try_launch(pod)
            self.publish()
            if self.final and not self.busy():
                with self.lock:
                    if self.inbox.empty():
                        self.done = True
                        return

    def _handle(self, kind: str, *args: Any) -> None:
        if kind == "exited":
            pod = args[0]
            if pod.stopping:
                self.after_stop(pod)
            elif self.pods.get(pod.index) is not pod:
                self.write_pod(pod)
            else:
                self.pod_exited(pod)
        elif kind == "spec":
            for key in RESIZED_FIELDS:  # everything else of a running workload is immutable: ignored
                if key in args[0]:
                    self.spec[key] = args[0][key]
                else:
                    self.spec.pop(key, None)
        elif kind == "delete":
            self.deleted = True
            self.stop_all(args[0], "WorkloadDeleted", "remove")
        elif kind == "close":
            self.closing = True
            self.stop_all(min(self.grace, args[0]), "Shutdown", "keep")
        elif kind == "pod_deleted":
            self._pod_deleted(args[0], args[1])

    def _pod_deleted(self, name: str, grace: float | None) -> None:
        """The Pod object was deleted: kill its process; its index comes back (a new pod, not a failure)."""
        for pod in self.stopping:
            if pod.name == name:
                pod.after_stop = "gone"
                if grace is not None and grace <= 0:
                    pod.hurry()
        pod = next((p for p in self.pods.values() if p.name == name), None)
        if pod is None:
            return
        if not pod.finished:
            self.stop(pod, grace, "DeletionByAPI", "gone")
        elif self.restarts_in_place:
            self.stop(pod, 0, "DeletionByAPI", "gone")

    # -- pods -------------------------------------------------------------------------------------------------

    def busy(self) -> bool:
        return bool(self.stopping) or any(p.alive for p in self.pods.values())

    def new_pod(self, index: int, restart_of: PodProcess | None = None) -> None:
        """Create the Pod (a new attempt, or `restart_of` run again in place) and try to start its process."""
        if restart_of is not None:
            old = restart_of
            pod = PodProcess(
                name=old.name, uid=old.uid, index=index, attempt=old.attempt, restart_count=old.restart_count + 1
            )
            pod.created_at, pod.append_log = old.created_at, True
            pod.last_state = {
                "exitCode": old.exit_code,
                "reason": "Completed" if old.exit_code == 0 else "Error",
                "startedAt": old.started_at,
                "finishedAt": old.finished_at,
            }
        else:
            attempt = max(self.attempts.get(index, 0), self.group_floor) + 1
            self.attempts[index] = attempt
            pod = PodProcess(name=self.pod_name(index, attempt), uid=str(uuid.uuid4()), index=index, attempt=attempt)
        if self.http_ports:
            if index not in self.http_ports:
                self.http_ports[index] = free_port()
            pod.port = self.http_ports[index]
        self.pods[index] = pod
        self.try_launch(pod, create=True)

    def try_launch(self, pod: PodProcess, *, create: bool = False) -> None:
        """Take its GPUs and start its process; when either is impossible now the pod stays Pending, with why.
        `create`: the Pod object is written for the first time."""
        if self.closing or self.deleted or self.sup.closed:
            if create:
                self.write_pod(pod, create=True)
            return
        wanted = gpus_wanted(self.pod_spec)
        if wanted and not pod.gpus:
            got = gpu_allocator().allocate(wanted, pod.gpu_owner)
            if got is None:
                total = gpu_inventory().count
                free = max(total - len(gpu_allocator().in_use()), 0)
                message = (
                    f"0/1 nodes are available: 1 Insufficient nvidia.com/gpu (wants {wanted}, {free}/{total} free)"
                )
                self._set_waiting(pod, "Unschedulable", message, create=create)
                return
            pod.gpus = got
        meta = render_pod(owner=self.owner, template=self.template, pod=pod, deleting=False)["metadata"]
        context = PodContext(
            kind=self.kind,
            workload=self.name,
            namespace=self.namespace,
            pod_name=pod.name,
            index=pod.index,
            labels=meta["labels"],
            annotations=meta["annotations"],
            pod_spec=self.pod_spec,
            service=self.service,
            data_dir=self.sup.data_dir,
            log_dir=self.sup.log_dir,
            master_port=self.master_port,
            rdzv_port=self.rdzv_port,
            http_port=pod.port,
            gpus=pod.gpus,
            lookup=self.sup.store.read_object,
        )
        try:
            plan = build_launch(context)
        except (PodConfigError, OSError) as exc:
            gpu_allocator().release(pod.gpu_owner)
            pod.gpus = []
            reason = exc.reason if isinstance(exc, PodConfigError) else "CreateContainerError"
            self._set_waiting(pod, reason, str(exc), create=create)
            return
        pod.reason = pod.message = ""
        self.sup.track(pod)
        pod.launch(plan, append=pod.append_log, on_exit=self._exited, spawn=self.sup.spawn)
        self.sup.started(pod)
        if pod.alive and not (self.probe and self.restarts_in_place):
            pod.ready = True  # no readiness probe to wait for
        self.write_pod(pod, create=create)

    def _exited(self, pod: PodProcess) -> None:
        self.sup.untrack(pod)
        self.post(("exited", pod))

    def _set_waiting(self, pod: PodProcess, reason: str, message: str, *, create: bool = False) -> None:
        if create or (pod.reason, pod.message) != (reason, message):
            pod.reason, pod.message = reason, message
            self.write_pod(pod, create=create)

    def write_pod(self, pod: PodProcess, *, create: bool = False) -> None:
        if pod.after_stop == "gone":
            return
        restarting = self.restarts_in_place and pod.finished and self.pods.get(pod.index) is pod
        deleting = self.deleted or (pod.stopping and pod.after_stop == "remove")
        obj = render_pod(owner=self.owner, template=self.template, pod=pod, deleting=deleting, restarting=restarting)
        self.sup.store.write_pod(obj, create=create, owner_uid=self.uid)

    def stop(self, pod: PodProcess, grace: float | None, reason: str, after: str) -> None:
        """Start one pod's termination sequence (on a background thread); its outcome no longer counts. `after`:
        keep the Pod object with its final phase, remove it, or `gone` (already removed)."""
        if self.pods.get(pod.index) is pod:
            del self.pods[pod.index]
        if pod.finished:  # nothing runs: only the object is left to settle
            if after == "remove":
                self.sup.store.remove_object(POD, self.namespace, pod.name, pod.uid)
            return
        pod.stopping, pod.stop_reason, pod.after_stop = True, reason, after
        if not pod.started:
            pod.cancel_pending(reason)
            self.after_stop(pod)
            return
        self.stopping.append(pod)
        self.write_pod(pod)
        seconds = self.grace if grace is None else float(grace)
        if seconds <= 0:
            pod.hurry()
        self.sup.spawn(lambda: pod.terminate(seconds), f"gryvia-stop-{pod.name}")

    def stop_all(self, grace: float | None, reason: str, after: str) -> None:
        for pod in list(self.pods.values()):
            self.stop(pod, grace, reason, after)
        for pod in self.stopping:
            if after == "remove" and pod.after_stop == "keep":
                pod.after_stop = "remove"
            if grace is not None and grace <= 0:
                pod.hurry()

    def after_stop(self, pod: PodProcess) -> None:
        if pod in self.stopping:
            self.stopping.remove(pod)
        if pod.after_stop == "remove":
            self.sup.store.remove_object(POD, self.namespace, pod.name, pod.uid)
        else:
            self.write_pod(pod)

    def publish(self) -> None:
        """Write the workload's `status` when it changed."""
        status = self.status()
        if status != self.last_status:
            self.last_status = copy.deepcopy(status)
            self.sup.store.write_status(self.resource, self.namespace, self.name, self.uid, status)

"""The job reconciler: each job's workload, Service, token Secret and PVC, and its status from what runs.

Per pass (see apps.core.reconcile): one LIST per managed kind, one of Pods and one of Nodes; GPU capacity is
checked before a workload is created; cancel deletes the workload (keeping the PVC); terminal jobs keep only
their PVC until `ttlSecondsAfterFinished`; pods on a lost node are force-deleted so the Job replaces them.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from apps.cluster.services import (
    JOB,
    MANAGED_BY,
    MANAGER,
    NODE,
    POD,
    PVC,
    SECRET,
    SERVICE,
    STATEFUL_SET,
    WORKLOAD,
    ClusterBackend,
    get_backend,
)
from apps.core.db import epochs
from apps.core.locks import LockedRead
from apps.core.reconcile import OwnerReconciler, ReconcileStats
from apps.queueing import kai, kueue

from . import admission_budgets, admission_inputs, manifests, selectors, services
from . import choices as C
from .admission import GPU, Decision, admit
from .choices import HOLDING_PHASES, JobPhase
from .models import Job
from .reconciler_desired import DesiredMixin, has_workload
from .reconciler_pass import PassMixin
from .reconciler_placement import PlacementMixin
from .reconciler_recovery import RecoveryMixin
from .status import Observed, from_batch_job, from_stateful_set, set_condition, workload_ended

logger = logging.getLogger(__name__)
NODE_LOSS_GRACE = dt.timedelta(seconds=60)


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _ts(value: str | None) -> dt.datetime | None:
    return parse_datetime(value) if value else None


class JobReconciler(DesiredMixin, RecoveryMixin, PassMixin, PlacementMixin, OwnerReconciler[Job]):
    kind = "job"
    managed_kinds = (PVC, SECRET, JOB, STATEFUL_SET, SERVICE)
    observed_kinds = (POD,)
    label_selector = f"{MANAGED_BY}={MANAGER},{manifests.COMPONENT}=job"
    delete_order = ("Service", "Job", "StatefulSet", "Secret", "PersistentVolumeClaim")
    owner_label = C.JOB_UID_LABEL

    def __init__(self, backend: ClusterBackend, **kw: Any) -> None:
        super().__init__(backend, **kw)
        self.gpu_total = 0
        self.gpu_simulated = False
        self.lost_nodes: dict[str, dt.datetime] = {}
        self.decisions: dict[int, Decision] = {}
        self.mode = "native"
        self.workloads: list[dict[str, Any]] = []
        self.node_views: list[Any] = []
        self.typed_nodes = False
        self.claims: dict[str, int | None] = {}
        self.reserved_tenants: set[int] = set()
        self.placements: dict[int, dict[str, Any]] = {}
        self.unplaced: dict[int, str] = {}
        self.now = timezone.now()
        self.head_status: dict[int, tuple[str, str, str]] = {}
        self.head_identity: dict[int, tuple[int, str, str]] = {}  # waiting head -> (tenant id, uid, name)
        self.active_rows: list[admission_inputs.Active] = []
        self.fingerprints: dict[int, tuple | None] = {}  # admitted and ended jobs' (see PassMixin._fingerprint)
        self.released: set[int] = set()  # admitted jobs whose workload ended: free for this pass's admission
        self.lost: dict[int, bool] = {}  # running jobs whose workload is gone -> applied again (DesiredMixin)
        self.overdue: set[int] = set()  # running jobs past their timeout (DesiredMixin._overdue)
        # Writes buffered during the pass, flushed by end_pass(): job pk -> changed fields, events, revocations.
        self._changes: dict[int, dict[str, Any]] = {}
        self._jobs: dict[int, Job] = {}
        self._events: list[tuple[Job, str, str, str]] = []
        self._status: dict[int, tuple[int, dict[str, str]]] = {}
        self._revoke: list[str] = []
        self._finalize: list[int] = []  # terminal jobs whose cluster objects are all gone
        self._seen_now: dict[str, tuple] = {}
        self._tokens: dict[str, str] = {}
        self._issued: dict[str, str] = {}

    # -- pass-wide state ----------------------------------------------------------------------------------------

    def run_pass(self) -> ReconcileStats:
        # The small tables a pass reads (queues, tenants, webhook endpoints, SKUs) are read again only when they
        # changed since this process last read them: one read of their epochs a pass (apps.core.db.epochs).
        with epochs.snapshot():
            return super().run_pass()

    def lock_reads(self) -> list[LockedRead]:
        return epochs.snapshot_reads()  # the epochs, read with the lock attempt

    def begin_pass(self, observed: dict[str | None, dict[str, list[dict[str, Any]]]]) -> None:
        total, now = 0, timezone.now()
        self.now = now
        self.lost_nodes = {}
        self.gpu_simulated = False
        nodes = self.backend.list(NODE)
        self._inventory(nodes, observed)
        for node in nodes:
            status = node.get("status") or {}
            if _labels(node).get("gryvia.io/simulated-gpus") == "true":
                self.gpu_simulated = True
            ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
            if ready is not None and ready.get("status") != "True":
                since = _ts(ready.get("lastTransitionTime")) or now
                if now - since >= NODE_LOSS_GRACE:
                    self.lost_nodes[node["metadata"]["name"]] = since
                continue
            total += int((status.get("allocatable") or {}).get(manifests.GPU_RESOURCE) or 0)
        self.gpu_total = total
        self.mode = settings.GRYVIA_ADMISSION
        if self.mode != "native":  # Kueue or KAI admits: Gryvia creates the workloads and reads their state
            self.workloads = self.backend.list(WORKLOAD) if self.mode == "kueue" else []
            return
        heads, self.active_rows = admission_inputs.heads_and_active(settings.GRYVIA_ADMISSION_HEADS)  # one round trip
        self.head_status, self.head_identity = heads.status, heads.identity
        self.fingerprints = self._fingerprints()  # (owners() reads them too)
        # A job whose workload has ended is marked finished by this pass's observe(): what it held is free for this
        # pass's admission already, so a finish and the admissions it allows take one pass, not two. One whose row
        # and objects are as this process last observed them has not ended since (an end changes its workload).
        self.released = self._ended(
            {
                row.pk: row.uid
                for row in self.active_rows
                if row.phase in HOLDING_PHASES and not self._as_last_observed(row.uid, self.fingerprints[row.pk])
            }
        )
        holdings = admission_inputs.holdings(self.active_rows)
        held = [h for h in holdings if h.job_id not in self.released]
        # The released jobs' runs close only at the pass's end: until then hard budgets count what they ran.
        ended = [h for h in holdings if h.job_id in self.released] if self.released else []
        waiting, budgets = admission_budgets.budget_rooms(heads.demands, held, now, ended=ended)  # 2 queries if hard
        self.decisions = {
            d.job_id: d
            for d in admit(
                waiting=waiting,
                holdings=held,
                queues=admission_inputs.queue_quotas(),
                ceilings=admission_inputs.tenant_ceilings(),
                capacity={GPU: total},
                budgets=budgets,
            )
        }
        if heads.pending:
            self._queue_submitted()
        self._record_queue_status(heads, held)

    def _ended(self, holding: dict[int, str]) -> set[int]:
        """Of these admitted jobs (pk -> uid), those whose batch Job has completed or failed."""
        out = set()
        for pk, uid in holding.items():
            for obj in self.live_by_owner.get(uid, {}).values():
                if obj.get("kind") == "Job" and workload_ended(obj):
                    out.add(pk)
        return out

    def _queue_submitted(self) -> None:
        """Submitted jobs not admitted at once are Queued, all in a few statements (one per queue name)."""
        decided = sorted(pk for pk, d in self.decisions.items() if d.outcome in ("admit", "reject"))
        rows = selectors.submitted_jobs(decided=decided, tenants={})
        by_queue: dict[str, list[Job]] = {}
        for job in rows:
            by_queue.setdefault(job.queue_name, []).append(job)
        events = []
        with transaction.atomic():  # the phase change and its events (and webhook outbox rows) together
            for queue, jobs in by_queue.items():
                message = f"waiting for jobs ahead of it in queue {queue}"
                for start in range(0, len(jobs), 1000):
                    chunk = jobs[start : start + 1000]
                    Job.all_tenants.filter(pk__any_of=[j.pk for j in chunk], phase=JobPhase.PENDING).update(
                        phase=JobPhase.QUEUED, reason="WaitingForJobsAhead", message=message
                    )
                events += [(job, "Queued", message, "Normal") for job in jobs]
                for job in jobs:
                    if job.pk in self.head_status:
                        self.head_status[job.pk] = (JobPhase.QUEUED, "WaitingForJobsAhead", message)
            services.job_events_record(events, runs=False)  # never ran: no usage record to open or close

    # -- owners -------------------------------------------------------------------------------------------------

    def owner_key(self, owner: Job) -> str:
        return owner.uid_text

    def owner_key_of(self, obj: dict[str, Any]) -> str | None:
        return _labels(obj).get(C.JOB_UID_LABEL)

    def generation(self, owner: Job) -> tuple[int, int]:
        return owner.generation, owner.observed_generation

    def applied(self, owner: Job) -> dict[str, str]:
        return owner.status_applied or {}

    def needs_work(self, owner: Job, live: dict[str, dict[str, Any]]) -> bool:
        return True  # status follows the workload every pass; applies still happen only when hashes differ

    # -- status -------------------------------------------------------------------------------------------------

    def record_error(self, owner: Job, message: str) -> None:
        if owner.message != message:
            Job.all_tenants.filter(pk=owner.pk).update(message=message[:2000])
            services.job_event(job=owner, reason="ReconcileError", message=message, type="Warning")

    def observe(self, owner: Job, live: dict[str, dict[str, Any]], observed: dict[str, list[dict[str, Any]]]) -> None:
        job = owner
        now = timezone.now()
        if job.is_terminal:
            if not live and not job.finalized:
                self._finalize.append(job.pk)
                job.finalized = True
            return
        decision = self.decisions.get(job.pk)
        stopping = [
            p for p in observed.get("Pod", []) if (p.get("status") or {}).get("phase") in ("Pending", "Running")
        ]
        if job.cancel_requested_at is not None:
            if stopping:  # checkpoint request, grace period, then the pods go; the token works until they have
                message = f"waiting for {len(stopping)} pod(s) to stop (checkpoint request, then the grace period)"
                self._update(job, reason="Cancelling", message=message)
                return
            self._finish(job, JobPhase.CANCELLED, "Cancelled", "cancelled by request", now)
            return
        if decision is not None and decision.outcome == "evict" and job.phase != JobPhase.PREEMPTED:
            events = [("Preempted", decision.message, "Warning")]
            self._update(job, events=events, phase=JobPhase.PREEMPTED, reason="Preempted", message=decision.message)
            return
        if job.phase == JobPhase.PREEMPTED:
            if not stopping and not has_workload(live.values()):
                attempts = max(job.attempts, 1)
                message = f"queued again after preemption (attempt {attempts + 1} next)"
                self._update(
                    job,
                    events=[("Requeued", message, "Normal")],
                    phase=JobPhase.QUEUED,
                    reason="Requeued",
                    message=message,
                    requeues_attempts=attempts,
                    attempts=attempts,
                )
            return
        if job.pk in self.lost:
            self._workload_lost(job, now)
            return
        if self._overdue(job, live):
            message = f"ran past its timeout of {job.timeout_s}s (started {job.start_time:%Y-%m-%d %H:%M:%S} UTC)"
            self._finish(job, JobPhase.FAILED, "DeadlineExceeded", message, now)
            return
        workload = next((o for o in live.values() if o.get("kind") in ("Job", "StatefulSet")), None)
        if job.pk in self.placements and job.placement != self.placements[job.pk]:
            self._update(job, placement=self.placements[job.pk])
        if workload is None and job.pk in self.unplaced:
            events = [] if job.reason == "WaitingForPlacement" else [("Queued", self.unplaced[job.pk], "Normal")]
            self._update(
                job, events=events, phase=JobPhase.QUEUED, reason="WaitingForPlacement", message=self.unplaced[job.pk]
            )
            return
        if workload is None:
            if decision is not None and decision.outcome == "reject":
                self._finish(job, JobPhase.REJECTED, "NeverFits", decision.message, now)
            elif decision is not None and decision.outcome == "wait":
                events = [] if job.phase == JobPhase.QUEUED else [("Queued", decision.message, "Normal")]
                reason, message = decision.reason, decision.message
                self._update(job, events=events, phase=JobPhase.QUEUED, reason=reason, message=message)
            return
        if decision is not None and decision.outcome == "admit" and job.admitted_borrowing != decision.borrowing:
            self._update(job, admitted_borrowing=decision.borrowing)
        pods = observed.get("Pod", [])
        if self.mode == "kueue" and workload["kind"] == "Job" and self._kueue_holds(job, workload, now):
            return
        if self.mode == "kai":
            pending = [kai.unschedulable_reason(p) for p in pods if (p.get("status") or {}).get("phase") == "Pending"]
            running = any((p.get("status") or {}).get("phase") == "Running" for p in pods)
            if any(pending) and not running:  # not scheduled yet, or evicted by KAI and waiting to be again
                message = f"KAI scheduler: {next(r for r in pending if r)}"
                events = [("Evicted", message, "Warning")] if job.phase == JobPhase.RUNNING else []
                self._update(job, events=events, phase=JobPhase.QUEUED, reason="Unschedulable", message=message)
                return
        if workload["kind"] == "Job":
            seen = from_batch_job(workload, pods, was_running=job.phase == JobPhase.RUNNING)
        else:
            port = job.spec.get("port") or 8000
            default = f"http://{manifests.names(job.name)['service']}.{job.tenant.namespace}.svc:{port}"
            seen = from_stateful_set(workload, pods, default_endpoint=default)
        self._recover_lost_nodes(job, pods, now)
        self._apply_observed(job, seen, now)

    def _kueue_holds(self, job: Job, workload: dict[str, Any], now: dt.datetime) -> bool:
        """While Kueue has not admitted the job (or evicted it), its phase, reason and message are Kueue's."""
        uid = (workload.get("metadata") or {}).get("uid")
        phase, reason, message = kueue.phase_from_workload(kueue.workload_for(uid, self.workloads), job=workload)
        if phase != JobPhase.QUEUED:
            return False
        events = [] if job.phase == JobPhase.QUEUED and job.reason == reason else [("Queued", message, "Normal")]
        self._update(job, events=events, phase=JobPhase.QUEUED, reason=reason, message=message)
        return True

    def _apply_observed(self, job: Job, seen: Observed, now: dt.datetime) -> None:
        if seen.phase in (JobPhase.SUCCEEDED, JobPhase.FAILED):
            self._finish(job, seen.phase, seen.reason, seen.message, now, seen=seen)
            return
        changes: dict[str, Any] = {
            "phase": seen.phase,
            "reason": "",
            "attempts": job.requeues_attempts + seen.attempts,
            "current_nodes": seen.current_nodes,
            "ready_nodes": seen.ready_nodes,
            "restarts": seen.restarts,
            "allocated_nodes": seen.allocated_nodes,
            "endpoint": seen.endpoint,
            "gpus_allocated": job.typed_spec.gpus_per_pod * max(seen.current_nodes, 1),
            "gpus_simulated": bool(job.typed_spec.gpus_per_pod) and self.gpu_simulated,
        }
        if seen.phase == JobPhase.RUNNING:
            changes["message"] = ""
            if job.start_time is None:
                changes["start_time"] = _ts(seen.start_time) or now
        ready = seen.ready_nodes >= seen.current_nodes > 0
        changes["conditions"] = set_condition(
            job.conditions,
            type="Ready",
            status=ready,
            reason="Ready" if ready else "PodsNotReady",
            message=f"{seen.ready_nodes}/{seen.current_nodes} replicas are ready",
            now=now,
        )
        events = []
        if job.requeues_attempts + seen.attempts > max(job.attempts, 1):
            events.append(("Restarted", f"attempt {seen.attempts} after a pod failed", "Warning"))
        if job.current_nodes and seen.current_nodes != job.current_nodes:
            verb = "Grown" if seen.current_nodes > job.current_nodes else "Shrunk"
            events.append(("Resized", f"{verb}: {job.current_nodes} -> {seen.current_nodes} nodes", "Normal"))
            changes["conditions"] = set_condition(
                changes["conditions"],
                type="Resized",
                status=True,
                reason=verb,
                message=f"{job.current_nodes} -> {seen.current_nodes} workers",
                now=now,
            )
        if seen.phase != job.phase:
            reason = {JobPhase.SCHEDULING: "Scheduled", JobPhase.RUNNING: "Running"}.get(seen.phase, seen.phase)
            events.append((reason, f"{seen.current_nodes} node(s)", "Normal"))
        self._update(job, events=events, **changes)

    def _finish(
        self, job: Job, phase: str, reason: str, message: str, now: dt.datetime, *, seen: Observed | None = None
    ) -> None:
        changes: dict[str, Any] = {
            "phase": phase,
            "reason": reason,
            "message": message,
            "completion_time": (_ts(seen.completion_time) if seen else None) or now,
            "gpus_allocated": 0,
            "ready_nodes": 0,
        }
        if seen is not None:
            changes.update(
                attempts=job.requeues_attempts + seen.attempts, restarts=seen.restarts, current_nodes=seen.current_nodes
            )
            if job.start_time is None:
                changes["start_time"] = _ts(seen.start_time) or now
        changes["conditions"] = set_condition(
            job.conditions, type="Ready", status=False, reason=reason or phase, message=message, now=now
        )
        self._revoke.append(f"job:{job.uid_text}")
        kind = "Warning" if phase == JobPhase.FAILED else "Normal"
        self._update(job, events=[(phase, message or reason or phase, kind)], **changes)


def reconcile_jobs(backend: ClusterBackend | None = None) -> ReconcileStats:
    """One bounded pass (the periodic entry point for the ticker and Celery beat)."""
    reconciler = JobReconciler(
        backend or get_backend(),
        max_per_pass=settings.GRYVIA_RECONCILE_MAX_PER_PASS,
        budget_s=settings.GRYVIA_RECONCILE_BUDGET_S,
    )
    return reconciler.run_pass()

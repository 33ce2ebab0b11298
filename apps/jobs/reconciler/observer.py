"""The job reconciler's observer: each job's phase, reason and message from what runs in the cluster.

One `StatusObserver` per pass. It reads the pass's admission decisions (or Kueue's Workloads, or KAI's pod
conditions), its placements and its recovery, and records what it concludes through the pass's status writer.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.utils import timezone

from apps.queueing.selectors import phase_from_workload, unschedulable_reason, workload_for

from .. import manifests
from ..choices import JobPhase
from ..models import Job
from ..status import Observed, from_batch_job, from_stateful_set, set_condition
from .admitting import PassAdmission
from .desired import has_workload
from .placement import NodePlacement, timestamp
from .recovery import Recovery
from .writer import StatusWriter


class StatusObserver:
    """Derives each job's status from its live objects and pods, once per job and pass."""

    def __init__(
        self,
        *,
        mode: str,
        admission: PassAdmission,
        nodes: NodePlacement,
        recovery: Recovery,
        writer: StatusWriter,
    ) -> None:
        self.mode = mode
        self.admission = admission
        self.nodes = nodes
        self.recovery = recovery
        self.writer = writer

    def observe(self, job: Job, live: dict[str, dict[str, Any]], observed: dict[str, list[dict[str, Any]]]) -> None:
        """Record the job's status as its objects and pods show it (or as admission decided, before it runs)."""
        now = timezone.now()
        update, finish = self.writer.update, self.writer.finish
        if job.is_terminal:
            if not live and not job.finalized:
                self.writer.finalized(job)
            return
        decision = self.admission.decisions.get(job.pk)
        stopping = [
            p for p in observed.get("Pod", []) if (p.get("status") or {}).get("phase") in ("Pending", "Running")
        ]
        if job.cancel_requested_at is not None:
            if stopping:  # checkpoint request, grace period, then the pods go; the token works until they have
                message = f"waiting for {len(stopping)} pod(s) to stop (checkpoint request, then the grace period)"
                update(job, reason="Cancelling", message=message)
                return
            finish(job, JobPhase.CANCELLED, "Cancelled", "cancelled by request", now)
            return
        if decision is not None and decision.outcome == "evict" and job.phase != JobPhase.PREEMPTED:
            events = [("Preempted", decision.message, "Warning")]
            update(job, events=events, phase=JobPhase.PREEMPTED, reason="Preempted", message=decision.message)
            return
        if job.phase == JobPhase.PREEMPTED:
            if not stopping and not has_workload(live.values()):
                attempts = max(job.attempts, 1)
                message = f"queued again after preemption (attempt {attempts + 1} next)"
                update(
                    job,
                    events=[("Requeued", message, "Normal")],
                    phase=JobPhase.QUEUED,
                    reason="Requeued",
                    message=message,
                    requeues_attempts=attempts,
                    attempts=attempts,
                )
            return
        if job.pk in self.recovery.lost:
            self.recovery.workload_lost(job, now)
            return
        if self.recovery.is_overdue(job, live):
            message = f"ran past its timeout of {job.timeout_s}s (started {job.start_time:%Y-%m-%d %H:%M:%S} UTC)"
            finish(job, JobPhase.FAILED, "DeadlineExceeded", message, now)
            return
        workload = next((o for o in live.values() if o.get("kind") in ("Job", "StatefulSet")), None)
        placements, unplaced = self.nodes.placements, self.nodes.unplaced
        if job.pk in placements and job.placement != placements[job.pk]:
            update(job, placement=placements[job.pk])
        if workload is None and job.pk in unplaced:
            events = [] if job.reason == "WaitingForPlacement" else [("Queued", unplaced[job.pk], "Normal")]
            update(job, events=events, phase=JobPhase.QUEUED, reason="WaitingForPlacement", message=unplaced[job.pk])
            return
        if workload is None:
            if decision is not None and decision.outcome == "reject":
                finish(job, JobPhase.REJECTED, "NeverFits", decision.message, now)
            elif decision is not None and decision.outcome == "wait":
                events = [] if job.phase == JobPhase.QUEUED else [("Queued", decision.message, "Normal")]
                reason, message = decision.reason, decision.message
                update(job, events=events, phase=JobPhase.QUEUED, reason=reason, message=message)
            return
        if decision is not None and decision.outcome == "admit" and job.admitted_borrowing != decision.borrowing:
            update(job, admitted_borrowing=decision.borrowing)
        pods = observed.get("Pod", [])
        if self.mode == "kueue" and workload["kind"] == "Job" and self._kueue_holds(job, workload):
            return
        if self.mode == "kai" and self._kai_holds(job, pods):
            return
        if workload["kind"] == "Job":
            seen = from_batch_job(workload, pods, was_running=job.phase == JobPhase.RUNNING)
        else:
            port = job.spec.get("port") or 8000
            default = f"http://{manifests.names(job.name)['service']}.{job.tenant.namespace}.svc:{port}"
            seen = from_stateful_set(workload, pods, default_endpoint=default)
        self.recovery.recover_lost_nodes(job, pods, now)
        self._apply_observed(job, seen, now)

    def _kueue_holds(self, job: Job, workload: dict[str, Any]) -> bool:
        """While Kueue has not admitted the job (or evicted it), its phase, reason and message are Kueue's."""
        uid = (workload.get("metadata") or {}).get("uid")
        phase, reason, message = phase_from_workload(workload_for(uid, self.admission.workloads), job=workload)
        if phase != JobPhase.QUEUED:
            return False
        events = [] if job.phase == JobPhase.QUEUED and job.reason == reason else [("Queued", message, "Normal")]
        self.writer.update(job, events=events, phase=JobPhase.QUEUED, reason=reason, message=message)
        return True

    def _kai_holds(self, job: Job, pods: list[dict[str, Any]]) -> bool:
        """While KAI has not scheduled the job's pods (or evicted them), the job is queued with KAI's reason."""
        pending = [unschedulable_reason(p) for p in pods if (p.get("status") or {}).get("phase") == "Pending"]
        running = any((p.get("status") or {}).get("phase") == "Running" for p in pods)
        if not any(pending) or running:
            return False
        message = f"KAI scheduler: {next(r for r in pending if r)}"  # not scheduled yet, or evicted and waiting
        events = [("Evicted", message, "Warning")] if job.phase == JobPhase.RUNNING else []
        self.writer.update(job, events=events, phase=JobPhase.QUEUED, reason="Unschedulable", message=message)
        return True

    def _apply_observed(self, job: Job, seen: Observed, now: dt.datetime) -> None:
        """Record what the workload and its pods show: its end, or its phase, nodes, restarts and readiness."""
        if seen.phase in (JobPhase.SUCCEEDED, JobPhase.FAILED):
            self.writer.finish(job, seen.phase, seen.reason, seen.message, now, seen=seen)
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
            "gpus_simulated": bool(job.typed_spec.gpus_per_pod) and self.nodes.gpu_simulated,
        }
        if seen.phase == JobPhase.RUNNING:
            changes["message"] = ""
            if job.start_time is None:
                changes["start_time"] = timestamp(seen.start_time) or now
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
        self.writer.update(job, events=events, **changes)

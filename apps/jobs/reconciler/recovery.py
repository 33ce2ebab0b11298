"""The job reconciler's recovery: what it does when the cluster lost part of a job, or a job ran past its time.

- A lost node (NotReady past the grace): a non-elastic job's pods on it are force-deleted, so its controller
  replaces them (`RecoveredFromNodeLoss`).
- A lost workload (its Job or StatefulSet gone from the cluster: deleted behind Gryvia's back, the cluster
  emptied, the local backend's process restarted): applied again from its last checkpoint within `retryLimit`,
  else the job fails (`WorkloadLost`). desired() decides which, observe() records it.
- A deadline passed by the database's clock (`timeout` from the stored `startTime`, whatever the backend reports):
  the job fails (`DeadlineExceeded`) and its workload is deleted in the same pass.

One `Recovery` per pass; it records what it decides through the pass's status writer.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from apps.cluster.services import POD, ClusterBackend, ObjectRef

from .. import services
from ..choices import JobPhase
from ..models import Job
from ..status import set_condition, workload_ended
from .writer import StatusWriter

RUNNING_PHASES = (JobPhase.SCHEDULING, JobPhase.RUNNING)  # has (had) a workload


def workload_has_ended(objects: Any) -> bool:
    """Whether these live objects include a batch Job that has completed or failed on its own."""
    return any(o.get("kind") == "Job" and workload_ended(o) for o in objects)


def may_retry(job: Job) -> bool:
    """Whether a job whose workload was lost may run again: each lost workload counts as an attempt against
    `retryLimit`, as a failed pod does."""
    return max(job.attempts, 1) - 1 < int(job.spec.get("retryLimit") or 0)


def deadline(job: Job) -> dt.datetime | None:
    """When a started job's `timeout` runs out, from the start time the database keeps (whatever the backend says:
    a workload re-created after a loss keeps the job's first start)."""
    if job.start_time is None or not job.timeout_s:
        return None
    return job.start_time + dt.timedelta(seconds=job.timeout_s)


class Recovery:
    """Lost nodes, lost workloads and deadlines, for one pass."""

    def __init__(
        self,
        *,
        backend: ClusterBackend,
        now: dt.datetime,
        lost_nodes: dict[str, dt.datetime],
        active_rows: list[Any],
        writer: StatusWriter,
    ) -> None:
        self.backend = backend
        self.now = now
        self.lost_nodes = lost_nodes
        self.active_rows = active_rows
        self.writer = writer
        self.lost: dict[int, bool] = {}  # jobs whose workload this pass found missing -> whether it runs again
        self.overdue: set[int] = set()  # jobs past their timeout this pass (see is_overdue)

    def workload_missing(self, job: Job) -> bool:
        """A running job whose workload is gone: record it, and whether it may run again (see may_retry)."""
        self.lost[job.pk] = retry = may_retry(job)
        return retry

    def is_overdue(self, job: Job, live: dict[str, dict[str, Any]]) -> bool:
        """A running job past its deadline (one whose batch Job has just ended on its own is left to report so)."""
        if job.pk in self.overdue:
            return True
        end = deadline(job) if job.phase in RUNNING_PHASES else None
        if end is None or self.now < end or workload_has_ended(live.values()):
            return False
        self.overdue.add(job.pk)
        return True

    def past_deadline(self) -> set[int]:
        """Of the admitted jobs begin_pass read, those whose timeout has run out since they started (or, not yet
        started, since they were admitted): owners() hands them to observe() even when nothing else changed."""
        return {
            row.pk
            for row in self.active_rows
            if row.phase in (JobPhase.SCHEDULING, JobPhase.RUNNING)
            and row.timeout_s
            and row.admitted_at is not None
            and self.now >= row.admitted_at + dt.timedelta(seconds=row.timeout_s)
        }

    def workload_lost(self, job: Job, now: dt.datetime) -> None:
        """Its workload is gone from the cluster (deleted behind Gryvia's back, the cluster emptied, the local
        backend's process restarted): run it again from its last checkpoint within `retryLimit`, else fail it.
        Its run's usage record closes either way (the `WorkloadLost` event); a new one opens when it runs again."""
        limit = int(job.spec.get("retryLimit") or 0)
        attempt = max(job.attempts, 1) + 1
        what = "its workload is gone from the cluster (deleted outside Gryvia, or the backend restarted)"
        if not self.lost[job.pk]:
            message = f"{what}; no retry left ({attempt - 1} attempt(s), retryLimit {limit})"
            self.writer.finish(job, JobPhase.FAILED, "WorkloadLost", message, now)
            return
        message = f"{what}; started again from its last checkpoint: attempt {attempt} of {limit + 1}"
        self.writer.update(
            job,
            events=[("WorkloadLost", message, "Warning")],
            phase=JobPhase.SCHEDULING,
            reason="WorkloadLost",
            message=message,
            requeues_attempts=attempt - 1,
            attempts=attempt,
            ready_nodes=0,
            conditions=set_condition(
                job.conditions, type="Ready", status=False, reason="WorkloadLost", message=message, now=now
            ),
        )

    def recover_lost_nodes(self, job: Job, pods: list[dict[str, Any]], now: dt.datetime) -> None:
        """Force-delete (UID precondition) a non-elastic job's pods stuck on nodes NotReady past the grace."""
        if not self.lost_nodes or job.typed_spec.elastic:
            return
        replaced, lost_on = [], set()
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            phase = (pod.get("status") or {}).get("phase")
            if node in self.lost_nodes and phase not in ("Succeeded", "Failed"):
                meta = pod["metadata"]
                self.backend.delete(
                    ObjectRef(POD, meta["name"], meta.get("namespace")), grace_period_s=0, uid=meta.get("uid")
                )
                replaced.append(meta["name"])
                lost_on.add(node)
        if not replaced:
            return
        lost = max((job.last_reported_step or 0) - (job.last_checkpoint_step or 0), 0)
        message = (
            f"replaced {len(replaced)} pod(s) from NotReady node(s) {', '.join(sorted(lost_on))}; "
            f"resuming from step {job.last_checkpoint_step or 0} ({lost} step(s) lost)"
        )
        conditions = set_condition(
            job.conditions, type="RecoveredFromNodeLoss", status=True, reason="PodsReplaced", message=message, now=now
        )
        Job.all_tenants.filter(pk=job.pk).update(
            conditions=conditions, node_loss_recoveries=job.node_loss_recoveries + 1, lost_steps=job.lost_steps + lost
        )
        job.conditions = conditions
        services.job_event(job=job, reason="NodeLost", message=message, type="Warning")

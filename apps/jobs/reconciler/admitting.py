"""The job reconciler's admission step: what the pass reads of the waiting and admitted jobs, the admission cycle's
decisions (apps.jobs.admission), the submitted jobs it queues, and each queue's status after the cycle.

One `PassAdmission` per pass. With Kueue or KAI admitting (GRYVIA_ADMISSION), it only reads Kueue's Workloads:
Gryvia creates the workloads and reads their state.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from apps.cluster.services import WORKLOAD, ClusterBackend
from apps.queueing.services import queue_status_sync

from .. import selectors, services
from ..admission import GPU, Decision, admit
from ..admission import budgets as admission_budgets
from ..admission import inputs as admission_inputs
from ..admission import limits as admission_limits
from ..choices import HOLDING_PHASES, JobPhase
from ..models import Job
from ..status import workload_ended
from .seen import Fingerprints


class QueueStatus:
    """Each queue's admitted usage and waiting count after the cycle, written with the pass's other writes."""

    def __init__(self) -> None:
        self.pending_write: tuple[dict, dict] | None = None  # (admitted, pending) for queue_status_sync

    def record(self, heads: admission_inputs.WaitingHeads, held: list[Any], decisions: dict[int, Decision]) -> None:
        """Each queue's admitted usage (held + admitted now) and waiting count, after the cycle."""
        admitted: dict[tuple[int, str], dict[str, int]] = {}
        newly = [d for d in heads.demands if getattr(decisions.get(d.job_id), "outcome", None) == "admit"]
        for item in [*held, *newly]:
            usage = admitted.setdefault((item.tenant_id, item.queue), {})
            for resource, amount in item.request.items():
                usage[resource] = usage.get(resource, 0) + amount
        pending = dict(heads.counts)
        for demand in heads.demands:
            decision = decisions.get(demand.job_id)
            if decision is not None and decision.outcome != "wait":
                key = (demand.tenant_id, demand.queue)
                pending[key] = pending.get(key, 0) - 1
        self.pending_write = (admitted, {k: v for k, v in pending.items() if v > 0})

    def write(self) -> None:
        """Write what record() computed, once (in the caller's transaction)."""
        if self.pending_write is not None:
            admitted, pending = self.pending_write
            self.pending_write = None
            queue_status_sync(admitted=admitted, pending=pending)


class PassAdmission:
    """The pass's admission: the waiting heads and active rows it read, the decisions, the jobs it released."""

    def __init__(self, *, mode: str, fingerprints: Fingerprints) -> None:
        self.mode = mode
        self.fingerprints = fingerprints
        self.decisions: dict[int, Decision] = {}
        self.workloads: list[dict[str, Any]] = []  # Kueue's Workloads (GRYVIA_ADMISSION=kueue)
        self.head_status: dict[int, tuple[str, str, str]] = {}
        self.head_identity: dict[int, tuple[int, str, str]] = {}  # waiting head -> (tenant id, uid, name)
        self.active_rows: list[admission_inputs.Active] = []
        self.job_fingerprints: dict[int, tuple | None] = {}  # admitted and ended jobs' (see Fingerprints)
        self.released: set[int] = set()  # admitted jobs whose workload ended: free for this pass's admission
        self.queue_status = QueueStatus()

    def run(self, backend: ClusterBackend, *, gpu_total: int, now: Any, max_heads: int) -> None:
        """Read the waiting heads and the admitted jobs, release what ended, and decide who starts."""
        if self.mode != "native":  # Kueue or KAI admits: Gryvia creates the workloads and reads their state
            self.workloads = backend.list(WORKLOAD) if self.mode == "kueue" else []
            return
        heads, self.active_rows = admission_inputs.heads_and_active(max_heads)  # one round trip
        self.head_status, self.head_identity = heads.status, heads.identity
        self.job_fingerprints = self.fingerprints.of_rows(self.active_rows)  # (owners() reads them too)
        # A job whose workload has ended is marked finished by this pass's observe(): what it held is free for this
        # pass's admission already, so a finish and the admissions it allows take one pass, not two. One whose row
        # and objects are as this process last observed them has not ended since (an end changes its workload).
        self.released = self._ended(
            {
                row.pk: row.uid
                for row in self.active_rows
                if row.phase in HOLDING_PHASES
                and not self.fingerprints.as_last_observed(row.uid, self.job_fingerprints[row.pk])
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
                queues=admission_limits.queue_quotas(),
                ceilings=admission_limits.tenant_ceilings(),
                capacity={GPU: gpu_total},
                budgets=budgets,
            )
        }
        if heads.pending:
            self._queue_submitted()
        self.queue_status.record(heads, held, self.decisions)

    def outcome(self, pk: int) -> str | None:
        """This pass's decision for a job ("admit", "wait", "reject", "evict"), None when there is none."""
        decision = self.decisions.get(pk)
        return None if decision is None else decision.outcome

    def _ended(self, holding: dict[int, str]) -> set[int]:
        """Of these admitted jobs (pk -> uid), those whose batch Job has completed or failed."""
        out = set()
        for pk, uid in holding.items():
            for obj in self.fingerprints.live_by_owner.get(uid, {}).values():
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

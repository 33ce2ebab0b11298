"""The job reconciler's status writer: the pass's writes, buffered while it observes jobs and written together.

Status changes, compare-and-swap status writes, events, audit rows and token revocations are recorded during the
pass and written by `flush()` in a few statements, in one transaction: a pass's end takes a few round trips, not
one per write (apps.core.db.deferred). When that fails, apps.jobs.reconciler.isolation writes each tenant's share
alone.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from apps.core.db.bulk import bulk_set, bulk_set_deferred
from apps.core.db.deferred import atomic_deferred_writes
from apps.core.periodic import nudge
from apps.tenants.services import api_key_revoke_bound

from .. import services
from ..choices import HOLDING_PHASES, TERMINAL_PHASES, JobPhase
from ..models import Job
from ..status import Observed, set_condition
from .admitting import PassAdmission
from .placement import timestamp

# The buffers a write isolates (apps.jobs.reconciler.isolation saves, narrows and restores them).
BUFFERS = ("changes", "jobs", "events", "status", "revoke", "issued", "finalize")


def record_error(job: Job, message: str) -> None:
    """A job's reconcile failed: say so on the job (its message and a `ReconcileError` event), once per message."""
    if job.message != message:
        Job.all_tenants.filter(pk=job.pk).update(message=message[:2000])
        services.job_event(job=job, reason="ReconcileError", message=message, type="Warning")


class StatusWriter:
    """The pass's buffered writes: job pk -> changed fields, events, CAS status writes, revocations, finalizing."""

    def __init__(self, admission: PassAdmission) -> None:
        self.admission = admission
        self.changes: dict[int, dict[str, Any]] = {}
        self.jobs: dict[int, Job] = {}
        self.events: list[tuple[Job, str, str, str]] = []
        self.status: dict[int, tuple[int, dict[str, str]]] = {}
        self.revoke: list[str] = []
        self.finalize: list[int] = []  # terminal jobs whose cluster objects are all gone
        self.issued: dict[str, str] = {}  # bound_to -> key id of the key this pass issued (its earlier ones go)
        self.freed_after_admission = 0  # jobs written whose quota frees after this pass's admission ran

    # -- recording ----------------------------------------------------------------------------------------------

    def update(self, job: Job, *, events: list[tuple[str, str, str]] | None = None, **changes: Any) -> None:
        """Record changed status fields and their events; flush() writes them (never over a terminal phase)."""
        changed = {k: v for k, v in changes.items() if getattr(job, k) != v}
        if not changed:
            return
        self.changes.setdefault(job.pk, {}).update(changed)
        self.jobs[job.pk] = job
        for key, value in changed.items():
            setattr(job, key, value)
        self.events += [(job, reason, message, kind) for reason, message, kind in events or []]

    def waiting_reason(self, pk: int, reason: str, message: str) -> None:
        """A job still queued, for a new reason: only its reason and message change (no event), written without
        reading the job."""
        self.changes.setdefault(pk, {}).update(reason=reason, message=message)

    def finish(
        self, job: Job, phase: str, reason: str, message: str, now: dt.datetime, *, seen: Observed | None = None
    ) -> None:
        """The job ended (succeeded, failed, cancelled, rejected): its end, its last status, its token revoked."""
        changes: dict[str, Any] = {
            "phase": phase,
            "reason": reason,
            "message": message,
            "completion_time": (timestamp(seen.completion_time) if seen else None) or now,
            "gpus_allocated": 0,
            "ready_nodes": 0,
        }
        if seen is not None:
            changes.update(
                attempts=job.requeues_attempts + seen.attempts, restarts=seen.restarts, current_nodes=seen.current_nodes
            )
            if job.start_time is None:
                changes["start_time"] = timestamp(seen.start_time) or now
        changes["conditions"] = set_condition(
            job.conditions, type="Ready", status=False, reason=reason or phase, message=message, now=now
        )
        self.revoke.append(f"job:{job.uid_text}")
        kind = "Warning" if phase == JobPhase.FAILED else "Normal"
        self.update(job, events=[(phase, message or reason or phase, kind)], **changes)

    def write_status(self, owner: Job, *, generation: int, applied: dict[str, str]) -> None:
        """Buffered: flush() writes it, compare-and-swap on `generation`."""
        if owner.observed_generation == generation and owner.status_applied == applied:
            return
        self.status[owner.pk] = (generation, applied)
        owner.observed_generation, owner.status_applied = generation, applied

    def finalized(self, job: Job) -> None:
        """A terminal job whose cluster objects are all gone: no later pass reads it."""
        self.finalize.append(job.pk)
        job.finalized = True

    # -- writing ------------------------------------------------------------------------------------------------

    def buffers(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in BUFFERS}

    def restore(self, saved: dict[str, Any]) -> None:
        for name, value in saved.items():
            setattr(self, name, value)

    def flush(self, *, shared: bool = True) -> set[int]:
        """Write the buffers in one transaction (`shared`: with the queues' status). Returns the jobs written."""
        # Status, its events and their webhook outbox rows: all or none.
        with atomic_deferred_writes():  # (its last writes go with the COMMIT)
            for pk in self.changes.keys() & set(self.finalize):  # ended and collected in this pass: one write
                self.changes[pk]["finalized"] = True
            written = bulk_set(Job, self.changes, exclude={"phase": sorted(TERMINAL_PHASES)})
            for pk in set(self.changes) - written:  # became terminal meanwhile: its events did not happen
                if pk in self.jobs:  # (a waiting job's new reason was written without reading the job)
                    self.jobs[pk].refresh_from_db()
            events = [e for e in self.events if e[0].pk in written]
            if self.status:
                bulk_set_deferred(
                    Job,
                    {pk: {"observed_generation": g, "status_applied": a} for pk, (g, a) in self.status.items()},
                    when={pk: {"generation": g} for pk, (g, _a) in self.status.items()},
                )
            if self.revoke or self.issued:
                # The keys of jobs that ended or were evicted, and those issued before the ones this pass issued:
                # one UPDATE. A job that ended in the pass its key was issued keeps none.
                ended = set(self.revoke)
                keep = [key_id for bound_to, key_id in self.issued.items() if bound_to not in ended]
                api_key_revoke_bound(bound_to=[*ended, *self.issued], keep=keep)
            rest = [pk for pk in self.finalize if pk not in written]  # (finalized with its status otherwise)
            if rest:
                Job.all_tenants.filter(pk__in=rest).update(finalized=True)
            if shared:
                self.admission.queue_status.write()  # computed by the pass's admission
            services.job_events_record(events)
            # Quota freed after this pass's admission ran (a cancelled, preempted or requeued job's pods are gone):
            # another pass at once admits what it now allows, rather than at the next tick.
            before = {row.pk: row.phase for row in self.admission.active_rows}
            freed = sum(
                1
                for pk in written
                if before.get(pk) in HOLDING_PHASES
                and pk not in self.admission.released
                and self.changes[pk].get("phase", before[pk]) not in HOLDING_PHASES
            )
            if freed:
                nudge(services.RECONCILE)
        self.freed_after_admission += freed
        return written

    def clear(self) -> None:
        """The pass's writes are done (or recorded as failed): nothing is buffered any more."""
        self.changes, self.jobs, self.events, self.status, self.revoke = {}, {}, [], {}, []
        self.finalize, self.issued = [], {}

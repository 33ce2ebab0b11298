"""Which jobs a pass of the job reconciler looks at.

Waiting jobs that admission decided nothing new for, and running or finished jobs whose row and objects did not
change since this process last observed them, are left out; a waiting job that is still queued for a new reason
gets its reason and message written without being read.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

from django.conf import settings
from django.db.models.fields.json import KT

from apps.core.db.deferred import deferred_writes

from .. import selectors
from ..choices import HOLDING_PHASES, TERMINAL_PHASES, JobPhase
from ..models import Job
from .admitting import PassAdmission
from .placement import NodePlacement
from .recovery import Recovery
from .seen import Fingerprints
from .tokens import Tokens
from .writer import StatusWriter


class PassSelection:
    """The owners of one pass, read in chunks, and which of the others still exist (their objects are kept)."""

    def __init__(
        self,
        *,
        mode: str,
        now: dt.datetime,
        admission: PassAdmission,
        fingerprints: Fingerprints,
        nodes: NodePlacement,
        recovery: Recovery,
        tokens: Tokens,
        writer: StatusWriter,
    ) -> None:
        self.mode = mode
        self.now = now
        self.admission = admission
        self.fingerprints = fingerprints
        self.nodes = nodes
        self.recovery = recovery
        self.tokens = tokens
        self.writer = writer
        self.candidate_keys: set[str] = set()

    def owners(self) -> Iterator[Job]:
        """The jobs this pass has something to do for: every job that runs or has ended and whose row or objects
        changed since this process last looked, and of the waiting ones only those admission decided something new
        for (or that were cancelled). The others wait in their queues untouched."""
        native = self.mode == "native"
        admission = self.admission
        decided = set()
        for pk, d in admission.decisions.items() if native else ():
            if d.outcome == "wait":
                phase, reason, message = admission.head_status.get(pk) or ("", "", "")
                if phase == JobPhase.QUEUED:
                    # Still queued, for a reason of its own: only its reason and message change (no event, nothing
                    # in the cluster), written by the writer's flush without reading the job.
                    if (reason, message) != (d.reason, d.message):
                        self.writer.waiting_reason(pk, d.reason, d.message)
                    continue
            decided.add(pk)
        if native:  # the admitted and ended jobs the admission read (admission.inputs.active), then the waiting ones
            rows = [
                (r.pk, r.uid, r.phase, r.generation, r.observed_generation, r.cancel_requested_at, *r[-2:])
                for r in admission.active_rows
            ]
        else:
            rows = (
                Job.all_tenants.filter(finalized=False)
                .values_list(
                    "pk", "uid", "phase", "generation", "observed_generation", "cancel_requested_at", "completion_time"
                )
                .annotate(ttl=KT("spec__ttlSecondsAfterFinished"))
            )
        self.candidate_keys = set()
        overdue = self.recovery.past_deadline() if native else set()
        wanted = []
        default_ttl = settings.GRYVIA_JOB_TTL_S
        for pk, uid, phase, generation, observed_generation, cancel_at, completion_time, ttl in rows:
            key = str(uid)
            self.candidate_keys.add(key)
            if native:  # the admission computed them
                seen = admission.job_fingerprints.get(pk)
            else:
                seen = self.fingerprints.fingerprint(key, (phase, generation, observed_generation, cancel_at))
            if (
                not native
                or pk in admission.decisions
                or seen is None
                or self.fingerprints.last(key) != seen
                or (self.nodes.lost_nodes and phase in HOLDING_PHASES)
                or pk in overdue  # past its timeout: failed by the database's clock, whatever the backend says
                or (  # collected after its TTL
                    phase in TERMINAL_PHASES
                    and completion_time is not None
                    and self.now >= completion_time + dt.timedelta(seconds=int(default_ttl if ttl is None else ttl))
                )
            ):
                wanted.append(pk)
        # Cancelled waiting jobs and those admission decided something new for come with the first chunk.
        chunks = [wanted[start : start + 500] for start in range(0, len(wanted), 500)] or [[]]
        waiting = sorted(decided) if native else []
        tenants = selectors.tenants_by_id()
        read: set[int] = set()
        for index, chunk in enumerate(chunks):
            # The admitted jobs' tokens, issued before their rows are read (their ids and names came with the
            # waiting heads): the INSERT goes in the read's round trip and commits with it, before any Secret.
            with deferred_writes():
                early = self.tokens.issue_early(tenants) if index == 0 else set()
                jobs = [
                    job
                    for job in selectors.jobs_to_reconcile(chunk, waiting if index == 0 else [], tenants)
                    if job.pk not in read  # a cancelled waiting job matches every chunk's query
                ]
            read.update(job.pk for job in jobs)
            self.candidate_keys.update(job.uid_text for job in jobs)
            # A token issued for a job the read did not return (deleted meanwhile) is revoked with the pass's others.
            self.writer.revoke += sorted(early - {f"job:{job.uid_text}" for job in jobs})
            self.tokens.issue(jobs)  # (the jobs whose identity the heads did not give)
            yield from jobs

    def owners_alive(self, keys: set[str]) -> set[str]:
        """Jobs left out of owners() keep their objects: those with nothing new this pass, and waiting ones (a PVC
        made before they were queued again)."""
        alive = keys & self.candidate_keys
        rest = keys - alive
        if rest:
            alive |= {
                str(uid)
                for uid in Job.all_tenants.filter(uid__any_of=rest, finalized=False).values_list("uid", flat=True)
            }
        return alive

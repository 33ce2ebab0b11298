"""The job reconciler's pass bookkeeping: which jobs a pass looks at, and its writes, buffered and flushed together.

A mixin of `JobReconciler` (apps.jobs.reconciler), kept apart so each module stays one concept. `owners()` leaves
out waiting jobs admission decided nothing new for, and running or finished jobs whose row and objects did not
change since this process last observed them; status changes, compare-and-swap status writes, events, audit rows
and token revocations are recorded during the pass and written by `end_pass()` in a few statements.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.conf import settings
from django.db import DatabaseError
from django.db.models.fields.json import KT

from apps.core.db.bulk import bulk_set, bulk_set_deferred
from apps.core.db.deferred import atomic_deferred_writes, deferred_writes
from apps.core.db.prepared import Arg
from apps.core.db.prepared_update import PreparedUpdate
from apps.core.periodic import nudge
from apps.core.scopes import JOBS_REPORT
from apps.tenants.services import api_key_revoke_bound_deferred, api_keys_issue_bound, parse_key

from . import manifests, selectors, services
from .choices import HOLDING_PHASES, TERMINAL_PHASES, JobPhase
from .models import Job
from .reconciler_isolation import IsolationMixin

# job uid -> what its last observation saw (its row's state, its objects' resourceVersions): a later pass in this
# process that sees the same leaves the job alone. Only ever a shortcut: a fresh process observes every job.
_SEEN: dict[str, tuple] = {}
_SEEN_MAX = 200_000
_FINALIZE = PreparedUpdate(lambda: Job.all_tenants.filter(pk__any_of=Arg("pks")), finalized=True)


class PassMixin(IsolationMixin):
    backend: Any
    mode: str
    now: Any
    decisions: dict[int, Any]
    head_status: dict[int, tuple[str, str, str]]
    head_identity: dict[int, tuple[int, str, str]]
    lost_nodes: dict[str, Any]
    live_by_owner: dict[str | None, dict[str, dict[str, Any]]]
    observed_by_owner: dict[str | None, dict[str, list[dict[str, Any]]]]
    _changes: dict[int, dict[str, Any]]
    _jobs: dict[int, Job]
    _events: list[tuple[Job, str, str, str]]
    _status: dict[int, tuple[int, dict[str, str]]]
    _revoke: list[str]
    _finalize: list[int]
    _seen_now: dict[str, tuple]
    _tokens: dict[str, str]
    _write_queue_status: Any
    _issued: dict[str, str]  # bound_to -> key id of the key this pass issued (its earlier keys go in end_pass)
    active_rows: list[Any]
    fingerprints: dict[int, tuple | None]
    released: set[int]
    freed_after_admission: int = 0

    def owners(self):
        """The jobs this pass has something to do for: every job that runs or has ended and whose row or objects
        changed since this process last looked, and of the waiting ones only those admission decided something new
        for (or that were cancelled). The others wait in their queues untouched."""
        native = self.mode == "native"
        decided = set()
        for pk, d in self.decisions.items() if native else ():
            if d.outcome == "wait":
                phase, reason, message = self.head_status.get(pk) or ("", "", "")
                if phase == JobPhase.QUEUED:
                    # Still queued, for a reason of its own: only its reason and message change (no event, nothing
                    # in the cluster), written by end_pass() without reading the job.
                    if (reason, message) != (d.reason, d.message):
                        self._changes.setdefault(pk, {}).update(reason=d.reason, message=d.message)
                    continue
            decided.add(pk)
        if native:  # the admitted and ended jobs begin_pass read (admission_inputs.active), then the waiting ones
            rows = [
                (r.pk, r.uid, r.phase, r.generation, r.observed_generation, r.cancel_requested_at, *r[-2:])
                for r in self.active_rows
            ]
        else:
            rows = (
                Job.all_tenants.filter(finalized=False)
                .values_list(
                    "pk", "uid", "phase", "generation", "observed_generation", "cancel_requested_at", "completion_time"
                )
                .annotate(ttl=KT("spec__ttlSecondsAfterFinished"))
            )
        self.candidate_keys: set[str] = set()
        overdue = self._past_deadline() if native else set()
        wanted = []
        default_ttl = settings.GRYVIA_JOB_TTL_S
        for pk, uid, phase, generation, observed_generation, cancel_at, completion_time, ttl in rows:
            key = str(uid)
            self.candidate_keys.add(key)
            if native:  # begin_pass computed them (apps.jobs.reconciler)
                seen = self.fingerprints.get(pk)
            else:
                seen = self._fingerprint(key, (phase, generation, observed_generation, cancel_at))
            if (
                not native
                or pk in self.decisions
                or seen is None
                or _SEEN.get(key) != seen
                or (self.lost_nodes and phase in HOLDING_PHASES)
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
                early = self._issue_tokens_early(tenants) if index == 0 else set()
                jobs = [
                    job
                    for job in selectors.jobs_to_reconcile(chunk, waiting if index == 0 else [], tenants)
                    if job.pk not in read  # a cancelled waiting job matches every chunk's query
                ]
            read.update(job.pk for job in jobs)
            self.candidate_keys.update(job.uid_text for job in jobs)
            # A token issued for a job the read did not return (deleted meanwhile) is revoked with the pass's others.
            self._revoke += sorted(early - {f"job:{job.uid_text}" for job in jobs})
            self._issue_tokens(jobs)  # (the jobs whose identity the heads did not give)
            yield from jobs

    def _issue_tokens(self, jobs: list[Job]) -> None:
        """The tokens of the workloads about to be created that have none yet, issued together (prepare() hands
        them out)."""
        self._issue(
            (job.tenant_id, job.tenant.namespace, job.uid_text, job.name)
            for job in jobs
            if getattr(self.decisions.get(job.pk), "outcome", None) == "admit"
            and f"job:{job.uid_text}" not in self._issued
        )

    def _issue_tokens_early(self, tenants: dict[int, Any]) -> set[str]:
        """`_issue_tokens` for the admitted jobs before their rows are read, from what the waiting heads gave (a
        tenant the pass has not read yet waits for the read). Returns the bound_to of the tokens issued."""
        wanted = []
        for pk, decision in self.decisions.items():
            identity = self.head_identity.get(pk) if decision.outcome == "admit" else None
            if identity is not None and identity[0] in tenants:
                tenant_id, uid, name = identity
                wanted.append((tenant_id, tenants[tenant_id].namespace, uid, name))
        return self._issue(wanted)

    def _issue(self, jobs: Any) -> set[str]:
        """Issue the tokens of (tenant id, namespace, uid, name) jobs whose token Secret does not exist yet."""
        starting = [
            (tenant_id, uid, name)
            for tenant_id, namespace, uid, name in jobs
            if f"Secret/{namespace}/{manifests.names(name)['secret']}" not in self.live_by_owner.get(uid, {})
        ]
        issued = api_keys_issue_bound(
            [(tenant_id, f"job:{uid}", [JOBS_REPORT], f"job {name}") for tenant_id, uid, name in starting],
            revoke_earlier=False,  # end_pass() revokes the earlier keys, with the pass's other revocations
        )
        self._tokens.update(issued)
        self._issued.update((bound_to, parse_key(raw)[0]) for bound_to, raw in issued.items())
        return set(issued)

    def _fingerprints(self) -> dict[int, tuple | None]:
        """Each admitted or ended job's fingerprint now (job pk -> None when its objects' versions are unknown)."""
        fingerprint = self._fingerprint
        return {
            r.pk: fingerprint(r.uid, (r.phase, r.generation, r.observed_generation, r.cancel_requested_at))
            for r in self.active_rows
        }

    def _as_last_observed(self, uid: str, fingerprint: tuple | None) -> bool:
        """Whether the job's row and objects are as this process's last observation of it left them."""
        return fingerprint is not None and _SEEN.get(uid) == fingerprint

    def _fingerprint(self, key: str, row_state: tuple, live: dict[str, dict[str, Any]] | None = None) -> tuple | None:
        """What observing a job depends on: its row's state and its objects' versions (None: unknown versions)."""
        objects = self.live_by_owner.get(key, {}) if live is None else live
        versions = [(obj.get("metadata") or {}).get("resourceVersion") for obj in objects.values()]
        observed = self.observed_by_owner.get(key)
        if observed:
            for items in observed.values():
                versions += [(o.get("metadata") or {}).get("resourceVersion") for o in items]
        if None in versions:
            return None
        versions.sort()
        return (*row_state, tuple(versions))

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

    def write_status(self, owner: Job, *, generation: int, applied: dict[str, str]) -> None:
        """Buffered: end_pass() writes it, compare-and-swap on `generation`."""
        if owner.observed_generation == generation and owner.status_applied == applied:
            return
        self._status[owner.pk] = (generation, applied)
        owner.observed_generation, owner.status_applied = generation, applied

    def _update(self, job: Job, *, events: list[tuple[str, str, str]] | None = None, **changes: Any) -> None:
        """Record changed status fields and their events; end_pass() writes them (never over a terminal phase)."""
        changed = {k: v for k, v in changes.items() if getattr(job, k) != v}
        if not changed:
            return
        self._changes.setdefault(job.pk, {}).update(changed)
        self._jobs[job.pk] = job
        for key, value in changed.items():
            setattr(job, key, value)
        self._events += [(job, reason, message, kind) for reason, message, kind in events or []]

    def _observe(self, owner, live, extra, stats) -> None:
        phase = owner.phase
        super()._observe(owner, live, extra, stats)
        if owner.phase != phase and (owner.is_terminal or owner.phase == JobPhase.PREEMPTED):
            # What it wants moved with its phase (its token goes; a preempted workload goes; with a TTL of 0 all
            # of it goes): reconcile it again now rather than next pass.
            again = self._reconcile_one(owner, live, stats)
            if again is None:
                return
            live = again
            super()._observe(owner, live, extra, stats)
        key = owner.uid_text
        if owner.finalized:  # no later pass reads it (owners() lists jobs not finalized): nothing to remember
            _SEEN.pop(key, None)
            self._seen_now.pop(key, None)
            return
        seen = self._fingerprint(  # as the next pass will see it if nothing changes: the objects as they are now
            key, (owner.phase, owner.generation, owner.observed_generation, owner.cancel_requested_at), live
        )
        if seen is not None:
            self._seen_now[key] = seen

    def end_pass(self) -> None:
        """Write what the pass buffered: status in one statement, compare-and-swaps in another, events in bulk. The
        writes whose results nothing reads go to the server together, with the statement after them
        (apps.core.db.deferred): a pass's end takes a few round trips, not one per write. When that fails, each
        tenant's share and then each job's is written alone, and a job whose write still fails is recorded and
        retried later (apps.jobs.reconciler_isolation): one tenant's fault does not stop the others."""
        self.freed_after_admission = 0
        self.hold_back()
        try:
            self._write_buffered()
        except DatabaseError as exc:
            self.write_isolated(exc)
        else:
            self.written_all()
        if len(_SEEN) > _SEEN_MAX:
            _SEEN.clear()
        _SEEN.update(self._seen_now)
        self._changes, self._jobs, self._events, self._status, self._revoke, self._seen_now = {}, {}, [], {}, [], {}
        self._finalize, self._issued = [], {}

    def _write_buffered(self, *, shared: bool = True) -> set[int]:
        """Write the buffers in one transaction (`shared`: with the queues' status). Returns the jobs written."""
        # Status, its events and their webhook outbox rows: all or none.
        with atomic_deferred_writes():  # (its last writes go with the COMMIT)
            for pk in self._changes.keys() & set(self._finalize):  # ended and collected in this pass: one write
                self._changes[pk]["finalized"] = True
            written = bulk_set(Job, self._changes, exclude={"phase": sorted(TERMINAL_PHASES)})
            for pk in set(self._changes) - written:  # became terminal meanwhile: its events did not happen
                if pk in self._jobs:  # (a waiting job's new reason was written without reading the job)
                    self._jobs[pk].refresh_from_db()
            events = [e for e in self._events if e[0].pk in written]
            if self._status:
                bulk_set_deferred(
                    Job,
                    {pk: {"observed_generation": g, "status_applied": a} for pk, (g, a) in self._status.items()},
                    when={pk: {"generation": g} for pk, (g, _a) in self._status.items()},
                )
            if self._revoke or self._issued:
                # The keys of jobs that ended or were evicted, and those issued before the ones this pass issued:
                # one UPDATE. A job that ended in the pass its key was issued keeps none.
                ended = set(self._revoke)
                keep = [key_id for bound_to, key_id in self._issued.items() if bound_to not in ended]
                api_key_revoke_bound_deferred(bound_to=[*ended, *self._issued], keep=keep)
            rest = [pk for pk in self._finalize if pk not in written]  # (finalized with its status otherwise)
            if rest:
                _FINALIZE.run_deferred(pks=rest)
            if shared:
                self._write_queue_status()  # computed by begin_pass's admission (apps.jobs.reconciler_placement)
            services.job_events_record(events)
            # Quota freed after this pass's admission ran (a cancelled, preempted or requeued job's pods are gone):
            # another pass at once admits what it now allows, rather than at the next tick.
            before = {row.pk: row.phase for row in self.active_rows}
            freed = sum(
                1
                for pk in written
                if before.get(pk) in HOLDING_PHASES
                and pk not in self.released
                and self._changes[pk].get("phase", before[pk]) not in HOLDING_PHASES
            )
            if freed:
                nudge(services.RECONCILE)
        self.freed_after_admission += freed
        return written

"""One tenant's fault stays that tenant's: what the job reconciler does when writing a pass's results fails.

A pass buffers every job's status, events (and with them the job's usage records and ledger entries,
apps.billing.runs) and writes them in one transaction at its end (apps.jobs.reconciler.writer). One bad row, say a
ledger entry inserted behind Gryvia's back so that the tenant's next entry hits its (tenant, sequence) constraint,
would fail that transaction in every pass, for every tenant. So when it fails, the pass writes again, each
tenant's share in a transaction of its own, then, for a tenant whose share fails, each of its jobs' own. What
still fails is recorded on its job (its message, and a `ReconcileError` event) and is left out of the passes'
writes until its retry is due, with a backoff that doubles up to five minutes; everyone else's results are
written. When nothing can be written (two tenants or more, all failing) the fault is the database's, not a
tenant's: the first error is raised, as before. None of this costs anything while writes succeed.

The retry times live in this process (a restarted process tries at once, then backs off again): the failure
itself is in the database, on the job.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from typing import Any

from django.db import DatabaseError, transaction

from apps.core.metrics import RECONCILE_ERRORS

from ..models import Job
from .admitting import PassAdmission
from .seen import Fingerprints
from .writer import StatusWriter, record_error

logger = logging.getLogger(__name__)
BACKOFF_S = (15, 30, 60, 120, 300)
# job pk -> (failures in a row, time.monotonic() at which its writes are tried again)
_RETRY: dict[int, tuple[int, float]] = {}


def retry_due_now() -> None:
    """Make every job that waits for its retry due at the next pass (tests, and an operator's shell after a fix)."""
    for pk, (failures, _at) in list(_RETRY.items()):
        _RETRY[pk] = (failures, 0.0)


class WriteIsolation:
    """Around the status writer's flush: `hold_back` before writing, `write_isolated` when the write fails,
    `written_all` when it succeeded."""

    def __init__(self, writer: StatusWriter, fingerprints: Fingerprints, admission: PassAdmission) -> None:
        self.writer = writer
        self.fingerprints = fingerprints
        self.admission = admission

    def hold_back(self) -> None:
        """Leave out of this pass's writes the jobs whose last write failed and whose retry is not due yet (they are
        observed again by the next pass). No work while no job waits for a retry."""
        if not _RETRY:
            return
        now = time.monotonic()
        waiting = {pk for pk, (_failures, at) in _RETRY.items() if at > now}
        if waiting:
            uids = self._uids()
            self._select({pk for pk in self._buffered(uids) if pk not in waiting}, uids)
            for pk in waiting:
                self.fingerprints.forget(uids.get(pk, ""))

    def written_all(self) -> None:
        """The whole pass was written: the jobs that waited for a retry and were in it are healthy again."""
        if _RETRY:
            for pk in self._buffered(self._uids()):
                _RETRY.pop(pk, None)

    def write_isolated(self, error: DatabaseError) -> None:
        """The pass's write failed (and was rolled back): write each tenant's share alone, then each job's of a
        tenant whose share fails, and record on each job what still fails."""
        uids = self._uids()
        saved = self.writer.buffers()
        tenants = self._tenants(self._buffered(uids))
        by_tenant: dict[int | None, set[int]] = defaultdict(set)
        for pk, tenant_id in tenants.items():
            by_tenant[tenant_id].add(pk)
        failed: dict[int, DatabaseError] = {}
        wrote = False
        for tenant_id, pks in sorted(by_tenant.items(), key=lambda item: item[0] or 0):
            first = self._attempt(saved, pks, uids)
            if first is None:
                wrote = True
                continue
            logger.warning("job pass: writing tenant %s's results failed, each job alone: %s", tenant_id, first)
            for pk in sorted(pks):
                alone = self._attempt(saved, {pk}, uids)
                if alone is None:
                    wrote = True
                else:
                    failed[pk] = alone
        self.writer.restore(saved)
        try:  # what belongs to no job: the queues' status
            with transaction.atomic():
                self.admission.queue_status.write()
        except DatabaseError as exc:
            logger.warning("job pass: writing the queues' status failed: %s", exc)
        if failed and not wrote and len(by_tenant) > 1:
            raise error  # every tenant fails: the database's fault, not one tenant's
        for pk, exc in failed.items():
            self._record(pk, exc, saved["jobs"], uids)

    # -- helpers ------------------------------------------------------------------------------------------------

    def _attempt(self, saved: dict[str, Any], pks: set[int], uids: dict[int, str]) -> DatabaseError | None:
        self.writer.restore(saved)
        self._select(pks, uids)
        try:
            self.writer.flush(shared=False)
        except DatabaseError as exc:
            return exc
        for pk in pks:
            _RETRY.pop(pk, None)
        return None

    def _uids(self) -> dict[int, str]:
        """job pk -> uid, for the jobs this pass knows (their keys' bound_to name them by uid)."""
        uids = {row.pk: row.uid for row in self.admission.active_rows}
        uids.update((pk, identity[1]) for pk, identity in self.admission.head_identity.items())
        uids.update((pk, job.uid_text) for pk, job in self.writer.jobs.items())
        uids.update((job.pk, job.uid_text) for job, *_ in self.writer.events)
        return uids

    def _buffered(self, uids: dict[int, str]) -> set[int]:
        """The jobs with something buffered (keys of jobs the pass does not know are written with the first)."""
        w = self.writer
        pks = set(w.changes) | set(w.status) | set(w.finalize) | {job.pk for job, *_ in w.events}
        bound = {f"job:{uid}": pk for pk, uid in uids.items()}
        return pks | {bound[b] for b in [*w.revoke, *w.issued] if b in bound}

    def _select(self, pks: set[int], uids: dict[int, str]) -> None:
        """Keep in the buffers only what belongs to these jobs."""
        w = self.writer
        bound = {f"job:{uids[pk]}" for pk in pks if pk in uids}
        known = {f"job:{uid}" for uid in uids.values()}
        w.changes = {pk: v for pk, v in w.changes.items() if pk in pks}
        w.jobs = {pk: v for pk, v in w.jobs.items() if pk in pks}
        w.events = [e for e in w.events if e[0].pk in pks]
        w.status = {pk: v for pk, v in w.status.items() if pk in pks}
        w.finalize = [pk for pk in w.finalize if pk in pks]
        # A key bound to no job the pass knows is revoked with every share (revoking twice changes nothing).
        w.revoke = [b for b in w.revoke if b in bound or b not in known]
        w.issued = {b: k for b, k in w.issued.items() if b in bound}

    def _tenants(self, pks: set[int]) -> dict[int, int | None]:
        """job pk -> its tenant id (read for the jobs the pass has no row of: only on this failure path)."""
        out: dict[int, int | None] = {row.pk: row.tenant_id for row in self.admission.active_rows if row.pk in pks}
        out.update((pk, identity[0]) for pk, identity in self.admission.head_identity.items() if pk in pks)
        out.update((pk, job.tenant_id) for pk, job in self.writer.jobs.items() if pk in pks)
        missing = pks - out.keys()
        if missing:
            out.update(Job.all_tenants.filter(pk__in=missing).values_list("pk", "tenant_id"))
        return {pk: out.get(pk) for pk in pks}

    def _record(self, pk: int, exc: DatabaseError, jobs: dict[int, Job], uids: dict[int, str]) -> None:
        """The job's write failed alone: back off, and say so on the job (its message and a ReconcileError event)."""
        failures = _RETRY.get(pk, (0, 0.0))[0] + 1
        delay = BACKOFF_S[min(failures, len(BACKOFF_S)) - 1]
        _RETRY[pk] = (failures, time.monotonic() + delay)
        self.fingerprints.forget(uids.get(pk, ""))  # observed again when it is retried
        RECONCILE_ERRORS.labels(kind="job").inc()
        reason = " ".join(str(exc).split())[:500]
        message = (
            f"what the reconciler observed could not be recorded ({type(exc).__name__}: {reason}); "
            f"retrying in {delay} s (failure {failures} in a row)"
        )
        logger.warning("job %s: %s", pk, message)
        try:
            job = jobs.get(pk) or Job.all_tenants.select_related("tenant").get(pk=pk)
            job.refresh_from_db(fields=["message"])
            with transaction.atomic():
                record_error(job, message)
        except (DatabaseError, Job.DoesNotExist) as again:
            logger.warning("job %s: recording its failure failed too: %s", pk, again)

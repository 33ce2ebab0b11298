"""The job reconciler: each job's workload, Service, token Secret and PVC, and its status from what runs.

Per pass (see apps.core.reconcile): one LIST per managed kind, one of Pods and one of Nodes; GPU capacity is
checked before a workload is created; cancel deletes the workload (keeping the PVC); terminal jobs keep only
their PVC until `ttlSecondsAfterFinished`; pods on a lost node are force-deleted so the Job replaces them.

`JobReconciler` is the framework's hooks (apps.core.reconcile.OwnerReconciler); each pass it builds its
collaborators (`JobPass`) and hands each hook to the one that owns it, in the pass's order: the nodes, admission,
the owners to look at, what each wants, what each runs as, then the writes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone

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
    ClusterBackend,
    get_backend,
)
from apps.core.db import epochs
from apps.core.locks import LockedRead
from apps.core.reconcile import Desired, OwnerReconciler, ReconcileStats

from .. import choices as C
from .. import manifests
from ..choices import JobPhase
from ..models import Job
from .admitting import PassAdmission
from .desired import DesiredState
from .isolation import WriteIsolation
from .observer import StatusObserver
from .placement import NodePlacement, labels_of
from .recovery import Recovery
from .seen import Fingerprints
from .selection import PassSelection
from .tokens import Tokens
from .writer import StatusWriter, record_error

logger = logging.getLogger(__name__)


@dataclass
class JobPass:
    """One pass's collaborators, each with its own state, built by `JobPass.begin` in the order they run."""

    nodes: NodePlacement
    fingerprints: Fingerprints
    admission: PassAdmission
    writer: StatusWriter
    recovery: Recovery
    tokens: Tokens
    desired: DesiredState
    observer: StatusObserver
    selection: PassSelection
    isolation: WriteIsolation

    @classmethod
    def begin(
        cls,
        backend: ClusterBackend,
        *,
        live_by_owner: dict[str | None, dict[str, dict[str, Any]]],
        observed_by_owner: dict[str | None, dict[str, list[dict[str, Any]]]],
        read: bool = True,
    ) -> JobPass:
        """The pass's collaborators; `read`: read the nodes and run admission (what begin_pass does)."""
        now = timezone.now()
        mode = settings.GRYVIA_ADMISSION if read else "native"
        nodes = NodePlacement()
        if read:
            nodes.read(backend.list(NODE), observed_by_owner, now)
        fingerprints = Fingerprints(live_by_owner, observed_by_owner)
        admission = PassAdmission(mode=mode, fingerprints=fingerprints)
        if read:
            admission.run(backend, gpu_total=nodes.gpu_total, now=now, max_heads=settings.GRYVIA_ADMISSION_HEADS)
        writer = StatusWriter(admission)
        recovery = Recovery(
            backend=backend, now=now, lost_nodes=nodes.lost_nodes, active_rows=admission.active_rows, writer=writer
        )
        tokens = Tokens(admission=admission, writer=writer, live_by_owner=live_by_owner)
        return cls(
            nodes=nodes,
            fingerprints=fingerprints,
            admission=admission,
            writer=writer,
            recovery=recovery,
            tokens=tokens,
            desired=DesiredState(
                mode=mode, now=now, admission=admission, recovery=recovery, nodes=nodes, tokens=tokens
            ),
            observer=StatusObserver(mode=mode, admission=admission, nodes=nodes, recovery=recovery, writer=writer),
            selection=PassSelection(
                mode=mode,
                now=now,
                admission=admission,
                fingerprints=fingerprints,
                nodes=nodes,
                recovery=recovery,
                tokens=tokens,
                writer=writer,
            ),
            isolation=WriteIsolation(writer, fingerprints, admission),
        )

    def write(self) -> int:
        """Write what the pass buffered: status in one statement, compare-and-swaps in another, events in bulk.
        When that fails, each tenant's share and then each job's is written alone, and a job whose write still
        fails is recorded and retried later (apps.jobs.reconciler.isolation): one tenant's fault does not stop the
        others. Returns how many jobs freed quota after this pass's admission ran."""
        self.isolation.hold_back()
        try:
            self.writer.flush()
        except DatabaseError as exc:
            self.isolation.write_isolated(exc)
        else:
            self.isolation.written_all()
        self.fingerprints.commit()
        self.writer.clear()
        return self.writer.freed_after_admission


class JobReconciler(OwnerReconciler[Job]):
    kind = "job"
    managed_kinds = (PVC, SECRET, JOB, STATEFUL_SET, SERVICE)
    observed_kinds = (POD,)
    label_selector = f"{MANAGED_BY}={MANAGER},{manifests.COMPONENT}=job"
    delete_order = ("Service", "Job", "StatefulSet", "Secret", "PersistentVolumeClaim")
    owner_label = C.JOB_UID_LABEL

    def __init__(self, backend: ClusterBackend, **kw: Any) -> None:
        super().__init__(backend, **kw)
        self.freed_after_admission = 0  # (read by benchmarks/admission.py)
        self.current = JobPass.begin(backend, live_by_owner={}, observed_by_owner={}, read=False)

    # -- the pass -----------------------------------------------------------------------------------------------

    def run_pass(self) -> ReconcileStats:
        # The small tables a pass reads (queues, tenants, webhook endpoints, SKUs) are read again only when they
        # changed since this process last read them: one read of their epochs a pass (apps.core.db.epochs).
        with epochs.snapshot():
            return super().run_pass()

    def lock_reads(self) -> list[LockedRead]:
        return epochs.snapshot_reads()  # the epochs, read with the lock attempt

    def begin_pass(self, observed: dict[str | None, dict[str, list[dict[str, Any]]]]) -> None:
        self.current = JobPass.begin(self.backend, live_by_owner=self.live_by_owner, observed_by_owner=observed)

    def owners(self) -> Iterator[Job]:
        return self.current.selection.owners()

    def owners_alive(self, keys: set[str]) -> set[str]:
        return self.current.selection.owners_alive(keys)

    def end_pass(self) -> None:
        self.freed_after_admission = self.current.write()

    # -- each owner ---------------------------------------------------------------------------------------------

    def owner_key(self, owner: Job) -> str:
        return owner.uid_text

    def owner_key_of(self, obj: dict[str, Any]) -> str | None:
        return labels_of(obj).get(C.JOB_UID_LABEL)

    def generation(self, owner: Job) -> tuple[int, int]:
        return owner.generation, owner.observed_generation

    def applied(self, owner: Job) -> dict[str, str]:
        return owner.status_applied or {}

    def needs_work(self, owner: Job, live: dict[str, dict[str, Any]]) -> bool:
        return True  # status follows the workload every pass; applies still happen only when hashes differ

    def desired(self, owner: Job, live: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        return self.current.desired.desired(owner, live)

    def desired_hashed(self, owner: Job, live: dict[str, dict[str, Any]]) -> list[Desired]:
        return self.current.desired.desired_hashed(owner, live, build=super().desired_hashed)

    def prepare(self, owner: Job, manifest: dict[str, Any], results: dict[str, dict[str, Any]]) -> dict[str, Any]:
        return self.current.desired.prepare(owner, manifest, results)

    def observe(self, owner: Job, live: dict[str, dict[str, Any]], observed: dict[str, list[dict[str, Any]]]) -> None:
        self.current.observer.observe(owner, live, observed)

    def write_status(self, owner: Job, *, generation: int, applied: dict[str, str]) -> None:
        self.current.writer.write_status(owner, generation=generation, applied=applied)

    def record_error(self, owner: Job, message: str) -> None:
        record_error(owner, message)

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
        self.current.fingerprints.remember(owner, live)


def reconcile_jobs(backend: ClusterBackend | None = None) -> ReconcileStats:
    """One bounded pass (the periodic entry point for the ticker and Celery beat)."""
    reconciler = JobReconciler(
        backend or get_backend(),
        max_per_pass=settings.GRYVIA_RECONCILE_MAX_PER_PASS,
        budget_s=settings.GRYVIA_RECONCILE_BUDGET_S,
    )
    return reconciler.run_pass()

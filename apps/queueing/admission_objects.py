"""In the `kueue` and `kai` admission modes, Gryvia's queues become that scheduler's objects (ResourceFlavors,
Cohorts, ClusterQueues, LocalQueues, Topology, WorkloadPriorityClasses and, with MultiKueue, MultiKueueClusters, a
MultiKueueConfig and an AdmissionCheck; or KAI Queues), kept in step by this reconciler: one owner (the cluster),
applied by spec hash, objects Gryvia no longer wants collected by label.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from apps.cluster.services import (
    ADMISSION_CHECK,
    CLUSTER_QUEUE,
    KAI_QUEUE,
    KUEUE_COHORT,
    KUEUE_TOPOLOGY,
    LOCAL_QUEUE,
    MANAGED_BY,
    MANAGER,
    MULTIKUEUE_CLUSTER,
    MULTIKUEUE_CONFIG,
    RESOURCE_FLAVOR,
    WORKLOAD_PRIORITY_CLASS,
    ClusterBackend,
    get_backend,
)
from apps.core.reconcile import OwnerReconciler, ReconcileStats, live_hash, with_spec_hash
from apps.tenants.models import Tenant

from . import kai, kueue, selectors
from .models import Cohort, GpuNode

OWNER = "admission"


def desired_objects(mode: str) -> list[dict[str, Any]]:
    tenants = list(Tenant.objects.filter(archived_at__isnull=True).order_by("slug"))
    queues = list(selectors.all_queues())
    if mode == "kai":
        return kai.queue_objects(tenants=tenants, queues=queues)
    gpu_types = sorted({t for t in GpuNode.objects.values_list("gpu_type", flat=True) if t})
    return kueue.cluster_objects(
        queues=queues,
        cohorts=Cohort.objects.order_by("name"),
        tenants_by_id={t.pk: t for t in tenants},
        flavors=gpu_types,
        priority_classes=selectors.all_priority_classes(),
        multikueue_clusters=settings.GRYVIA_KUEUE_MULTIKUEUE_CLUSTERS,
        kueue_namespace=settings.GRYVIA_KUEUE_NAMESPACE,
    )


class AdmissionObjectsReconciler(OwnerReconciler[str]):
    kind = "admission-objects"
    label_selector = f"{MANAGED_BY}={MANAGER}"
    delete_order = (
        "LocalQueue",
        "ClusterQueue",
        "AdmissionCheck",
        "MultiKueueConfig",
        "MultiKueueCluster",
        "Cohort",
        "WorkloadPriorityClass",
        "Topology",
        "ResourceFlavor",
    )

    def __init__(self, backend: ClusterBackend, *, mode: str, **kw: Any) -> None:
        super().__init__(backend, **kw)
        self.mode = mode
        # The MultiKueue kinds are listed even with MultiKueue off, so that turning it off collects its objects;
        # Kueue installs their CRDs whatever its feature gates say.
        self.managed_kinds = (
            (KAI_QUEUE,)
            if mode == "kai"
            else (
                RESOURCE_FLAVOR,
                KUEUE_TOPOLOGY,
                KUEUE_COHORT,
                MULTIKUEUE_CLUSTER,
                MULTIKUEUE_CONFIG,
                ADMISSION_CHECK,
                CLUSTER_QUEUE,
                LOCAL_QUEUE,
                WORKLOAD_PRIORITY_CLASS,
            )
        )
        self._desired: list[dict[str, Any]] | None = None

    def owners(self):
        return [OWNER]

    def owner_key(self, owner: str) -> str:
        return owner

    def owner_key_of(self, obj: dict[str, Any]) -> str | None:
        return OWNER  # every object of these kinds labelled as ours belongs to the one owner

    def desired(self, owner: str, live: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        if self._desired is None:
            self._desired = desired_objects(self.mode)
        return self._desired

    def needs_work(self, owner: str, live: dict[str, dict[str, Any]]) -> bool:
        wanted = {}
        for manifest in self.desired(owner, live):
            hashed, digest = with_spec_hash(manifest)
            meta = hashed["metadata"]
            wanted[f"{hashed['kind']}/{meta.get('namespace') or ''}/{meta['name']}"] = digest
        return set(wanted) != set(live) or any(live_hash(live[k]) != d for k, d in wanted.items())

    def generation(self, owner: str) -> tuple[int, int]:
        return 0, 0

    def applied(self, owner: str) -> dict[str, str]:
        return {}

    def write_status(self, owner: str, *, generation: int, applied: dict[str, str]) -> None:
        """Nothing to record: the live objects carry their spec hash."""

    def record_error(self, owner: str, message: str) -> None:
        """Logged and counted by the framework; retried next pass."""


def reconcile_admission_objects(backend: ClusterBackend | None = None, *, mode: str | None = None) -> ReconcileStats:
    mode = mode or settings.GRYVIA_ADMISSION
    if mode == "native":
        return ReconcileStats(skipped=True)
    return AdmissionObjectsReconciler(backend or get_backend(), mode=mode).run_pass()

"""Priority classes become Kubernetes PriorityClasses (`gryvia-<name>`), which job pods name."""

from __future__ import annotations

from typing import Any

from apps.cluster.services import MANAGED_BY, MANAGER, PRIORITY_CLASS, ClusterBackend, get_backend
from apps.core.reconcile import OwnerReconciler, ReconcileStats, live_hash, with_spec_hash

from .models import PriorityClass

COMPONENT = "gryvia.io/component"
NAME_LABEL = "gryvia.io/priority-class"


def kubernetes_name(name: str) -> str:
    return f"gryvia-{name}"


def priority_class_manifest(pc: PriorityClass) -> dict[str, Any]:
    """Pure. Never globalDefault: Gryvia's default applies to its own jobs, not to every pod of the cluster."""
    manifest: dict[str, Any] = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {
            "name": kubernetes_name(pc.name),
            "labels": {MANAGED_BY: MANAGER, COMPONENT: "priority-class", NAME_LABEL: pc.name},
        },
        "value": pc.value,
        "preemptionPolicy": pc.preemption_policy,
        "globalDefault": False,
    }
    if pc.description:
        manifest["description"] = pc.description[:1000]
    return manifest


class PriorityClassReconciler(OwnerReconciler[PriorityClass]):
    """Few objects: every pass compares each desired manifest's hash with the live one (no status to keep)."""

    kind = "priority-class"
    managed_kinds = (PRIORITY_CLASS,)
    label_selector = f"{MANAGED_BY}={MANAGER},{COMPONENT}=priority-class"

    def owners(self):
        return PriorityClass.objects.order_by("pk")

    def owner_key(self, owner: PriorityClass) -> str:
        return owner.name

    def owner_key_of(self, obj: dict[str, Any]) -> str | None:
        return ((obj.get("metadata") or {}).get("labels") or {}).get(NAME_LABEL)

    def desired(self, owner: PriorityClass, live: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        return [priority_class_manifest(owner)]

    def needs_work(self, owner: PriorityClass, live: dict[str, dict[str, Any]]) -> bool:
        manifest, digest = with_spec_hash(priority_class_manifest(owner))
        return len(live) != 1 or any(live_hash(obj) != digest for obj in live.values())

    def generation(self, owner: PriorityClass) -> tuple[int, int]:
        return 0, 0

    def applied(self, owner: PriorityClass) -> dict[str, str]:
        return {}

    def write_status(self, owner: PriorityClass, *, generation: int, applied: dict[str, str]) -> None:
        """Nothing to record: the live objects carry their spec hash."""

    def record_error(self, owner: PriorityClass, message: str) -> None:
        """Logged and counted by the framework; retried next pass."""


def reconcile_priority_classes(backend: ClusterBackend | None = None) -> ReconcileStats:
    return PriorityClassReconciler(backend or get_backend()).run_pass()

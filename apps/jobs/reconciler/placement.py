"""The job reconciler's node-facing parts: GPU inventory, reservation claims, node choice and queue status.

A mixin of `JobReconciler` (apps.jobs.reconciler), kept apart so each module stays one concept.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from apps.core.db.epochs import EpochCached
from apps.core.db.prepared import PreparedRead
from apps.queueing.inventory import node_views, sync_gpu_nodes
from apps.queueing.placement import place, reservation_claims
from apps.queueing.services import queue_status_sync
from apps.tenants.models import Tenant

from . import admission_inputs, manifests
from .models import Job

_SLUGS = PreparedRead(lambda: Tenant.objects.values_list("slug", "pk"))
_SLUG_IDS = EpochCached(("tenants_tenant",), lambda: dict(_SLUGS.rows()))  # slug -> tenant id


class PlacementMixin:
    backend: Any
    lost_nodes: dict[str, Any]
    decisions: dict[int, Any]
    node_views: list[Any]
    typed_nodes: bool
    claims: dict[str, int | None]
    reserved_tenants: set[int]
    placements: dict[int, dict[str, Any]]
    unplaced: dict[int, str]
    _queue_status: tuple[dict, dict] | None = None  # (admitted, pending) for queue_status_sync, until end_pass

    def _inventory(
        self, nodes: list[dict[str, Any]], observed: dict[str | None, dict[str, list[dict[str, Any]]]]
    ) -> None:
        """GpuNode rows from the Nodes, and what placement needs: free GPUs per node and reservation claims."""
        allocated: dict[str, int] = {}
        for by_kind in observed.values():
            for pod in by_kind.get("Pod", []):
                node = (pod.get("spec") or {}).get("nodeName")
                if not node or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                    continue
                for container in (pod.get("spec") or {}).get("containers") or []:
                    limits = (container.get("resources") or {}).get("limits") or {}
                    allocated[node] = allocated.get(node, 0) + int(limits.get(manifests.GPU_RESOURCE) or 0)
        sync_gpu_nodes(nodes, allocated=allocated)
        self.node_views = node_views(nodes, allocated=allocated)
        self.typed_nodes = any(view.gpu_type for view in self.node_views)
        slugs = _SLUG_IDS.get()
        self.claims = reservation_claims(nodes, slugs)
        self.reserved_tenants = {tenant_id for tenant_id in self.claims.values() if tenant_id}
        self.placements: dict[int, dict[str, Any]] = {}
        self.unplaced: dict[int, str] = {}

    def _place(self, job: Job) -> dict[str, Any] | None:
        """Choose nodes for a GPU job's pods (recorded on the job, then given to the pods as required affinity)."""
        spec = job.typed_spec
        options = spec.raw.get("placement") or {}
        same = {"rack": "rack", "ibBlock": "ib_block"}.get(options.get("sameTopology") or "")
        chosen = place(
            pods=spec.desired_nodes,
            gpus_per_pod=spec.gpus_per_pod,
            gpu_type=(spec.raw.get("gpuType") or None) if self.typed_nodes else None,
            nodes=self.node_views,
            strategy=options.get("strategy") or "pack",
            same=same,
            require_rdma=bool(options.get("rdma")),
            reserved_for=self.claims,
            tenant_id=job.tenant_id,
        )
        if chosen is None:
            self.unplaced[job.pk] = (
                f"waiting for placement: no set of healthy nodes has {spec.desired_nodes} x {spec.gpus_per_pod} "
                f"{manifests.GPU_RESOURCE} free" + (f" in one {options['sameTopology']}" if same else "")
            )
            return None
        taken: dict[str, int] = {}
        for node in chosen.nodes:  # later jobs of this pass see what is left
            taken[node] = taken.get(node, 0) + spec.gpus_per_pod
        self.node_views = [
            dataclasses.replace(v, free_gpus=v.free_gpus - taken[v.name]) if v.name in taken else v
            for v in self.node_views
        ]
        record = {
            "nodes": chosen.nodes,
            "scores": chosen.scores,
            "explanation": chosen.explanation,
            "reserved": job.tenant_id in self.reserved_tenants,  # tolerate the tenant's reserved nodes
        }
        self.placements[job.pk] = record
        return record

    def _record_queue_status(self, heads: admission_inputs.WaitingHeads, held: list[Any]) -> None:
        """Each queue's admitted usage (held + admitted now) and waiting count, after the cycle: written by
        `_write_queue_status` in end_pass's transaction, with the pass's other writes."""
        admitted: dict[tuple[int, str], dict[str, int]] = {}
        newly = [d for d in heads.demands if getattr(self.decisions.get(d.job_id), "outcome", None) == "admit"]
        for item in [*held, *newly]:
            usage = admitted.setdefault((item.tenant_id, item.queue), {})
            for resource, amount in item.request.items():
                usage[resource] = usage.get(resource, 0) + amount
        pending = dict(heads.counts)
        for demand in heads.demands:
            decision = self.decisions.get(demand.job_id)
            if decision is not None and decision.outcome != "wait":
                key = (demand.tenant_id, demand.queue)
                pending[key] = pending.get(key, 0) - 1
        self._queue_status = (admitted, {k: v for k, v in pending.items() if v > 0})

    def _write_queue_status(self) -> None:
        if self._queue_status is not None:
            admitted, pending = self._queue_status
            self._queue_status = None
            queue_status_sync(admitted=admitted, pending=pending)

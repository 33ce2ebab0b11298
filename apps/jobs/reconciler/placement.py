"""The job reconciler's view of the nodes: GPU capacity, lost nodes, GPU inventory, reservation claims, and the
choice of nodes for a GPU job's pods.

One `NodePlacement` per pass: `read()` takes the pass's Nodes and Pods once; `place()` chooses nodes for a job and
takes the GPUs it chose from what later jobs of the pass see.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from django.utils.dateparse import parse_datetime

from apps.core.db.epochs import EpochCached
from apps.core.db.prepared import PreparedRead
from apps.queueing.selectors import node_views, place, reservation_claims
from apps.queueing.services import sync_gpu_nodes
from apps.tenants.models import Tenant

from .. import manifests
from ..models import Job

NODE_LOSS_GRACE = dt.timedelta(seconds=60)
_SLUGS = PreparedRead(lambda: Tenant.objects.values_list("slug", "pk"))
_SLUG_IDS = EpochCached(("tenants_tenant",), lambda: dict(_SLUGS.rows()))  # slug -> tenant id


def labels_of(obj: dict[str, Any]) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def timestamp(value: str | None) -> dt.datetime | None:
    return parse_datetime(value) if value else None


class NodePlacement:
    """The nodes as this pass found them, and the placements it chose (job pk -> record; unplaced: job pk -> why)."""

    def __init__(self) -> None:
        self.gpu_total = 0
        self.gpu_simulated = False
        self.lost_nodes: dict[str, dt.datetime] = {}
        self.node_views: list[Any] = []
        self.typed_nodes = False
        self.claims: dict[str, int | None] = {}
        self.reserved_tenants: set[int] = set()
        self.placements: dict[int, dict[str, Any]] = {}
        self.unplaced: dict[int, str] = {}

    def read(
        self,
        nodes: list[dict[str, Any]],
        observed: dict[str | None, dict[str, list[dict[str, Any]]]],
        now: dt.datetime,
    ) -> None:
        """The GPUs of the Ready nodes, the nodes NotReady past the grace (lost), and the inventory."""
        total = 0
        self._inventory(nodes, observed)
        for node in nodes:
            status = node.get("status") or {}
            if labels_of(node).get("gryvia.io/simulated-gpus") == "true":
                self.gpu_simulated = True
            ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
            if ready is not None and ready.get("status") != "True":
                since = timestamp(ready.get("lastTransitionTime")) or now
                if now - since >= NODE_LOSS_GRACE:
                    self.lost_nodes[node["metadata"]["name"]] = since
                continue
            total += int((status.get("allocatable") or {}).get(manifests.GPU_RESOURCE) or 0)
        self.gpu_total = total

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

    def place(self, job: Job) -> dict[str, Any] | None:
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

"""The GPU node inventory: Kubernetes Node objects -> `GpuNode` rows.

`gpu_node_fields(node)` is pure: it reads NVIDIA GPU feature discovery labels (`nvidia.com/gpu.*`,
`nvidia.com/cuda.*`, `nvidia.com/mig.*`), node feature discovery labels (RDMA, SR-IOV), Gryvia's topology
labels, the allocatable `nvidia.com/gpu`, the taints, the Ready condition and `spec.unschedulable`.
`sync_gpu_nodes(nodes, allocated=...)` makes the table match the Node list: one SELECT, then at most one
bulk INSERT, one bulk UPDATE (only the rows and columns that changed) and one DELETE (rows of nodes no longer
listed). A pass where nothing changed writes nothing; `last_seen_at` is refreshed only when it is older than
`SEEN_REFRESH`, so that an unchanged fleet costs one write per row every few minutes rather than every pass.
Inside the job reconciler's pass (an `apps.core.db.epochs` snapshot) the rows are read again only when the table
changed since this process last read them: an unchanged fleet costs no statement at all.
"""

from __future__ import annotations

import copy
import datetime as dt
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import InvalidOperation
from typing import Any

from django.db import transaction
from django.utils import timezone

from apps.core.db.epochs import EpochCached
from apps.core.db.prepared import PreparedRead, model_fields
from apps.core.quantities import QuantityError, parse_quantity

from .choices import GPU
from .models import GpuNode
from .placement import NodeView

UNHEALTHY_TAINT = "gryvia.io/gpu-unhealthy"
SIMULATED_LABEL = "gryvia.io/simulated-gpus"
GPU_TYPE_LABEL = "gryvia.io/gpu"
RACK_LABELS = ("topology.kubernetes.io/rack", "gryvia.io/rack")
IB_BLOCK_LABEL = "gryvia.io/ib-block"
SEEN_REFRESH = dt.timedelta(minutes=5)

# Columns compared on every sync (everything but the bookkeeping times).
SYNCED_FIELDS = (
    "gpu_product",
    "gpu_type",
    "gpu_count",
    "gpu_memory_mib",
    "driver_version",
    "cuda_version",
    "mig_capable",
    "mig_strategy",
    "rdma",
    "sriov",
    "rack",
    "ib_block",
    "allocatable_gpus",
    "allocated_gpus",
    "healthy",
    "unschedulable",
    "simulated",
    "labels",
)

_VENDOR_PREFIXES = ("NVIDIA", "Tesla", "GeForce", "Quadro")
_TWO_TOKEN_FAMILIES = ("RTX", "GTX", "TITAN")
_LABEL_VALUE_CHARS = re.compile(r"[^A-Za-z0-9._-]")


def gpu_type_of(product: str) -> str:
    """The short GPU type of a GFD product label: "NVIDIA-H100-80GB-HBM3" -> "H100", "NVIDIA-GeForce-RTX-4090"
    -> "RTX-4090", "Tesla-V100-SXM2-16GB" -> "V100"; "" for no product."""
    tokens = [t for t in re.split(r"[-_ ]+", product.strip()) if t]
    while tokens and tokens[0] in _VENDOR_PREFIXES:
        tokens.pop(0)
    if not tokens:
        return ""
    short = "-".join(tokens[:2]) if tokens[0].upper() in _TWO_TOKEN_FAMILIES and len(tokens) > 1 else tokens[0]
    return _LABEL_VALUE_CHARS.sub("", short)[:63]


def _int(value: Any) -> int:
    """A non-negative integer from a label value or resource quantity; 0 when absent or unparsable."""
    if value in (None, ""):
        return 0
    try:
        return max(int(parse_quantity(value)), 0)
    except (QuantityError, InvalidOperation, ValueError, TypeError, ArithmeticError):
        return 0


def _version(labels: Mapping[str, str], prefix: str, parts: Iterable[str], full: str) -> str:
    found = [labels[f"{prefix}.{p}"] for p in parts if labels.get(f"{prefix}.{p}")]
    return ".".join(found) if found else labels.get(full, "")


def _true(value: Any) -> bool:
    return str(value).strip().lower() == "true"


def node_healthy(node: Mapping[str, Any]) -> bool:
    """Ready condition True and no `gryvia.io/gpu-unhealthy` taint (any effect)."""
    spec = node.get("spec") or {}
    if any((t or {}).get("key") == UNHEALTHY_TAINT for t in spec.get("taints") or []):
        return False
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def gpu_node_fields(node: Mapping[str, Any]) -> dict[str, Any]:
    """The `GpuNode` column values (including `name`, excluding times) of one v1 Node object. Pure."""
    metadata = node.get("metadata") or {}
    labels = dict(metadata.get("labels") or {})
    status = node.get("status") or {}
    allocatable = status.get("allocatable") or {}
    capacity = status.get("capacity") or {}
    product = labels.get("nvidia.com/gpu.product", "")
    allocatable_gpus = _int(allocatable.get(GPU))
    gpu_count = _int(labels.get("nvidia.com/gpu.count")) or _int(capacity.get(GPU)) or allocatable_gpus
    rack = next((labels[k] for k in RACK_LABELS if labels.get(k)), "")
    return {
        "name": metadata.get("name", ""),
        "gpu_product": product,
        "gpu_type": labels.get(GPU_TYPE_LABEL) or gpu_type_of(product),
        "gpu_count": gpu_count,
        "gpu_memory_mib": _int(labels.get("nvidia.com/gpu.memory")),
        "driver_version": _version(
            labels, "nvidia.com/cuda.driver", ("major", "minor", "rev"), "nvidia.com/cuda.driver-version.full"
        ),
        "cuda_version": _version(
            labels, "nvidia.com/cuda.runtime", ("major", "minor"), "nvidia.com/cuda.runtime-version.full"
        ),
        "mig_capable": _true(labels.get("nvidia.com/mig.capable")),
        "mig_strategy": labels.get("nvidia.com/mig.strategy", ""),
        "rdma": _true(labels.get("feature.node.kubernetes.io/rdma.capable")),
        "sriov": _true(labels.get("feature.node.kubernetes.io/network-sriov.capable")),
        "rack": rack,
        "ib_block": labels.get(IB_BLOCK_LABEL, ""),
        "allocatable_gpus": allocatable_gpus,
        "allocated_gpus": 0,
        "healthy": node_healthy(node),
        "unschedulable": bool((node.get("spec") or {}).get("unschedulable")),
        "simulated": _true(labels.get(SIMULATED_LABEL)),
        "labels": labels,
    }


@dataclass
class SyncResult:
    """Node names per outcome of one `sync_gpu_nodes` call."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unchanged: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.created or self.updated or self.deleted)


_GPU_NODES = PreparedRead(lambda: GpuNode.objects.values_list(*model_fields(GpuNode)))
# name -> row; read again inside a pass only when a row changed (apps.core.db.epochs). Shared between passes: a row
# about to be written is copied first.
_GPU_NODE_ROWS = EpochCached(("queueing_gpunode",), lambda: {row.name: row for row in _GPU_NODES.models(GpuNode)})


def sync_gpu_nodes(
    nodes: list[dict[str, Any]], *, allocated: Mapping[str, int], now: dt.datetime | None = None
) -> SyncResult:
    """Upsert one `GpuNode` per listed Node and delete the rows of nodes no longer listed.

    `allocated` maps node name -> GPUs Gryvia's pods hold there (missing: 0). One SELECT (none inside an epochs
    snapshot when the table has not changed since this process read it); writes only what changed (bulk INSERT /
    bulk UPDATE of the changed columns / one DELETE), in one transaction.
    """
    now = now or timezone.now()
    wanted: dict[str, dict[str, Any]] = {}
    for node in nodes:
        fields = gpu_node_fields(node)
        if fields["name"]:
            fields["allocated_gpus"] = max(int(allocated.get(fields["name"], 0) or 0), 0)
            wanted[fields["name"]] = fields
    existing = _GPU_NODE_ROWS.get()
    result = SyncResult()
    to_create: list[GpuNode] = []
    to_update: list[GpuNode] = []
    update_fields: set[str] = set()
    for name, fields in sorted(wanted.items()):
        row = existing.get(name)
        if row is None:
            to_create.append(GpuNode(**fields, last_seen_at=now, created_at=now, updated_at=now))
            result.created.append(name)
            continue
        changed = [f for f in SYNCED_FIELDS if getattr(row, f) != fields[f]]
        stale = row.last_seen_at is None or now - row.last_seen_at >= SEEN_REFRESH
        if not changed and not stale:
            result.unchanged += 1
            continue
        row = copy.copy(row)  # (the cached one stays as read)
        for f in changed:
            setattr(row, f, fields[f])
        row.last_seen_at = now
        update_fields.update(changed)
        update_fields.add("last_seen_at")
        if changed:
            row.updated_at = now
            update_fields.add("updated_at")
            result.updated.append(name)
        else:
            result.unchanged += 1
        to_update.append(row)
    result.deleted = sorted(set(existing) - set(wanted))
    if not (to_create or to_update or result.deleted):
        return result
    with transaction.atomic():
        if to_create:
            GpuNode.objects.bulk_create(to_create)
        if to_update:
            GpuNode.objects.bulk_update(to_update, sorted(update_fields))
        if result.deleted:
            GpuNode.objects.filter(name__in=result.deleted).delete()
    return result


def node_views(nodes: list[dict[str, Any]], *, allocated: Mapping[str, int]) -> list[NodeView]:
    """`placement.NodeView`s straight from v1 Node objects (no database), free = allocatable - allocated."""
    views = []
    for node in nodes:
        fields = gpu_node_fields(node)
        if fields["name"]:
            fields["allocated_gpus"] = max(int(allocated.get(fields["name"], 0) or 0), 0)
            views.append(NodeView.of(fields))
    return views

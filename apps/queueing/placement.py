"""Topology-aware GPU placement: which nodes a job's pods should run on. Pure functions, no database.

`place(...)` filters the candidate nodes, scores them, and assigns every pod to a node, or returns None (never a
partial placement). `node_affinity(...)` pins a pod template to the chosen nodes; `reservation_claim(...)` is the
taint, label and toleration of a node claimed by a tenant's reservation.

Filters (a node is a candidate only when all hold): healthy; schedulable; its `gpu_type` equals the requested one
(case-insensitive; any type when none is requested); RDMA-capable when `require_rdma`; at least `gpus_per_pod`
free GPUs; not claimed by another tenant's reservation (a node claimed by this tenant is allowed). With `same`,
a node lacking that topology label cannot be proven to share it and is excluded.

Score of a node with `free` free GPUs for one pod needing `need = max(gpus_per_pod, 1)` GPUs, fill = need / free:

    pack:   100 * fill          (fuller nodes first: a pod that exactly fills a node scores 100)
    spread: 100 * (1 - fill)    (emptier nodes first: the more GPUs left after the pod, the higher)
    + 10 * memory_mib / (largest memory_mib among the candidates)   (memory bonus, 0..10)
    + 5 when the node has RDMA and the job has more than one pod    (RDMA bonus)

Assignment is greedy and dynamic: each pod in turn goes to the node with the highest score *given the GPUs still
free after the previous pods* (ties: node name), so pack stacks pods onto one node while spread moves on to the
next. Greedy is complete here: it places every pod whenever the nodes' pod slots (free // gpus_per_pod) suffice.
With `same` ("rack" or "ib_block") each group of candidates sharing that value is tried on its own, and the group
whose assignment has the highest total score wins (ties: group name). `Placement.scores` are the candidates'
scores before any pod was assigned.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

logger = logging.getLogger(__name__)

RESERVED_KEY = "gryvia.io/reserved"
MEMORY_BONUS = 10.0
RDMA_BONUS = 5.0
UNKNOWN_TENANT = 0  # reserved_for value of a claim naming no known tenant: nobody may use the node

Strategy = Literal["spread", "pack"]
Same = Literal["rack", "ib_block"]


@dataclass(frozen=True)
class NodeView:
    """What placement needs to know about one node."""

    name: str
    gpu_type: str = ""
    free_gpus: int = 0
    memory_mib: int = 0
    rdma: bool = False
    rack: str = ""
    ib_block: str = ""
    healthy: bool = True
    unschedulable: bool = False

    @classmethod
    def of(cls, row: Any) -> NodeView:
        """From a `GpuNode` row or a `gpu_node_fields` dict: free = allocatable - allocated (at least 0)."""

        def get(name: str, default: Any = None) -> Any:
            return row.get(name, default) if isinstance(row, Mapping) else getattr(row, name, default)

        return cls(
            name=get("name"),
            gpu_type=get("gpu_type", "") or "",
            free_gpus=max(int(get("allocatable_gpus", 0) or 0) - int(get("allocated_gpus", 0) or 0), 0),
            memory_mib=int(get("gpu_memory_mib", 0) or 0),
            rdma=bool(get("rdma", False)),
            rack=get("rack", "") or "",
            ib_block=get("ib_block", "") or "",
            healthy=bool(get("healthy", True)),
            unschedulable=bool(get("unschedulable", False)),
        )


@dataclass(frozen=True)
class Placement:
    """`nodes[i]` is pod i's node; `scores` maps each candidate node to its score; `explanation` says why."""

    nodes: list[str]
    scores: dict[str, float]
    explanation: list[str] = field(default_factory=list)

    @property
    def node_names(self) -> list[str]:
        """The distinct chosen nodes, sorted."""
        return sorted(set(self.nodes))


def _exclusion(
    node: NodeView,
    *,
    gpus_per_pod: int,
    gpu_type: str | None,
    require_rdma: bool,
    same: Same | None,
    reserved_for: Mapping[str, int | None],
    tenant_id: int,
) -> str | None:
    """Why `node` is not a candidate, or None when it is."""
    if not node.healthy:
        return "unhealthy"
    if node.unschedulable:
        return "unschedulable (cordoned)"
    if gpu_type and node.gpu_type.lower() != gpu_type.lower():
        return f"GPU type {node.gpu_type or 'none'} is not {gpu_type}"
    if require_rdma and not node.rdma:
        return "no RDMA"
    holder = reserved_for.get(node.name)
    if holder is not None and holder != tenant_id:
        return "reserved for another tenant"
    if node.free_gpus < gpus_per_pod:
        return f"{node.free_gpus} free GPU(s) < {gpus_per_pod} per pod"
    if same and not getattr(node, same):
        return f"no {same} label"
    return None


def _score(node: NodeView, free: int, *, need: int, strategy: Strategy, max_memory: int, pods: int) -> float:
    fill = need / max(free, need)
    base = 100.0 * fill if strategy == "pack" else 100.0 * (1.0 - fill)
    memory = MEMORY_BONUS * node.memory_mib / max_memory if max_memory else 0.0
    rdma = RDMA_BONUS if node.rdma and pods > 1 else 0.0
    return round(base + memory + rdma, 2)


def _assign(
    group: list[NodeView], *, pods: int, gpus_per_pod: int, strategy: Strategy, max_memory: int
) -> tuple[list[str], float] | None:
    """Greedy assignment of `pods` pods within `group`: (node per pod, total score) or None when they don't fit."""
    free = {n.name: n.free_gpus for n in group}
    need = max(gpus_per_pod, 1)
    chosen: list[str] = []
    total = 0.0
    for _ in range(pods):
        best: tuple[float, str] | None = None
        for node in group:
            if free[node.name] < gpus_per_pod:
                continue
            score = _score(node, free[node.name], need=need, strategy=strategy, max_memory=max_memory, pods=pods)
            if best is None or score > best[0]:  # `group` is sorted by name: ties go to the first name
                best = (score, node.name)
        if best is None:
            return None
        chosen.append(best[1])
        total += best[0]
        free[best[1]] -= gpus_per_pod
    return chosen, round(total, 2)


def place(
    *,
    pods: int,
    gpus_per_pod: int,
    gpu_type: str | None,
    nodes: list[NodeView],
    strategy: Strategy = "pack",
    same: Same | None = None,
    require_rdma: bool = False,
    reserved_for: Mapping[str, int | None] | None = None,
    tenant_id: int,
) -> Placement | None:
    """Assign each of `pods` pods needing `gpus_per_pod` GPUs to a node (see the module doc), or None when they
    cannot all be placed. `reserved_for` maps node name -> id of the tenant whose reservation claims it."""
    if pods < 1 or gpus_per_pod < 0:
        raise ValueError("pods must be >= 1 and gpus_per_pod >= 0")
    if strategy not in ("spread", "pack"):
        raise ValueError(f"unknown strategy {strategy!r}")
    if same not in (None, "rack", "ib_block"):
        raise ValueError(f"unknown topology constraint {same!r}")
    reserved_for = reserved_for or {}
    explanation: list[str] = []
    candidates: list[NodeView] = []
    for node in sorted(nodes, key=lambda n: n.name):
        reason = _exclusion(
            node,
            gpus_per_pod=gpus_per_pod,
            gpu_type=gpu_type,
            require_rdma=require_rdma,
            same=same,
            reserved_for=reserved_for,
            tenant_id=tenant_id,
        )
        if reason:
            explanation.append(f"{node.name}: excluded, {reason}")
        else:
            candidates.append(node)
    max_memory = max((n.memory_mib for n in candidates), default=0)
    need = max(gpus_per_pod, 1)
    scores = {
        n.name: _score(n, n.free_gpus, need=need, strategy=strategy, max_memory=max_memory, pods=pods)
        for n in candidates
    }
    for name, score in scores.items():
        explanation.append(f"{name}: score {score}")

    groups: dict[str, list[NodeView]] = {}
    for node in candidates:
        groups.setdefault(getattr(node, same) if same else "", []).append(node)
    best: tuple[float, str, list[str]] | None = None
    for key in sorted(groups):
        assigned = _assign(groups[key], pods=pods, gpus_per_pod=gpus_per_pod, strategy=strategy, max_memory=max_memory)
        label = f"{same} {key}" if same else "all candidates"
        if assigned is None:
            slots = sum(n.free_gpus // gpus_per_pod for n in groups[key]) if gpus_per_pod else 0
            explanation.append(f"{label}: cannot fit {pods} pod(s) of {gpus_per_pod} GPU(s) ({slots} pod slot(s))")
            continue
        chosen, total = assigned
        explanation.append(f"{label}: fits, total score {total}")
        if best is None or total > best[0]:
            best = (total, key, chosen)
    if best is None:
        logger.debug("no placement for %d x %d GPU(s): %s", pods, gpus_per_pod, "; ".join(explanation))
        return None
    total, key, chosen = best
    if same:
        explanation.append(f"chose {same} {key} (total score {total})")
    explanation.extend(f"pod {i} -> {name}" for i, name in enumerate(chosen))
    return Placement(nodes=chosen, scores=scores, explanation=explanation)


def node_affinity(node_names: list[str]) -> dict[str, Any]:
    """The pod-spec `affinity` that requires one of `node_names` (matched on `metadata.name`)."""
    names = sorted(set(node_names))
    if not names:
        raise ValueError("node_affinity needs at least one node name")
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": names}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def reservation_claim(tenant_slug: str) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """(taint, label, toleration) for a node claimed by `tenant_slug`'s reservation: the node gets the NoSchedule
    taint and the label `gryvia.io/reserved=<tenant>`; the tenant's pods carry the toleration."""
    if not tenant_slug:
        raise ValueError("tenant_slug is required")
    taint = {"key": RESERVED_KEY, "value": tenant_slug, "effect": "NoSchedule"}
    label = {RESERVED_KEY: tenant_slug}
    toleration = {"key": RESERVED_KEY, "operator": "Equal", "value": tenant_slug, "effect": "NoSchedule"}
    return taint, label, toleration


def reservation_claims(nodes: list[dict[str, Any]], tenant_ids: Mapping[str, int]) -> dict[str, int | None]:
    """node name -> tenant id of its `gryvia.io/reserved` label (from v1 Node objects or their label dicts);
    a slug not in `tenant_ids` maps to UNKNOWN_TENANT (nobody's), an unlabelled node is left out."""
    claims: dict[str, int | None] = {}
    for node in nodes:
        metadata = node.get("metadata") or {}
        slug = (metadata.get("labels") or {}).get(RESERVED_KEY)
        if slug and metadata.get("name"):
            claims[metadata["name"]] = tenant_ids.get(slug, UNKNOWN_TENANT)
    return claims

"""GPU reservations become node claims: whole nodes labelled and tainted `gryvia.io/reserved=<tenant>`.

One pass (`reconcile_reservations`, every 30 s and after a reservation changes):
1. takes the non-blocking lock `reconcile:reservations`, LISTs the Nodes once, reads the active reservations;
2. `desired_claims(...)` (pure) decides which nodes each active reservation holds;
3. applies a partial Node manifest (server-side apply, field manager `gryvia`) to each node whose claim differs:
   the label `gryvia.io/reserved=<tenant>` (what placement reads), the taint `gryvia.io/reserved=<tenant>:NoSchedule`
   (what the tenant's pods tolerate) and the annotation `gryvia.io/reservation=<id>`, which marks the claim as
   Gryvia's. A node Gryvia claimed that no reservation keeps gets the same apply without the three;
4. writes each reservation's status (claimed nodes, their GPUs, what is short) where it changed.

Choice: reservations in start order. First each keeps the usable nodes it already holds (stable across passes),
as many as it needs; then those still short take, from the usable nodes of their GPU type that nobody holds,
the ones already claimed for the same tenant first, then those with the fewest allocated GPUs (then by name).
A node counts its allocatable `nvidia.com/gpu`, and is claimed whole. Usable: Ready, no `gryvia.io/gpu-unhealthy`
taint, not cordoned; the GPU type is read and compared as placement does (`gpu_node_fields`, case-insensitive).
A node carrying a `gryvia.io/reserved` label or taint without Gryvia's annotation was claimed by someone else: it
is never changed and never chosen. A reservation that cannot be covered claims what it can and says what is short.

Taints: `spec.taints` is an atomic list in Kubernetes (`x-kubernetes-list-type: atomic`), so an apply sets the
whole list. The manifest therefore carries the node's other taints unchanged, and the listed node's
`metadata.resourceVersion`: a taint another controller adds meanwhile makes the apply fail with a conflict (the
next pass retries from a fresh LIST) instead of being dropped, and a node deleted meanwhile is not re-created.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone

from apps.cluster.services import NODE, ClusterBackend, ClusterError, get_backend
from apps.core.locks import try_advisory_lock
from apps.core.metrics import RECONCILE_DURATION, RECONCILE_ERRORS
from apps.core.reconcile import ReconcileStats

from . import selectors
from .inventory import gpu_node_fields
from .models import GpuNode, Reservation
from .placement import RESERVED_KEY, reservation_claim
from .services.reservation_hooks import reservation_claims_written

logger = logging.getLogger(__name__)

KIND = "reservations"
RESERVATION_ANNOTATION = "gryvia.io/reservation"


@dataclass(frozen=True)
class ClaimNode:
    """What the claim choice needs to know about one node. `holder` is the tenant its `gryvia.io/reserved` label
    (or taint) names; `reservation` is Gryvia's annotation (the id of the reservation it claimed the node for)."""

    name: str
    gpu_type: str = ""
    gpus: int = 0
    allocated: int = 0
    usable: bool = True
    holder: str = ""
    reservation: str = ""

    @property
    def foreign(self) -> bool:
        """Claimed, but not by Gryvia: left alone."""
        return bool(self.holder) and not self.reservation


@dataclass(frozen=True)
class Demand:
    """An active reservation as the claim choice sees it."""

    id: int
    tenant: str
    gpu_type: str
    count: int

    @classmethod
    def of(cls, reservation: Reservation) -> Demand:
        return cls(
            id=reservation.pk, tenant=reservation.tenant.slug, gpu_type=reservation.gpu_type, count=reservation.count
        )


@dataclass
class ClaimPlan:
    """`claims`: node name -> the reservation that holds it; per reservation id: its nodes, their GPUs, a message."""

    claims: dict[str, Demand] = field(default_factory=dict)
    nodes: dict[int, list[str]] = field(default_factory=dict)
    gpus: dict[int, int] = field(default_factory=dict)
    messages: dict[int, str] = field(default_factory=dict)


def _reserved_taints(node: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [t for t in (node.get("spec") or {}).get("taints") or [] if (t or {}).get("key") == RESERVED_KEY]


def claim_node(node: Mapping[str, Any], *, allocated: int = 0) -> ClaimNode:
    """A `ClaimNode` from a v1 Node object and the GPUs Gryvia's pods hold on it. Pure."""
    fields = gpu_node_fields(node)
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    taint_holder = next((str(t.get("value") or "") for t in _reserved_taints(node)), "")
    return ClaimNode(
        name=fields["name"],
        gpu_type=fields["gpu_type"],
        gpus=fields["allocatable_gpus"],
        allocated=max(int(allocated or 0), 0),
        usable=fields["healthy"] and not fields["unschedulable"],
        holder=fields["labels"].get(RESERVED_KEY) or taint_holder,
        reservation=str(annotations.get(RESERVATION_ANNOTATION) or ""),
    )


def _matches(node: ClaimNode, demand: Demand) -> bool:
    return node.usable and node.gpus > 0 and node.gpu_type.lower() == demand.gpu_type.lower()


def _shortfall(demand: Demand, held: int, nodes: Sequence[ClaimNode], plan: ClaimPlan) -> str:
    typed = [n for n in nodes if n.gpus > 0 and n.gpu_type.lower() == demand.gpu_type.lower()]
    mine = sum(1 for n in typed if plan.claims.get(n.name) == demand)
    unusable = sum(1 for n in typed if not n.usable)
    foreign = sum(1 for n in typed if n.usable and n.foreign)
    others = sum(1 for n in typed if n.usable and n.name in plan.claims and plan.claims[n.name] != demand)
    return (
        f"holds {held} of {demand.count} {demand.gpu_type} GPUs: not enough Ready, healthy, schedulable "
        f"{demand.gpu_type} nodes free of other claims ({len(typed)} {demand.gpu_type} node(s): {mine} held here, "
        f"{others} held by other reservations, {foreign} claimed outside Gryvia, {unusable} not usable)"
    )


def desired_claims(reservations: Sequence[Demand], nodes: Sequence[ClaimNode]) -> ClaimPlan:
    """Which nodes each active reservation holds (see the module doc). Pure; `reservations` in priority order."""
    plan = ClaimPlan()
    ordered = sorted(nodes, key=lambda n: n.name)
    held = {d.id: 0 for d in reservations}

    def take(node: ClaimNode, demand: Demand) -> None:
        plan.claims[node.name] = demand
        held[demand.id] += node.gpus

    for demand in reservations:  # keep what each already holds, as much as it needs
        kept = [n for n in ordered if n.reservation == str(demand.id) and _matches(n, demand)]
        for node in sorted(kept, key=lambda n: (n.allocated, n.name)):
            if held[demand.id] >= demand.count:
                break
            if node.name not in plan.claims:
                take(node, demand)
    for demand in reservations:  # then fill what is short from the nodes nobody holds
        if held[demand.id] >= demand.count:
            continue
        free = [n for n in ordered if n.name not in plan.claims and not n.foreign and _matches(n, demand)]
        for node in sorted(free, key=lambda n: (n.holder != demand.tenant, n.allocated, n.name)):
            if held[demand.id] >= demand.count:
                break
            take(node, demand)
    for demand in reservations:
        names = sorted(name for name, d in plan.claims.items() if d == demand)
        plan.nodes[demand.id] = names
        plan.gpus[demand.id] = held[demand.id]
        if held[demand.id] >= demand.count:
            whole = f" (whole nodes, {demand.count} reserved)" if held[demand.id] > demand.count else ""
            plan.messages[demand.id] = f"holds {held[demand.id]} {demand.gpu_type} GPUs on {len(names)} node(s){whole}"
        else:
            plan.messages[demand.id] = _shortfall(demand, held[demand.id], ordered, plan)
    return plan


def claim_manifest(node: Mapping[str, Any], demand: Demand | None) -> dict[str, Any] | None:
    """The partial Node manifest that makes `node` claimed for `demand` (None: claimed by nobody), or None when it
    already is. Pure. Other taints are carried unchanged (an atomic list); `resourceVersion` is a precondition."""
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    reserved = _reserved_taints(node)
    others = [t for t in (node.get("spec") or {}).get("taints") or [] if (t or {}).get("key") != RESERVED_KEY]
    manifest: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": meta["name"]}}
    if meta.get("resourceVersion"):
        manifest["metadata"]["resourceVersion"] = meta["resourceVersion"]
    if demand is None:
        if RESERVED_KEY not in labels and RESERVATION_ANNOTATION not in annotations and not reserved:
            return None
        manifest["spec"] = {"taints": others}
        return manifest
    taint, label, _toleration = reservation_claim(demand.tenant)
    current = [{k: t.get(k) for k in ("key", "value", "effect")} for t in reserved]
    if (
        labels.get(RESERVED_KEY) == demand.tenant
        and annotations.get(RESERVATION_ANNOTATION) == str(demand.id)
        and current == [taint]
    ):
        return None
    manifest["metadata"]["labels"] = label
    manifest["metadata"]["annotations"] = {RESERVATION_ANNOTATION: str(demand.id)}
    manifest["spec"] = {"taints": [*others, taint]}
    return manifest


def _released_message(reservation: Reservation, now: dt.datetime) -> str:
    if reservation.tenant.archived_at is not None:
        return "the tenant is archived: its nodes are released"
    if reservation.end_at <= now:
        return "ended: its nodes are released"
    return "not active: its nodes are released"


def _write_status(
    reservation: Reservation, *, nodes: list[str], gpus: int, message: str, now: dt.datetime, stats: ReconcileStats
) -> None:
    current = (reservation.status_claimed_nodes, reservation.status_claimed_gpus, reservation.status_message)
    if current == (nodes, gpus, message):
        return
    Reservation.all_tenants.filter(pk=reservation.pk).update(
        status_claimed_nodes=nodes, status_claimed_gpus=gpus, status_message=message, status_updated_at=now
    )
    stats.reconciled += 1


def _pass(backend: ClusterBackend, now: dt.datetime, stats: ReconcileStats) -> None:
    try:
        stats.lists += 1
        nodes = [n for n in backend.list(NODE) if (n.get("metadata") or {}).get("name")]
    except ClusterError as exc:
        stats.errors += 1
        RECONCILE_ERRORS.labels(kind=KIND).inc()
        logger.warning("%s pass: cannot list the cluster: %s", KIND, exc)
        return
    active = list(selectors.all_reservations_active(now))
    stats.examined = len(active)
    allocated = dict(GpuNode.objects.values_list("name", "allocated_gpus"))  # the job reconciler's last count
    views = {n["metadata"]["name"]: claim_node(n, allocated=allocated.get(n["metadata"]["name"], 0)) for n in nodes}
    plan = desired_claims([Demand.of(r) for r in active], list(views.values()))

    failed: dict[str, str] = {}
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        view = views[node["metadata"]["name"]]
        demand = plan.claims.get(view.name)
        if view.foreign or (demand is None and not view.reservation):
            continue
        manifest = claim_manifest(node, demand)
        if manifest is None:
            continue
        try:
            backend.apply(manifest)
        except ClusterError as exc:
            stats.errors += 1
            RECONCILE_ERRORS.labels(kind=KIND).inc()
            logger.warning("%s: node %s: %s", KIND, view.name, exc)
            failed[view.name] = f"{type(exc).__name__}: {exc}"
            continue
        if demand is None:
            stats.deleted += 1
        else:
            stats.applied += 1

    for reservation in active:
        names = [n for n in plan.nodes[reservation.pk] if n not in failed]
        problems = [f"cannot claim node {n}: {failed[n]}" for n in plan.nodes[reservation.pk] if n in failed]
        _write_status(
            reservation,
            nodes=names,
            gpus=sum(views[n].gpus for n in names),
            message="; ".join([plan.messages[reservation.pk], *problems]),
            now=now,
            stats=stats,
        )
    ended = Reservation.all_tenants.filter(status_claimed_gpus__gt=0).exclude(pk__in=[r.pk for r in active])
    for reservation in ended.select_related("tenant"):
        _write_status(reservation, nodes=[], gpus=0, message=_released_message(reservation, now), now=now, stats=stats)
    reservation_claims_written(now=now)  # billing's usage records follow the claims just written (its hook)


def reconcile_reservations(backend: ClusterBackend | None = None, *, now: dt.datetime | None = None) -> ReconcileStats:
    """One pass (see the module doc). `applied`: nodes claimed or re-claimed; `deleted`: claims removed;
    `examined`: active reservations; `reconciled`: reservation statuses written."""
    stats = ReconcileStats()
    started = time.monotonic()
    with try_advisory_lock(f"reconcile:{KIND}") as acquired:
        if not acquired:
            stats.skipped = True
            return stats
        try:
            _pass(backend or get_backend(), now or timezone.now(), stats)
        finally:
            stats.duration_s = time.monotonic() - started
            RECONCILE_DURATION.labels(kind=KIND).observe(stats.duration_s)
    return stats

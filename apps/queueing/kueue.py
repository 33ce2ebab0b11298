"""Pure functions between Gryvia's queues and Kueue (kueue.x-k8s.io, v0.11 API: v1beta1, Cohort/Topology v1alpha1).

Used when `GRYVIA_ADMISSION = "kueue"`: Kueue, not Gryvia's native admission cycle, decides when a job starts.

* `cluster_objects()` turns Queue/Cohort rows into ResourceFlavors, ClusterQueues, LocalQueues, Cohorts, a Topology
  and WorkloadPriorityClasses, to apply (server-side) and prune by the `app.kubernetes.io/managed-by` label. With
  MultiKueue worker clusters it adds a MultiKueueCluster per worker, one MultiKueueConfig and the MultiKueue
  AdmissionCheck every ClusterQueue lists (`multikueue.py`).
* `suspend_patch()` makes the batch/v1 Job Kueue-managed: created suspended, labelled with its LocalQueue.
* `workload_for()` + `phase_from_workload()` read Kueue's Workload back into a Gryvia phase.

Quota mapping: cpu and memory are one resource group on `default-flavor`; `nvidia.com/gpu` is a second group with
one flavor per GPU type (`gpu-<type>`, node label `gryvia.io/gpu=<type>`) plus `any-gpu` for untyped GPU quota.
A (resource, flavor) a queue sets no quota for is unlimited in Gryvia; Kueue has no "unlimited", so it gets
`UNLIMITED` nominal quota and lends none of it. Borrowing/lending limits are only set for queues in a cohort
(Kueue rejects them otherwise).

MultiKueue: the cluster Gryvia talks to is the manager; Kueue copies each workload that gets quota there to the
workers and runs it on the first that admits it. Kueue before v0.15 marks a ClusterQueue that has topology-aware
flavors and a MultiKueue check inactive ("TAS is not supported with MultiKueue admission check"), so with
MultiKueue the flavors carry no `topologyName` and no Topology is generated. No I/O here.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from apps.cluster.services import MANAGED_BY, MANAGER

from . import multikueue
from .choices import CPU, GPU, MEMORY, WorkloadPhase

GROUP = "kueue.x-k8s.io"
V1BETA1 = f"{GROUP}/v1beta1"
V1ALPHA1 = f"{GROUP}/v1alpha1"
QUEUE_LABEL = f"{GROUP}/queue-name"
PRIORITY_LABEL = f"{GROUP}/priority-class"
TENANT_LABEL = "gryvia.io/tenant"
GPU_TYPE_LABEL = "gryvia.io/gpu"
QUEUE_NAME_LABEL = "gryvia.io/queue"
DEFAULT_FLAVOR = "default-flavor"
ANY_GPU_FLAVOR = "any-gpu"
TOPOLOGY_NAME = "gryvia-topology"
IB_BLOCK_LABEL = "gryvia.io/ib-block"
RACK_LABEL = "gryvia.io/rack"
HOSTNAME_LABEL = "kubernetes.io/hostname"
DEFAULT_QUEUE = "default"
UNLIMITED = {CPU: "1M", MEMORY: "1Ei", GPU: 1_000_000}

# Workload condition types and reasons (Kueue's apis/kueue/v1beta1/workload_types.go).
QUOTA_RESERVED = "QuotaReserved"
ADMITTED = "Admitted"
EVICTED = "Evicted"
PREEMPTED = "Preempted"
REQUEUED = "Requeued"
FINISHED = "Finished"


def _labels(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    return {MANAGED_BY: MANAGER, **(extra or {})}


def _meta(name: str, namespace: str | None = None, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": _labels(labels)}
    if namespace:
        meta["namespace"] = namespace
    return meta


def _weight(value: float | int | None) -> str:
    return f"{float(1 if value is None else value):g}"


def _quantity(value: Any) -> int | str:
    return value if isinstance(value, int) and not isinstance(value, bool) else str(value)


def flavor_name(gpu_type: str) -> str:
    """The ResourceFlavor of a GPU type: `H100` -> `gpu-h100`."""
    return f"gpu-{gpu_type.lower()}"


def cluster_queue_name(tenant_slug: str, queue_name: str) -> str:
    return f"gryvia-{tenant_slug}-{queue_name}"


def tenant_namespace(tenant: Any) -> str:
    return getattr(tenant, "namespace", None) or f"tenant-{tenant.slug}"


def resource_flavors(
    flavors: Iterable[str], *, any_gpu: bool = True, topology_aware: bool = True
) -> list[dict[str, Any]]:
    """`default-flavor` for cpu and memory, one flavor per GPU type and `any-gpu`; the GPU flavors name the Topology
    unless `topology_aware` is False (MultiKueue, see the module doc)."""
    tas = {"topologyName": TOPOLOGY_NAME} if topology_aware else {}
    out = [
        {"apiVersion": V1BETA1, "kind": "ResourceFlavor", "metadata": _meta(DEFAULT_FLAVOR), "spec": {}},
    ]
    for gpu_type in sorted(set(flavors)):
        out.append(
            {
                "apiVersion": V1BETA1,
                "kind": "ResourceFlavor",
                "metadata": _meta(flavor_name(gpu_type)),
                "spec": {"nodeLabels": {GPU_TYPE_LABEL: gpu_type}, **tas},
            }
        )
    if any_gpu:
        out.append(
            {"apiVersion": V1BETA1, "kind": "ResourceFlavor", "metadata": _meta(ANY_GPU_FLAVOR), "spec": dict(tas)}
        )
    return out


def topology(*, rack_label: str = RACK_LABEL) -> dict[str, Any]:
    """IB block -> rack -> host, for topology-aware scheduling (`kueue.x-k8s.io/podset-required-topology`)."""
    levels = [IB_BLOCK_LABEL, rack_label, HOSTNAME_LABEL]
    return {
        "apiVersion": V1ALPHA1,
        "kind": "Topology",
        "metadata": _meta(TOPOLOGY_NAME),
        "spec": {"levels": [{"nodeLabel": label} for label in levels]},
    }


def _flavor_quota(resource: str, entry: Mapping[str, Any] | None, *, in_cohort: bool) -> dict[str, Any]:
    if entry is None:  # no quota in Gryvia: unlimited, never lent
        quota: dict[str, Any] = {"name": resource, "nominalQuota": UNLIMITED[resource]}
        if in_cohort:
            quota["lendingLimit"] = 0
        return quota
    quota = {"name": resource, "nominalQuota": _quantity(entry["nominal"])}
    if in_cohort:
        for key in ("borrowingLimit", "lendingLimit"):
            if entry.get(key) is not None:
                quota[key] = _quantity(entry[key])
    return quota


def cluster_queue(
    queue: Any, tenant: Any, *, gpu_types: list[str], admission_checks: Sequence[str] = ()
) -> dict[str, Any]:
    """One Gryvia Queue as a ClusterQueue; `gpu_types` (GPU type label values) orders the GPU flavors;
    `admission_checks` names the AdmissionChecks every workload of the queue must pass (MultiKueue)."""
    cohort = _cohort_name(queue)
    in_cohort = bool(cohort)
    entries = {(e["resource"], e.get("flavor") or ""): e for e in (getattr(queue, "quotas", None) or [])}
    gpu_flavors = [(flavor_name(t), t) for t in gpu_types] + [(ANY_GPU_FLAVOR, "")]
    groups = [
        {
            "coveredResources": [CPU, MEMORY],
            "flavors": [
                {
                    "name": DEFAULT_FLAVOR,
                    "resources": [_flavor_quota(r, entries.get((r, "")), in_cohort=in_cohort) for r in (CPU, MEMORY)],
                }
            ],
        },
        {
            "coveredResources": [GPU],
            "flavors": [
                {"name": name, "resources": [_flavor_quota(GPU, entries.get((GPU, t)), in_cohort=in_cohort)]}
                for name, t in gpu_flavors
            ],
        },
    ]
    spec: dict[str, Any] = {
        "namespaceSelector": {"matchLabels": {TENANT_LABEL: tenant.slug}},
        "queueingStrategy": "BestEffortFIFO",
        "resourceGroups": groups,
        "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
        "fairSharing": {"weight": _weight(getattr(queue, "weight", 1.0))},
    }
    if cohort:
        spec["cohort"] = cohort
    if admission_checks:
        spec["admissionChecks"] = list(admission_checks)
    name = cluster_queue_name(tenant.slug, queue.name)
    return {
        "apiVersion": V1BETA1,
        "kind": "ClusterQueue",
        "metadata": _meta(name, labels={TENANT_LABEL: tenant.slug, QUEUE_NAME_LABEL: queue.name}),
        "spec": spec,
    }


def local_queue(queue_name: str, tenant: Any) -> dict[str, Any]:
    return {
        "apiVersion": V1BETA1,
        "kind": "LocalQueue",
        "metadata": _meta(queue_name, tenant_namespace(tenant), {TENANT_LABEL: tenant.slug}),
        "spec": {"clusterQueue": cluster_queue_name(tenant.slug, queue_name)},
    }


def _cohort_name(queue: Any) -> str:
    name = getattr(queue, "cohort_name", None)
    if name is None:
        cohort = getattr(queue, "cohort", None)
        name = cohort.name if cohort is not None else ""
    return name or ""


class _ImplicitQueue:
    """A tenant without queues: its unlimited `default` queue."""

    def __init__(self, tenant_id: int) -> None:
        self.tenant_id = tenant_id
        self.name = DEFAULT_QUEUE
        self.quotas: list[dict[str, Any]] = []
        self.weight = 1.0
        self.cohort_name = ""


def cluster_objects(
    *,
    queues: Iterable[Any],
    cohorts: Iterable[Any],
    tenants_by_id: Mapping[int, Any],
    flavors: Iterable[str],
    cohort_weights: Mapping[str, float] | None = None,
    priority_classes: Iterable[Any] = (),
    rack_label: str = RACK_LABEL,
    multikueue_clusters: Sequence[str] = (),
    kueue_namespace: str = "kueue-system",
) -> list[dict[str, Any]]:
    """Every Kueue object for Gryvia's queues, in apply order (flavors and topology, cohorts, MultiKueue objects,
    cluster queues, local queues, priority classes).

    `queues`: Queue rows (tenant_id, name, quotas, weight, cohort); tenants in `tenants_by_id` without a queue get
    an unlimited `default` ClusterQueue/LocalQueue. `flavors`: GPU type label values (`H100`), ordered by
    preference for untyped requests. `cohort_weights`: fair-sharing weight per cohort name (default 1).
    `priority_classes`: PriorityClass rows, mirrored as WorkloadPriorityClasses for `job_labels(priority_class=)`.
    `multikueue_clusters`: MultiKueue worker cluster names (empty: MultiKueue off); every ClusterQueue then lists
    the MultiKueue AdmissionCheck, and topology-aware scheduling is left out (see the module doc).
    """
    queues = list(queues)
    gpu_types = list(dict.fromkeys(flavors))
    for queue in queues:  # a flavor quota names a GPU type the caller did not list: still give it a flavor
        for entry in getattr(queue, "quotas", None) or []:
            if entry["resource"] == GPU and entry.get("flavor") and entry["flavor"] not in gpu_types:
                gpu_types.append(entry["flavor"])
    objects = resource_flavors(gpu_types, topology_aware=not multikueue_clusters)
    if not multikueue_clusters:
        objects.append(topology(rack_label=rack_label))
    weights = cohort_weights or {}
    for cohort in sorted(cohorts, key=lambda c: c.name):
        objects.append(
            {
                "apiVersion": V1ALPHA1,
                "kind": "Cohort",
                "metadata": _meta(cohort.name),
                "spec": {"fairSharing": {"weight": _weight(weights.get(cohort.name, 1.0))}},
            }
        )
    with_queues = {q.tenant_id for q in queues}
    queues += [_ImplicitQueue(tid) for tid in sorted(tenants_by_id) if tid not in with_queues]
    pairs = sorted(
        ((tenants_by_id[q.tenant_id], q) for q in queues if q.tenant_id in tenants_by_id),
        key=lambda tq: (tq[0].slug, tq[1].name),
    )
    objects += multikueue.cluster_objects(multikueue_clusters, kueue_namespace=kueue_namespace)
    checks = [multikueue.ADMISSION_CHECK_NAME] if multikueue_clusters else []
    objects += [cluster_queue(q, t, gpu_types=gpu_types, admission_checks=checks) for t, q in pairs]
    objects += [local_queue(q.name, t) for t, q in pairs]
    for pc in sorted(priority_classes, key=lambda p: p.name):
        objects.append(
            {
                "apiVersion": V1BETA1,
                "kind": "WorkloadPriorityClass",
                "metadata": _meta(pc.name),
                "value": int(pc.value),
                "description": getattr(pc, "description", "") or "",
            }
        )
    return objects


# -- jobs -------------------------------------------------------------------------------------------------------


def job_labels(*, queue_name: str, priority_class: str | None = None) -> dict[str, str]:
    """The labels that hand a Job to Kueue: its LocalQueue and (optionally) its WorkloadPriorityClass."""
    labels = {QUEUE_LABEL: queue_name}
    if priority_class:
        labels[PRIORITY_LABEL] = priority_class
    return labels


def suspend_patch(
    job_manifest: dict[str, Any], *, queue_name: str = DEFAULT_QUEUE, priority_class: str | None = None
) -> dict[str, Any]:
    """A copy of the workload manifest handed to Kueue: labelled, and for a batch/v1 Job created with
    `spec.suspend: true` (Kueue unsuspends it on admission). A StatefulSet only gets the labels (Kueue's pod
    integration gates its pods instead)."""
    manifest = copy.deepcopy(job_manifest)
    labels = job_labels(queue_name=queue_name, priority_class=priority_class)
    manifest.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
    if manifest.get("kind") == "Job":
        manifest.setdefault("spec", {})["suspend"] = True
    else:
        template = manifest.setdefault("spec", {}).setdefault("template", {})
        template.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
    return manifest


# -- reading Kueue's Workload back ------------------------------------------------------------------------------


def workload_for(job_uid: str, workloads: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The Workload Kueue created for the Job with uid `job_uid` (by its ownerReferences), None when none yet."""
    for wl in workloads:
        refs = (wl.get("metadata") or {}).get("ownerReferences") or []
        if any(ref.get("uid") == job_uid for ref in refs):
            return wl
    return None


def _conditions(workload: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c.get("type"): c for c in (workload.get("status") or {}).get("conditions") or []}


def _is_true(conditions: Mapping[str, dict[str, Any]], kind: str) -> bool:
    return (conditions.get(kind) or {}).get("status") == "True"


def phase_from_workload(workload: dict[str, Any] | None, *, job: dict[str, Any] | None = None) -> tuple[str, str, str]:
    """(phase, reason, message) from Kueue's Workload (and the Job, for `spec.suspend`).

    * Finished=True: Succeeded or Failed (reason Succeeded/Failed).
    * Evicted=True and not re-admitted: Queued, reason `Evicted` (or `Preempted` when Kueue preempted it), with
      Kueue's message; the Job is suspended again and its pods removed.
    * Admitted=True: Scheduling once the Job is unsuspended (the reconciler then derives Running/... from the Job
      as for native admission); still suspended: Queued, reason `Admitted`.
    * QuotaReserved=True, Admitted not yet: Queued, reason `QuotaReserved` (admission checks pending).
    * Otherwise (no Workload yet, or pending): Queued with Kueue's QuotaReserved message, e.g.
      "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor gpu-h100,
      4 more needed".
    """
    if workload is None:
        return WorkloadPhase.QUEUED, "Pending", "waiting for Kueue to create the workload"
    cond = _conditions(workload)
    if _is_true(cond, FINISHED):
        finished = cond[FINISHED]
        failed = finished.get("reason") == "Failed"
        return (
            WorkloadPhase.FAILED if failed else WorkloadPhase.SUCCEEDED,
            finished.get("reason", ""),
            finished.get("message", ""),
        )
    if _is_true(cond, EVICTED):  # Kueue suspends the Job again (if not yet) and requeues the workload
        evicted = cond[EVICTED]
        if evicted.get("reason") == "Preempted" or _is_true(cond, PREEMPTED):
            message = (cond.get(PREEMPTED) or {}).get("message") or evicted.get("message", "")
            return WorkloadPhase.QUEUED, PREEMPTED, message
        return WorkloadPhase.QUEUED, EVICTED, evicted.get("message", "")
    admitted = _is_true(cond, ADMITTED)
    if admitted:
        suspended = bool(((job or {}).get("spec") or {}).get("suspend"))
        if suspended:
            return WorkloadPhase.QUEUED, ADMITTED, "admitted by Kueue; waiting for the job to be unsuspended"
        return WorkloadPhase.SCHEDULING, ADMITTED, cond[ADMITTED].get("message", "")
    if _is_true(cond, QUOTA_RESERVED):
        message = cond[QUOTA_RESERVED].get("message") or "waiting for admission checks"
        return WorkloadPhase.QUEUED, QUOTA_RESERVED, message
    pending = cond.get(QUOTA_RESERVED) or {}
    return WorkloadPhase.QUEUED, pending.get("reason") or "Pending", pending.get("message", "")

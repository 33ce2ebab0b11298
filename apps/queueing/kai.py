"""Pure functions between Gryvia's queues and NVIDIA KAI Scheduler (scheduling.run.ai/v2 `Queue`).

Used when `GRYVIA_ADMISSION = "kai"`: pods are scheduled by `kai-scheduler`, which enforces queue quotas itself.

* `queue_objects()`: a parent Queue per tenant (`gryvia-<slug>`) and a child per Gryvia queue
  (`gryvia-<slug>-<queue>`, see `queue_name()`); a tenant without queues gets its unlimited `default` child.
* `pod_template_patch()`: the pod template of the Job/StatefulSet, handed to KAI (and fractional GPUs: a job's
  `spec.gpuFraction` reaches the template as the `gpu-fraction` annotation, see `gpu_fraction_annotations()`).
* `unschedulable_reason()`: why KAI left a pod pending.

KAI has no GPU flavors: a queue's GPU quota is the sum over its GPU quota entries. Units follow the CRD: gpu in
GPUs (fractions allowed), cpu in millicores, memory in megabytes (10^6 bytes); -1 means unlimited. No I/O here.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Mapping
from typing import Any

from apps.cluster.services import MANAGED_BY, MANAGER

from .choices import CPU, GPU, MEMORY
from .resources import resource_amount

API_VERSION = "scheduling.run.ai/v2"
SCHEDULER_NAME = "kai-scheduler"
QUEUE_LABEL = "kai.scheduler/queue"
GPU_FRACTION_ANNOTATION = "gpu-fraction"
TENANT_LABEL = "gryvia.io/tenant"
DEFAULT_QUEUE = "default"
UNLIMITED = -1

_KAI_RESOURCES = {"gpu": GPU, "cpu": CPU, "memory": MEMORY}


def parent_queue_name(tenant_slug: str) -> str:
    return f"gryvia-{tenant_slug}"


def queue_name(tenant_slug: str, queue: str) -> str:
    """The KAI Queue of a Gryvia queue: the value of the pod label `kai.scheduler/queue`."""
    return f"gryvia-{tenant_slug}-{queue}"


def _kai_units(resource: str, amount: int | float) -> int | float:
    if amount == math.inf:
        return UNLIMITED
    if resource == MEMORY:
        return int(amount) // 10**6  # bytes -> MB
    return amount  # gpu count, cpu millicores


def _resource(quotas: Iterable[Mapping[str, Any]], resource: str, weight: float) -> dict[str, Any]:
    entries = [e for e in quotas if e["resource"] == resource]
    if not entries:
        return {"quota": UNLIMITED, "limit": UNLIMITED, "overQuotaWeight": weight}
    nominal = sum(resource_amount(resource, e["nominal"]) for e in entries)
    borrow = [e.get("borrowingLimit") for e in entries]
    limit: int | float = (
        math.inf if any(b is None for b in borrow) else nominal + sum(resource_amount(resource, b) for b in borrow)
    )
    return {
        "quota": _kai_units(resource, nominal),
        "limit": _kai_units(resource, limit),
        "overQuotaWeight": weight,
    }


def _queue(name: str, *, parent: str | None, resources: dict[str, Any], tenant_slug: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"displayName": name, "resources": resources}
    if parent:
        spec["parentQueue"] = parent
    return {
        "apiVersion": API_VERSION,
        "kind": "Queue",
        "metadata": {"name": name, "labels": {MANAGED_BY: MANAGER, TENANT_LABEL: tenant_slug}},
        "spec": spec,
    }


def _sum(values: list[int | float]) -> int | float:
    return UNLIMITED if any(v == UNLIMITED for v in values) else sum(values)


def queue_objects(*, tenants: Iterable[Any], queues: Iterable[Any]) -> list[dict[str, Any]]:
    """KAI Queues for every tenant (`tenants`: rows with `id`, `slug`) and its Gryvia queues (rows with
    `tenant_id`, `name`, `quotas`, `weight`). A parent's quota is the sum of its children's (unlimited if any
    child is); parents are not limited and share the over-quota pool with weight 1."""
    by_tenant: dict[int, list[Any]] = {}
    for queue in queues:
        by_tenant.setdefault(queue.tenant_id, []).append(queue)
    out: list[dict[str, Any]] = []
    for tenant in sorted(tenants, key=lambda t: t.slug):
        parent = parent_queue_name(tenant.slug)
        children = []
        for queue in sorted(by_tenant.get(tenant.id, []), key=lambda q: q.name):
            weight = float(getattr(queue, "weight", 1.0) or 1.0)
            resources = {k: _resource(queue.quotas or [], r, weight) for k, r in _KAI_RESOURCES.items()}
            children.append(
                _queue(queue_name(tenant.slug, queue.name), parent=parent, resources=resources, tenant_slug=tenant.slug)
            )
        if not children:
            resources = {k: _resource([], r, 1.0) for k, r in _KAI_RESOURCES.items()}
            children.append(
                _queue(
                    queue_name(tenant.slug, DEFAULT_QUEUE), parent=parent, resources=resources, tenant_slug=tenant.slug
                )
            )
        parent_resources = {
            k: {
                "quota": _sum([c["spec"]["resources"][k]["quota"] for c in children]),
                "limit": UNLIMITED,
                "overQuotaWeight": 1.0,
            }
            for k in _KAI_RESOURCES
        }
        out.append(_queue(parent, parent=None, resources=parent_resources, tenant_slug=tenant.slug))
        out += children
    return out


def gpu_fraction_annotations(gpu_fraction: float) -> dict[str, str]:
    """The pod annotation that asks KAI for `gpu_fraction` (0 < f < 1) of one GPU's memory: `gpu-fraction: "0.5"`
    (KAI Scheduler's docs/gpu-sharing; GPU sharing must be on in KAI, `global.gpuSharing=true`)."""
    if not 0 < gpu_fraction < 1:
        raise ValueError(f"gpu_fraction must be between 0 and 1 (exclusive), got {gpu_fraction}")
    return {GPU_FRACTION_ANNOTATION: repr(float(gpu_fraction))}  # repr: the shortest text that reads back exactly


def pod_template_patch(template: dict[str, Any], *, queue: str, gpu_fraction: float | None = None) -> dict[str, Any]:
    """A copy of the pod template scheduled by KAI in `queue` (a KAI Queue name, see `queue_name()`).

    With `0 < gpu_fraction < 1`, or a `gpu-fraction` annotation already on the template (`manifests.workload` puts
    it there for a job's `spec.gpuFraction`), the pod asks for that share of one GPU, and the containers'
    `nvidia.com/gpu` requests and limits are removed (KAI's GPU sharing rejects both at once).
    """
    out = copy.deepcopy(template)
    meta = out.setdefault("metadata", {})
    meta.setdefault("labels", {})[QUEUE_LABEL] = queue
    spec = out.setdefault("spec", {})
    spec["schedulerName"] = SCHEDULER_NAME
    if gpu_fraction is None and GPU_FRACTION_ANNOTATION in (meta.get("annotations") or {}):
        gpu_fraction = float(meta["annotations"][GPU_FRACTION_ANNOTATION])
    if gpu_fraction is not None:
        meta.setdefault("annotations", {}).update(gpu_fraction_annotations(gpu_fraction))
        for container in spec.get("containers") or []:
            resources = container.get("resources") or {}
            for key in ("limits", "requests"):
                if key in resources:
                    resources[key].pop(GPU, None)
                    if not resources[key]:
                        del resources[key]
    return out


def unschedulable_reason(pod: dict[str, Any]) -> str | None:
    """KAI's explanation for a pending pod: the message of its `PodScheduled=False` condition (reason
    `Unschedulable`), None when the pod is scheduled or KAI has not looked at it yet."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return condition.get("message") or condition.get("reason") or "Unschedulable"
    return None

"""Pure functions from a job to its Kubernetes objects: an Indexed Job (training, fine-tuning, evaluation) or a
StatefulSet (inference), a headless Service, the report-token Secret and, with `storage`, a PVC. No I/O.

A job with `gpuFraction` (KAI mode only) gets KAI's `gpu-fraction` pod annotation and no `nvidia.com/gpu` limit.
"""

from __future__ import annotations

from typing import Any

from apps.cluster.services import MANAGED_BY, MANAGER
from apps.core.quantities import parse_quantity
from apps.queueing.services import gpu_fraction_annotations
from apps.tenants.services import CONTAINER_DEFAULT_LIMITS

from . import choices as C
from .environment import entrypoint, job_env
from .spec import JobSpec

COMPONENT = "gryvia.io/component"
TENANT_LABEL = "gryvia.io/tenant"
GPU_RESOURCE = "nvidia.com/gpu"
PRESTOP_COMMAND = ["python3", "-m", "gryvia_trainer.request_checkpoint"]


def names(name: str) -> dict[str, str]:
    return {
        "workload": name,
        "service": f"{name}-headless",
        "pvc": f"{name}-data",
        "secret": f"{name}-token",
    }


def labels(*, name: str, uid: str, tenant: str, job_type: str) -> dict[str, str]:
    return {
        MANAGED_BY: MANAGER,
        COMPONENT: "job",
        TENANT_LABEL: tenant,
        C.JOB_LABEL: name,
        C.JOB_UID_LABEL: uid,
        C.TYPE_LABEL: job_type,
    }


def _meta(name: str, namespace: str, job_labels: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": dict(job_labels)}


def _resources(spec: JobSpec) -> dict[str, Any]:
    """Requests as asked; memory limited to its request; a cpu request above the tenant LimitRange's default cpu
    limit gets a limit equal to it (the API server would fill in that default below the request and refuse the
    pod), one at or under it keeps the default, so the job may burst up to it like any pod of the tenant."""
    wanted = spec.raw.get("resources") or {}
    requests = {k: v for k, v in wanted.items() if k in ("cpu", "memory")}
    limits: dict[str, str] = {}
    if "cpu" in requests and parse_quantity(requests["cpu"]) > parse_quantity(CONTAINER_DEFAULT_LIMITS["cpu"]):
        limits["cpu"] = requests["cpu"]
    if "memory" in requests:
        limits["memory"] = requests["memory"]
    if spec.gpus_per_pod:
        limits[GPU_RESOURCE] = str(spec.gpus_per_pod)
    out: dict[str, Any] = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def pod_template(
    spec: JobSpec,
    *,
    name: str,
    namespace: str,
    uid: str,
    tenant: str,
    api_url: str,
    job_labels: dict[str, str],
    placed_on: list[str] | None = None,
    reserved: bool = False,
) -> dict[str, Any]:
    n = names(name)
    command, args = entrypoint(spec)
    container: dict[str, Any] = {
        "name": "trainer",
        "image": spec.raw["image"],
        "env": job_env(
            spec, name=name, namespace=namespace, uid=uid, tenant=tenant, api_url=api_url, token_secret=n["secret"]
        ),
    }
    if command:
        container["command"] = command
    if args:
        container["args"] = args
    if spec.raw.get("workingDir"):
        container["workingDir"] = spec.raw["workingDir"]
    resources = _resources(spec)
    if resources:
        container["resources"] = resources
    mounts, volumes = [], []
    if spec.raw.get("storage"):
        mounts.append({"name": "data", "mountPath": "/data"})
        volumes.append({"name": "data", "persistentVolumeClaim": {"claimName": n["pvc"]}})
    if spec.is_distributed:
        mounts.append({"name": "shm", "mountPath": "/dev/shm"})
        volumes.append({"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}})
    if mounts:
        container["volumeMounts"] = mounts
    pod_spec: dict[str, Any] = {"containers": [container]}
    if volumes:
        pod_spec["volumes"] = volumes
    checkpoint = spec.checkpoint
    if checkpoint:
        grace = int(checkpoint["preStopGraceSeconds"])
        # The hook waits for the trainer's ack a little less than the grace, so shutdown still fits in it.
        command = [*PRESTOP_COMMAND, "--timeout", str(max(grace - 5, 1))]
        container["lifecycle"] = {"preStop": {"exec": {"command": command}}}
        pod_spec["terminationGracePeriodSeconds"] = int(checkpoint["preStopGraceSeconds"])
    if spec.type == "inference":
        port = int(spec.raw.get("port") or 8000)
        container["ports"] = [{"name": "http", "containerPort": port}]
        container["readinessProbe"] = {"tcpSocket": {"port": port}, "periodSeconds": 5}
    node_selector = dict(spec.raw.get("nodeSelector") or {})
    if spec.uses_gpu and spec.raw.get("gpuType") not in (None, "", "any"):
        node_selector["gryvia.io/gpu"] = spec.raw["gpuType"]
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    tolerations = list(spec.raw.get("tolerations") or [])
    if reserved:  # the tenant's reserved nodes carry this taint; nobody else's pods tolerate it
        tolerations.append({"key": "gryvia.io/reserved", "operator": "Equal", "value": tenant, "effect": "NoSchedule"})
    if tolerations:
        pod_spec["tolerations"] = tolerations
    if placed_on:  # the recorded placement is the truth: the pods may run on exactly those nodes
        pod_spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": sorted(placed_on)}]}
                    ]
                }
            }
        }
    if spec.raw.get("priorityClassName"):  # reconciled from Gryvia's priority classes (apps.queueing.reconciler)
        pod_spec["priorityClassName"] = f"gryvia-{spec.raw['priorityClassName']}"
    if spec.workload_kind == "Job":
        pod_spec["restartPolicy"] = "Never"
        pod_spec["subdomain"] = n["service"]
    metadata: dict[str, Any] = {"labels": dict(job_labels)}
    if spec.gpu_fraction is not None:  # a share of one GPU, through KAI: no whole-GPU limit (see _resources)
        metadata["annotations"] = gpu_fraction_annotations(spec.gpu_fraction)
    return {"metadata": metadata, "spec": pod_spec}


def workload(
    spec: JobSpec,
    *,
    name: str,
    namespace: str,
    uid: str,
    tenant: str,
    api_url: str,
    placed_on: list[str] | None = None,
    reserved: bool = False,
) -> dict[str, Any]:
    """The Indexed Job, or for inference the StatefulSet."""
    job_labels = labels(name=name, uid=uid, tenant=tenant, job_type=spec.type)
    template = pod_template(
        spec,
        name=name,
        namespace=namespace,
        uid=uid,
        tenant=tenant,
        api_url=api_url,
        job_labels=job_labels,
        placed_on=placed_on,
        reserved=reserved,
    )
    selector = {C.JOB_UID_LABEL: uid}
    if spec.workload_kind == "StatefulSet":
        return {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": _meta(name, namespace, job_labels),
            "spec": {
                "replicas": spec.max_nodes,
                "serviceName": names(name)["service"],
                "podManagementPolicy": "Parallel",
                "selector": {"matchLabels": selector},
                "template": template,
            },
        }
    size = spec.desired_nodes
    job_spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": size,
        "parallelism": size,
        "backoffLimit": int(spec.raw.get("retryLimit") or 0),
        # Evictions, drains and preemptions (DisruptionTarget) do not use up retries.
        "podFailurePolicy": {
            "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]
        },
        "template": template,
    }
    timeout = spec.timeout_seconds
    if timeout:
        job_spec["activeDeadlineSeconds"] = timeout
    if spec.elastic and spec.min_nodes < spec.max_nodes:
        job_spec["successPolicy"] = {"rules": [{"succeededCount": spec.min_nodes}]}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": _meta(name, namespace, job_labels), "spec": job_spec}


def headless_service(
    spec: JobSpec, *, name: str, namespace: str, uid: str, tenant: str, owner: dict[str, Any] | None = None
) -> dict[str, Any]:
    """DNS for the pods (`<job>-<i>.<job>-headless`); owned by the Job once the Job exists."""
    job_labels = labels(name=name, uid=uid, tenant=tenant, job_type=spec.type)
    ports = [
        {"name": "torch-dist", "port": C.MASTER_PORT, "targetPort": C.MASTER_PORT},
        {"name": "rendezvous", "port": C.RDZV_PORT, "targetPort": C.RDZV_PORT},
    ]
    if spec.type == "inference":
        port = int(spec.raw.get("port") or 8000)
        ports.append({"name": "http", "port": port, "targetPort": port})
    meta = _meta(names(name)["service"], namespace, job_labels)
    if owner is not None and (owner.get("metadata") or {}).get("uid"):
        meta["ownerReferences"] = owned_by(owner)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {C.JOB_UID_LABEL: uid},
            "ports": ports,
        },
    }


def owned_by(owner: dict[str, Any]) -> list[dict[str, Any]]:
    """The `ownerReferences` of an object the live `owner` (a workload with its uid) controls."""
    meta = owner["metadata"]
    return [
        {
            "apiVersion": owner["apiVersion"],
            "kind": owner["kind"],
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": True,
            "blockOwnerDeletion": False,
        }
    ]


def data_pvc(spec: JobSpec, *, name: str, namespace: str, uid: str, tenant: str) -> dict[str, Any] | None:
    if not spec.raw.get("storage"):
        return None
    job_labels = labels(name=name, uid=uid, tenant=tenant, job_type=spec.type)
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _meta(names(name)["pvc"], namespace, job_labels),
        "spec": {
            "accessModes": ["ReadWriteMany" if spec.max_nodes > 1 else "ReadWriteOnce"],
            "storageClassName": spec.raw["storage"],
            "resources": {"requests": {"storage": spec.raw.get("storageRequest") or C.DEFAULT_STORAGE_REQUEST}},
        },
    }


def token_secret(spec: JobSpec, *, name: str, namespace: str, uid: str, tenant: str, token: str) -> dict[str, Any]:
    """The job's report token (scope jobs:report, bound to this job); only its HMAC is in Gryvia's database."""
    job_labels = labels(name=name, uid=uid, tenant=tenant, job_type=spec.type)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(names(name)["secret"], namespace, job_labels),
        "type": "Opaque",
        "stringData": {"token": token},
    }

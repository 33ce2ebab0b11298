"""The objects the local backend reports, in Kubernetes' shapes: Pods of local processes, a Job's, a
StatefulSet's and a Deployment's `status`, and the one Node (`local`). Pure functions of the supervisor's state.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from collections.abc import Iterable
from typing import Any

from apps.cluster.gpus import GpuInventory

from .env import LOOPBACK, container_of
from .pods import PodProcess

NODE_NAME = "local"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
INDEX_KEY = "batch.kubernetes.io/job-completion-index"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
POD_TEMPLATE_HASH_LABEL = "pod-template-hash"
ATTEMPT_LABEL = "gryvia.io/attempt"
LOCAL_PORT_ANNOTATION = "gryvia.io/local-port"
LOCAL_PID_ANNOTATION = "gryvia.io/local-pid"
LOCAL_GPUS_ANNOTATION = "gryvia.io/local-gpus"


def condition(kind: str, status: bool, *, reason: str = "", message: str = "", at: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {"type": kind, "status": "True" if status else "False"}
    if reason:
        out["reason"] = reason
    if message:
        out["message"] = message
    if at:
        out["lastProbeTime"] = at
        out["lastTransitionTime"] = at
    return out


def compress_indexes(indexes: Iterable[int]) -> str:
    """`[0, 1, 2, 5]` -> `"0-2,5"`, the format of `completedIndexes`."""
    out: list[str] = []
    run: list[int] = []
    for i in sorted(set(indexes)):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
        run = [i]
    if run:
        out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ",".join(out)


def template_hash(template: dict[str, Any]) -> str:
    """A Deployment pod template's `pod-template-hash` (10 hex digits here; the API server's differ, only equality
    matters)."""
    body = json.dumps(template, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()[:10]


def _container_status(container: dict[str, Any], pod: PodProcess) -> dict[str, Any]:
    if pod.finished and pod.started_at:
        state: dict[str, Any] = {
            "terminated": {
                "exitCode": pod.exit_code,
                "reason": pod.reason or ("Completed" if pod.exit_code == 0 else "Error"),
                "startedAt": pod.started_at,
                "finishedAt": pod.finished_at,
            }
        }
    elif pod.started:
        state = {"running": {"startedAt": pod.started_at}}
    else:
        state = {
            "waiting": {
                "reason": pod.reason or "ContainerCreating",
                **({"message": pod.message} if pod.message else {}),
            }
        }
    status: dict[str, Any] = {
        "name": container.get("name", "main"),
        "image": container.get("image", ""),
        "ready": pod.ready,
        "started": pod.alive,
        "restartCount": pod.restart_count,
        "state": state,
    }
    if pod.last_state:
        status["lastState"] = {"terminated": dict(pod.last_state)}
    return status


def render_pod(
    *,
    owner: dict[str, Any],
    template: dict[str, Any],
    pod: PodProcess,
    deleting: bool,
    restarting: bool = False,
) -> dict[str, Any]:
    """The v1 Pod for one local pod. `owner` is the workload (apiVersion, kind, metadata); `restarting` shows a
    StatefulSet's or Deployment's pod between two runs (phase Running, container waiting in CrashLoopBackOff)."""
    kind, meta = owner["kind"], owner["metadata"]
    labels = dict((template.get("metadata") or {}).get("labels") or {})
    annotations = dict((template.get("metadata") or {}).get("annotations") or {})
    spec = copy.deepcopy(template.get("spec") or {})
    if kind == "Job":
        labels.update({JOB_NAME_LABEL: meta["name"], "job-name": meta["name"], INDEX_KEY: str(pod.index)})
        labels["batch.kubernetes.io/controller-uid"] = meta["uid"]
        annotations[INDEX_KEY] = str(pod.index)
        spec.setdefault("hostname", f"{meta['name']}-{pod.index}")
    elif kind == "StatefulSet":
        labels.update({POD_INDEX_LABEL: str(pod.index), "statefulset.kubernetes.io/pod-name": pod.name})
        spec.setdefault("hostname", pod.name)
    else:  # a Deployment's pod (in a cluster its owner is a ReplicaSet; locally, the Deployment itself)
        labels[POD_TEMPLATE_HASH_LABEL] = template_hash(template)
    labels[ATTEMPT_LABEL] = str(pod.attempt)
    if pod.port is not None:
        annotations[LOCAL_PORT_ANNOTATION] = str(pod.port)
    if pod.pid is not None:
        annotations[LOCAL_PID_ANNOTATION] = str(pod.pid)
    if pod.gpus:
        annotations[LOCAL_GPUS_ANNOTATION] = ",".join(map(str, pod.gpus))
    scheduled = pod.reason != "Unschedulable"
    if scheduled:
        spec["nodeName"] = NODE_NAME
    metadata: dict[str, Any] = {
        "name": pod.name,
        "namespace": meta["namespace"],
        "uid": pod.uid,
        "labels": labels,
        "annotations": annotations,
        "creationTimestamp": pod.created_at,
        "ownerReferences": [
            {
                "apiVersion": owner["apiVersion"],
                "kind": kind,
                "name": meta["name"],
                "uid": meta["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    if deleting:
        metadata["deletionTimestamp"] = pod.finished_at or pod.created_at
    container = container_of(spec)
    phase = "Running" if restarting else pod.phase
    status: dict[str, Any] = {"phase": phase, "qosClass": "BestEffort"}
    conditions = [condition("PodScheduled", scheduled, reason="" if scheduled else "Unschedulable")]
    if scheduled:
        status.update({"startTime": pod.created_at, "hostIP": LOOPBACK, "podIP": LOOPBACK})
        status["podIPs"] = [{"ip": LOOPBACK}]
        conditions += [condition("Initialized", True), condition("ContainersReady", pod.ready)]
        conditions.append(condition("Ready", pod.ready))
        container_status = _container_status(container, pod)
        if restarting:
            container_status["state"] = {"waiting": {"reason": "CrashLoopBackOff"}}
        status["containerStatuses"] = [container_status]
    if pod.stopping:
        conditions.append(condition("DisruptionTarget", True, reason=pod.stop_reason or "TerminationByGryvia"))
    if not scheduled and pod.message:
        conditions[0]["message"] = pod.message
    status["conditions"] = conditions
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


def job_status(
    *,
    start_time: str,
    pods: Iterable[PodProcess],
    terminating: int,
    succeeded: Iterable[int],
    failed: int,
    conditions: list[dict[str, Any]],
    completion_time: str | None,
) -> dict[str, Any]:
    """batch/v1 JobStatus: zero counters are left out, as the API server does; `ready`/`terminating` always set."""
    current = [p for p in pods if not p.finished]
    done = sorted(set(succeeded))
    status: dict[str, Any] = {
        "startTime": start_time,
        "active": len(current),
        "ready": sum(1 for p in current if p.ready),
        "terminating": terminating,
        "succeeded": len(done),
        "failed": failed,
        "completedIndexes": compress_indexes(done),
        "conditions": conditions,
        "completionTime": completion_time,
        "uncountedTerminatedPods": {},
    }
    for key in ("active", "succeeded", "failed", "completedIndexes", "conditions", "completionTime"):
        if not status[key]:
            del status[key]
    return status


def stateful_set_status(*, pods: Iterable[PodProcess], endpoint: str | None) -> dict[str, Any]:
    current = [p for p in pods if not p.stopping]
    ready = sum(1 for p in current if p.ready)
    status: dict[str, Any] = {
        "replicas": len(current),
        "readyReplicas": ready,
        "availableReplicas": ready,
        "currentReplicas": len(current),
        "updatedReplicas": len(current),
    }
    if endpoint:
        status["endpoint"] = endpoint
    return status


def deployment_status(
    *, pods: Iterable[PodProcess], replicas: int, endpoints: list[str], conditions: list[dict[str, Any]]
) -> dict[str, Any]:
    """apps/v1 DeploymentStatus (zero counters left out, as the API server does), plus `endpoints`, which only the
    local backend reports: the base URL of each ready replica, in replica order."""
    current = [p for p in pods if not p.stopping]
    ready = sum(1 for p in current if p.ready)
    status: dict[str, Any] = {
        "replicas": len(current),
        "updatedReplicas": len(current),
        "readyReplicas": ready,
        "availableReplicas": ready,
        "unavailableReplicas": max(replicas - ready, 0),
    }
    status = {key: value for key, value in status.items() if value}
    status["conditions"] = conditions
    if endpoints:
        status["endpoints"] = endpoints
    return status


def node_object(inventory: GpuInventory, *, since: str) -> dict[str, Any]:
    """The local machine as a Ready v1 Node whose allocatable `nvidia.com/gpu` is the GPU count."""
    resources = {"cpu": str(os.cpu_count() or 1), "nvidia.com/gpu": str(inventory.count), "pods": "110"}
    labels = {"kubernetes.io/hostname": NODE_NAME, "kubernetes.io/os": "linux", "gryvia.io/local": "true"}
    if inventory.models:
        labels["nvidia.com/gpu.product"] = inventory.models[0].replace(" ", "-")[:63]
    if inventory.simulated:
        labels["gryvia.io/simulated-gpus"] = "true"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": NODE_NAME, "labels": labels},
        "spec": {},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [condition("Ready", True, reason="KubeletReady", message="local backend", at=since)],
            "addresses": [{"type": "InternalIP", "address": LOOPBACK}, {"type": "Hostname", "address": NODE_NAME}],
        },
    }

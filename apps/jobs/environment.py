"""The environment a job's pods get: the Kubeflow Trainer v2 (`PET_*`) set, the torch.distributed variables
computed over processes, elastic rendezvous, and Gryvia's own (`GRYVIA_*`: identity, reporting, checkpoints).

Pure functions; the same list goes to Kubernetes and to the local backend (which maps addresses and ports).
"""

from __future__ import annotations

from typing import Any

from . import choices as C
from .spec import JobSpec

SHELL_RANK = 'export RANK=$((PET_NODE_RANK * PET_NPROC_PER_NODE)); exec "$@"'


def master_host(*, name: str, namespace: str, kind: str, domain: str = "cluster.local") -> str:
    """DNS name of node 0: `<job>-0.<job>-headless.<ns>.svc.<domain>` (Job and StatefulSet pods alike)."""
    return f"{name}-0.{name}-headless.{namespace}.svc.{domain}"


def _index_ref(kind: str) -> dict[str, Any]:
    if kind == "Job":
        path = f"metadata.annotations['{C.INDEX_ANNOTATION}']"
    else:
        path = "metadata.labels['apps.kubernetes.io/pod-index']"
    return {"fieldRef": {"fieldPath": path}}


def distributed_env(spec: JobSpec, *, name: str, namespace: str, uid: str) -> list[dict[str, Any]]:
    """Variables of a distributed job (empty when not distributed)."""
    if not spec.is_distributed:
        return []
    kind = spec.workload_kind
    host = master_host(name=name, namespace=namespace, kind=kind)
    procs = spec.procs_per_node
    elastic = spec.elastic
    nnodes = f"{spec.min_nodes}:{spec.max_nodes}" if elastic else str(spec.max_nodes)
    env: list[dict[str, Any]] = [
        {"name": "PET_NNODES", "value": nnodes},
        {"name": "PET_NPROC_PER_NODE", "value": str(procs)},
        {"name": "PET_NODE_RANK", "valueFrom": _index_ref(kind)},
        {"name": "PET_MASTER_ADDR", "value": host},
        {"name": "PET_MASTER_PORT", "value": str(C.MASTER_PORT)},
        {"name": "MASTER_ADDR", "value": host},
        {"name": "MASTER_PORT", "value": str(C.MASTER_PORT)},
        {"name": "WORLD_SIZE", "value": str(spec.max_nodes * procs)},
        {"name": "NODE_RANK", "valueFrom": _index_ref(kind)},
        {"name": "NNODES", "value": nnodes},
        {"name": "NPROC_PER_NODE", "value": str(procs)},
    ]
    if procs == 1:  # one process per pod: its rank is the node index
        env.append({"name": "RANK", "valueFrom": _index_ref(kind)})
    if elastic:
        env += [
            {"name": "PET_RDZV_BACKEND", "value": "c10d"},
            {"name": "PET_RDZV_ENDPOINT", "value": f"{host}:{C.RDZV_PORT}"},
            {"name": "PET_RDZV_ID", "value": uid},
            {"name": "PET_MAX_RESTARTS", "value": "3"},
            {"name": "GRYVIA_ELASTIC", "value": "true"},
            {"name": "GRYVIA_ELASTIC_MIN_NODES", "value": str(spec.min_nodes)},
            {"name": "GRYVIA_ELASTIC_MAX_NODES", "value": str(spec.max_nodes)},
            {"name": "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "value": "1"},
        ]
    backend = spec.distributed.get("backend")
    if backend:
        env.append({"name": "GRYVIA_DIST_BACKEND", "value": backend})
    if backend != "gloo" and spec.gpus_per_pod:
        env.append({"name": "NCCL_DEBUG", "value": "WARN"})
    return env


def gryvia_env(
    spec: JobSpec, *, name: str, namespace: str, uid: str, tenant: str, api_url: str, token_secret: str
) -> list[dict[str, Any]]:
    """Identity, the control plane's address and the job's report token, and the checkpoint contract."""
    env: list[dict[str, Any]] = [
        {"name": "GRYVIA_JOB_NAME", "value": name},
        {"name": "GRYVIA_JOB_UID", "value": uid},
        {"name": "GRYVIA_TENANT", "value": tenant},
        {"name": "GRYVIA_NAMESPACE", "value": namespace},
        {"name": "GRYVIA_API_URL", "value": api_url},
        {"name": "GRYVIA_JOB_TOKEN", "valueFrom": {"secretKeyRef": {"name": token_secret, "key": "token"}}},
    ]
    checkpoint = spec.checkpoint
    if checkpoint:
        env += [
            {"name": "GRYVIA_CHECKPOINT_DIR", "value": checkpoint["dir"]},
            {"name": "GRYVIA_CHECKPOINT_REQUEST_FILE", "value": f"{checkpoint['dir']}/.checkpoint-request"},
            {"name": "GRYVIA_RESUME_IF_PRESENT", "value": "true"},
        ]
        if checkpoint.get("interval"):
            env.append({"name": "GRYVIA_CHECKPOINT_INTERVAL", "value": str(checkpoint["interval"])})
    if spec.type == "inference":
        env.append({"name": "PORT", "value": str(spec.raw.get("port") or 8000)})
    return env


def job_env(
    spec: JobSpec, *, name: str, namespace: str, uid: str, tenant: str, api_url: str, token_secret: str
) -> list[dict[str, Any]]:
    """User env first, then Gryvia's (validation keeps the names from clashing)."""
    return [
        *[dict(item) for item in spec.raw.get("env", [])],
        *distributed_env(spec, name=name, namespace=namespace, uid=uid),
        *gryvia_env(
            spec, name=name, namespace=namespace, uid=uid, tenant=tenant, api_url=api_url, token_secret=token_secret
        ),
    ]


def entrypoint(spec: JobSpec) -> tuple[list[str] | None, list[str] | None]:
    """(command, args) for the container; with several processes per pod RANK is node rank x processes."""
    command, args = spec.raw.get("command"), spec.raw.get("args")
    if spec.is_distributed and spec.procs_per_node > 1 and command:
        return ["/bin/sh", "-c", SHELL_RANK, "gryvia-entrypoint", *command, *(args or [])], None
    return command, args

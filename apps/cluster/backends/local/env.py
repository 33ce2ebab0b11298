"""How a pod's container becomes a local process: argv, environment (secrets, field references, `$(VAR)`
expansion), volumes mapped to directories under the data dir, and cluster addresses and ports mapped to this
machine. Pure apart from creating directories and reading Secrets/ConfigMaps through `lookup`.
"""

from __future__ import annotations

import base64
import logging
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
DEFAULT_GRACE_S = 30.0
CHECKPOINT_FILE_ENV = "GRYVIA_CHECKPOINT_REQUEST_FILE"
_HOST = re.compile(r"(?<![\w.-])[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?![\w.-])")
_VAR_REF = re.compile(r"\$(\$|\(([A-Za-z_][A-Za-z0-9_.-]*)\))")
_FIELD_MAP = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


def map_hosts(value: str, *, service: str | None, namespace: str) -> str:
    """Rewrite cluster DNS names (`*.svc`, `*.svc.cluster.local`, the headless service's names) to the loopback."""

    def sub(match: re.Match[str]) -> str:
        host = match.group(0).lower()
        if host.endswith((".svc", ".svc.cluster.local")):
            return LOOPBACK
        if service and (host == service or host.endswith((f".{service}", f".{service}.{namespace}"))):
            return LOOPBACK
        return match.group(0)

    return _HOST.sub(sub, value)


def expand_refs(value: str, env: dict[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion against variables defined so far; `$$` escapes, unknown names stay as written."""

    def sub(match: re.Match[str]) -> str:
        if match.group(1) == "$":
            return "$"
        return env.get(match.group(2), match.group(0))

    return _VAR_REF.sub(sub, value)


class PodConfigError(Exception):
    """The pod cannot start yet (a missing Secret, say): it stays Pending with this reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass
class PodContext:
    """What a container needs from its surroundings to become a local process."""

    kind: str  # "Job", "StatefulSet" or "Deployment"
    workload: str
    namespace: str
    pod_name: str
    index: int
    labels: dict[str, str]
    annotations: dict[str, str]
    pod_spec: dict[str, Any]
    service: str | None
    data_dir: Path
    log_dir: Path
    master_port: int
    rdzv_port: int
    http_port: int | None
    gpus: list[int]
    lookup: Callable[[str, str, str], dict[str, Any] | None]  # (kind, namespace, name) -> object


@dataclass
class LaunchPlan:
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    log_path: Path
    checkpointing: bool
    checkpoint_file: str | None
    scratch: list[Path] = field(default_factory=list)


def container_of(pod_spec: dict[str, Any]) -> dict[str, Any]:
    return ((pod_spec.get("containers") or [{}])[0]) or {}


def gpus_wanted(pod_spec: dict[str, Any]) -> int:
    resources = container_of(pod_spec).get("resources") or {}
    value = (resources.get("limits") or {}).get("nvidia.com/gpu") or (resources.get("requests") or {}).get(
        "nvidia.com/gpu"
    )
    return int(value or 0)


def grace_of(pod_spec: dict[str, Any]) -> float:
    value = pod_spec.get("terminationGracePeriodSeconds")
    return DEFAULT_GRACE_S if value is None else float(value)


def _key_value(ctx: PodContext, kind: str, ref: dict[str, Any]) -> str | None:
    obj = ctx.lookup(kind, ctx.namespace, ref.get("name", ""))
    label = f'{kind.lower()} "{ref.get("name")}"'
    if obj is None:
        if ref.get("optional"):
            return None
        raise PodConfigError("CreateContainerConfigError", f"{label} not found")
    key = ref.get("key", "")
    string_data = obj.get("stringData") or {}
    if key in string_data:
        return str(string_data[key])
    encoded = (obj.get("data") or {}).get(key)
    if encoded is not None:
        return base64.b64decode(encoded).decode() if kind == "Secret" else str(encoded)
    if ref.get("optional"):
        return None
    raise PodConfigError("CreateContainerConfigError", f"couldn't find key {key} in {label}")


def _all_keys(ctx: PodContext, kind: str, name: str) -> dict[str, str]:
    obj = ctx.lookup(kind, ctx.namespace, name) or {}
    out = {k: base64.b64decode(v).decode() if kind == "Secret" else str(v) for k, v in (obj.get("data") or {}).items()}
    out.update({k: str(v) for k, v in (obj.get("stringData") or {}).items()})
    return out


def _field_value(ctx: PodContext, path: str) -> str:
    match = _FIELD_MAP.match(path)
    if match:
        source = ctx.labels if match.group(1) == "labels" else ctx.annotations
        return source.get(match.group(2), "")
    fixed = {
        "metadata.name": ctx.pod_name,
        "metadata.namespace": ctx.namespace,
        "spec.nodeName": "local",
        "spec.serviceAccountName": "default",
        "status.podIP": LOOPBACK,
        "status.hostIP": LOOPBACK,
    }
    return fixed.get(path, "")


def resolve_env(ctx: PodContext, container: dict[str, Any]) -> dict[str, str]:
    """The container's `envFrom` and `env` resolved in order, with `$(VAR)` expansion as Kubernetes does it."""
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        for kind, key in (("Secret", "secretRef"), ("ConfigMap", "configMapRef")):
            if source.get(key):
                env.update({prefix + k: v for k, v in _all_keys(ctx, kind, source[key].get("name", "")).items()})
    for item in container.get("env") or []:
        name, source = item["name"], item.get("valueFrom")
        if source is None:
            env[name] = expand_refs(str(item.get("value", "")), env)
        elif "fieldRef" in source:
            env[name] = _field_value(ctx, source["fieldRef"].get("fieldPath", ""))
        elif "secretKeyRef" in source or "configMapKeyRef" in source:
            kind = "Secret" if "secretKeyRef" in source else "ConfigMap"
            value = _key_value(ctx, kind, source.get("secretKeyRef") or source.get("configMapKeyRef") or {})
            if value is not None:
                env[name] = value
        else:
            env[name] = ""
    return env


def volume_paths(ctx: PodContext, container: dict[str, Any]) -> tuple[list[tuple[str, Path]], list[Path], Path | None]:
    """(mountPath -> local directory, longest first), the pod's scratch directories, and the first PVC's directory."""
    volumes = {v.get("name"): v for v in ctx.pod_spec.get("volumes") or []}
    mounts: list[tuple[str, Path]] = []
    scratch: list[Path] = []
    pvc_dir: Path | None = None
    for mount in container.get("volumeMounts") or []:
        volume = volumes.get(mount.get("name")) or {}
        if "persistentVolumeClaim" in volume:
            local = ctx.data_dir / "volumes" / ctx.namespace / volume["persistentVolumeClaim"]["claimName"]
            pvc_dir = pvc_dir or local
        elif "emptyDir" in volume:
            local = ctx.data_dir / "scratch" / ctx.namespace / ctx.pod_name / str(mount.get("name"))
            scratch.append(local)
        else:
            continue  # configMap, secret, hostPath...: not mapped locally
        sub_path = str(mount.get("subPath") or "")
        if sub_path and ".." not in Path(sub_path).parts:
            local = local / sub_path.lstrip("/")
        local.mkdir(parents=True, exist_ok=True)
        mounts.append((str(mount.get("mountPath", "")).rstrip("/") or "/", local))
    mounts.sort(key=lambda m: len(m[0]), reverse=True)
    return mounts, scratch, pvc_dir


def map_path(value: str, mounts: list[tuple[str, Path]]) -> str:
    """`/data/checkpoints` -> `<data_dir>/volumes/<ns>/<claim>/checkpoints` for a mount of `/data`."""
    for mount_path, local in mounts:
        if value == mount_path or value.startswith(mount_path + "/"):
            return str(local) + value[len(mount_path) :]
    return value


def build_launch(ctx: PodContext) -> LaunchPlan:
    """Everything needed to start the pod's (first) container locally. Raises PodConfigError."""
    container = container_of(ctx.pod_spec)
    mounts, scratch, pvc_dir = volume_paths(ctx, container)
    resolved = resolve_env(ctx, container)
    env: dict[str, str] = {
        "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", os.defpath),
        "HOME": os.environ.get("HOME", str(Path.home())),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "PYTHONUNBUFFERED": "1",
        "HOSTNAME": ctx.pod_name,
    }
    if ctx.kind == "Job":
        env["JOB_COMPLETION_INDEX"] = str(ctx.index)
    for name, value in resolved.items():
        env[name] = map_path(map_hosts(value, service=ctx.service, namespace=ctx.namespace), mounts)
    for name in ("MASTER_PORT", "PET_MASTER_PORT"):
        if name in env:
            env[name] = str(ctx.master_port)
    if "PET_RDZV_ENDPOINT" in env:
        env["PET_RDZV_ENDPOINT"] = f"{LOOPBACK}:{ctx.rdzv_port}"
    if ctx.http_port is not None and "PORT" in env:
        env["PORT"] = str(ctx.http_port)
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in ctx.gpus)
    argv = [expand_refs(str(a), env) for a in [*(container.get("command") or []), *(container.get("args") or [])]]
    default_dir = pvc_dir or ctx.data_dir / "work" / ctx.namespace / ctx.workload
    cwd = default_dir
    if container.get("workingDir"):
        mapped = Path(map_path(container["workingDir"], mounts))
        if mapped.is_dir() or any(mapped.is_relative_to(local) for _, local in mounts):
            cwd = mapped
        else:
            logger.info("%s/%s: workingDir %s does not exist here", ctx.namespace, ctx.pod_name, mapped)
    cwd.mkdir(parents=True, exist_ok=True)
    checkpoint_file = env.get(CHECKPOINT_FILE_ENV)
    if checkpoint_file and not Path(checkpoint_file).is_relative_to(ctx.data_dir):
        logger.info("%s/%s: %s is not on a volume; SIGUSR1 only", ctx.namespace, ctx.pod_name, checkpoint_file)
        checkpoint_file = None  # never write outside the data dir
    pre_stop = bool((container.get("lifecycle") or {}).get("preStop"))
    return LaunchPlan(
        argv=argv,
        env=env,
        cwd=cwd,
        log_path=ctx.log_dir / ctx.namespace / f"{ctx.pod_name}.log",
        checkpointing=pre_stop or bool(checkpoint_file),
        checkpoint_file=checkpoint_file,
        scratch=scratch,
    )

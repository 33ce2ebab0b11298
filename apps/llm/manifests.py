"""Pure functions from an InferenceService to its Kubernetes objects: an `apps/v1 Deployment` (the runtime's server,
with readiness, liveness and startup probes on its health path) and a `v1 Service` (ClusterIP, port 8000). No I/O.

A tenant's service lives in the tenant's namespace (`tenant-<slug>`), a shared one in the platform namespace
(`shared_namespace`, default `gryvia-system`, where Gryvia itself runs). Runtime `external` has no objects.

In a cluster the container runs the runtime's image with its own entrypoint and the arguments built here. The local
backend cannot run images: the reconciler passes a `LocalLaunch` (the server's argv on this machine, see
apps.llm.packaged) that becomes the container's command; everything else is the same manifest.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from apps.cluster.services import MANAGED_BY, MANAGER

from .choices import Runtime
from .models import InferenceService

COMPONENT = "gryvia.io/component"
COMPONENT_VALUE = "inference-service"
TENANT_LABEL = "gryvia.io/tenant"
SERVICE_LABEL = "gryvia.io/inference-service"
UID_LABEL = "gryvia.io/inference-service-uid"
SHARED_LABEL = "gryvia.io/shared"
GPU_RESOURCE = "nvidia.com/gpu"
PORT = 8000
DEFAULT_SHARED_NAMESPACE = "gryvia-system"
SELECTOR = f"{MANAGED_BY}={MANAGER},{COMPONENT}={COMPONENT_VALUE}"

# Pinned images (override with GRYVIA_LLM_IMAGE_<RUNTIME>, see `images()` in apps.llm.reconciler). llama.cpp's
# build tag names the server release; the CUDA variant is used when the service asks for GPUs.
DEFAULT_IMAGES: dict[str, str] = {
    Runtime.VLLM: "vllm/vllm-openai:v0.10.1.1",
    Runtime.TGI: "ghcr.io/huggingface/text-generation-inference:3.3.4",
    Runtime.LLAMACPP: "ghcr.io/ggml-org/llama.cpp:server-b9603",
    "llamacpp-cuda": "ghcr.io/ggml-org/llama.cpp:server-cuda12-b9603",
    Runtime.SENTENCE_TRANSFORMERS: "ghcr.io/gryvia/gryvia:0.1.0",
}
# The path that answers 200 once the server has loaded its model.
HEALTH_PATHS = {
    Runtime.VLLM: "/health",
    Runtime.TGI: "/health",
    Runtime.LLAMACPP: "/health",
    Runtime.SENTENCE_TRANSFORMERS: "/health",
}
DEPLOYED_RUNTIMES = frozenset(HEALTH_PATHS)
# Loading a large model takes minutes: the startup probe allows 30 min before liveness applies.
STARTUP_PERIOD_S, STARTUP_FAILURES = 10, 180


@dataclass(frozen=True)
class LocalLaunch:
    """How the local backend runs a service's server: its argv (`$(PORT)` where the port goes), extra environment
    and the health path of that server."""

    command: list[str]
    health_path: str
    env: Mapping[str, str] = field(default_factory=dict)


def service_uid(service: InferenceService) -> str:
    """A stable identity for the objects of one service row (a row deleted and created again gets another)."""
    created = service.created_at.isoformat() if service.created_at else ""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"gryvia:inference-service:{service.pk}:{created}"))


def names(service: InferenceService) -> dict[str, str]:
    """The Deployment and Service name: `llm-<name>` (a DNS-1035 label, so it starts with a letter), shortened with
    a hash when the service's name is long."""
    base = f"llm-{service.name}"
    if len(base) > 63:
        digest = hashlib.sha256(service.name.encode()).hexdigest()[:8]
        base = f"llm-{service.name[:50].rstrip('-')}-{digest}"
    return {"deployment": base, "service": base}


def namespace_of(service: InferenceService, *, shared_namespace: str = DEFAULT_SHARED_NAMESPACE) -> str:
    return service.tenant.namespace if service.tenant_id else shared_namespace


def endpoint(service: InferenceService, *, shared_namespace: str = DEFAULT_SHARED_NAMESPACE) -> str:
    """The in-cluster base URL: `http://<service>.<namespace>.svc:8000/v1`."""
    namespace = namespace_of(service, shared_namespace=shared_namespace)
    return f"http://{names(service)['service']}.{namespace}.svc:{PORT}/v1"


def labels(service: InferenceService) -> dict[str, str]:
    out = {
        MANAGED_BY: MANAGER,
        COMPONENT: COMPONENT_VALUE,
        SERVICE_LABEL: service.name,
        UID_LABEL: service_uid(service),
    }
    if service.tenant_id:
        out[TENANT_LABEL] = service.tenant.slug
    else:
        out[SHARED_LABEL] = "true"
    return out


def served_model(service: InferenceService) -> str:
    """The model id the server answers to: what the gateway sends upstream."""
    return service.upstream_model or service.model


def gpus(service: InferenceService) -> int:
    return int((service.resources or {}).get("gpus") or 0)


def _llamacpp_model_args(model: str) -> list[str]:
    """A GGUF path in the image, a URL, or a Hugging Face repo (`org/name[:quant]`) that llama.cpp downloads."""
    if model.startswith(("http://", "https://")):
        return ["--model-url", model]
    if model.startswith("/") or model.endswith(".gguf"):
        return ["-m", model]
    return ["-hf", model]


def runtime_args(service: InferenceService) -> list[str]:
    """The server's arguments in its image (its entrypoint runs them), then the service's own `args`."""
    model, name, ctx, n_gpus = service.model, served_model(service), service.context_length, gpus(service)
    listen = ["--host", "0.0.0.0", "--port", str(PORT)]  # noqa: S104 - a pod listens on its own address
    if service.runtime == Runtime.VLLM:
        args = ["--model", model, "--served-model-name", name, *listen]
        args += ["--max-model-len", str(ctx)] if ctx else []
        args += ["--tensor-parallel-size", str(n_gpus)] if n_gpus > 1 else []
    elif service.runtime == Runtime.TGI:
        args = ["--model-id", model, "--hostname", "0.0.0.0", "--port", str(PORT)]  # noqa: S104
        args += ["--max-total-tokens", str(ctx)] if ctx else []
        args += ["--num-shard", str(n_gpus)] if n_gpus > 1 else []
    elif service.runtime == Runtime.LLAMACPP:
        args = [*_llamacpp_model_args(model), "--alias", name, *listen]
        args += ["--ctx-size", str(ctx)] if ctx else []
        args += ["--n-gpu-layers", "999"] if n_gpus else []
    elif service.runtime == Runtime.SENTENCE_TRANSFORMERS:
        args = ["--model-path", model, "--name", name, *listen]
    else:
        raise ValueError(f"runtime {service.runtime!r} has no Deployment")
    return [*args, *[str(a) for a in service.args or []]]


def image(service: InferenceService, images: Mapping[str, str] = DEFAULT_IMAGES) -> str:
    if service.runtime == Runtime.LLAMACPP and gpus(service):
        return images.get("llamacpp-cuda") or DEFAULT_IMAGES["llamacpp-cuda"]
    return images.get(service.runtime) or DEFAULT_IMAGES[service.runtime]


def _resources(service: InferenceService) -> dict[str, Any]:
    wanted = service.resources or {}
    requests = {k: str(wanted[k]) for k in ("cpu", "memory") if wanted.get(k)}
    limits: dict[str, str] = {}
    if "memory" in requests:
        limits["memory"] = requests["memory"]
    if gpus(service):
        limits[GPU_RESOURCE] = str(gpus(service))
    out: dict[str, Any] = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def _probe(path: str, *, period: int, failures: int, timeout: int = 1) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": period,
        "timeoutSeconds": timeout,
        "failureThreshold": failures,
    }


def deployment(
    service: InferenceService,
    *,
    namespace: str,
    images: Mapping[str, str] = DEFAULT_IMAGES,
    local: LocalLaunch | None = None,
) -> dict[str, Any]:
    """The runtime's server as a Deployment of `service.replicas` pods; with `local`, the same pods running the
    local server's command instead of the image's entrypoint."""
    if service.runtime not in DEPLOYED_RUNTIMES:
        raise ValueError(f"runtime {service.runtime!r} has no Deployment")
    own = labels(service)
    health = local.health_path if local else HEALTH_PATHS[service.runtime]
    container: dict[str, Any] = {
        "name": "server",
        "image": image(service, images),
        "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
        "readinessProbe": _probe(health, period=5, failures=3),
        "livenessProbe": _probe(health, period=10, failures=3, timeout=5),
        "startupProbe": _probe(health, period=STARTUP_PERIOD_S, failures=STARTUP_FAILURES),
    }
    if local is not None:
        container["command"] = list(local.command)
        env = {**local.env, "PORT": str(PORT)}  # the local backend gives each replica a port of its own
        container["env"] = [{"name": k, "value": str(v)} for k, v in sorted(env.items())]
    else:
        if service.runtime == Runtime.SENTENCE_TRANSFORMERS:
            container["command"] = ["python", "-m", "apps.llm.embedding_server"]
        container["args"] = runtime_args(service)
        container["env"] = [{"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"}]
    resources = _resources(service)
    if resources:
        container["resources"] = resources
    pod_spec: dict[str, Any] = {"containers": [container], "terminationGracePeriodSeconds": 30}
    if service.runtime in (Runtime.VLLM, Runtime.TGI) and local is None:
        # Tensor-parallel workers share memory through /dev/shm, which is 64 MiB in a container by default.
        container["volumeMounts"] = [{"name": "shm", "mountPath": "/dev/shm"}]
        pod_spec["volumes"] = [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}}]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": names(service)["deployment"], "namespace": namespace, "labels": dict(own)},
        "spec": {
            "replicas": int(service.replicas),
            "selector": {"matchLabels": {UID_LABEL: own[UID_LABEL]}},
            # The old pods go before the new ones start: a GPU server's replacement needs the GPUs it holds.
            "strategy": {"type": "Recreate"} if gpus(service) else {"type": "RollingUpdate"},
            "template": {"metadata": {"labels": dict(own)}, "spec": pod_spec},
        },
    }


def cluster_service(service: InferenceService, *, namespace: str) -> dict[str, Any]:
    """The ClusterIP Service in front of the Deployment's ready pods (port 8000)."""
    own = labels(service)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": names(service)["service"], "namespace": namespace, "labels": dict(own)},
        "spec": {
            "type": "ClusterIP",
            "selector": {UID_LABEL: own[UID_LABEL]},
            "ports": [{"name": "http", "port": PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def service_manifests(
    service: InferenceService,
    *,
    shared_namespace: str = DEFAULT_SHARED_NAMESPACE,
    images: Mapping[str, str] = DEFAULT_IMAGES,
    local: LocalLaunch | None = None,
) -> list[dict[str, Any]]:
    """Everything a running service has in the cluster: its Deployment and Service (none for `external`)."""
    if service.runtime not in DEPLOYED_RUNTIMES:
        return []
    namespace = namespace_of(service, shared_namespace=shared_namespace)
    return [
        deployment(service, namespace=namespace, images=images, local=local),
        cluster_service(service, namespace=namespace),
    ]

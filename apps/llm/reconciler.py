"""The inference service reconciler: each service's Deployment and Service, and its status from what runs.

Per pass (see apps.core.reconcile): one LIST of Deployments, one of Services and one of Pods, by label. A service
that runs (enabled, replicas > 0, a runtime Gryvia deploys) gets the objects of apps.llm.manifests; a disabled,
scaled-to-zero or deleted one loses them (deleted ones as orphans). Status is derived from the Deployment's ready
replicas and its pods and written with a compare-and-swap on `generation`, only when it changed; after a change the
gateway is told on commit (`apps.llm.routing.routes_changed`).

On the local backend (the embedded profile) the same Deployment runs as processes on this machine: its command is
the local server's argv (`local_launch`), each replica listens on a port of its own on 127.0.0.1, and since no
Service proxies them the endpoints are the ready replicas' addresses. On Kubernetes the endpoint is the Service.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
import weakref
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from apps.cluster.services import (
    DEPLOYMENT,
    NAMESPACE,
    POD,
    SERVICE,
    ClusterBackend,
    ConflictError,
    NotFoundError,
    ObjectRef,
    get_backend,
)
from apps.core.reconcile import OwnerReconciler, ReconcileStats

from . import manifests, packaged, routing
from .choices import Runtime, ServicePhase
from .manifests import LocalLaunch
from .models import InferenceService

logger = logging.getLogger(__name__)

RECONCILE = "reconcile-inference-services"
LOCAL_RUNTIMES = (Runtime.LLAMACPP, Runtime.SENTENCE_TRANSFORMERS)
LOOPBACK = "127.0.0.1"
CRASH_RESTARTS = 3  # a replica restarted this often without ever becoming ready: the service has Failed
STATUS_FIELDS = ("status_phase", "status_message", "status_ready_replicas", "status_endpoint", "status_endpoints")
# Backends whose platform namespace is known to exist (checked once per backend object, created when absent).
_NAMESPACES: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()
# (model, data dir, threads) -> (argv, weights path): resolving tiny-chat hashes 253 MB, so once per process.
_PACKAGED_ARGV: dict[tuple[str, str, int], tuple[list[str], Path]] = {}


class LocalLaunchError(Exception):
    """This service cannot run on this machine; the message says why and what to do."""


def images() -> dict[str, str]:
    """The runtimes' images: GRYVIA_LLM_IMAGE_VLLM, _TGI, _LLAMACPP, _LLAMACPP_CUDA, _SENTENCE_TRANSFORMERS."""
    out = dict(manifests.DEFAULT_IMAGES)
    for key in out:
        value = getattr(settings, f"GRYVIA_LLM_IMAGE_{key.upper().replace('-', '_')}", "")
        if value:
            out[key] = value
    return out


def shared_namespace() -> str:
    return settings.GRYVIA_LLM_SHARED_NAMESPACE or manifests.DEFAULT_SHARED_NAMESPACE


def _threads() -> int:
    return max(1, settings.GRYVIA_LLM_LOCAL_THREADS)


def _packaged_argv(model: packaged.LocalModel, threads: int) -> list[str]:
    key = (model.name, str(settings.DATA_DIR), threads)
    cached = _PACKAGED_ARGV.get(key)
    if cached is None or not cached[1].exists():
        argv = packaged.server_command(
            model, host=LOOPBACK, port=manifests.PORT, data_dir=settings.DATA_DIR, threads=threads
        )
        weights = Path(argv[argv.index("--model" if model.runtime == Runtime.LLAMACPP else "--model-path") + 1])
        argv[argv.index("--port") + 1] = "$(PORT)"  # the local backend expands it to the replica's own port
        cached = _PACKAGED_ARGV[key] = (argv, weights)
    return list(cached[0])


def local_launch(service: InferenceService) -> LocalLaunch:
    """The server a service runs on this machine: GRYVIA_LLM_LOCAL_COMMANDS[runtime] when set (an argv template
    with {python}, {model}, {served_model}, {host}, {port}); a packaged model (tiny-chat, minilm) through
    apps.llm.packaged; else a GGUF file (llamacpp) or a model folder (sentence-transformers) on this machine.

    Raises:
        LocalLaunchError: the runtime needs a cluster, the models extra is missing, or there is no such model here.
    """
    runtime = service.runtime
    if runtime not in LOCAL_RUNTIMES:
        raise LocalLaunchError(
            f"runtime {runtime} runs only on the kubernetes backend (GRYVIA_BACKEND=kubernetes); this machine runs "
            "llamacpp and sentence-transformers services"
        )
    threads, served = _threads(), manifests.served_model(service)
    env = {**packaged.server_env(threads=threads, base={}), "PYTHONPATH": str(settings.BASE_DIR)}
    health = packaged.HEALTH_PATHS[runtime]
    extra = [str(a) for a in service.args or []]
    template = settings.GRYVIA_LLM_LOCAL_COMMANDS.get(runtime)
    if template:
        values = {"python": sys.executable, "model": service.model, "served_model": served}
        values.update(host=LOOPBACK, port="$(PORT)")
        return LocalLaunch([str(a).format(**values) for a in template] + extra, health, env)
    bundled = next((m for m in packaged.MODELS if m.name == service.model and m.runtime == runtime), None)
    if bundled is not None:
        if bundled not in packaged.installed():
            raise LocalLaunchError(
                f"model {bundled.name} needs the local models extra: run `make models`, then restart Gryvia"
            )
        return LocalLaunch(_packaged_argv(bundled, threads) + extra, health, env)
    path = Path(service.model).expanduser()
    if not path.exists():
        known = ", ".join(m.name for m in packaged.MODELS if m.runtime == runtime)
        raise LocalLaunchError(
            f"model {service.model!r} is neither a packaged local model ({known}) nor a file or folder on this "
            "machine; in a cluster (GRYVIA_BACKEND=kubernetes) the runtime's image loads it"
        )
    module = "llama_cpp" if runtime == Runtime.LLAMACPP else "sentence_transformers"
    if importlib.util.find_spec(module) is None:
        raise LocalLaunchError(f"runtime {runtime} needs the Python package {module}: run `make models`")
    listen = ["--host", LOOPBACK, "--port", "$(PORT)"]
    if runtime == Runtime.LLAMACPP:
        argv = [sys.executable, "-m", "llama_cpp.server", "--model", str(path), "--model_alias", served, *listen]
        argv += ["--n_threads", str(threads)]
        argv += ["--n_ctx", str(service.context_length)] if service.context_length else []
    else:
        argv = [sys.executable, "-m", "apps.llm.embedding_server", "--model-path", str(path), "--name", served]
        argv += [*listen, "--threads", str(threads)]
    return LocalLaunch(argv + extra, health, env)


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _pod_problem(pod: dict[str, Any]) -> str | None:
    """Why a pod is not serving, in a user's words (None: it is ready)."""
    status = pod.get("status") or {}
    name = pod["metadata"]["name"]
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    scheduled = conditions.get("PodScheduled") or {}
    if scheduled.get("status") == "False":
        return f"pod {name} is not scheduled: {scheduled.get('message') or scheduled.get('reason') or 'pending'}"
    container = (status.get("containerStatuses") or [{}])[0]
    if container.get("ready"):
        return None
    waiting = (container.get("state") or {}).get("waiting") or {}
    last = (container.get("lastState") or {}).get("terminated") or {}
    restarts = int(container.get("restartCount") or 0)
    if last or restarts:
        code, state = last.get("exitCode", "?"), waiting.get("reason") or "restarting"
        return f"pod {name}: the server exited with code {code}, restarted {restarts} times ({state})"
    if waiting.get("reason") and waiting["reason"] != "ContainerCreating":
        return f"pod {name}: {waiting['reason']}" + (f": {waiting['message']}" if waiting.get("message") else "")
    if (container.get("state") or {}).get("running"):
        return f"pod {name}: the server is starting (loading the model)"
    return f"pod {name}: {status.get('phase') or 'Pending'}"


class InferenceServiceReconciler(OwnerReconciler[InferenceService]):
    kind = "inference-service"
    managed_kinds = (DEPLOYMENT, SERVICE)
    observed_kinds = (POD,)
    label_selector = manifests.SELECTOR
    delete_order = ("Service", "Deployment")

    def __init__(self, backend: ClusterBackend, **kw: Any) -> None:
        super().__init__(backend, **kw)
        # Local replicas have no proxy in front of them (a Service is only a record there): the gateway gets each.
        self.per_replica = backend.name == "local"
        self.namespace = shared_namespace()
        self.images = images()
        self._pending: dict[int, tuple[int, dict[str, str]]] = {}
        self._failures: dict[int, str] = {}
        self._routes_changed = False

    def owners(self):
        live_tenant = Q(tenant__isnull=True) | Q(tenant__archived_at__isnull=True)
        return InferenceService.objects.filter(live_tenant).select_related("tenant").order_by("pk").iterator(500)

    def owner_key(self, owner: InferenceService) -> str:
        return manifests.service_uid(owner)

    def owner_key_of(self, obj: dict[str, Any]) -> str | None:
        return _labels(obj).get(manifests.UID_LABEL)

    def generation(self, owner: InferenceService) -> tuple[int, int]:
        return owner.generation, owner.observed_generation

    def applied(self, owner: InferenceService) -> dict[str, str]:
        return owner.status_applied or {}

    def needs_work(self, owner: InferenceService, live: dict[str, dict[str, Any]]) -> bool:
        """A spec or object change, a service not settled yet (Pending, Failed: tried again each pass), or a status
        that the objects now say otherwise (a replica became ready); a settled service costs nothing."""
        if super().needs_work(owner, live) or owner.status_phase in (ServicePhase.PENDING, ServicePhase.FAILED):
            return True
        pods = self.observed_by_owner.get(self.owner_key(owner), {}).get("Pod", [])
        seen = self._derive(owner, live, pods)
        return any(getattr(owner, k) != v for k, v in seen.items())

    def _wants_objects(self, owner: InferenceService) -> bool:
        return owner.enabled and owner.replicas > 0 and owner.runtime in manifests.DEPLOYED_RUNTIMES

    def desired(self, owner: InferenceService, live: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        self._failures.pop(owner.pk, None)
        if not self._wants_objects(owner):
            return []
        local = None
        if self.per_replica:
            try:
                local = local_launch(owner)
            except LocalLaunchError as exc:
                self._failures[owner.pk] = str(exc)
                return []
        if owner.tenant_id is None:
            self._ensure_namespace(self.namespace)
        return manifests.service_manifests(owner, shared_namespace=self.namespace, images=self.images, local=local)

    def _ensure_namespace(self, name: str) -> None:
        """The platform namespace is cluster set-up (Gryvia runs there); the local backend starts with none, so it
        is created when absent, unlabelled: nothing ever collects it."""
        seen = _NAMESPACES.setdefault(self.backend, set())
        if name in seen:
            return
        try:
            self.backend.get(ObjectRef(NAMESPACE, name))
        except NotFoundError:
            try:
                self.backend.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
            except ConflictError:
                pass
        seen.add(name)

    # -- status -------------------------------------------------------------------------------------------------

    def _derive(
        self, owner: InferenceService, live: dict[str, dict[str, Any]], pods: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """The status fields the objects (and this pass's launch check) say the service has."""

        def status(phase: str, message: str = "", ready: int = 0, endpoints: list[str] | None = None):
            endpoints = endpoints or []
            endpoint = endpoints[0] if endpoints else ""
            return dict(
                status_phase=phase,
                status_message=message,
                status_ready_replicas=ready,
                status_endpoint=endpoint,
                status_endpoints=endpoints,
            )

        if owner.runtime == Runtime.EXTERNAL:
            if not owner.enabled:
                return status(ServicePhase.STOPPED, "disabled")
            return status(ServicePhase.READY, ready=1, endpoints=[owner.url.rstrip("/")])
        if not owner.enabled:
            return status(ServicePhase.STOPPED, "disabled")
        if owner.replicas == 0:
            return status(ServicePhase.STOPPED, "scaled to 0 replicas")
        if owner.pk in self._failures:
            return status(ServicePhase.FAILED, self._failures[owner.pk])
        deployment = next((o for o in live.values() if o.get("kind") == "Deployment"), None)
        if deployment is None:
            return status(ServicePhase.PENDING, "waiting for its Deployment to be created")
        seen = deployment.get("status") or {}
        wanted, ready = owner.replicas, int(seen.get("readyReplicas") or 0)
        if self.per_replica:
            endpoints = [f"{url.rstrip('/')}/v1" for url in seen.get("endpoints") or []]
            endpoint = endpoints[0] if endpoints else ""
        else:
            endpoint = manifests.endpoint(owner, shared_namespace=self.namespace)
            endpoints = [endpoint] if ready else []
        fields = status(ServicePhase.READY, ready=min(ready, wanted), endpoints=endpoints)
        fields["status_endpoint"] = endpoint
        if ready >= wanted:
            return fields
        current = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
        problems = [p for p in (_pod_problem(pod) for pod in sorted(current, key=lambda p: p["metadata"]["name"])) if p]
        message = f"{ready}/{wanted} replicas ready" + (f"; {problems[0]}" if problems else "")
        progressing = next((c for c in seen.get("conditions") or [] if c.get("type") == "Progressing"), {})
        crashing = any(
            int(((p.get("status") or {}).get("containerStatuses") or [{}])[0].get("restartCount") or 0)
            >= CRASH_RESTARTS
            for p in current
        )
        if ready == 0 and (progressing.get("reason") == "ProgressDeadlineExceeded" or crashing):
            phase = ServicePhase.FAILED
        else:
            phase = ServicePhase.DEPLOYING if ready == 0 else ServicePhase.DEGRADED
        fields.update(status_phase=phase, status_message=message)
        return fields

    def write_status(self, owner: InferenceService, *, generation: int, applied: dict[str, str]) -> None:
        """Kept for observe(), which writes it with the status in one compare-and-swap."""
        self._pending[owner.pk] = (generation, applied)

    def observe(
        self, owner: InferenceService, live: dict[str, dict[str, Any]], observed: dict[str, list[dict[str, Any]]]
    ) -> None:
        generation, applied = self._pending.pop(owner.pk, (owner.generation, owner.status_applied or {}))
        seen = self._derive(owner, live, observed.get("Pod", []))
        changes = {k: v for k, v in seen.items() if getattr(owner, k) != v}
        if owner.observed_generation != generation:
            changes["observed_generation"] = generation
        if (owner.status_applied or {}) != applied:
            changes["status_applied"] = applied
        if not changes:
            return
        if InferenceService.objects.filter(pk=owner.pk, generation=generation).update(**changes):
            for key, value in changes.items():
                setattr(owner, key, value)
            self._routes_changed |= any(k in STATUS_FIELDS and k != "status_message" for k in changes)

    def record_error(self, owner: InferenceService, message: str) -> None:
        message = message[:2000]
        if owner.status_message != message:
            InferenceService.objects.filter(pk=owner.pk).update(status_message=message)
            owner.status_message = message

    def end_pass(self) -> None:
        if self._routes_changed:
            transaction.on_commit(routing.routes_changed)
            self._routes_changed = False


def reconcile_inference_services(backend: ClusterBackend | None = None) -> ReconcileStats:
    """One bounded pass (the periodic entry point for the ticker and Celery beat)."""
    reconciler = InferenceServiceReconciler(
        backend or get_backend(),
        max_per_pass=settings.GRYVIA_RECONCILE_MAX_PER_PASS,
        budget_s=settings.GRYVIA_RECONCILE_BUDGET_S,
    )
    return reconciler.run_pass()

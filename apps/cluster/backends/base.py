"""The ClusterBackend protocol, resource kinds, object references and typed errors shared by every backend."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "gryvia"
FIELD_MANAGER = "gryvia"
SPEC_HASH_ANNOTATION = "gryvia.io/spec-hash"


@dataclass(frozen=True)
class ResourceKind:
    """A Kubernetes resource type and where its REST paths live."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool

    @property
    def base_path(self) -> str:
        return f"/api/{self.api_version}" if "/" not in self.api_version else f"/apis/{self.api_version}"

    def path(self, *, namespace: str | None = None, name: str | None = None) -> str:
        parts = [self.base_path]
        if self.namespaced and namespace:
            parts.append(f"namespaces/{namespace}")
        parts.append(self.plural)
        if name:
            parts.append(name)
        return "/".join(parts)


NAMESPACE = ResourceKind("v1", "Namespace", "namespaces", False)
RESOURCE_QUOTA = ResourceKind("v1", "ResourceQuota", "resourcequotas", True)
LIMIT_RANGE = ResourceKind("v1", "LimitRange", "limitranges", True)
SERVICE = ResourceKind("v1", "Service", "services", True)
CONFIG_MAP = ResourceKind("v1", "ConfigMap", "configmaps", True)
SECRET = ResourceKind("v1", "Secret", "secrets", True)
POD = ResourceKind("v1", "Pod", "pods", True)
PVC = ResourceKind("v1", "PersistentVolumeClaim", "persistentvolumeclaims", True)
EVENT = ResourceKind("v1", "Event", "events", True)
NETWORK_POLICY = ResourceKind("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies", True)
ROLE_BINDING = ResourceKind("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings", True)
JOB = ResourceKind("batch/v1", "Job", "jobs", True)
STATEFUL_SET = ResourceKind("apps/v1", "StatefulSet", "statefulsets", True)
DEPLOYMENT = ResourceKind("apps/v1", "Deployment", "deployments", True)
PRIORITY_CLASS = ResourceKind("scheduling.k8s.io/v1", "PriorityClass", "priorityclasses", False)
NODE = ResourceKind("v1", "Node", "nodes", False)
# Kueue (v0.11) and the KAI scheduler: the kinds Gryvia generates or reads in those admission modes.
RESOURCE_FLAVOR = ResourceKind("kueue.x-k8s.io/v1beta1", "ResourceFlavor", "resourceflavors", False)
CLUSTER_QUEUE = ResourceKind("kueue.x-k8s.io/v1beta1", "ClusterQueue", "clusterqueues", False)
LOCAL_QUEUE = ResourceKind("kueue.x-k8s.io/v1beta1", "LocalQueue", "localqueues", True)
WORKLOAD = ResourceKind("kueue.x-k8s.io/v1beta1", "Workload", "workloads", True)
WORKLOAD_PRIORITY_CLASS = ResourceKind(
    "kueue.x-k8s.io/v1beta1", "WorkloadPriorityClass", "workloadpriorityclasses", False
)
KUEUE_COHORT = ResourceKind("kueue.x-k8s.io/v1alpha1", "Cohort", "cohorts", False)
KUEUE_TOPOLOGY = ResourceKind("kueue.x-k8s.io/v1alpha1", "Topology", "topologies", False)
ADMISSION_CHECK = ResourceKind("kueue.x-k8s.io/v1beta1", "AdmissionCheck", "admissionchecks", False)
MULTIKUEUE_CONFIG = ResourceKind("kueue.x-k8s.io/v1beta1", "MultiKueueConfig", "multikueueconfigs", False)
MULTIKUEUE_CLUSTER = ResourceKind("kueue.x-k8s.io/v1beta1", "MultiKueueCluster", "multikueueclusters", False)
KAI_QUEUE = ResourceKind("scheduling.run.ai/v2", "Queue", "queues", False)

KINDS: dict[tuple[str, str], ResourceKind] = {
    (k.api_version, k.kind): k
    for k in (
        NAMESPACE,
        RESOURCE_QUOTA,
        LIMIT_RANGE,
        SERVICE,
        CONFIG_MAP,
        SECRET,
        POD,
        PVC,
        EVENT,
        NETWORK_POLICY,
        ROLE_BINDING,
        JOB,
        STATEFUL_SET,
        DEPLOYMENT,
        PRIORITY_CLASS,
        NODE,
        RESOURCE_FLAVOR,
        CLUSTER_QUEUE,
        LOCAL_QUEUE,
        WORKLOAD,
        WORKLOAD_PRIORITY_CLASS,
        KUEUE_COHORT,
        KUEUE_TOPOLOGY,
        ADMISSION_CHECK,
        MULTIKUEUE_CONFIG,
        MULTIKUEUE_CLUSTER,
        KAI_QUEUE,
    )
}


def kind_of(manifest: dict[str, Any]) -> ResourceKind:
    try:
        return KINDS[(manifest["apiVersion"], manifest["kind"])]
    except KeyError as exc:
        raise InvalidError(f"unsupported kind {manifest.get('apiVersion')}/{manifest.get('kind')}") from exc


@dataclass(frozen=True)
class ObjectRef:
    """Identifies one object: its kind, namespace (None for cluster-scoped kinds) and name."""

    kind: ResourceKind
    name: str
    namespace: str | None = None

    @classmethod
    def of(cls, manifest: dict[str, Any]) -> ObjectRef:
        kind = kind_of(manifest)
        meta = manifest.get("metadata") or {}
        return cls(kind=kind, name=meta["name"], namespace=meta.get("namespace") if kind.namespaced else None)

    @property
    def key(self) -> str:
        return f"{self.kind.kind}/{self.namespace or ''}/{self.name}"

    def __str__(self) -> str:
        return self.key


def object_key(obj: dict[str, Any]) -> str:
    """`ObjectRef.of(obj).key`, without building the ObjectRef (a pass keys every object it lists)."""
    kind = kind_of(obj)
    meta = obj.get("metadata") or {}
    return f"{kind.kind}/{(meta.get('namespace') if kind.namespaced else None) or ''}/{meta['name']}"


@dataclass(frozen=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK
    object: dict[str, Any]


class ClusterError(Exception):
    """A call to the cluster failed. `status` is the HTTP status when the API server answered."""

    status: int | None = None

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status


class NotFoundError(ClusterError):
    status = 404


class NamespaceMissingError(NotFoundError):
    """A write into a namespace that does not exist: the API server answers 404 naming the namespace."""

    def __init__(self, message: str, *, namespace: str) -> None:
        super().__init__(message)
        self.namespace = namespace


class ConflictError(ClusterError):
    status = 409


class ForbiddenError(ClusterError):
    status = 403


class InvalidError(ClusterError):
    status = 422


class UnavailableError(ClusterError):
    """No answer: connection refused, timeout, or a 5xx from the API server."""


def parse_label_selector(selector: str) -> list[tuple[str, str, str | None]]:
    """Equality-based selectors: `a=b`, `a==b`, `a!=b`, `a` (exists), `!a` (absent), comma separated."""
    out: list[tuple[str, str, str | None]] = []
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            out.append((key.strip(), "!=", value.strip()))
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            out.append((key.strip(), "=", value.strip()))
        elif term.startswith("!"):
            out.append((term[1:].strip(), "!", None))
        else:
            out.append((term, "exists", None))
    return out


def labels_match(labels: dict[str, str], selector: str) -> bool:
    for key, op, value in parse_label_selector(selector):
        present = key in labels
        if op == "=" and labels.get(key) != value:
            return False
        if op == "!=" and present and labels[key] == value:
            return False
        if op == "exists" and not present:
            return False
        if op == "!" and present:
            return False
    return True


@runtime_checkable
class ClusterBackend(Protocol):
    """What reconcilers need from a cluster. Every method may raise a ClusterError subclass."""

    name: str

    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply (create or update the fields we own); returns the live object."""
        ...

    def create(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Create; ConflictError when it exists."""
        ...

    def get(self, ref: ObjectRef) -> dict[str, Any]:
        """Read one object; NotFoundError when absent."""
        ...

    def list(self, kind: ResourceKind, *, label_selector: str = "", namespace: str | None = None) -> list[dict]:
        """One LIST call: every object of `kind` matching the selector (in `namespace`, or everywhere)."""
        ...

    def delete(self, ref: ObjectRef, *, grace_period_s: int | None = None, uid: str | None = None) -> bool:
        """Delete (background propagation); False when it was already gone. `grace_period_s` overrides the
        termination grace of the pods it stops (0: kill at once); `uid` is a precondition: ConflictError when the
        live object has another uid."""
        ...

    def watch(
        self,
        kind: ResourceKind,
        *,
        label_selector: str = "",
        namespace: str | None = None,
        timeout_s: float = 30.0,
    ) -> Iterator[WatchEvent]:
        """Stream changes until `timeout_s` passes."""
        ...

    def pod_logs(
        self, *, namespace: str, pod: str, container: str | None = None, tail_lines: int | None = None
    ) -> str: ...

    def stream_pod_logs(self, *, namespace: str, pod: str, follow: bool, poll_s: float = 0.2) -> Iterator[str]:
        """The pod's log line by line (each with its newline); with `follow`, new lines as they are written until
        the pod has finished and its log is drained. NotFoundError (raised by the call) when there is no log."""
        ...

    def events(self, *, namespace: str, involved_name: str | None = None) -> list[dict[str, Any]]: ...

    def close(self) -> None: ...

"""Pure functions from a tenant to its Kubernetes objects: Namespace, ResourceQuota, LimitRange, NetworkPolicy
and one RoleBinding per role that has members with a cluster identity. No I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from apps.cluster.services import MANAGED_BY, MANAGER

COMPONENT = "gryvia.io/component"
TENANT_LABEL = "gryvia.io/tenant"
GPU_RESOURCE = "nvidia.com/gpu"
# Per-type GPU quota relies on the device plugin advertising one resource name per type (nvidia.com/gpu-h100).
GPU_TYPE_RESOURCE = "nvidia.com/gpu-{type}"
ROLE_CLUSTER_ROLES = {"owner": "admin", "admin": "admin", "member": "member", "viewer": "viewer"}
PRIVATE_CIDRS = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16"]
# The LimitRange's container defaults: the API server fills them in where a container sets no request or limit
# (a job's manifests set a limit wherever its request is above the default limit: apps.jobs.manifests).
CONTAINER_DEFAULT_LIMITS = {"cpu": "4", "memory": "8Gi"}
CONTAINER_DEFAULT_REQUESTS = {"cpu": "1", "memory": "2Gi"}


def labels_for(slug: str) -> dict[str, str]:
    return {MANAGED_BY: MANAGER, COMPONENT: "tenant", TENANT_LABEL: slug}


def _meta(name: str, slug: str, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels_for(slug)}
    if namespace:
        meta["namespace"] = namespace
    return meta


def namespace(tenant: Any) -> dict[str, Any]:
    meta = _meta(tenant.namespace, tenant.slug)
    meta["labels"] = {
        **{k: str(v) for k, v in (tenant.labels or {}).items()},
        **meta["labels"],
        "pod-security.kubernetes.io/enforce": "baseline",
    }
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def resource_quota(tenant: Any) -> dict[str, Any] | None:
    hard: dict[str, str] = {}
    if tenant.max_gpus is not None:
        hard[f"requests.{GPU_RESOURCE}"] = str(tenant.max_gpus)
    for gpu_type, count in sorted((tenant.gpu_type_ceilings or {}).items()):
        hard["requests." + GPU_TYPE_RESOURCE.format(type=gpu_type.lower())] = str(count)
    if tenant.max_cpu:
        hard["requests.cpu"] = tenant.max_cpu
    if tenant.max_memory:
        hard["requests.memory"] = tenant.max_memory
    if not hard:
        return None
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": _meta("tenant-quota", tenant.slug, tenant.namespace),
        "spec": {"hard": hard},
    }


def limit_range(tenant: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": _meta("tenant-limits", tenant.slug, tenant.namespace),
        "spec": {
            "limits": [
                {
                    "type": "Container",
                    "default": dict(CONTAINER_DEFAULT_LIMITS),
                    "defaultRequest": dict(CONTAINER_DEFAULT_REQUESTS),
                }
            ]
        },
    }


def network_policy(tenant: Any) -> dict[str, Any]:
    """Isolates the namespace: traffic within it, from the platform, DNS, and the internet (not other tenants)."""
    platform = {"namespaceSelector": {"matchLabels": {"gryvia.io/platform": "true"}}}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta("tenant-isolation", tenant.slug, tenant.namespace),
        "spec": {
            "podSelector": {},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [{"podSelector": {}}, platform]}],
            "egress": [
                {"to": [{"podSelector": {}}, platform]},
                {
                    "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}}],
                    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
                },
                {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": PRIVATE_CIDRS}}]},
            ],
        },
    }


def role_bindings(tenant: Any, memberships: Iterable[Any]) -> list[dict[str, Any]]:
    subjects: dict[str, list[str]] = {}
    for membership in memberships:
        if membership.cluster_identity:
            subjects.setdefault(ROLE_CLUSTER_ROLES[membership.role], []).append(membership.cluster_identity)
    out = []
    for role in sorted(subjects):
        out.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": _meta(f"gryvia-tenant-{role}", tenant.slug, tenant.namespace),
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": f"gryvia-tenant-{role}",
                },
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name}
                    for name in sorted(set(subjects[role]))
                ],
            }
        )
    return out


def tenant_manifests(tenant: Any, memberships: Iterable[Any]) -> list[dict[str, Any]]:
    """Every object the tenant wants, namespace first."""
    objects = [namespace(tenant), resource_quota(tenant), limit_range(tenant), network_policy(tenant)]
    return [o for o in objects if o is not None] + role_bindings(tenant, memberships)

"""Kueue's MultiKueue objects (kueue.x-k8s.io/v1beta1, Kueue v0.11), used by `kueue.cluster_objects()` when
`GRYVIA_KUEUE_MULTIKUEUE_CLUSTERS` names worker clusters.

The cluster Gryvia talks to is MultiKueue's manager. Per worker there is a MultiKueueCluster whose kubeconfig
Kueue reads from the Secret `<cluster>-kubeconfig` (key `kubeconfig`) in Kueue's own namespace; one
MultiKueueConfig lists the workers; one AdmissionCheck, run by Kueue's MultiKueue controller, points at that config;
and every ClusterQueue Gryvia generates lists the check. Kueue then copies each workload that got quota in the
manager to every worker, runs it on the first worker that admits it and removes the other copies. Gryvia creates
neither the Secrets nor anything in the workers (they need the same namespaces and LocalQueues). No I/O here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from apps.cluster.services import MANAGED_BY, MANAGER

GROUP = "kueue.x-k8s.io"
API_VERSION = f"{GROUP}/v1beta1"
CONTROLLER_NAME = f"{GROUP}/multikueue"
CONFIG_NAME = "gryvia-multikueue"
ADMISSION_CHECK_NAME = "gryvia-multikueue"
KUBECONFIG_SECRET_ANNOTATION = "gryvia.io/kubeconfig-secret"


def kubeconfig_secret_name(cluster: str) -> str:
    """The Secret, in Kueue's namespace, that holds a worker cluster's kubeconfig (key `kubeconfig`)."""
    return f"{cluster}-kubeconfig"


def _meta(name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {MANAGED_BY: MANAGER}}
    if annotations:
        meta["annotations"] = annotations
    return meta


def cluster_objects(clusters: Sequence[str], *, kueue_namespace: str) -> list[dict[str, Any]]:
    """The MultiKueueClusters, the MultiKueueConfig and the AdmissionCheck, in apply order; [] when `clusters` is
    empty (MultiKueue off). `kueue_namespace` is only recorded, in the `gryvia.io/kubeconfig-secret` annotation,
    so that whoever looks at a MultiKueueCluster sees where its Secret is expected."""
    if not clusters:
        return []
    out: list[dict[str, Any]] = []
    for cluster in clusters:
        secret = kubeconfig_secret_name(cluster)
        out.append(
            {
                "apiVersion": API_VERSION,
                "kind": "MultiKueueCluster",
                "metadata": _meta(cluster, {KUBECONFIG_SECRET_ANNOTATION: f"{kueue_namespace}/{secret}"}),
                "spec": {"kubeConfig": {"locationType": "Secret", "location": secret}},
            }
        )
    out.append(
        {
            "apiVersion": API_VERSION,
            "kind": "MultiKueueConfig",
            "metadata": _meta(CONFIG_NAME),
            "spec": {"clusters": list(clusters)},
        }
    )
    out.append(
        {
            "apiVersion": API_VERSION,
            "kind": "AdmissionCheck",
            "metadata": _meta(ADMISSION_CHECK_NAME),
            "spec": {
                "controllerName": CONTROLLER_NAME,
                "parameters": {"apiGroup": GROUP, "kind": "MultiKueueConfig", "name": CONFIG_NAME},
            },
        }
    )
    return out

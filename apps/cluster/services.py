"""The cluster app's public face: which backend is in use, and the vocabulary every reconciler speaks with it.

Other apps import these names from here, never from `apps.cluster.backends.*` (see docs/architecture.md): the
kinds and labels Gryvia manages, the `ClusterBackend` protocol and its typed errors, and the functions that
pick, replace or claim the backend of this process.
"""

from .backends import claim_local_node, get_backend, set_backend
from .backends.base import (
    ADMISSION_CHECK,
    CLUSTER_QUEUE,
    DEPLOYMENT,
    JOB,
    KAI_QUEUE,
    KUEUE_COHORT,
    KUEUE_TOPOLOGY,
    LIMIT_RANGE,
    LOCAL_QUEUE,
    MANAGED_BY,
    MANAGER,
    MULTIKUEUE_CLUSTER,
    MULTIKUEUE_CONFIG,
    NAMESPACE,
    NETWORK_POLICY,
    NODE,
    POD,
    PRIORITY_CLASS,
    PVC,
    RESOURCE_FLAVOR,
    RESOURCE_QUOTA,
    ROLE_BINDING,
    SECRET,
    SERVICE,
    SPEC_HASH_ANNOTATION,
    STATEFUL_SET,
    WORKLOAD,
    WORKLOAD_PRIORITY_CLASS,
    ClusterBackend,
    ClusterError,
    ConflictError,
    NamespaceMissingError,
    NotFoundError,
    ObjectRef,
    ResourceKind,
    object_key,
)
from .backends.local import NodeBusyError

__all__ = [
    # the backend of this process
    "get_backend",
    "set_backend",
    "claim_local_node",
    "NodeBusyError",
    # the protocol, its references and errors
    "ClusterBackend",
    "ObjectRef",
    "ResourceKind",
    "object_key",
    "ClusterError",
    "ConflictError",
    "NamespaceMissingError",
    "NotFoundError",
    # labels and annotations on what Gryvia manages
    "MANAGED_BY",
    "MANAGER",
    "SPEC_HASH_ANNOTATION",
    # the kinds
    "ADMISSION_CHECK",
    "CLUSTER_QUEUE",
    "DEPLOYMENT",
    "JOB",
    "KAI_QUEUE",
    "KUEUE_COHORT",
    "KUEUE_TOPOLOGY",
    "LIMIT_RANGE",
    "LOCAL_QUEUE",
    "MULTIKUEUE_CLUSTER",
    "MULTIKUEUE_CONFIG",
    "NAMESPACE",
    "NETWORK_POLICY",
    "NODE",
    "POD",
    "PRIORITY_CLASS",
    "PVC",
    "RESOURCE_FLAVOR",
    "RESOURCE_QUOTA",
    "ROLE_BINDING",
    "SECRET",
    "SERVICE",
    "STATEFUL_SET",
    "WORKLOAD",
    "WORKLOAD_PRIORITY_CLASS",
]

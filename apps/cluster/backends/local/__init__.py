"""The `local` backend: the embedded default, Kubernetes semantics on one machine (see apps/cluster/README.md).

Its modules depend in one direction, top to bottom; a module imports only modules below it (the `local-backend`
contract in .importlinter checks it, so no function-local or TYPE_CHECKING import hides a cycle):

    backend      LocalBackend: the object store, watches, the node's claim; what get_backend() returns
       |
    workloads    WorkloadSupervisor (the kubelet) and JobController
       |
    replicas     StatefulSetController and DeploymentController: pods restarted in place, readiness probes
       |
    controller   WorkloadController: one workload's thread; the Supervisor and WorkloadStore it is given
       |
    objects      the Kubernetes shapes: Pod objects, workload status, the Node
       |
    pods         PodProcess: one pod's process group and its termination sequence
       |
    env | node | logs
                 env: a container as a launch plan (argv, environment, volumes);
                 node: which process of the installation runs the workloads (flock, published objects, groups);
                 logs: pod log files, read whole or followed. These three import none of each other.
"""

from .backend import LocalBackend
from .node import NodeBusyError

__all__ = ["LocalBackend", "NodeBusyError"]

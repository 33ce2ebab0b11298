"""GPU node inventory: Node objects with GPU feature discovery labels -> GpuNode rows, written only on change."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.cluster.backends.local.objects import node_object
from apps.cluster.gpus import GpuInventory
from apps.core.db import epochs
from apps.queueing.inventory import SEEN_REFRESH, gpu_node_fields, gpu_type_of, node_views, sync_gpu_nodes
from apps.queueing.models import GpuNode

pytestmark = pytest.mark.django_db
WRITES = ("INSERT", "UPDATE", "DELETE")


def gpu_node(name, *, product="NVIDIA-H100-80GB-HBM3", gpus=8, rack="r1", ready=True, taints=(), **labels):
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "nvidia.com/gpu.product": product,
                "nvidia.com/gpu.count": str(gpus),
                "nvidia.com/gpu.memory": "81559",
                "nvidia.com/cuda.driver.major": "550",
                "nvidia.com/cuda.driver.minor": "54",
                "nvidia.com/cuda.driver.rev": "15",
                "nvidia.com/cuda.runtime.major": "12",
                "nvidia.com/cuda.runtime.minor": "4",
                "nvidia.com/mig.capable": "true",
                "nvidia.com/mig.strategy": "single",
                "feature.node.kubernetes.io/rdma.capable": "true",
                "feature.node.kubernetes.io/network-sriov.capable": "true",
                "topology.kubernetes.io/rack": rack,
                "gryvia.io/ib-block": "ib-1",
                **labels,
            },
        },
        "spec": {"taints": list(taints)},
        "status": {
            "capacity": {"nvidia.com/gpu": str(gpus)},
            "allocatable": {"nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def _writes(ctx) -> list[str]:
    return [q["sql"] for q in ctx.captured_queries if q["sql"].lstrip().upper().startswith(WRITES)]


def test_fields_from_feature_discovery_labels():
    fields = gpu_node_fields(gpu_node("gpu-1"))
    assert fields["name"] == "gpu-1"
    assert fields["gpu_product"] == "NVIDIA-H100-80GB-HBM3" and fields["gpu_type"] == "H100"
    assert (fields["gpu_count"], fields["gpu_memory_mib"], fields["allocatable_gpus"]) == (8, 81559, 8)
    assert (fields["driver_version"], fields["cuda_version"]) == ("550.54.15", "12.4")
    assert fields["mig_capable"] and fields["mig_strategy"] == "single"
    assert fields["rdma"] and fields["sriov"]
    assert (fields["rack"], fields["ib_block"]) == ("r1", "ib-1")
    assert fields["healthy"] and not fields["unschedulable"] and not fields["simulated"]


def test_health_schedulability_and_type_label():
    tainted = gpu_node("a", taints=[{"key": "gryvia.io/gpu-unhealthy", "effect": "NoSchedule"}])
    assert not gpu_node_fields(tainted)["healthy"]
    assert not gpu_node_fields(gpu_node("b", ready=False))["healthy"]
    cordoned = gpu_node("c", **{"gryvia.io/gpu": "H100-SXM", "gryvia.io/rack": "ignored"})
    cordoned["spec"]["unschedulable"] = True
    fields = gpu_node_fields(cordoned)
    assert fields["unschedulable"] and fields["gpu_type"] == "H100-SXM" and fields["rack"] == "r1"
    assert gpu_type_of("NVIDIA-A100-SXM4-80GB") == "A100"
    assert gpu_type_of("NVIDIA-GeForce-RTX-4090") == "RTX-4090"
    assert gpu_type_of("") == ""


def test_local_backend_node_is_simulated():
    node = node_object(GpuInventory(count=2, simulated=True), since="2024-01-01T00:00:00Z")
    fields = gpu_node_fields(node)
    assert fields["simulated"] and fields["allocatable_gpus"] == 2 and fields["gpu_count"] == 2
    assert fields["healthy"] and fields["gpu_type"] == ""


def test_sync_creates_updates_deletes_and_skips_unchanged():
    now = timezone.now()
    nodes = [gpu_node("gpu-1"), gpu_node("gpu-2", rack="r2")]
    first = sync_gpu_nodes(nodes, allocated={"gpu-1": 4}, now=now)
    assert first.created == ["gpu-1", "gpu-2"] and first.changed
    row = GpuNode.objects.get(name="gpu-1")
    assert (row.gpu_type, row.allocated_gpus, row.free_gpus, row.rack) == ("H100", 4, 4, "r1")
    assert row.labels["nvidia.com/gpu.count"] == "8" and row.last_seen_at == now

    with CaptureQueriesContext(connection) as ctx:
        again = sync_gpu_nodes(nodes, allocated={"gpu-1": 4}, now=now + dt.timedelta(seconds=30))
    assert not again.changed and again.unchanged == 2
    assert _writes(ctx) == [] and len(ctx.captured_queries) == 1

    nodes[1]["spec"]["taints"] = [{"key": "gryvia.io/gpu-unhealthy", "effect": "NoSchedule"}]
    with CaptureQueriesContext(connection) as ctx:
        third = sync_gpu_nodes(nodes, allocated={"gpu-1": 8}, now=now + dt.timedelta(seconds=60))
    assert third.updated == ["gpu-1", "gpu-2"] and not third.created and not third.deleted
    assert len(_writes(ctx)) == 1
    assert GpuNode.objects.get(name="gpu-1").allocated_gpus == 8
    assert not GpuNode.objects.get(name="gpu-2").healthy

    gone = sync_gpu_nodes(nodes[:1], allocated={"gpu-1": 8}, now=now + dt.timedelta(seconds=90))
    assert gone.deleted == ["gpu-2"] and list(GpuNode.objects.values_list("name", flat=True)) == ["gpu-1"]


def test_last_seen_refreshes_only_when_stale():
    now = timezone.now()
    nodes = [gpu_node("gpu-1")]
    sync_gpu_nodes(nodes, allocated={}, now=now)
    later = now + SEEN_REFRESH
    result = sync_gpu_nodes(nodes, allocated={}, now=later)
    assert not result.changed
    assert GpuNode.objects.get(name="gpu-1").last_seen_at == later


def test_node_views_from_nodes():
    views = node_views([gpu_node("gpu-1"), gpu_node("gpu-2", ready=False)], allocated={"gpu-1": 3})
    assert [(v.name, v.free_gpus, v.healthy, v.gpu_type) for v in views] == [
        ("gpu-1", 5, True, "H100"),
        ("gpu-2", 8, False, "H100"),
    ]


def test_inside_a_pass_an_unchanged_fleet_costs_no_statement_and_a_change_elsewhere_is_read_again():
    now = timezone.now()
    nodes = [gpu_node("gpu-1"), gpu_node("gpu-2", rack="r2")]
    with epochs.snapshot():
        sync_gpu_nodes(nodes, allocated={}, now=now)
    with epochs.snapshot():
        sync_gpu_nodes(nodes, allocated={}, now=now)  # read once after its own write
    with epochs.snapshot(), CaptureQueriesContext(connection) as ctx:
        again = sync_gpu_nodes(nodes, allocated={}, now=now + dt.timedelta(seconds=30))
    assert again.unchanged == 2
    assert [q["sql"] for q in ctx.captured_queries if "gpunode" in q["sql"].lower()] == []

    GpuNode.objects.filter(name="gpu-2").update(rack="elsewhere")  # written by someone else: a new epoch
    with epochs.snapshot():
        repaired = sync_gpu_nodes(nodes, allocated={}, now=now + dt.timedelta(seconds=60))
    assert repaired.updated == ["gpu-2"] and GpuNode.objects.get(name="gpu-2").rack == "r2"

    # A row the sync writes is a copy: the cached rows stay as read until the table's epoch says otherwise.
    with epochs.snapshot():
        sync_gpu_nodes(nodes, allocated={"gpu-1": 2}, now=now + dt.timedelta(seconds=90))
    assert GpuNode.objects.get(name="gpu-1").allocated_gpus == 2
    with epochs.snapshot():
        back = sync_gpu_nodes(nodes, allocated={}, now=now + dt.timedelta(seconds=120))
    assert back.updated == ["gpu-1"] and GpuNode.objects.get(name="gpu-1").allocated_gpus == 0

"""Placement wired into admission (against kmock): Nodes with GPU feature discovery labels become GpuNode rows;
a 2x4 H100 gang asking for one rack lands in one rack with its scores recorded and required affinity to exactly
those nodes; unhealthy nodes are never chosen; nodes a reservation claims stay off other tenants' jobs."""

from __future__ import annotations

import datetime as dt

import kubernetes_validate
import pytest
from django.utils import timezone

from apps.cluster.backends.base import JOB, NODE
from apps.cluster.backends.kubernetes import KubernetesBackend
from apps.jobs.models import Job
from apps.jobs.reconciler import reconcile_jobs
from apps.queueing import services as queueing_services
from apps.queueing.models import GpuNode
from apps.queueing.reservations import reconcile_reservations
from apps.tenants.reconciler import reconcile_tenants
from tests.factories import ACTOR
from tests.jobs.factories import make_job
from tests.kmock_cluster import running_kmock

pytestmark = pytest.mark.django_db
NS = "tenant-alpha"


def gpu_node(name: str, *, rack: str, gpus: int = 8, healthy: bool = True) -> dict:
    labels = {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.count": str(gpus),
        "nvidia.com/gpu.memory": "81559",
        "nvidia.com/cuda.driver.major": "550",
        "nvidia.com/cuda.driver.minor": "54",
        "nvidia.com/cuda.driver.rev": "15",
        "feature.node.kubernetes.io/rdma.capable": "true",
        "gryvia.io/rack": rack,
        "kubernetes.io/hostname": name,
    }
    spec: dict = {}
    if not healthy:
        spec["taints"] = [{"key": "gryvia.io/gpu-unhealthy", "effect": "NoSchedule"}]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-01T00:00:00Z"}],
        },
    }


@pytest.fixture
def cluster():
    with running_kmock() as running:
        yield running


@pytest.fixture
def kube(cluster, tenant_a, tenant_b):
    backend = KubernetesBackend.for_host(cluster.url, qps=1000, burst=1000, timeout_s=5.0)
    reconcile_tenants(backend)
    yield backend
    backend.close()


def _affinity_nodes(workload: dict) -> list[str]:
    terms = workload["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    return terms[0]["matchFields"][0]["values"]


def test_a_gang_asking_for_one_rack_gets_one_rack_with_scores_and_exact_affinity(cluster, kube, tenant_a):
    for node in (
        gpu_node("r1-a", rack="r1"),
        gpu_node("r1-b", rack="r1"),
        gpu_node("r2-a", rack="r2", gpus=8),
        gpu_node("r2-sick", rack="r2", healthy=False),
    ):
        cluster.seed(node)
    job = make_job(
        tenant_a,
        "gang",
        gpus=4,
        gpuType="H100",
        distributed={"enabled": True, "nodes": 2, "gpusPerNode": 4},
        placement={"sameTopology": "rack", "strategy": "spread"},
    )
    reconcile_jobs(kube)
    rows = {n.name: n for n in GpuNode.objects.all()}
    assert set(rows) == {"r1-a", "r1-b", "r2-a", "r2-sick"}
    assert rows["r1-a"].gpu_type == "H100" and rows["r1-a"].gpu_count == 8 and rows["r1-a"].rdma
    assert not rows["r2-sick"].healthy
    job.refresh_from_db()
    chosen = set(job.placement["nodes"])
    racks = {rows[name].rack for name in chosen}
    assert len(racks) == 1 and "r2-sick" not in chosen
    assert set(job.placement["scores"]) >= chosen and job.placement["explanation"]
    workload = cluster.stored(JOB, "gang", NS)
    assert sorted(_affinity_nodes(workload)) == sorted(chosen)
    kubernetes_validate.validate({k: v for k, v in workload.items() if k != "status"}, "1.33", strict=True)
    cluster.clear_requests()
    reconcile_jobs(kube)  # the placement is kept: the same manifest, no write
    assert [r for r in cluster.requests() if r.method != "GET"] == []


def test_unhealthy_nodes_are_never_chosen(cluster, kube, tenant_a):
    cluster.seed(gpu_node("sick", rack="r1", healthy=False))
    job = make_job(tenant_a, "one", gpus=1, distributed={"enabled": False})
    reconcile_jobs(kube)
    job.refresh_from_db()
    # The only node is unhealthy: no GPU is free to admit (unhealthy nodes offer none), so the job waits.
    assert job.phase == "Queued" and cluster.stored(JOB, "one", NS) is None
    cluster.seed(gpu_node("well", rack="r1"))
    reconcile_jobs(kube)
    job.refresh_from_db()
    assert job.placement["nodes"] == ["well"] and job.phase == "Scheduling"


def test_reserved_nodes_stay_off_other_tenants_jobs(cluster, kube, tenant_a, tenant_b):
    cluster.seed(gpu_node("reserved", rack="r1"))
    start = timezone.now() - dt.timedelta(minutes=1)
    reservation = queueing_services.reservation_create(
        actor=ACTOR, tenant=tenant_b, gpu_type="H100", count=8, start_at=start, end_at=start + dt.timedelta(hours=1)
    )
    assert reconcile_reservations(kube).applied == 1  # the reservation claims the node: label and taint
    assert cluster.stored(NODE, "reserved")["metadata"]["labels"]["gryvia.io/reserved"] == "bravo"
    other = make_job(tenant_a, "other", gpus=1, distributed={"enabled": False})
    owner = make_job(tenant_b, "owner", gpus=1, distributed={"enabled": False})
    reconcile_jobs(kube)
    other.refresh_from_db()
    owner.refresh_from_db()
    assert owner.placement["nodes"] == ["reserved"]
    tolerations = cluster.stored(JOB, "owner", "tenant-bravo")["spec"]["template"]["spec"]["tolerations"]
    assert {"key": "gryvia.io/reserved", "operator": "Equal", "value": "bravo", "effect": "NoSchedule"} in tolerations
    assert other.phase == "Queued" and other.reason == "WaitingForPlacement" and not other.placement
    assert Job.all_tenants.get(pk=other.pk).message.startswith("waiting for placement")
    # The reservation ends: its claim is released and the other tenant's job may use the node.
    assert reconcile_reservations(kube, now=reservation.end_at).deleted == 1
    reconcile_jobs(kube)
    other.refresh_from_db()
    assert other.placement["nodes"] == ["reserved"]


def test_a_finished_placed_job_is_not_applied_again(cluster, kube, tenant_a):
    cluster.seed(gpu_node("n1", rack="r1"))
    job = make_job(tenant_a, "done", gpus=2, distributed={"enabled": False})
    reconcile_jobs(kube)
    stored = cluster.stored(JOB, "done", NS)
    stored["status"] = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
    cluster.seed(stored)
    reconcile_jobs(kube)
    job.refresh_from_db()
    assert job.phase == "Succeeded"
    cluster.clear_requests()
    reconcile_jobs(kube)  # the finished Job keeps its (placed) manifest: no re-apply of an immutable template
    assert [r for r in cluster.requests() if r.method == "PATCH"] == []

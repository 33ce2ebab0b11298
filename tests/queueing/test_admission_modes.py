"""GRYVIA_ADMISSION=kueue and =kai against kmock: Gryvia's queues become the scheduler's objects (checked against
the CRD schemas in tests/fixtures/crds), jobs are created for that scheduler, and its verdicts become job phases."""

from __future__ import annotations

import pytest

from apps.cluster.backends.base import (
    ADMISSION_CHECK,
    CLUSTER_QUEUE,
    JOB,
    KAI_QUEUE,
    KUEUE_TOPOLOGY,
    LOCAL_QUEUE,
    MULTIKUEUE_CLUSTER,
    MULTIKUEUE_CONFIG,
    POD,
    RESOURCE_FLAVOR,
)
from apps.cluster.backends.kubernetes import KubernetesBackend
from apps.jobs.reconciler import reconcile_jobs
from apps.queueing import services as queueing
from apps.queueing.admission_objects import reconcile_admission_objects
from apps.tenants.reconciler import reconcile_tenants
from tests import crd_schema
from tests.factories import ACTOR
from tests.jobs.factories import make_job
from tests.jobs.test_reconciler_kubernetes import _set_job_status
from tests.kmock_cluster import running_kmock

pytestmark = pytest.mark.django_db
NS = "tenant-alpha"


@pytest.fixture
def cluster():
    with running_kmock() as running:
        yield running


@pytest.fixture
def kube(cluster, tenant_a):
    backend = KubernetesBackend.for_host(cluster.url, qps=1000, burst=1000, timeout_s=5.0)
    reconcile_tenants(backend)
    queueing.queue_create(
        actor=ACTOR, tenant=tenant_a, name="team-a", quotas=[{"resource": "nvidia.com/gpu", "nominal": 4}]
    )
    yield backend
    backend.close()


def _writes(cluster) -> list[str]:
    return [f"{r.method} {r.path}" for r in cluster.requests() if r.method not in ("GET",)]


def test_kueue_objects_are_generated_valid_and_kept_in_step(cluster, kube):
    stats = reconcile_admission_objects(kube, mode="kueue")
    assert stats.errors == 0 and stats.applied > 0
    cq = cluster.stored(CLUSTER_QUEUE, "gryvia-alpha-team-a")
    crd_schema.validate({k: v for k, v in cq.items() if k != "status"})
    assert cluster.stored(LOCAL_QUEUE, "team-a", NS)["spec"]["clusterQueue"] == "gryvia-alpha-team-a"
    cluster.clear_requests()
    assert reconcile_admission_objects(kube, mode="kueue").applied == 0
    assert _writes(cluster) == []


def _spec_only(obj: dict) -> dict:
    return {k: v for k, v in obj.items() if k != "status"}


def test_multikueue_objects_are_applied_kept_in_step_and_collected_when_turned_off(cluster, kube, settings):
    settings.GRYVIA_KUEUE_MULTIKUEUE_CLUSTERS = ["worker-a", "worker-b"]
    assert reconcile_admission_objects(kube, mode="kueue").errors == 0
    for name in ("worker-a", "worker-b"):
        mkc = cluster.stored(MULTIKUEUE_CLUSTER, name)
        crd_schema.validate(_spec_only(mkc))
        assert mkc["spec"]["kubeConfig"] == {"locationType": "Secret", "location": f"{name}-kubeconfig"}
    config = cluster.stored(MULTIKUEUE_CONFIG, "gryvia-multikueue")
    assert config["spec"]["clusters"] == ["worker-a", "worker-b"]
    check = cluster.stored(ADMISSION_CHECK, "gryvia-multikueue")
    crd_schema.validate(_spec_only(check))
    assert check["spec"]["controllerName"] == "kueue.x-k8s.io/multikueue"
    cq = cluster.stored(CLUSTER_QUEUE, "gryvia-alpha-team-a")
    crd_schema.validate(_spec_only(cq))
    assert cq["spec"]["admissionChecks"] == ["gryvia-multikueue"]
    assert kube.list(KUEUE_TOPOLOGY) == []  # Kueue v0.11 refuses topology-aware flavors with MultiKueue
    assert all("topologyName" not in f["spec"] for f in kube.list(RESOURCE_FLAVOR))
    cluster.clear_requests()
    assert reconcile_admission_objects(kube, mode="kueue").applied == 0
    assert _writes(cluster) == []

    settings.GRYVIA_KUEUE_MULTIKUEUE_CLUSTERS = ["worker-a"]  # a worker removed
    assert reconcile_admission_objects(kube, mode="kueue").errors == 0
    assert [o["metadata"]["name"] for o in kube.list(MULTIKUEUE_CLUSTER)] == ["worker-a"]
    assert cluster.stored(MULTIKUEUE_CONFIG, "gryvia-multikueue")["spec"]["clusters"] == ["worker-a"]

    settings.GRYVIA_KUEUE_MULTIKUEUE_CLUSTERS = []  # off: the MultiKueue objects go, the queues lose the check
    assert reconcile_admission_objects(kube, mode="kueue").errors == 0
    for kind in (MULTIKUEUE_CLUSTER, MULTIKUEUE_CONFIG, ADMISSION_CHECK):
        assert kube.list(kind) == [], kind.kind
    assert "admissionChecks" not in cluster.stored(CLUSTER_QUEUE, "gryvia-alpha-team-a")["spec"]
    assert [t["metadata"]["name"] for t in kube.list(KUEUE_TOPOLOGY)] == ["gryvia-topology"]


def test_kueue_mode_job_flow_suspended_admitted_running_evicted(cluster, kube, tenant_a, settings):
    settings.GRYVIA_ADMISSION = "kueue"
    job = make_job(tenant_a, "kj", queueName="team-a", gpus=1, distributed={"enabled": False})
    reconcile_jobs(kube)
    stored = cluster.stored(JOB, "kj", NS)
    assert stored["spec"]["suspend"] is True
    assert stored["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    job.refresh_from_db()
    assert job.phase == "Queued"

    def workload(conditions):
        return {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "Workload",
            "metadata": {
                "name": "job-kj-abc",
                "namespace": NS,
                "ownerReferences": [
                    {"apiVersion": "batch/v1", "kind": "Job", "name": "kj", "uid": stored["metadata"]["uid"]}
                ],
            },
            "spec": {"queueName": "team-a", "podSets": [{"name": "main", "count": 1, "template": {"spec": {}}}]},
            "status": {"conditions": conditions},
        }

    pending = [
        {
            "type": "QuotaReserved",
            "status": "False",
            "reason": "Pending",
            "message": "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu",
            "lastTransitionTime": "2026-12-02T10:00:00Z",
        }
    ]
    cluster.seed(workload(pending))
    reconcile_jobs(kube)
    job.refresh_from_db()
    assert job.phase == "Queued" and "insufficient quota" in job.message

    admitted = [
        {"type": t, "status": "True", "reason": t, "message": "ok", "lastTransitionTime": "2026-12-02T10:01:00Z"}
        for t in ("QuotaReserved", "Admitted")
    ]
    cluster.seed(workload(admitted))
    running = cluster.stored(JOB, "kj", NS)
    running["spec"]["suspend"] = False
    running["status"] = {"active": 1, "ready": 1}
    cluster.seed(running)
    reconcile_jobs(kube)
    job.refresh_from_db()
    assert job.phase == "Running"

    evicted = [
        *admitted,
        {
            "type": "Evicted",
            "status": "True",
            "reason": "Preempted",
            "message": "Preempted to accommodate a higher priority Workload",
            "lastTransitionTime": "2026-12-02T10:05:00Z",
        },
    ]
    cluster.seed(workload(evicted))
    suspended = cluster.stored(JOB, "kj", NS)
    suspended["spec"]["suspend"] = True
    suspended["status"] = {}
    cluster.seed(suspended)
    reconcile_jobs(kube)
    job.refresh_from_db()
    assert job.phase == "Queued" and "higher priority" in job.message


def _pending_pod(labels: dict, name: str, message: str) -> dict:
    """A job pod KAI has not scheduled, with its reason (as KAI writes it on PodScheduled)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": {"containers": [{"name": "trainer", "image": "x"}]},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}],
        },
    }


def test_kai_mode_generates_queues_and_pods_for_the_kai_scheduler(cluster, kube, tenant_a, settings):
    assert reconcile_admission_objects(kube, mode="kai").errors == 0
    child = cluster.stored(KAI_QUEUE, "gryvia-alpha-team-a")
    crd_schema.validate({k: v for k, v in child.items() if k != "status"})
    assert child["spec"]["parentQueue"] == "gryvia-alpha"
    settings.GRYVIA_ADMISSION = "kai"
    job = make_job(tenant_a, "kaij", queueName="team-a", gpus=1, distributed={"enabled": False})
    reconcile_jobs(kube)
    template = cluster.stored(JOB, "kaij", NS)["spec"]["template"]
    assert template["spec"]["schedulerName"] == "kai-scheduler"
    assert template["metadata"]["labels"]["kai.scheduler/queue"] == "gryvia-alpha-team-a"
    labels = template["metadata"]["labels"]
    pod = _pending_pod(labels, "kaij-0-x", "queue gryvia-alpha-team-a is over its quota")
    cluster.seed(pod)
    reconcile_jobs(kube)
    job.refresh_from_db()
    assert job.phase == "Queued" and "over its quota" in job.message
    # KAI schedules it: the pod runs.
    cluster.seed({**pod, "status": {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}]}})
    _set_job_status(cluster, "kaij", {"active": 1, "ready": 1})
    reconcile_jobs(kube)
    job.refresh_from_db()
    assert job.phase == "Running"
    # KAI preempts it for a higher-priority job: the pod is evicted and its replacement waits unschedulable.
    cluster.unseed(POD, "kaij-0-x", NS)
    evicted = "queue gryvia-alpha-team-a: reclaimed by a higher-priority workload"
    cluster.seed(_pending_pod(labels, "kaij-0-y", evicted))
    _set_job_status(cluster, "kaij", {"active": 1, "ready": 0})
    reconcile_jobs(kube)
    job.refresh_from_db()
    assert job.phase == "Queued" and job.reason == "Unschedulable" and evicted in job.message
    assert job.events.filter(reason="Evicted", type="Warning").exists()


def test_kai_mode_job_with_a_gpu_fraction(cluster, kube, tenant_a, settings):
    settings.GRYVIA_ADMISSION = "kai"
    job = make_job(tenant_a, "frac", queueName="team-a", gpuFraction=0.5, distributed={"enabled": False})
    assert job.typed_spec.total_gpus == 0 and job.typed_spec.total_gpu_share == 0.5
    reconcile_jobs(kube)
    template = cluster.stored(JOB, "frac", NS)["spec"]["template"]
    assert template["metadata"]["annotations"]["gpu-fraction"] == "0.5"
    assert template["spec"]["schedulerName"] == "kai-scheduler"
    assert template["metadata"]["labels"]["kai.scheduler/queue"] == "gryvia-alpha-team-a"
    assert "nvidia.com/gpu" not in str(template["spec"]["containers"])

"""The job reconciler with GRYVIA_BACKEND=kubernetes semantics, against kmock: objects, status, cancel, node loss."""

from __future__ import annotations

import datetime as dt

import pytest

from apps.cluster.backends.base import JOB, NAMESPACE, NODE, POD, PVC, SECRET, SERVICE, ObjectRef
from apps.cluster.backends.kubernetes import KubernetesBackend
from apps.jobs import services
from apps.jobs.models import Job, JobEvent
from apps.jobs.reconciler import reconcile_jobs
from apps.tenants.reconciler import reconcile_tenants
from tests.factories import ACTOR
from tests.jobs.factories import make_job
from tests.kmock_cluster import running_kmock

pytestmark = pytest.mark.django_db
WRITES = ("POST", "PUT", "PATCH", "DELETE")
NS = "tenant-alpha"


@pytest.fixture
def cluster():
    with running_kmock(require_namespaces=True) as running:
        yield running


@pytest.fixture
def kube(cluster, tenant_a):
    backend = KubernetesBackend.for_host(cluster.url, qps=1000, burst=1000, timeout_s=5.0)
    reconcile_tenants(backend)  # the tenant's namespace
    cluster.seed(_node("gpu-1", gpus=8))
    cluster.clear_requests()
    yield backend
    backend.close()


def _node(name: str, *, gpus: int, ready: bool = True, since: dt.datetime | None = None) -> dict:
    when = (since or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "32"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "Unknown", "lastTransitionTime": when}],
        },
    }


def _set_job_status(cluster, name: str, status: dict) -> None:
    """Play the Job controller: write the batch Job's status."""
    stored = cluster.stored(JOB, name, NS)
    stored["status"] = status
    cluster.seed(stored)


def _writes(cluster) -> list[str]:
    return [f"{r.method} {r.path}" for r in cluster.requests() if r.method in WRITES]


def test_objects_names_labels_owners_and_environment(cluster, kube, tenant_a):
    job = make_job(tenant_a, "hello", storage="standard", storageRequest="5Gi")
    stats = reconcile_jobs(kube)
    assert stats.errors == 0 and stats.applied == 4
    workload = cluster.stored(JOB, "hello", NS)
    service = cluster.stored(SERVICE, "hello-headless", NS)
    assert cluster.stored(PVC, "hello-data", NS)["spec"]["resources"]["requests"]["storage"] == "5Gi"
    secret = cluster.stored(SECRET, "hello-token", NS)
    assert secret["stringData"]["token"].startswith("gry_")  # a real, bound token (only its HMAC is in the DB)
    for obj in (workload, service, secret):
        labels = obj["metadata"]["labels"]
        assert labels["gryvia.io/job"] == "hello" and labels["gryvia.io/job-uid"] == str(job.uid)
        assert labels["gryvia.io/tenant"] == "alpha" and labels["app.kubernetes.io/managed-by"] == "gryvia"
    owner = service["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "Job" and owner["name"] == "hello" and owner["uid"] == workload["metadata"]["uid"]
    env = {e["name"]: e for e in workload["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["WORLD_SIZE"]["value"] == "2" and env["MASTER_ADDR"]["value"].startswith("hello-0.hello-headless.")
    assert workload["spec"]["parallelism"] == workload["spec"]["completions"] == 2
    job.refresh_from_db()
    assert job.phase == "Scheduling" and job.observed_generation == job.generation

    cluster.clear_requests()
    assert reconcile_jobs(kube).applied == 0
    assert _writes(cluster) == []  # a second pass makes no write


def test_driving_job_status_moves_the_phase_to_succeeded(cluster, kube, tenant_a):
    job = make_job(tenant_a, "ok")
    reconcile_jobs(kube)
    _set_job_status(cluster, "ok", {"active": 2, "ready": 2, "startTime": "2026-12-02T10:00:00Z"})
    reconcile_jobs(kube)
    job.refresh_from_db()
    assert job.phase == "Running" and job.ready_nodes == 2 and job.start_time is not None
    _set_job_status(
        cluster,
        "ok",
        {
            "succeeded": 2,
            "completionTime": "2026-12-02T10:05:00Z",
            "conditions": [{"type": "Complete", "status": "True"}],
        },
    )
    reconcile_jobs(kube)
    job.refresh_from_db()
    assert job.phase == "Succeeded" and job.completion_time.isoformat().startswith("2026-12-02T10:05")
    reasons = list(JobEvent.objects.filter(job=job).values_list("reason", flat=True))
    assert reasons == ["Submitted", "Scheduled", "Running", "Succeeded"]
    # Terminal is terminal. The token goes; the finished Job (and its pods' logs) stays until the TTL.
    reconcile_jobs(kube)
    assert cluster.stored(SECRET, "ok-token", NS) is None and cluster.stored(JOB, "ok", NS) is not None
    cluster.clear_requests()
    reconcile_jobs(kube)
    assert _writes(cluster) == []
    Job.all_tenants.filter(pk=job.pk).update(completion_time=job.completion_time - dt.timedelta(days=8))
    reconcile_jobs(kube)
    reconcile_jobs(kube)
    assert cluster.stored(JOB, "ok", NS) is None and cluster.stored(SERVICE, "ok-headless", NS) is None
    job.refresh_from_db()
    assert job.finalized and job.phase == "Succeeded"


@pytest.mark.parametrize(
    ("retry_limit", "failed", "counted"),
    [
        (1, 2, "(2 failed attempts of 2 allowed by retryLimit 1)"),
        (2, 3, "(3 failed attempts of 3 allowed by retryLimit 2)"),
    ],
)
def test_a_failed_job_reports_the_reason(cluster, kube, tenant_a, retry_limit, failed, counted):
    """The failed attempts are counted against retryLimit (the Job's backoffLimit), not divided by the job's
    parallelism (2 pods here): "3/2 pod(s) failed" said nothing a user could act on."""
    job = make_job(tenant_a, "bad", retryLimit=retry_limit)
    reconcile_jobs(kube)
    reason = "BackoffLimitExceeded"
    condition = {"type": "Failed", "status": "True", "reason": reason, "message": "Job has reached the backoff limit"}
    cluster.write_status(JOB, "bad", NS, {"failed": failed, "conditions": [condition]})
    reconcile_jobs(kube)
    job.refresh_from_db()
    assert job.phase == "Failed" and job.reason == reason and job.attempts == failed + 1
    assert job.message == f"{reason}: Job has reached the backoff limit {counted}"


def test_cancel_deletes_the_workload_and_keeps_the_pvc(cluster, kube, tenant_a):
    job = make_job(tenant_a, "stop", storage="standard")
    reconcile_jobs(kube)
    services.job_cancel(actor=ACTOR, job=job)
    reconcile_jobs(kube)
    job.refresh_from_db()
    assert job.phase == "Cancelled" and job.completion_time is not None
    assert cluster.stored(JOB, "stop", NS) is None and cluster.stored(SERVICE, "stop-headless", NS) is None
    assert cluster.stored(PVC, "stop-data", NS) is not None
    delete = cluster.last_request("DELETE", f"/apis/batch/v1/namespaces/{NS}/jobs/stop")
    assert delete.body["propagationPolicy"] == "Background"


def test_the_pvc_is_collected_after_ttl(cluster, kube, tenant_a):
    job = make_job(tenant_a, "ttl", storage="standard", ttlSecondsAfterFinished=60)
    reconcile_jobs(kube)
    services.job_cancel(actor=ACTOR, job=job)
    reconcile_jobs(kube)
    assert cluster.stored(PVC, "ttl-data", NS) is not None
    Job.all_tenants.filter(pk=job.pk).update(completion_time=job.created_at - dt.timedelta(hours=1))
    reconcile_jobs(kube)
    reconcile_jobs(kube)
    assert cluster.stored(PVC, "ttl-data", NS) is None
    job.refresh_from_db()
    assert job.finalized


def test_elastic_resize_patches_parallelism_and_completions_together(cluster, kube, tenant_a):
    job = make_job(tenant_a, "el", distributed={"enabled": True, "nodes": 2, "elastic": {"minNodes": 1}})
    reconcile_jobs(kube)
    assert cluster.stored(JOB, "el", NS)["spec"]["parallelism"] == 2
    for generation, nodes in ((2, 1), (3, 2)):  # 2 -> 1 -> 2
        cluster.clear_requests()
        services.job_resize(actor=ACTOR, job=job, nodes=nodes)
        reconcile_jobs(kube)
        patch = cluster.last_request("PATCH", f"/apis/batch/v1/namespaces/{NS}/jobs/el")
        assert patch.body["spec"]["parallelism"] == patch.body["spec"]["completions"] == nodes
        assert _writes(cluster) == [f"PATCH /apis/batch/v1/namespaces/{NS}/jobs/el"]
        job.refresh_from_db()
        assert job.observed_generation == job.generation == generation and job.current_nodes == nodes


def test_a_job_wanting_more_gpus_than_exist_waits_with_the_reason(cluster, kube, tenant_a):
    job = make_job(tenant_a, "big", gpus=8, distributed={"enabled": True, "nodes": 2})
    reconcile_jobs(kube)
    job.refresh_from_db()
    assert job.phase == "Queued" and job.reason == "InsufficientGPUs"
    assert job.message == "waiting for 16 nvidia.com/gpu: the cluster has 8 nvidia.com/gpu"
    assert cluster.stored(JOB, "big", NS) is None
    cluster.seed(_node("gpu-2", gpus=8))
    reconcile_jobs(kube)
    job.refresh_from_db()
    assert job.phase == "Scheduling" and cluster.stored(JOB, "big", NS) is not None


def test_node_loss_force_deletes_pods_with_a_uid_precondition(cluster, kube, tenant_a):
    job = make_job(tenant_a, "nl", checkpoint={"dir": "/data/ckpt"}, storage="standard")
    reconcile_jobs(kube)
    _set_job_status(cluster, "nl", {"active": 2, "ready": 2})
    Job.all_tenants.filter(pk=job.pk).update(last_checkpoint_step=40, last_reported_step=47)
    labels = cluster.stored(JOB, "nl", NS)["spec"]["template"]["metadata"]["labels"]
    for index, node in ((0, "gpu-1"), (1, "lost-1")):
        cluster.seed(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"nl-{index}-abc",
                    "namespace": NS,
                    "uid": f"pod-uid-{index}",
                    "labels": {**labels, "batch.kubernetes.io/job-completion-index": str(index)},
                },
                "spec": {"nodeName": node, "containers": [{"name": "trainer", "image": "x"}]},
                "status": {"phase": "Running"},
            }
        )
    cluster.seed(_node("lost-1", gpus=8, ready=False, since=dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)))
    cluster.clear_requests()
    reconcile_jobs(kube)
    delete = cluster.last_request("DELETE", f"/api/v1/namespaces/{NS}/pods/nl-1-abc")
    assert delete.body["gracePeriodSeconds"] == 0 and delete.body["preconditions"] == {"uid": "pod-uid-1"}
    assert cluster.stored(POD, "nl-0-abc", NS) is not None  # the healthy node's pod stays
    job.refresh_from_db()
    condition = next(c for c in job.conditions if c["type"] == "RecoveredFromNodeLoss")
    assert condition["status"] == "True" and condition["reason"] == "PodsReplaced"
    assert job.node_loss_recoveries == 1 and job.lost_steps == 7
    assert JobEvent.objects.filter(job=job, reason="NodeLost", type="Warning").exists()
    assert NODE.kind == "Node"


def test_a_missing_namespace_is_made_before_the_jobs_objects_go_in(cluster, kube, tenant_a):
    """The tenant's namespace deleted (the cluster emptied, or by hand): a real API server refuses every object
    applied into it with a 404. The job pass runs the tenant pass first, once, then applies the jobs' objects in
    the same pass, rather than failing every job until the tenant pass's next tick."""
    kube.delete(ObjectRef(NAMESPACE, NS))
    jobs = [make_job(tenant_a, "first"), make_job(tenant_a, "second")]
    cluster.clear_requests()
    stats = reconcile_jobs(kube)
    assert stats.errors == 0 and cluster.stored(NAMESPACE, NS) is not None
    writes = _writes(cluster)
    assert writes.count(f"PATCH /api/v1/namespaces/{NS}") == 1  # one tenant pass for both jobs
    for job in jobs:
        assert cluster.stored(JOB, job.name, NS) is not None and cluster.stored(SECRET, f"{job.name}-token", NS)
        assert writes.index(f"PATCH /api/v1/namespaces/{NS}") < writes.index(
            f"PATCH /apis/batch/v1/namespaces/{NS}/jobs/{job.name}"
        )
        job.refresh_from_db()
        assert job.phase == "Scheduling" and job.message == ""
    assert not JobEvent.objects.filter(reason="ReconcileError").exists()


def test_gryvia_backend_kubernetes_reaches_the_cluster_of_the_kubeconfig(
    cluster, tenant_a, tmp_path, monkeypatch, settings
):
    """The setting alone (and the usual kubeconfig) makes the process-wide backend, and a plain reconcile_jobs(),
    talk to the cluster: no test-only wiring."""
    from apps.cluster.backends import get_backend, set_backend

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: kmock\n"
        f"clusters: [{{name: kmock, cluster: {{server: '{cluster.url}'}}}}]\n"
        "users: [{name: nobody, user: {}}]\n"
        "contexts: [{name: kmock, context: {cluster: kmock, user: nobody}}]\n"
    )
    from kubernetes.config import kube_config

    # KUBECONFIG as the operator sets it before start (the client reads it once, at import).
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    settings.GRYVIA_BACKEND = "kubernetes"
    set_backend(None)
    try:
        assert isinstance(get_backend(), KubernetesBackend)
        reconcile_tenants()
        cluster.seed(_node("gpu-1", gpus=8))
        make_job(tenant_a, "viaenv")
        reconcile_jobs()
        assert cluster.stored(JOB, "viaenv", NS) is not None
    finally:
        set_backend(None)

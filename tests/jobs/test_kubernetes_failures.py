"""The job reconciler on the Kubernetes backend when the cluster misbehaves (issue 26, item 1), against the emulator:
a Job deleted behind Gryvia's back, the cluster emptied, the API server down. The emulator answers as a real API
server does where it matters here: writes into a missing namespace are refused with a 404, deleting a Job deletes
what it owns (its Service), a `/status` write is a new `resourceVersion`. The tests play the Job controller.

Every job ends: retried from its checkpoint (its PVC kept) within `retryLimit`, else `Failed` with `WorkloadLost`;
a pass whose LIST fails changes nothing.
"""

from __future__ import annotations

import datetime as dt
import time

import pytest
from django.utils import timezone

from apps.billing.models import UsageRecord
from apps.cluster.backends.base import JOB, NAMESPACE, PVC, SECRET, SERVICE, ObjectRef
from apps.cluster.backends.kubernetes import KubernetesBackend
from apps.jobs.models import Job, JobEvent
from apps.jobs.reconciler import reconcile_jobs
from apps.tenants.reconciler import reconcile_tenants
from tests.jobs.factories import make_job
from tests.kmock_cluster import running_kmock

pytestmark = pytest.mark.django_db
NS = "tenant-alpha"
CHECKPOINTED = {"checkpoint": {"dir": "/data/ckpt"}, "storage": "standard"}
STARTED = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")  # the jobs' timeout is 10 minutes


@pytest.fixture
def cluster():
    with running_kmock(require_namespaces=True) as running:
        yield running


@pytest.fixture
def kube(cluster, tenant_a):
    backend = KubernetesBackend.for_host(cluster.url, qps=1000, burst=1000, timeout_s=2.0)
    reconcile_tenants(backend)
    cluster.seed(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "gpu-1"},
            "status": {
                "allocatable": {"nvidia.com/gpu": "8", "cpu": "32"},
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": STARTED}],
            },
        }
    )
    yield backend
    backend.close()


def running(cluster, kube, tenant, name: str, **spec) -> Job:
    """A job whose Job the controller reports running on both its pods."""
    job = make_job(tenant, name, **spec)
    reconcile_jobs(kube)
    cluster.write_status(JOB, name, NS, {"active": 2, "ready": 2, "startTime": STARTED})
    reconcile_jobs(kube)
    job.refresh_from_db()
    assert job.phase == "Running" and job.attempts == 1
    return job


def succeed(cluster, kube, job: Job) -> Job:
    """The controller runs the job's (current) Job to completion; the next pass sees it."""
    cluster.write_status(JOB, job.name, NS, {"active": 2, "ready": 2, "startTime": STARTED})
    reconcile_jobs(kube)
    condition = {"type": "Complete", "status": "True", "lastTransitionTime": STARTED}
    cluster.write_status(JOB, job.name, NS, {"active": 0, "succeeded": 2, "conditions": [condition]})
    reconcile_jobs(kube)
    job.refresh_from_db()
    return job


def uid(obj: dict | None) -> str | None:
    return None if obj is None else obj["metadata"]["uid"]


def version(obj: dict | None) -> int:
    assert obj is not None
    return int(obj["metadata"]["resourceVersion"])


def open_usage(job: Job) -> list[UsageRecord]:
    return list(UsageRecord.all_tenants.filter(job_pk=job.pk, final=False))


def deletes(cluster) -> list[str]:
    return [r.path for r in cluster.requests("DELETE")]


def test_a_deleted_job_is_created_again_from_its_checkpoint_within_retry_limit(cluster, kube, tenant_a):
    job = running(cluster, kube, tenant_a, "survivor", retryLimit=1, **CHECKPOINTED)
    first = cluster.stored(JOB, "survivor", NS)
    secret, pvc = uid(cluster.stored(SECRET, "survivor-token", NS)), uid(cluster.stored(PVC, "survivor-data", NS))
    assert len(open_usage(job)) == 1

    kube.delete(ObjectRef.of(first))  # behind Gryvia's back; the garbage collector takes its Service
    assert cluster.stored(SERVICE, "survivor-headless", NS) is None
    cluster.clear_requests()
    assert reconcile_jobs(kube).errors == 0
    again = cluster.stored(JOB, "survivor", NS)
    assert again is not None and uid(again) != uid(first)
    volumes = again["spec"]["template"]["spec"]["volumes"]
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "survivor-data"}} in volumes
    assert uid(cluster.stored(PVC, "survivor-data", NS)) == pvc  # the checkpoints it resumes from
    assert uid(cluster.stored(SECRET, "survivor-token", NS)) == secret  # its token kept while it is recreated
    service = cluster.stored(SERVICE, "survivor-headless", NS)
    assert service["metadata"]["ownerReferences"][0]["uid"] == uid(again)
    assert deletes(cluster) == []
    job.refresh_from_db()
    assert (job.phase, job.reason, job.attempts) == ("Scheduling", "WorkloadLost", 2)
    assert "attempt 2 of 2" in job.message
    assert JobEvent.objects.filter(job=job, reason="WorkloadLost", type="Warning").exists()

    job = succeed(cluster, kube, job)
    assert (job.phase, job.attempts) == ("Succeeded", 2)
    assert not open_usage(job)


def test_a_deleted_job_with_no_retry_left_fails_and_takes_its_objects_with_it(cluster, kube, tenant_a):
    job = running(cluster, kube, tenant_a, "once", **CHECKPOINTED)
    kube.delete(ObjectRef(JOB, "once", NS))
    assert reconcile_jobs(kube).errors == 0
    job.refresh_from_db()
    assert (job.phase, job.reason) == ("Failed", "WorkloadLost"), job.message
    assert "retryLimit 0" in job.message and not open_usage(job)
    assert cluster.stored(JOB, "once", NS) is None and cluster.stored(SECRET, "once-token", NS) is None
    assert cluster.stored(PVC, "once-data", NS) is not None  # kept until the TTL, as for any finished job
    reconcile_jobs(kube)
    assert cluster.stored(JOB, "once", NS) is None  # never created again


def test_the_cluster_emptied_namespaces_first_then_the_jobs(cluster, kube, tenant_a):
    """Every object deleted (the namespace took its objects with it): the first job pass makes the namespace (the
    tenant pass), then runs again the job that has a retry left and fails the one that has none."""
    keep = running(cluster, kube, tenant_a, "keep", retryLimit=2, **CHECKPOINTED)
    lose = running(cluster, kube, tenant_a, "lose")
    kube.delete(ObjectRef(NAMESPACE, NS))
    assert cluster.stored(JOB, "keep", NS) is None and cluster.stored(PVC, "keep-data", NS) is None
    cluster.clear_requests()

    assert reconcile_jobs(kube).errors == 0
    assert [r.path for r in cluster.requests("PATCH")].count(f"/api/v1/namespaces/{NS}") == 1
    made = version(cluster.stored(NAMESPACE, NS))
    for kind, name in ((PVC, "keep-data"), (SECRET, "keep-token"), (JOB, "keep"), (SERVICE, "keep-headless")):
        assert version(cluster.stored(kind, name, NS)) > made, name  # written after their namespace
    assert cluster.stored(JOB, "lose", NS) is None
    keep.refresh_from_db()
    lose.refresh_from_db()
    assert (keep.phase, keep.reason, keep.attempts) == ("Scheduling", "WorkloadLost", 2)
    assert (lose.phase, lose.reason) == ("Failed", "WorkloadLost")
    assert not JobEvent.objects.filter(reason="ReconcileError").exists()

    keep = succeed(cluster, kube, keep)
    assert keep.phase == "Succeeded" and not open_usage(keep) and not open_usage(lose)


def test_the_api_server_down_changes_nothing_and_the_jobs_carry_on(cluster, kube, tenant_a):
    """The API server down for 30 s, as the issue tried it. While every call fails, each pass stops at its first
    LIST: no job is marked lost, no status, event or usage changes. After, the jobs go on from where they were; the
    one whose timeout ran out meanwhile fails at once."""
    steady = running(cluster, kube, tenant_a, "steady", retryLimit=1)
    late = running(cluster, kube, tenant_a, "late", timeout="60s")
    waiting = make_job(tenant_a, "waiting")
    before = {j["name"]: j for j in Job.all_tenants.values()}
    events = JobEvent.objects.count()

    with cluster.outage():
        Job.all_tenants.filter(pk=late.pk).update(start_time=timezone.now() - dt.timedelta(seconds=61))
        started = time.monotonic()
        passes = 0
        while time.monotonic() - started < 30.0:  # the API server down for 30 s; passes every 2 s, as scheduled
            assert reconcile_jobs(kube).errors == 1
            assert reconcile_tenants(kube).errors == 1
            passes += 1
            time.sleep(2.0)
        assert passes >= 10
    after = {j["name"]: j for j in Job.all_tenants.values()}
    for name in ("steady", "waiting"):
        assert after[name] == before[name], name
    assert after["late"]["phase"] == "Running" and JobEvent.objects.count() == events
    assert not JobEvent.objects.filter(reason="WorkloadLost").exists()

    reconcile_jobs(kube)  # the first pass after
    late.refresh_from_db()
    assert (late.phase, late.reason) == ("Failed", "DeadlineExceeded") and not open_usage(late)
    assert cluster.stored(JOB, "late", NS) is None
    steady = succeed(cluster, kube, steady)
    assert (steady.phase, steady.attempts) == ("Succeeded", 1) and not open_usage(steady)
    waiting.refresh_from_db()
    assert waiting.phase == "Scheduling" and cluster.stored(JOB, "waiting", NS) is not None
    assert succeed(cluster, kube, waiting).phase == "Succeeded"
    assert not JobEvent.objects.filter(reason="WorkloadLost").exists()

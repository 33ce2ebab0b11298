"""Admission wired into the job reconciler (against kmock): queue order, positions and reasons each cycle,
whole-gang admission, rejection of jobs that can never fit, and the API fields that show them."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.cluster.backends.base import JOB, POD
from apps.cluster.backends.kubernetes import KubernetesBackend
from apps.jobs.models import Job
from apps.jobs.reconciler import reconcile_jobs
from apps.queueing import services as queueing
from apps.tenants.reconciler import reconcile_tenants
from tests.factories import ACTOR
from tests.jobs.factories import make_job
from tests.jobs.test_reconciler_kubernetes import NS, _node, _set_job_status
from tests.kmock_cluster import running_kmock

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster():
    with running_kmock() as running:
        yield running


@pytest.fixture
def kube(cluster, tenant_a):
    backend = KubernetesBackend.for_host(cluster.url, qps=1000, burst=1000, timeout_s=5.0)
    reconcile_tenants(backend)
    cluster.seed(_node("gpu-1", gpus=8))
    queueing.queue_create(
        actor=ACTOR, tenant=tenant_a, name="team-a", quotas=[{"resource": "nvidia.com/gpu", "nominal": 2}]
    )
    yield backend
    backend.close()


def gpu_job(tenant, name, gpus=2, **kw):
    return make_job(tenant, name, gpus=gpus, queueName="team-a", distributed={"enabled": False}, **kw)


def running_pod(cluster, job_name: str) -> None:
    """The job's pod, Running (as the kubelet reports it until its grace period ends after an eviction)."""
    labels = cluster.stored(JOB, job_name, NS)["spec"]["template"]["metadata"]["labels"]
    cluster.seed(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{job_name}-0-pod", "namespace": NS, "uid": f"{job_name}-pod", "labels": labels},
            "spec": {"nodeName": "gpu-1", "containers": [{"name": "trainer", "image": "x"}]},
            "status": {"phase": "Running"},
        }
    )


def test_positions_and_reasons_follow_each_cycle(cluster, kube, tenant_a, client_a):
    first, second, third = (gpu_job(tenant_a, n) for n in ("first", "second", "third"))
    reconcile_jobs(kube)
    for job in (first, second, third):
        job.refresh_from_db()
    assert first.phase == "Scheduling" and cluster.stored(JOB, "first", NS) is not None
    assert (second.phase, second.queue_position, second.queue_length) == ("Queued", 1, 2)
    assert second.reason == "WaitingForQuota"
    assert second.message == "waiting for 2 nvidia.com/gpu in queue team-a"
    status = client_a.get("/api/v1/jobs/second/").json()["status"]
    assert status["message"] == "waiting for 2 nvidia.com/gpu in queue team-a; position 1 of 2"
    assert third.queue_position == 2 and cluster.stored(JOB, "second", NS) is None
    status = client_a.get("/api/v1/jobs/third/").json()["status"]
    assert (status["queueName"], status["queuePosition"], status["queueLength"]) == ("team-a", 2, 2)
    queue = client_a.get("/api/v1/queues/team-a/").json()["status"]
    assert queue["pending"] == 2 and queue["admitted"] == {"nvidia.com/gpu": 2}

    _set_job_status(cluster, "first", {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]})
    reconcile_jobs(kube)  # first finishes: its quota comes back
    reconcile_jobs(kube)  # second is admitted
    for job in (first, second, third):
        job.refresh_from_db()
    assert first.phase == "Succeeded" and second.phase == "Scheduling" and second.queue_position is None
    assert (third.phase, third.queue_position, third.queue_length) == ("Queued", 1, 1)


def test_a_finish_and_the_admission_it_allows_take_one_pass(cluster, kube, tenant_a):
    first, second = gpu_job(tenant_a, "first"), gpu_job(tenant_a, "second")
    reconcile_jobs(kube)
    _set_job_status(cluster, "first", {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]})
    stats = reconcile_jobs(kube)  # sees first's workload complete: its quota is free for this pass's admission
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.phase == "Succeeded" and second.phase == "Scheduling"
    assert cluster.stored(JOB, "second", NS) is not None and stats.errors == 0


def test_a_failed_workload_frees_its_quota_in_the_same_pass(cluster, kube, tenant_a):
    first, second = gpu_job(tenant_a, "first"), gpu_job(tenant_a, "second")
    reconcile_jobs(kube)
    _set_job_status(cluster, "first", {"failed": 1, "conditions": [{"type": "Failed", "status": "True"}]})
    reconcile_jobs(kube)
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.phase == "Failed" and second.phase == "Scheduling"


def test_priority_jumps_the_queue(cluster, kube, tenant_a):
    gpu_job(tenant_a, "holder", priority=50)  # as high as the newcomer: not preempted
    reconcile_jobs(kube)
    low = gpu_job(tenant_a, "low")
    high = gpu_job(tenant_a, "high", priority=50)
    reconcile_jobs(kube)
    low.refresh_from_db()
    high.refresh_from_db()
    assert Job.all_tenants.get(name="holder").phase == "Scheduling"
    assert (high.queue_position, low.queue_position, low.queue_length) == (1, 2, 2)


def test_a_job_that_can_never_fit_is_rejected_and_nothing_is_created(cluster, kube, tenant_a):
    job = gpu_job(tenant_a, "huge", gpus=4)
    reconcile_jobs(kube)
    job.refresh_from_db()
    assert job.phase == "Rejected" and job.reason == "NeverFits"
    assert (
        job.message == "asks for 4 nvidia.com/gpu but queue team-a can get at most 2 nvidia.com/gpu, borrowing included"
    )
    assert cluster.stored(JOB, "huge", NS) is None
    reconcile_jobs(kube)
    job.refresh_from_db()
    assert job.phase == "Rejected"  # terminal


def test_a_gang_waits_whole(cluster, kube, tenant_a):
    make_job(tenant_a, "gang", gpus=1, queueName="team-a", distributed={"enabled": True, "nodes": 4})
    reconcile_jobs(kube)
    assert Job.all_tenants.get(name="gang").phase == "Rejected"  # 4 GPUs never fit in a 2-GPU queue
    queueing.queue_create(
        actor=ACTOR, tenant=tenant_a, name="big", quotas=[{"resource": "nvidia.com/gpu", "nominal": 4}]
    )
    make_job(tenant_a, "filler", gpus=1, queueName="big", distributed={"enabled": False})
    reconcile_jobs(kube)
    gang = make_job(tenant_a, "gang2", gpus=1, queueName="big", distributed={"enabled": True, "nodes": 4})
    reconcile_jobs(kube)
    gang.refresh_from_db()
    assert gang.phase == "Queued" and cluster.stored(JOB, "gang2", NS) is None  # 3 free: no partial start


def test_a_higher_priority_job_preempts_and_the_victim_is_queued_again(cluster, kube, tenant_a):
    low = gpu_job(tenant_a, "low")
    reconcile_jobs(kube)
    _set_job_status(cluster, "low", {"active": 1, "ready": 1})
    reconcile_jobs(kube)
    low.refresh_from_db()
    assert low.phase == "Running" and low.attempts == 1
    running_pod(cluster, "low")
    high = gpu_job(tenant_a, "high", priority=50)
    reconcile_jobs(kube)
    low.refresh_from_db()
    high.refresh_from_db()
    assert low.phase == "Preempted" and "preempted for job" in low.message
    assert cluster.stored(JOB, "low", NS) is None  # evicted (its pods get the preStop checkpoint request)
    assert high.phase == "Queued" and high.reason == "WaitingForPreemption"
    reconcile_jobs(kube)  # its pod is still in its grace period: the victim holds its quota
    low.refresh_from_db()
    assert low.phase == "Preempted" and cluster.stored(JOB, "high", NS) is None
    cluster.unseed(POD, "low-0-pod", NS)
    reconcile_jobs(kube)  # the victim's pods are gone: it is queued again; the preemptor is admitted
    reconcile_jobs(kube)
    low.refresh_from_db()
    high.refresh_from_db()
    assert high.phase == "Scheduling" and cluster.stored(JOB, "high", NS) is not None
    assert low.phase == "Queued" and low.queue_position == 1 and low.attempts == 1
    reasons = list(low.events.values_list("reason", flat=True))
    assert "Preempted" in reasons and "Requeued" in reasons


def test_borrowed_quota_is_reclaimed_when_the_lender_comes_back(cluster, kube, tenant_a, tenant_b):
    from apps.jobs.models import Job as JobModel

    cohort = queueing.cohort_create(actor=ACTOR, name="pool")
    a = queueing.queue_create(
        actor=ACTOR,
        tenant=tenant_a,
        name="lend-a",
        cohort=cohort,
        quotas=[{"resource": "nvidia.com/gpu", "nominal": 2}],
    )
    reconcile_tenants(kube)
    queueing.queue_create(
        actor=ACTOR,
        tenant=tenant_b,
        name="lend-b",
        cohort=cohort,
        quotas=[{"resource": "nvidia.com/gpu", "nominal": 2}],
    )
    borrower = make_job(tenant_a, "borrower", gpus=4, queueName=a.name, distributed={"enabled": False})
    reconcile_jobs(kube)
    borrower.refresh_from_db()
    assert borrower.phase == "Scheduling" and borrower.admitted_borrowing
    running_pod(cluster, "borrower")
    lender = make_job(tenant_b, "lender", gpus=2, queueName="lend-b", distributed={"enabled": False})
    reconcile_jobs(kube)
    borrower.refresh_from_db()
    assert borrower.phase == "Preempted" and "borrowed quota reclaimed" in borrower.message
    cluster.unseed(POD, "borrower-0-pod", NS)
    reconcile_jobs(kube)
    reconcile_jobs(kube)
    assert JobModel.all_tenants.get(pk=lender.pk).phase == "Scheduling"


def test_a_running_jobs_objects_are_built_once_per_generation(cluster, kube, tenant_a, monkeypatch):
    """A running job whose pods change is observed every pass, but its manifests are built and hashed again only
    when what they depend on changes (apps.jobs.reconciler.desired.DesiredState.desired_hashed); what is applied is
    the same."""
    from django.db.models import F

    from apps.cluster.backends.base import SPEC_HASH_ANNOTATION
    from apps.jobs import manifests

    built = []
    workload = manifests.workload
    monkeypatch.setattr(manifests, "workload", lambda *a, **k: built.append(1) or workload(*a, **k))
    job = gpu_job(tenant_a, "steady")
    reconcile_jobs(kube)  # admitted: its objects are created
    running_pod(cluster, "steady")
    reconcile_jobs(kube)
    job.refresh_from_db()
    assert job.phase in ("Scheduling", "Running") and cluster.stored(JOB, "steady", NS) is not None
    first_build = len(built)
    original = cluster.stored(JOB, "steady", NS)
    pod = cluster.stored(POD, "steady-0-pod", NS)
    pod["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    cluster.seed(pod)  # the pod changed: the job is looked at again
    stats = reconcile_jobs(kube)
    assert stats.reconciled >= 1 and stats.applied == 0
    assert len(built) == first_build  # nothing built again

    # Someone edits the live Job: it is applied again, from the remembered manifest, exactly as first built.
    tampered = cluster.stored(JOB, "steady", NS)
    tampered["metadata"]["annotations"][SPEC_HASH_ANNOTATION] = "edited"
    cluster.seed(tampered)
    assert reconcile_jobs(kube).applied == 1 and len(built) == first_build
    again = cluster.stored(JOB, "steady", NS)
    assert again["spec"] == original["spec"]
    assert again["metadata"]["annotations"] == original["metadata"]["annotations"]

    # A new generation (a spec change) builds them again.
    Job.all_tenants.filter(pk=job.pk).update(generation=F("generation") + 1)
    reconcile_jobs(kube)
    assert len(built) == first_build + 1


def test_a_worker_forgets_a_job_once_it_has_ended_and_its_objects_are_collected(cluster, kube, tenant_a):
    """What a reconciler process remembers of a running job (its built objects, its last observation) goes when the
    job ends and is collected: a long-running worker's memory follows the jobs that run, not all it ever ran."""
    from apps.jobs.reconciler import desired, seen

    job = gpu_job(tenant_a, "brief", ttlSecondsAfterFinished=0)
    reconcile_jobs(kube)
    running_pod(cluster, "brief")
    reconcile_jobs(kube)
    key = str(job.uid)
    assert key in desired._DESIRED and key in seen._SEEN
    _set_job_status(cluster, "brief", {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]})
    cluster.unseed(POD, "brief-0-pod", NS)
    reconcile_jobs(kube)  # ends, and its objects go at once (TTL 0)
    reconcile_jobs(kube)
    job.refresh_from_db()
    assert job.phase == "Succeeded" and job.finalized and cluster.stored(JOB, "brief", NS) is None
    assert key not in desired._DESIRED and key not in seen._SEEN


def test_a_jobs_token_is_the_only_live_key_bound_to_it_while_it_runs_and_goes_when_it_ends(cluster, kube, tenant_a):
    from apps.tenants.models import ApiKey
    from apps.tenants.services import api_keys_issue_bound

    job = gpu_job(tenant_a, "tokened")
    stale = api_keys_issue_bound([(tenant_a, f"job:{job.uid}", ["jobs:report"], "left over")])
    with CaptureQueriesContext(connection) as queries:
        reconcile_jobs(kube)  # admitted: a fresh token in its Secret; the earlier key is revoked in the same pass
    if connection.vendor == "postgresql":  # the token is issued in the round trip that reads the job's row
        assert any('INSERT INTO "tenants_apikey"' in q["sql"] and '"jobs_job"' in q["sql"] for q in queries)

    def live():
        return list(ApiKey.all_tenants.filter(bound_to=f"job:{job.uid}", revoked_at__isnull=True))

    assert [key.name for key in live()] == ["job tokened"]
    assert stale[f"job:{job.uid}"].split("_")[1] not in {key.key_id for key in live()}
    _set_job_status(cluster, "tokened", {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]})
    reconcile_jobs(kube)
    job.refresh_from_db()
    assert job.phase == "Succeeded" and live() == []


def test_a_token_issued_for_a_job_the_pass_then_does_not_read_is_revoked(cluster, kube, tenant_a, monkeypatch):
    from apps.jobs import selectors
    from apps.tenants.models import ApiKey

    job = gpu_job(tenant_a, "vanishing")
    read = selectors.jobs_to_reconcile
    monkeypatch.setattr(  # as if it was deleted between the waiting heads' read and its row's
        selectors, "jobs_to_reconcile", lambda *a, **k: [j for j in read(*a, **k) if j.pk != job.pk]
    )
    reconcile_jobs(kube)
    keys = ApiKey.all_tenants.filter(bound_to=f"job:{job.uid}")
    assert keys.count() == 1 and not keys.filter(revoked_at__isnull=True).exists()

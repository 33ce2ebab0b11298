"""Kueue objects from Gryvia's queues (validated against the CRD schemas), the Kueue-managed Job, and reading the
Workload back into a phase, also through the kmock emulator."""

from __future__ import annotations

import copy
import json
import urllib.request
from types import SimpleNamespace

import kmock
import kubernetes_validate
import pytest

from apps.jobs import manifests
from apps.jobs.choices import JobPhase
from apps.jobs.spec import JobSpec, normalize_spec
from apps.queueing import kueue
from tests import crd_schema
from tests.jobs.factories import spec
from tests.kmock_cluster import running_kmock

ACME = SimpleNamespace(id=1, slug="acme", namespace="tenant-acme")
BETA = SimpleNamespace(id=2, slug="beta", namespace="tenant-beta")
RESEARCH = SimpleNamespace(name="research")
QUEUES = [
    SimpleNamespace(
        tenant_id=1,
        name="train",
        weight=2.0,
        cohort_name="research",
        quotas=[
            {"resource": "nvidia.com/gpu", "flavor": "H100", "nominal": 8, "borrowingLimit": 8, "lendingLimit": 4},
            {"resource": "nvidia.com/gpu", "flavor": "", "nominal": 2, "borrowingLimit": None, "lendingLimit": None},
            {"resource": "cpu", "flavor": "", "nominal": "64", "borrowingLimit": None, "lendingLimit": None},
            {"resource": "memory", "flavor": "", "nominal": "256Gi", "borrowingLimit": "64Gi", "lendingLimit": None},
        ],
    ),
    SimpleNamespace(
        tenant_id=1,
        name="dev",
        weight=0.5,
        cohort_name="",
        quotas=[{"resource": "nvidia.com/gpu", "flavor": "A100", "nominal": 1, "borrowingLimit": 1, "lendingLimit": 0}],
    ),
]
PRIORITIES = [SimpleNamespace(name="high", value=1000, description="urgent"), SimpleNamespace(name="low", value=10)]


def _objects() -> list[dict]:
    return kueue.cluster_objects(
        queues=QUEUES,
        cohorts=[RESEARCH],
        tenants_by_id={1: ACME, 2: BETA},
        flavors=["H100", "A100"],
        cohort_weights={"research": 3},
        priority_classes=PRIORITIES,
    )


def _by(objects: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def test_every_object_matches_its_crd_schema():
    objects = _objects()
    assert {o["kind"] for o in objects} == {
        "ResourceFlavor",
        "Topology",
        "Cohort",
        "ClusterQueue",
        "LocalQueue",
        "WorkloadPriorityClass",
    }
    for obj in objects:
        crd_schema.validate(obj)
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gryvia"


def test_wrong_objects_fail_the_schema():
    cq = copy.deepcopy(_by(_objects(), "ClusterQueue")["gryvia-acme-train"])
    cq["spec"]["cohortName"] = "research"  # v1beta2 spelling: unknown in v1beta1
    assert any("cohortName" in e for e in crd_schema.errors(cq))
    cq = copy.deepcopy(_by(_objects(), "ClusterQueue")["gryvia-acme-train"])
    cq["spec"]["preemption"]["reclaimWithinCohort"] = "Always"
    assert crd_schema.errors(cq)
    cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "lots"
    assert len(crd_schema.errors(cq)) == 2
    topology = kueue.topology()
    topology["spec"]["levels"] = []
    assert crd_schema.errors(topology)
    with pytest.raises(AssertionError):
        crd_schema.validate({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue", "metadata": {"name": "q"},
                             "spec": {"clusterQueue": "Not_A_Name"}})  # fmt: skip


MULTIKUEUE_KINDS = {"MultiKueueCluster", "MultiKueueConfig", "AdmissionCheck"}


def _multikueue_objects(clusters=("worker-a", "worker-b")) -> list[dict]:
    return kueue.cluster_objects(
        queues=QUEUES,
        cohorts=[RESEARCH],
        tenants_by_id={1: ACME, 2: BETA},
        flavors=["H100", "A100"],
        multikueue_clusters=list(clusters),
        kueue_namespace="kueue-system",
    )


def test_multikueue_objects_match_their_crd_schemas_and_every_cluster_queue_carries_the_check():
    objects = _multikueue_objects()
    for obj in objects:
        crd_schema.validate(obj)
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gryvia"
    kinds = [o["kind"] for o in objects]
    assert MULTIKUEUE_KINDS <= set(kinds)
    assert max(kinds.index(k) for k in MULTIKUEUE_KINDS) < kinds.index("ClusterQueue")  # the check exists first
    workers = _by(objects, "MultiKueueCluster")
    assert set(workers) == {"worker-a", "worker-b"}
    assert workers["worker-a"]["spec"] == {"kubeConfig": {"locationType": "Secret", "location": "worker-a-kubeconfig"}}
    assert workers["worker-a"]["metadata"]["annotations"] == {
        "gryvia.io/kubeconfig-secret": "kueue-system/worker-a-kubeconfig"
    }
    assert _by(objects, "MultiKueueConfig")["gryvia-multikueue"]["spec"] == {"clusters": ["worker-a", "worker-b"]}
    assert _by(objects, "AdmissionCheck")["gryvia-multikueue"]["spec"] == {
        "controllerName": "kueue.x-k8s.io/multikueue",
        "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "gryvia-multikueue"},
    }
    cqs = _by(objects, "ClusterQueue")
    assert set(cqs) == {"gryvia-acme-train", "gryvia-acme-dev", "gryvia-beta-default"}
    assert all(cq["spec"]["admissionChecks"] == ["gryvia-multikueue"] for cq in cqs.values())
    # Kueue v0.11 deactivates a ClusterQueue with topology-aware flavors and a MultiKueue check.
    assert "Topology" not in kinds
    assert all("topologyName" not in f["spec"] for f in _by(objects, "ResourceFlavor").values())


def test_without_multikueue_nothing_multikueue_is_generated():
    objects = _objects()
    assert not MULTIKUEUE_KINDS & {o["kind"] for o in objects}
    assert all("admissionChecks" not in cq["spec"] for cq in _by(objects, "ClusterQueue").values())
    assert _by(objects, "ResourceFlavor")["any-gpu"]["spec"] == {"topologyName": "gryvia-topology"}


def test_wrong_multikueue_objects_fail_the_schema():
    objects = _multikueue_objects()
    config = copy.deepcopy(_by(objects, "MultiKueueConfig")["gryvia-multikueue"])
    config["spec"]["clusters"] = [f"w{i}" for i in range(11)]  # Kueue takes at most 10 workers
    assert crd_schema.errors(config)
    check = copy.deepcopy(_by(objects, "AdmissionCheck")["gryvia-multikueue"])
    check["spec"]["parameters"]["kind"] = "MultiKueue_Config"
    del check["spec"]["controllerName"]
    assert len(crd_schema.errors(check)) == 2
    worker = copy.deepcopy(_by(objects, "MultiKueueCluster")["worker-a"])
    worker["spec"]["kubeConfig"]["locationType"] = "ConfigMap"
    assert crd_schema.errors(worker)
    cq = copy.deepcopy(_by(objects, "ClusterQueue")["gryvia-acme-train"])
    cq["spec"]["admissionChecks"] = "gryvia-multikueue"  # a list, not a name
    assert crd_schema.errors(cq)


def test_flavors_topology_and_cohorts():
    objects = _objects()
    flavors = _by(objects, "ResourceFlavor")
    assert set(flavors) == {"default-flavor", "gpu-h100", "gpu-a100", "any-gpu"}
    assert flavors["gpu-h100"]["spec"] == {"nodeLabels": {"gryvia.io/gpu": "H100"}, "topologyName": "gryvia-topology"}
    levels = [lv["nodeLabel"] for lv in _by(objects, "Topology")["gryvia-topology"]["spec"]["levels"]]
    assert levels == ["gryvia.io/ib-block", "gryvia.io/rack", "kubernetes.io/hostname"]
    assert kueue.topology(rack_label="topology.kubernetes.io/rack")["spec"]["levels"][1] == {
        "nodeLabel": "topology.kubernetes.io/rack"
    }
    assert _by(objects, "Cohort")["research"]["spec"] == {"fairSharing": {"weight": "3"}}
    assert _by(objects, "WorkloadPriorityClass")["high"]["value"] == 1000


def test_cluster_queue_quotas_and_local_queues():
    objects = _objects()
    cqs = _by(objects, "ClusterQueue")
    assert set(cqs) == {"gryvia-acme-train", "gryvia-acme-dev", "gryvia-beta-default"}
    train = cqs["gryvia-acme-train"]["spec"]
    assert train["cohort"] == "research"
    assert train["namespaceSelector"] == {"matchLabels": {"gryvia.io/tenant": "acme"}}
    assert train["preemption"] == {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
    assert train["fairSharing"] == {"weight": "2"}
    cpu_mem, gpu = train["resourceGroups"]
    assert cpu_mem["coveredResources"] == ["cpu", "memory"]
    assert cpu_mem["flavors"][0]["resources"] == [
        {"name": "cpu", "nominalQuota": "64"},
        {"name": "memory", "nominalQuota": "256Gi", "borrowingLimit": "64Gi"},
    ]
    gpu_quota = {f["name"]: f["resources"][0] for f in gpu["flavors"]}
    assert [f["name"] for f in gpu["flavors"]] == ["gpu-h100", "gpu-a100", "any-gpu"]
    assert gpu_quota["gpu-h100"] == {
        "name": "nvidia.com/gpu",
        "nominalQuota": 8,
        "borrowingLimit": 8,
        "lendingLimit": 4,
    }
    assert gpu_quota["any-gpu"] == {"name": "nvidia.com/gpu", "nominalQuota": 2}
    assert gpu_quota["gpu-a100"] == {"name": "nvidia.com/gpu", "nominalQuota": 1_000_000, "lendingLimit": 0}
    dev = cqs["gryvia-acme-dev"]["spec"]  # no cohort: no cohort field, no borrowing/lending limits
    assert "cohort" not in dev
    assert {f["name"]: f["resources"][0] for f in dev["resourceGroups"][1]["flavors"]}["gpu-a100"] == {
        "name": "nvidia.com/gpu",
        "nominalQuota": 1,
    }
    lqs = {(o["metadata"]["namespace"], o["metadata"]["name"]): o["spec"] for o in objects if o["kind"] == "LocalQueue"}
    assert lqs == {
        ("tenant-acme", "train"): {"clusterQueue": "gryvia-acme-train"},
        ("tenant-acme", "dev"): {"clusterQueue": "gryvia-acme-dev"},
        ("tenant-beta", "default"): {"clusterQueue": "gryvia-beta-default"},
    }


def _job() -> dict:
    typed = JobSpec.of(normalize_spec(spec()))
    return manifests.workload(
        typed, name="train", namespace="tenant-acme", uid="0b7c", tenant="acme", api_url="http://gryvia:8000"
    )


def test_suspended_job_is_still_a_valid_job():
    job = _job()
    out = kueue.suspend_patch(job, queue_name="train", priority_class="high")
    assert out["spec"]["suspend"] is True
    assert out["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "train"
    assert out["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "high"
    assert "suspend" not in job["spec"]  # the input is not modified
    kubernetes_validate.validate(out, "1.33", strict=True)
    assert kueue.job_labels(queue_name="dev", priority_class=None) == {"kueue.x-k8s.io/queue-name": "dev"}


def _condition(kind: str, status: str, reason: str, message: str = "") -> dict:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2025-01-01T00:00:00Z",
    }


PENDING_MESSAGE = (
    "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor gpu-h100, "
    "4 more needed"
)


def _workload(job: dict) -> dict:
    """A Workload as Kueue's job integration creates it (see Kueue's "Run a Kubernetes Job" task)."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {
            "name": f"job-{job['metadata']['name']}-3c5a1",
            "namespace": job["metadata"]["namespace"],
            "labels": {"kueue.x-k8s.io/job-uid": job["metadata"]["uid"]},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": job["metadata"]["name"],
                    "uid": job["metadata"]["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "queueName": "train",
            "priority": 1000,
            "priorityClassName": "high",
            "priorityClassSource": "kueue.x-k8s.io/workloadpriorityclass",
            "podSets": [{"name": "main", "count": 1, "template": job["spec"]["template"]}],
        },
        "status": {"conditions": [_condition("QuotaReserved", "False", "Pending", PENDING_MESSAGE)]},
    }


WORKLOADS = SimpleNamespace(api_version="kueue.x-k8s.io/v1beta1", plural="workloads")


def _http(url: str, method: str = "GET", body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    content = "application/merge-patch+json" if method == "PATCH" else "application/json"
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": content})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def test_workload_flow_through_kmock():
    with running_kmock() as cluster:
        resource = kmock.resource("kueue.x-k8s.io", "v1beta1", "workloads")
        cluster.call(
            lambda: cluster.emulator.resources.__setitem__(
                resource, kmock.ResourceInfo(kind="Workload", namespaced=True)
            )
        )
        jobs_url = f"{cluster.url}/apis/batch/v1/namespaces/tenant-acme/jobs"
        job = _http(jobs_url, "POST", kueue.suspend_patch(_job(), queue_name="train", priority_class="high"))
        assert job["spec"]["suspend"] is True and job["metadata"]["uid"]
        wl = _workload(job)
        crd_schema.validate(wl)
        key = (resource, "tenant-acme", wl["metadata"]["name"])
        cluster.call(lambda: cluster.emulator.objects.__setitem__(key, copy.deepcopy(wl)))
        wl_url = f"{cluster.url}/apis/kueue.x-k8s.io/v1beta1/namespaces/tenant-acme/workloads"

        def observe() -> tuple[str, str, str]:
            workloads = _http(wl_url)["items"]
            current_job = _http(f"{jobs_url}/train")
            found = kueue.workload_for(current_job["metadata"]["uid"], workloads)
            assert found is not None
            assert kueue.workload_for("someone-else", workloads) is None
            return kueue.phase_from_workload(found, job=current_job)

        assert observe() == (JobPhase.QUEUED, "Pending", PENDING_MESSAGE)

        # Kueue reserves quota and admits: the Job is unsuspended.
        admitted = [
            _condition("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue gryvia-acme-train"),
            _condition("Admitted", "True", "Admitted", "The workload is admitted"),
        ]
        admission = {
            "clusterQueue": "gryvia-acme-train",
            "podSetAssignments": [
                {"name": "main", "count": 1, "flavors": {"nvidia.com/gpu": "gpu-h100"}, "resourceUsage": {"cpu": "4"}}
            ],
        }
        _http(
            f"{wl_url}/{wl['metadata']['name']}", "PATCH", {"status": {"conditions": admitted, "admission": admission}}
        )
        assert observe()[:2] == (JobPhase.QUEUED, "Admitted")  # admitted, Job not yet unsuspended
        _http(f"{jobs_url}/train", "PATCH", {"spec": {"suspend": False}})
        assert observe() == (JobPhase.SCHEDULING, "Admitted", "The workload is admitted")

        # Preempted by a higher-priority workload in the cohort: evicted, requeued, the Job suspended again.
        evicted = [
            _condition("QuotaReserved", "False", "Pending", "Preempted to accommodate a workload"),
            _condition("Admitted", "False", "NoReservation", "The workload has no reservation"),
            _condition("Evicted", "True", "Preempted", "Preempted to accommodate a workload (UID: 9f2) due to ..."),
            _condition("Preempted", "True", "InCohortReclamation", "Preempted to accommodate a workload (UID: 9f2)"),
        ]
        _http(f"{wl_url}/{wl['metadata']['name']}", "PATCH", {"status": {"conditions": evicted, "admission": None}})
        _http(f"{jobs_url}/train", "PATCH", {"spec": {"suspend": True}})
        stored = cluster.stored(WORKLOADS, wl["metadata"]["name"], "tenant-acme")
        crd_schema.validate(stored)
        assert observe() == (JobPhase.QUEUED, "Preempted", "Preempted to accommodate a workload (UID: 9f2)")


def test_phase_mapping_edge_cases():
    assert kueue.phase_from_workload(None)[:2] == (JobPhase.QUEUED, "Pending")
    wl = {
        "status": {"conditions": [_condition("Evicted", "True", "PodsReadyTimeout", "Exceeded the PodsReady timeout")]}
    }
    assert kueue.phase_from_workload(wl) == (JobPhase.QUEUED, "Evicted", "Exceeded the PodsReady timeout")
    wl = {"status": {"conditions": [_condition("QuotaReserved", "True", "QuotaReserved", "")]}}
    assert kueue.phase_from_workload(wl) == (JobPhase.QUEUED, "QuotaReserved", "waiting for admission checks")
    wl = {"status": {"conditions": [_condition("Finished", "True", "Failed", "Job failed")]}}
    assert kueue.phase_from_workload(wl) == (JobPhase.FAILED, "Failed", "Job failed")
    wl = {"status": {"conditions": [_condition("Finished", "True", "Succeeded", "Job finished successfully")]}}
    assert kueue.phase_from_workload(wl)[0] == JobPhase.SUCCEEDED

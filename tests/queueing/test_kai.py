"""KAI Scheduler queues (validated against the Queue CRD schema), pod template patches and pending reasons."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import kubernetes_validate
import pytest

from apps.cluster.backends.base import POD
from apps.jobs import manifests
from apps.jobs.spec import JobSpec, normalize_spec
from apps.queueing import kai
from tests import crd_schema
from tests.jobs.factories import spec
from tests.kmock_cluster import running_kmock

ACME = SimpleNamespace(id=1, slug="acme")
BETA = SimpleNamespace(id=2, slug="beta")
QUEUES = [
    SimpleNamespace(
        tenant_id=1,
        name="train",
        weight=2.0,
        quotas=[
            {"resource": "nvidia.com/gpu", "flavor": "H100", "nominal": 8, "borrowingLimit": 4, "lendingLimit": None},
            {"resource": "nvidia.com/gpu", "flavor": "A100", "nominal": 2, "borrowingLimit": 0, "lendingLimit": None},
            {"resource": "cpu", "flavor": "", "nominal": "64", "borrowingLimit": None, "lendingLimit": None},
            {"resource": "memory", "flavor": "", "nominal": "1G", "borrowingLimit": None, "lendingLimit": None},
        ],
    ),
    SimpleNamespace(tenant_id=1, name="dev", weight=1.0, quotas=[]),
]


def _queues() -> dict[str, dict]:
    return {q["metadata"]["name"]: q for q in kai.queue_objects(tenants=[ACME, BETA], queues=QUEUES)}


def test_queues_match_the_crd_schema():
    queues = _queues()
    assert set(queues) == {"gryvia-acme", "gryvia-acme-dev", "gryvia-acme-train", "gryvia-beta", "gryvia-beta-default"}
    for queue in queues.values():
        crd_schema.validate(queue)
        assert queue["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gryvia"
    wrong = copy.deepcopy(queues["gryvia-acme-train"])
    wrong["spec"]["resources"]["gpu"]["quota"] = "8"
    wrong["spec"]["resources"]["gpu"]["burst"] = 1
    assert len(crd_schema.errors(wrong)) == 2


def test_queue_quotas():
    queues = _queues()
    train = queues["gryvia-acme-train"]["spec"]
    assert train["parentQueue"] == "gryvia-acme"
    assert train["resources"]["gpu"] == {"quota": 10, "limit": 14, "overQuotaWeight": 2.0}
    assert train["resources"]["cpu"] == {"quota": 64000, "limit": -1, "overQuotaWeight": 2.0}
    assert train["resources"]["memory"]["quota"] == 1000
    assert queues["gryvia-acme-dev"]["spec"]["resources"]["gpu"] == {"quota": -1, "limit": -1, "overQuotaWeight": 1.0}
    parent = queues["gryvia-acme"]["spec"]
    assert "parentQueue" not in parent
    assert parent["resources"]["gpu"]["quota"] == -1  # the dev child is unlimited
    assert queues["gryvia-beta-default"]["spec"]["parentQueue"] == "gryvia-beta"


def _job() -> dict:
    typed = JobSpec.of(normalize_spec(spec()))
    return manifests.workload(
        typed, name="train", namespace="tenant-acme", uid="0b7c", tenant="acme", api_url="http://gryvia:8000"
    )


def test_pod_template_patch():
    job = _job()
    template = job["spec"]["template"]
    out = kai.pod_template_patch(template, queue=kai.queue_name("acme", "train"), gpu_fraction=None)
    assert out["spec"]["schedulerName"] == "kai-scheduler"
    assert out["metadata"]["labels"]["kai.scheduler/queue"] == "gryvia-acme-train"
    assert "gpu-fraction" not in (out["metadata"].get("annotations") or {})
    assert "schedulerName" not in template["spec"]  # the input is not modified

    template["spec"]["containers"][0].setdefault("resources", {}).setdefault("limits", {})["nvidia.com/gpu"] = "1"
    half = kai.pod_template_patch(template, queue="gryvia-acme-train", gpu_fraction=0.5)
    assert half["metadata"]["annotations"]["gpu-fraction"] == "0.5"
    for container in half["spec"]["containers"]:
        resources = container.get("resources") or {}
        assert "nvidia.com/gpu" not in (resources.get("limits") or {})
        assert "nvidia.com/gpu" not in (resources.get("requests") or {})
    kubernetes_validate.validate({**job, "spec": {**job["spec"], "template": half}}, "1.33", strict=True)
    with pytest.raises(ValueError):
        kai.pod_template_patch(template, queue="q", gpu_fraction=1.5)


def test_unschedulable_reason_is_copied_from_the_pod():
    message = (
        "NonPreemptible workload is over quota. Workload requested 8 GPUs, but acme-train quota is 4 GPUs, "
        "while 0 GPUs are already allocated for non-preemptible pods."
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train-0-abcde", "namespace": "tenant-acme"},
        "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "main", "image": "busybox"}]},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                    "lastTransitionTime": "2025-01-01T00:00:00Z",
                }
            ],
        },
    }
    with running_kmock() as cluster:
        cluster.seed(pod)
        stored = cluster.stored(POD, "train-0-abcde", "tenant-acme")
    assert kai.unschedulable_reason(stored) == message
    scheduled = {"status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}}
    assert kai.unschedulable_reason(scheduled) is None
    assert kai.unschedulable_reason({}) is None


def test_a_job_gpu_fraction_survives_the_patch_the_reconciler_applies(settings):
    """The reconciler calls `pod_template_patch(template, queue=...)` without `gpu_fraction`: the job's fraction
    comes from the annotation `manifests.workload` put on the template."""
    settings.GRYVIA_ADMISSION = "kai"
    typed = JobSpec.of(normalize_spec(spec(distributed={"enabled": False}, gpuFraction=0.5)))
    job = manifests.workload(
        typed, name="train", namespace="tenant-acme", uid="0b7c", tenant="acme", api_url="http://gryvia:8000"
    )
    template = kai.pod_template_patch(job["spec"]["template"], queue=kai.queue_name("acme", "default"))
    assert template["metadata"]["annotations"] == {"gpu-fraction": "0.5"}
    assert template["spec"]["schedulerName"] == "kai-scheduler"
    assert "nvidia.com/gpu" not in str(template["spec"]["containers"])
    kubernetes_validate.validate({**job, "spec": {**job["spec"], "template": template}}, "1.33", strict=True)
    assert kai.gpu_fraction_annotations(1 / 3) == {"gpu-fraction": "0.3333333333333333"}  # reads back exactly
    with pytest.raises(ValueError):
        kai.gpu_fraction_annotations(0)

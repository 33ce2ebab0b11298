"""Spec validation, the distributed environment table, and strict validation of every manifest."""

from __future__ import annotations

from types import SimpleNamespace

import kubernetes_validate
import pytest
from rest_framework import serializers

from apps.core.quantities import parse_quantity
from apps.jobs import manifests
from apps.jobs.environment import SHELL_RANK
from apps.jobs.spec import JobSpec, normalize_spec, parse_duration
from apps.tenants import manifests as tenant_manifests
from tests.jobs.factories import spec

COMMON = {"name": "train", "namespace": "tenant-alpha", "uid": "0b7c", "tenant": "alpha"}


def _env(workload: dict) -> dict[str, object]:
    container = workload["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def _build(**overrides) -> tuple[JobSpec, dict]:
    typed = JobSpec.of(normalize_spec(spec(**overrides)))
    return typed, manifests.workload(typed, api_url="http://gryvia.gryvia-system.svc:8000", **COMMON)


@pytest.mark.parametrize(
    ("value", "seconds"), [("3s", 3), ("90m", 5400), ("1d12h", 129600), ("1h30m15s", 5415), ("2d", 172800)]
)
def test_durations(value, seconds):
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", ["", "10", "1x", "m", "0s", "1.5h", "-3s", "1s2h"])
def test_bad_durations(value):
    with pytest.raises(ValueError, match="duration|zero"):
        parse_duration(value)


INDEX = {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (  # 1 node x 1 GPU
            {"gpus": 1, "distributed": {"enabled": True, "nodes": 1}},
            {"WORLD_SIZE": "1", "PET_NNODES": "1", "PET_NPROC_PER_NODE": "1", "RANK": INDEX, "pods": 1, "gpus": "1"},
        ),
        (  # 2 nodes x 1 GPU
            {"gpus": 1, "distributed": {"enabled": True, "nodes": 2, "backend": "nccl"}},
            {"WORLD_SIZE": "2", "PET_NNODES": "2", "PET_NPROC_PER_NODE": "1", "RANK": INDEX, "pods": 2, "gpus": "1"},
        ),
        (  # 2 nodes x 4 GPUs: ranks count processes, RANK = node rank x 4 (computed by the entrypoint)
            {"gpus": 4, "distributed": {"enabled": True, "nodes": 2, "gpusPerNode": 4}},
            {"WORLD_SIZE": "8", "PET_NNODES": "2", "PET_NPROC_PER_NODE": "4", "RANK": None, "pods": 2, "gpus": "4"},
        ),
        (  # CPU, 2 nodes x 3 processes
            {"distributed": {"enabled": True, "nodes": 2, "procsPerNode": 3}},
            {"WORLD_SIZE": "6", "PET_NNODES": "2", "PET_NPROC_PER_NODE": "3", "RANK": None, "pods": 2, "gpus": None},
        ),
        (  # elastic 1..4 nodes, 2 wanted now
            {"distributed": {"enabled": True, "nodes": 4, "elastic": {"minNodes": 1, "desiredNodes": 2}}},
            {"WORLD_SIZE": "4", "PET_NNODES": "1:4", "PET_NPROC_PER_NODE": "1", "RANK": INDEX, "pods": 2, "gpus": None},
        ),
    ],
    ids=["1x1", "2x1", "2x4", "cpu-2x3", "elastic-1:4"],
)
def test_distributed_environment(overrides, expected):
    typed, job = _build(**overrides)
    env = _env(job)
    host = "train-0.train-headless.tenant-alpha.svc.cluster.local"
    assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == host
    assert env["MASTER_PORT"] == env["PET_MASTER_PORT"] == "29500"
    assert env["PET_NODE_RANK"] == INDEX
    for name in ("WORLD_SIZE", "PET_NNODES", "PET_NPROC_PER_NODE"):
        assert env[name] == expected[name], name
    assert env.get("RANK") == expected["RANK"]
    assert job["spec"]["parallelism"] == job["spec"]["completions"] == expected["pods"]
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert (container.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")) == expected["gpus"]
    if expected["RANK"] is None:  # RANK over processes comes from the entrypoint wrapper
        assert container["command"][:3] == ["/bin/sh", "-c", SHELL_RANK]
    if typed.elastic:
        assert env["PET_RDZV_BACKEND"] == "c10d" and env["PET_RDZV_ENDPOINT"] == f"{host}:29400"
        assert env["PET_RDZV_ID"] == "0b7c" and env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
        assert job["spec"]["successPolicy"] == {"rules": [{"succeededCount": 1}]}
    else:
        assert "PET_RDZV_ENDPOINT" not in env


SPECS = {
    "hello": {},
    "gpu-typed-storage-checkpoint": {
        "gpus": 2,
        "gpuType": "H100",
        "storage": "fast-rwx",
        "storageRequest": "50Gi",
        "checkpoint": {"dir": "/data/ckpt", "interval": 100, "preStopGraceSeconds": 120},
        "resources": {"cpu": "8", "memory": "64Gi"},
        "nodeSelector": {"zone": "a"},
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "env": {"EPOCHS": "3"},
        "retryLimit": 3,
    },
    "elastic": {"distributed": {"enabled": True, "nodes": 4, "elastic": {"minNodes": 2}}},
    "inference": {"type": "inference", "distributed": {"enabled": False}, "port": 8080, "storage": "standard"},
    "evaluation": {"type": "evaluation", "distributed": {"enabled": False}, "timeout": "3s"},
}


@pytest.mark.parametrize("overrides", SPECS.values(), ids=SPECS.keys())
def test_every_manifest_validates_strictly(overrides):
    typed = JobSpec.of(normalize_spec(spec(**overrides)))
    objects = [
        manifests.workload(typed, api_url="http://gryvia:8000", **COMMON),
        manifests.headless_service(typed, **COMMON),
        manifests.token_secret(typed, token="gry_x", **COMMON),
    ]
    owner = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "uid": "u-1"}}
    objects.append(manifests.headless_service(typed, owner=owner, **COMMON))
    pvc = manifests.data_pvc(typed, **COMMON)
    if pvc is not None:
        objects.append(pvc)
    for obj in objects:
        kubernetes_validate.validate(obj, "1.33", strict=True)
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "gryvia" and labels["gryvia.io/job-uid"] == "0b7c"


def test_job_manifest_details():
    typed, job = _build(**SPECS["gpu-typed-storage-checkpoint"])
    pod = job["spec"]["template"]["spec"]
    assert job["spec"]["backoffLimit"] == 3 and job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["activeDeadlineSeconds"] == 600
    assert job["spec"]["podFailurePolicy"]["rules"][0] == {
        "action": "Ignore",
        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
    }
    assert pod["subdomain"] == "train-headless" and pod["restartPolicy"] == "Never"
    assert pod["nodeSelector"] == {"zone": "a", "gryvia.io/gpu": "H100"}
    assert pod["terminationGracePeriodSeconds"] == 120
    container = pod["containers"][0]
    assert container["lifecycle"]["preStop"]["exec"]["command"] == [*manifests.PRESTOP_COMMAND, "--timeout", "115"]
    env = _env(job)
    assert env["EPOCHS"] == "3" and env["GRYVIA_CHECKPOINT_DIR"] == "/data/ckpt"
    assert env["GRYVIA_JOB_TOKEN"] == {"secretKeyRef": {"name": "train-token", "key": "token"}}
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "train-data"}} in pod["volumes"]
    inference, sts = _build(**SPECS["inference"])
    assert sts["kind"] == "StatefulSet" and sts["spec"]["serviceName"] == "train-headless"
    assert _env(sts)["PORT"] == "8080"


def _admitted_under(limit_range: dict, container: dict) -> dict[str, dict]:
    """The container's resources as a real API server stores them in a namespace with this LimitRange: requests
    default to the limits set, the LimitRanger fills in its defaults where a value is missing, and a request above
    its limit is refused (AssertionError here, "must be less than or equal to cpu limit" there)."""
    [item] = limit_range["spec"]["limits"]
    resources = container.get("resources") or {}
    limits = {**item["default"], **(resources.get("limits") or {})}
    requests = {**item["defaultRequest"], **(resources.get("limits") or {}), **(resources.get("requests") or {})}
    for name in ("cpu", "memory"):
        assert parse_quantity(requests[name]) <= parse_quantity(limits[name]), f"{name}: {requests} > {limits}"
    return {"requests": requests, "limits": limits}


@pytest.mark.parametrize(
    ("overrides", "cpu", "memory"),
    [
        ({"resources": {"cpu": "8", "memory": "64Gi"}}, ("8", "8"), ("64Gi", "64Gi")),
        ({"resources": {"cpu": "16"}}, ("16", "16"), ("2Gi", "8Gi")),
        ({"resources": {"cpu": "4500m", "memory": "1Gi"}}, ("4500m", "4500m"), ("1Gi", "1Gi")),
        ({"resources": {"cpu": "4"}}, ("4", "4"), ("2Gi", "8Gi")),
        ({"resources": {"cpu": "500m", "memory": "12Gi"}}, ("500m", "4"), ("12Gi", "12Gi")),
        ({}, ("1", "4"), ("2Gi", "8Gi")),
        ({**SPECS["inference"], "resources": {"cpu": "6"}}, ("6", "6"), ("2Gi", "8Gi")),
    ],
    ids=["8cpu-64Gi", "16cpu", "4500m-1Gi", "4cpu", "500m-12Gi", "defaults", "inference-6cpu"],
)
def test_containers_fit_the_tenants_limit_range(overrides, cpu, memory):
    """A job's container gets what it asks for under its tenant's LimitRange (default limit cpu 4, memory 8Gi): a
    request above a default limit is its own limit, as an API server would otherwise fill in the default below
    the request and refuse the pod; at or under it, the pod may burst to the tenant's default limit."""
    _typed, workload = _build(**overrides)
    kubernetes_validate.validate(workload, "1.33", strict=True)
    limit_range = tenant_manifests.limit_range(SimpleNamespace(slug="alpha", namespace="tenant-alpha"))
    container = workload["spec"]["template"]["spec"]["containers"][0]
    stored = _admitted_under(limit_range, container)
    assert (stored["requests"]["cpu"], stored["limits"]["cpu"]) == cpu
    assert (stored["requests"]["memory"], stored["limits"]["memory"]) == memory


BAD = [
    ({"gpus": -1}, "spec.gpus"),
    ({"type": "pretraining"}, "spec.type"),
    ({"timeout": "ten minutes"}, "spec.timeout"),
    ({"env": [{"name": "WORLD_SIZE", "value": "9"}]}, "spec.env"),
    ({"env": {"PET_NNODES": "3"}}, "spec.env"),
    ({"env": {"GRYVIA_JOB_TOKEN": "x"}}, "spec.env"),
    ({"distributed": {"enabled": True, "nodes": 0}}, "spec.distributed.nodes"),
    ({"distributed": {"enabled": True, "nodes": 2, "elastic": {"minNodes": 3}}}, "spec.distributed.elastic.minNodes"),
    (
        {"type": "inference", "distributed": {"enabled": True, "nodes": 2, "elastic": {"minNodes": 1}}},
        "spec.distributed.elastic",
    ),
    ({"resources": {"memory": "lots"}}, "spec.resources.memory"),
    ({"colour": "blue"}, "spec.colour"),
    ({"image": ""}, "spec.image"),
    ({"retryLimit": "many"}, "spec.retryLimit"),
]


@pytest.mark.parametrize(("overrides", "field"), BAD, ids=[b[1] + str(i) for i, b in enumerate(BAD)])
def test_bad_specs_name_the_field(overrides, field):
    from django.core.exceptions import ValidationError

    from apps.jobs.services.jobs import _spec_errors

    with pytest.raises(serializers.ValidationError) as caught:
        normalize_spec(spec(**overrides))
    errors = _spec_errors(caught.value)
    assert isinstance(errors, ValidationError) and field in errors.message_dict, errors.message_dict


ONE_POD = {"distributed": {"enabled": False}}


def _spec_errors_of(overrides: dict) -> dict[str, list[str]]:
    from apps.jobs.services.jobs import _spec_errors

    with pytest.raises(serializers.ValidationError) as caught:
        normalize_spec(spec(**overrides))
    return _spec_errors(caught.value).message_dict


def test_a_gpu_fraction_becomes_the_kai_annotation_without_a_whole_gpu(settings):
    settings.GRYVIA_ADMISSION = "kai"
    typed, job = _build(**ONE_POD, gpuFraction=0.25, gpuType="H100")
    assert typed.raw["gpuFraction"] == 0.25
    template = job["spec"]["template"]
    assert template["metadata"]["annotations"] == {"gpu-fraction": "0.25"}
    container = template["spec"]["containers"][0]
    assert "nvidia.com/gpu" not in (container.get("resources") or {}).get("limits", {})
    assert template["spec"]["nodeSelector"] == {"gryvia.io/gpu": "H100"}  # the share is of an H100
    kubernetes_validate.validate(job, "1.33", strict=True)
    # Whole-GPU accounting holds nothing; the share is what KAI counts.
    assert (typed.gpus_per_pod, typed.total_gpus) == (0, 0)
    assert (typed.gpu_fraction, typed.gpu_share_per_pod, typed.total_gpu_share, typed.uses_gpu) == (
        0.25,
        0.25,
        0.25,
        True,
    )
    replicas, sts = _build(type="inference", distributed={"enabled": True, "nodes": 3}, gpuFraction="0.5")
    assert sts["kind"] == "StatefulSet" and sts["spec"]["template"]["metadata"]["annotations"]["gpu-fraction"] == "0.5"
    kubernetes_validate.validate(sts, "1.33", strict=True)
    assert (replicas.total_gpus, replicas.total_gpu_share) == (0, 1.5)


def test_whole_gpu_jobs_carry_no_fraction(settings):
    settings.GRYVIA_ADMISSION = "kai"
    typed, job = _build(**ONE_POD, gpus=2)
    assert "annotations" not in job["spec"]["template"]["metadata"]
    assert (typed.gpu_fraction, typed.total_gpus, typed.total_gpu_share) == (None, 2, 2.0)
    cpu, _ = _build(**ONE_POD)
    assert not cpu.uses_gpu


BAD_FRACTIONS = [
    ({"gpuFraction": 0}, "between 0 and 1"),
    ({"gpuFraction": 1}, "between 0 and 1"),
    ({"gpuFraction": 1.5}, "between 0 and 1"),
    ({"gpuFraction": -0.5}, "between 0 and 1"),
    ({"gpuFraction": "half"}, "number"),
    ({"gpuFraction": 0.5, "gpus": 1}, "gpus: 1"),
    ({"gpuFraction": 0.5, "distributed": {"enabled": True, "nodes": 2, "gpusPerNode": 1}}, "gpusPerNode: 1"),
    ({"gpuFraction": 0.5, "distributed": {"enabled": True, "nodes": 2}}, "distributed ranks"),
]


@pytest.mark.parametrize(("overrides", "message"), BAD_FRACTIONS, ids=[m for _, m in BAD_FRACTIONS])
def test_bad_gpu_fractions_name_the_field(settings, overrides, message):
    settings.GRYVIA_ADMISSION = "kai"
    errors = _spec_errors_of({**ONE_POD, **overrides})
    assert list(errors) == ["spec.gpuFraction"], errors
    assert message in " ".join(errors["spec.gpuFraction"])


@pytest.mark.parametrize("mode", ["native", "kueue"])
def test_a_gpu_fraction_is_refused_without_the_kai_scheduler(settings, mode):
    settings.GRYVIA_ADMISSION = mode
    errors = _spec_errors_of({**ONE_POD, "gpuFraction": 0.5})
    assert "needs the KAI scheduler (GRYVIA_ADMISSION=kai)" in errors["spec.gpuFraction"][0]
    assert normalize_spec(spec(**ONE_POD, gpuFraction=None)).get("gpuFraction") is None  # null: whole GPUs

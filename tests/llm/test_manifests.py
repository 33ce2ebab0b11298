"""An inference service's Deployment and Service: strictly valid Kubernetes objects, with the runtime's image,
arguments, probes, GPUs, labels and namespace; the same manifest with the local server's command on this machine."""

from __future__ import annotations

import kubernetes_validate
import pytest

from apps.cluster.backends.base import MANAGED_BY, labels_match
from apps.llm import manifests
from apps.llm.manifests import LocalLaunch
from apps.llm.models import InferenceService, Runtime

pytestmark = pytest.mark.django_db

SERVICES = {
    "vllm-2-gpus": dict(
        runtime=Runtime.VLLM,
        model="meta-llama/Llama-3.1-8B-Instruct",
        upstream_model="llama-3.1-8b",
        replicas=2,
        resources={"gpus": 2, "cpu": "8", "memory": "64Gi"},
        context_length=8192,
        args=["--gpu-memory-utilization", "0.9"],
    ),
    "tgi": dict(runtime=Runtime.TGI, model="HuggingFaceH4/zephyr-7b-beta", resources={"gpus": 1}),
    "llamacpp-cpu": dict(runtime=Runtime.LLAMACPP, model="/models/qwen.gguf", resources={"cpu": "4"}),
    "llamacpp-gpu-hf": dict(runtime=Runtime.LLAMACPP, model="ggml-org/gemma-3-1b-it-GGUF", resources={"gpus": 1}),
    "embeddings": dict(runtime=Runtime.SENTENCE_TRANSFORMERS, model="/models/minilm", task="embeddings"),
}


def make_service(tenant, name: str = "chat", **fields) -> InferenceService:
    fields.setdefault("model_name", name)
    return InferenceService.objects.create(tenant=tenant, name=name, **fields)


def validate(obj: dict) -> None:
    kubernetes_validate.validate(obj, "1.33", strict=True)


@pytest.mark.parametrize("fields", SERVICES.values(), ids=SERVICES.keys())
def test_every_manifest_validates_strictly(fields, tenant_a):
    own = make_service(tenant_a, **fields)
    shared = make_service(None, **fields)
    local = LocalLaunch(["python3", "-m", "server", "--port", "$(PORT)"], "/v1/models", {"OMP_NUM_THREADS": "2"})
    for service in (own, shared):
        for launch in (None, local):
            objects = manifests.service_manifests(service, local=launch)
            assert [o["kind"] for o in objects] == ["Deployment", "Service"]
            for obj in objects:
                validate(obj)


def test_names_labels_namespaces_and_the_endpoint(tenant_a):
    own = make_service(tenant_a, name="chat", runtime=Runtime.VLLM, model="m", replicas=3)
    shared = make_service(None, name="chat", runtime=Runtime.VLLM, model="m")
    deployment, service = manifests.service_manifests(own)
    assert deployment["metadata"]["namespace"] == service["metadata"]["namespace"] == "tenant-alpha"
    assert deployment["metadata"]["name"] == service["metadata"]["name"] == "llm-chat"
    labels = deployment["metadata"]["labels"]
    assert labels[MANAGED_BY] == "gryvia" and labels["gryvia.io/tenant"] == "alpha"
    assert labels["gryvia.io/inference-service"] == "chat" and labels_match(labels, manifests.SELECTOR)
    uid = labels[manifests.UID_LABEL]
    assert deployment["spec"]["selector"] == {"matchLabels": {manifests.UID_LABEL: uid}}
    assert deployment["spec"]["template"]["metadata"]["labels"][manifests.UID_LABEL] == uid
    assert service["spec"]["selector"] == {manifests.UID_LABEL: uid} and service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"] == [{"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}]
    assert deployment["spec"]["replicas"] == 3
    assert manifests.endpoint(own) == "http://llm-chat.tenant-alpha.svc:8000/v1"
    # A shared service lives in the platform namespace; same name, another row: another uid.
    shared_deployment, _ = manifests.service_manifests(shared, shared_namespace="platform")
    assert shared_deployment["metadata"]["namespace"] == "platform"
    assert "gryvia.io/tenant" not in shared_deployment["metadata"]["labels"]
    assert shared_deployment["metadata"]["labels"]["gryvia.io/shared"] == "true"
    assert shared_deployment["metadata"]["labels"][manifests.UID_LABEL] != uid
    assert manifests.endpoint(shared) == "http://llm-chat.gryvia-system.svc:8000/v1"


def test_a_long_name_still_makes_a_valid_service_name(tenant_a):
    name = "a" * 30 + "-" + "b" * 32  # 63 characters: the longest service name
    deployment, service = manifests.service_manifests(make_service(tenant_a, name=name, runtime="tgi", model="m"))
    assert len(service["metadata"]["name"]) <= 63 and service["metadata"]["name"].startswith("llm-aaa")
    validate(service)
    validate(deployment)


def _container(service: InferenceService, **kw) -> dict:
    return manifests.service_manifests(service, **kw)[0]["spec"]["template"]["spec"]["containers"][0]


def test_each_runtime_has_its_image_arguments_and_health_probe(tenant_a):
    fields = SERVICES["vllm-2-gpus"]
    vllm = _container(make_service(tenant_a, name="v", **fields))
    assert vllm["image"].startswith("vllm/vllm-openai:v") and "command" not in vllm
    assert vllm["args"] == [
        "--model", "meta-llama/Llama-3.1-8B-Instruct", "--served-model-name", "llama-3.1-8b",
        "--host", "0.0.0.0", "--port", "8000", "--max-model-len", "8192", "--tensor-parallel-size", "2",
        "--gpu-memory-utilization", "0.9",
    ]  # fmt: skip
    assert vllm["resources"] == {
        "requests": {"cpu": "8", "memory": "64Gi"},
        "limits": {"memory": "64Gi", "nvidia.com/gpu": "2"},
    }
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert vllm[probe]["httpGet"] == {"path": "/health", "port": "http"}
    assert vllm["volumeMounts"] == [{"name": "shm", "mountPath": "/dev/shm"}]

    tgi = _container(make_service(tenant_a, name="t", **SERVICES["tgi"]))
    assert tgi["image"].startswith("ghcr.io/huggingface/text-generation-inference:")
    assert tgi["args"][:2] == ["--model-id", "HuggingFaceH4/zephyr-7b-beta"] and "--port" in tgi["args"]

    cpu = _container(make_service(tenant_a, name="l", **SERVICES["llamacpp-cpu"]))
    assert cpu["image"].startswith("ghcr.io/ggml-org/llama.cpp:server-b")
    assert cpu["args"] == [
        "-m",
        "/models/qwen.gguf",
        "--alias",
        "/models/qwen.gguf",
        "--host",
        "0.0.0.0",
        "--port",
        "8000",
    ]
    assert "nvidia.com/gpu" not in str(cpu.get("resources"))
    gpu = _container(make_service(tenant_a, name="g", upstream_model="gemma", **SERVICES["llamacpp-gpu-hf"]))
    assert gpu["image"].startswith("ghcr.io/ggml-org/llama.cpp:server-cuda")
    assert gpu["args"][:4] == ["-hf", "ggml-org/gemma-3-1b-it-GGUF", "--alias", "gemma"]
    assert gpu["args"][-2:] == ["--n-gpu-layers", "999"]

    embed = _container(make_service(tenant_a, name="e", **SERVICES["embeddings"]))
    assert embed["command"] == ["python", "-m", "apps.llm.embedding_server"]
    assert embed["args"][:4] == ["--model-path", "/models/minilm", "--name", "/models/minilm"]
    images = {**manifests.DEFAULT_IMAGES, Runtime.SENTENCE_TRANSFORMERS: "registry.example/gryvia:7"}
    assert _container(InferenceService.objects.get(name="e"), images=images)["image"] == "registry.example/gryvia:7"


def test_the_local_form_runs_the_local_command_with_a_port_variable(tenant_a):
    service = make_service(tenant_a, runtime=Runtime.LLAMACPP, model="tiny-chat", resources={"gpus": 1})
    launch = LocalLaunch(["/usr/bin/python3", "-m", "llama_cpp.server", "--port", "$(PORT)"], "/v1/models", {"A": "1"})
    container = _container(service, local=launch)
    assert container["command"] == launch.command and "args" not in container
    assert {e["name"]: e["value"] for e in container["env"]} == {"A": "1", "PORT": "8000"}
    assert container["readinessProbe"]["httpGet"]["path"] == "/v1/models"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"  # the local backend hands out GPUs too


def test_external_services_have_no_objects(tenant_a):
    service = make_service(tenant_a, runtime=Runtime.EXTERNAL, model="gpt-4o", url="https://api.example/v1")
    assert manifests.service_manifests(service) == []

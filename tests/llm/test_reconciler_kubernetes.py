"""The inference service reconciler with the Kubernetes backend, against kmock: Deployment and Service created,
status from the Deployment's ready replicas (set here as the Deployment controller would), what is wrong named from
the pods, objects deleted when the service is disabled or deleted, and no writes when nothing changed."""

from __future__ import annotations

import pytest

from apps.cluster.backends.base import DEPLOYMENT, NAMESPACE, SERVICE
from apps.cluster.backends.kubernetes import KubernetesBackend
from apps.llm import manifests, routing
from apps.llm.models import InferenceService, Runtime, ServicePhase
from apps.llm.reconciler import reconcile_inference_services
from apps.tenants.reconciler import reconcile_tenants
from tests.kmock_cluster import running_kmock

pytestmark = pytest.mark.django_db
WRITES = ("POST", "PUT", "PATCH", "DELETE")
NS = "tenant-alpha"
URL = "http://llm-chat.tenant-alpha.svc:8000/v1"


@pytest.fixture
def cluster():
    with running_kmock() as running:
        yield running


@pytest.fixture
def kube(cluster, tenant_a, settings):
    settings.GRYVIA_BACKEND = "kubernetes"
    backend = KubernetesBackend.for_host(cluster.url, qps=1000, burst=1000, timeout_s=5.0)
    reconcile_tenants(backend)
    cluster.clear_requests()
    yield backend
    backend.close()


def make_service(tenant, name: str = "chat", **fields) -> InferenceService:
    fields.setdefault("runtime", Runtime.VLLM)
    fields.setdefault("model", "meta-llama/Llama-3.1-8B-Instruct")
    return InferenceService.objects.create(tenant=tenant, name=name, model_name=name, **fields)


def set_deployment_status(cluster, name: str, namespace: str, status: dict) -> None:
    """Play the Deployment controller."""
    stored = cluster.stored(DEPLOYMENT, name, namespace)
    stored["status"] = status
    cluster.seed(stored)


def writes(cluster) -> list[str]:
    return [f"{r.method} {r.path}" for r in cluster.requests() if r.method in WRITES]


def reload(service: InferenceService) -> InferenceService:
    service.refresh_from_db()
    return service


def test_deployment_and_service_then_ready_degraded_and_deleted(
    cluster, kube, tenant_a, django_capture_on_commit_callbacks
):
    service = make_service(tenant_a, replicas=2, resources={"gpus": 1})
    stats = reconcile_inference_services(kube)
    assert stats.errors == 0 and stats.applied == 2 and stats.lists == 3  # Deployments, Services, Pods
    deployment = cluster.stored(DEPLOYMENT, "llm-chat", NS)
    svc = cluster.stored(SERVICE, "llm-chat", NS)
    uid = manifests.service_uid(service)
    for obj in (deployment, svc):
        labels = obj["metadata"]["labels"]
        assert labels[manifests.UID_LABEL] == uid and labels["gryvia.io/tenant"] == "alpha"
        assert (
            labels["app.kubernetes.io/managed-by"] == "gryvia" and obj["metadata"]["annotations"]["gryvia.io/spec-hash"]
        )
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert (
        container["image"].startswith("vllm/vllm-openai:") and container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    )
    assert container["readinessProbe"]["httpGet"]["path"] == "/health" and deployment["spec"]["replicas"] == 2
    service = reload(service)
    assert service.status_phase == ServicePhase.DEPLOYING and service.status_message == "0/2 replicas ready"
    assert service.status_endpoint == URL and service.status_endpoints == []
    assert service.observed_generation == service.generation and len(service.status_applied) == 2

    # The controller reports both replicas ready: Ready, the Service is the endpoint, the gateway is told.
    set_deployment_status(cluster, "llm-chat", NS, {"replicas": 2, "readyReplicas": 2, "availableReplicas": 2})
    before = routing.current
    with django_capture_on_commit_callbacks(execute=True):
        reconcile_inference_services(kube)
    service = reload(service)
    assert service.status_phase == ServicePhase.READY and service.status_ready_replicas == 2
    assert service.status_endpoints == [URL] and service.status_message == ""
    assert routing.current != before

    # Settled: nothing is written, to the cluster or the row.
    cluster.clear_requests()
    stats = reconcile_inference_services(kube)
    assert writes(cluster) == [] and stats.reconciled == 0

    # One replica goes: Degraded, naming the pod and why.
    set_deployment_status(cluster, "llm-chat", NS, {"replicas": 2, "readyReplicas": 1, "availableReplicas": 1})
    cluster.seed(_pod("llm-chat-7d9f-abcde", uid, waiting={"reason": "CrashLoopBackOff"}, restarts=2, exit_code=137))
    reconcile_inference_services(kube)
    service = reload(service)
    assert service.status_phase == ServicePhase.DEGRADED and service.status_ready_replicas == 1
    assert service.status_message == (
        "1/2 replicas ready; pod llm-chat-7d9f-abcde: the server exited with code 137, restarted 2 times "
        "(CrashLoopBackOff)"
    )
    assert service.status_endpoints == [URL]

    # Disabled: both objects go, Stopped.
    cluster.clear_requests()
    InferenceService.objects.filter(pk=service.pk).update(enabled=False, generation=service.generation + 1)
    reconcile_inference_services(kube)
    assert sorted(writes(cluster)) == [
        "DELETE /api/v1/namespaces/tenant-alpha/services/llm-chat",
        "DELETE /apis/apps/v1/namespaces/tenant-alpha/deployments/llm-chat",
    ]
    service = reload(service)
    assert service.status_phase == ServicePhase.STOPPED and service.status_endpoints == []
    assert service.status_endpoint == "" and service.status_applied == {}


def _pod(name: str, uid: str, *, waiting: dict, restarts: int = 0, exit_code: int | None = None) -> dict:
    container = {"name": "server", "ready": False, "restartCount": restarts, "state": {"waiting": waiting}}
    if exit_code is not None:
        container["lastState"] = {"terminated": {"exitCode": exit_code}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {
                "app.kubernetes.io/managed-by": "gryvia",
                manifests.COMPONENT: "inference-service",
                manifests.UID_LABEL: uid,
            },
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": "PodScheduled", "status": "True"}],
            "containerStatuses": [container],
        },
    }


def test_a_crash_looping_service_has_failed_and_an_unschedulable_one_says_why(cluster, kube, tenant_a):
    crashing = make_service(tenant_a, "crash")
    waiting = make_service(tenant_a, "big", resources={"gpus": 8})
    reconcile_inference_services(kube)
    cluster.seed(
        _pod(
            "llm-crash-1-aaaaa",
            manifests.service_uid(crashing),
            waiting={"reason": "CrashLoopBackOff"},
            restarts=3,
            exit_code=1,
        )
    )
    pending = _pod("llm-big-1-bbbbb", manifests.service_uid(waiting), waiting={"reason": "ContainerCreating"})
    pending["status"] = {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
            }
        ],
    }
    cluster.seed(pending)
    reconcile_inference_services(kube)
    crashing, waiting = reload(crashing), reload(waiting)
    assert crashing.status_phase == ServicePhase.FAILED
    assert "exited with code 1, restarted 3 times" in crashing.status_message
    assert waiting.status_phase == ServicePhase.DEPLOYING
    assert waiting.status_message == (
        "0/1 replicas ready; pod llm-big-1-bbbbb is not scheduled: "
        "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    )


def test_shared_services_go_to_the_platform_namespace_and_deleted_ones_are_collected(cluster, kube, settings):
    settings.GRYVIA_LLM_SHARED_NAMESPACE = "platform-llm"
    shared = make_service(None, "embed", runtime=Runtime.SENTENCE_TRANSFORMERS, model="/models/minilm")
    reconcile_inference_services(kube)
    assert cluster.stored(NAMESPACE, "platform-llm") is not None  # absent, so created (and never collected)
    deployment = cluster.stored(DEPLOYMENT, "llm-embed", "platform-llm")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["command"] == [
        "python",
        "-m",
        "apps.llm.embedding_server",
    ]
    assert reload(shared).status_endpoint == "http://llm-embed.platform-llm.svc:8000/v1"
    InferenceService.objects.filter(pk=shared.pk).delete()
    stats = reconcile_inference_services(kube)
    assert stats.orphans == 2
    assert cluster.stored(DEPLOYMENT, "llm-embed", "platform-llm") is None
    assert cluster.stored(SERVICE, "llm-embed", "platform-llm") is None
    assert cluster.stored(NAMESPACE, "platform-llm") is not None


def test_a_spec_change_is_applied_and_external_services_have_no_objects(cluster, kube, tenant_a):
    service = make_service(tenant_a)
    make_service(tenant_a, "remote", runtime=Runtime.EXTERNAL, model="gpt-4o", url="https://api.example/v1")
    reconcile_inference_services(kube)
    cluster.clear_requests()
    InferenceService.objects.filter(pk=service.pk).update(args=["--enforce-eager"], generation=service.generation + 1)
    reconcile_inference_services(kube)
    assert writes(cluster) == ["PATCH /apis/apps/v1/namespaces/tenant-alpha/deployments/llm-chat"]
    args = cluster.stored(DEPLOYMENT, "llm-chat", NS)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[-1] == "--enforce-eager"
    assert reload(service).observed_generation == service.generation == 2
    remote = InferenceService.objects.get(name="remote")
    assert remote.status_phase == ServicePhase.READY and remote.status_endpoints == ["https://api.example/v1"]
    assert [d["metadata"]["name"] for d in kube.list(DEPLOYMENT, label_selector=manifests.SELECTOR)] == ["llm-chat"]

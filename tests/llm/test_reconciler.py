"""The inference service reconciler on the local backend (the embedded profile): services run as processes on this
machine, status follows their readiness, /readyz waits for the local models registered at start, and bootstrap
registers tiny-chat and minilm. The fast tests run `benchmarks.upstream` (a cheap OpenAI-compatible server) as the
llama.cpp runtime's command; the slow one runs the real packaged models through the reconciler."""

from __future__ import annotations

import io
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.cluster.backends.base import DEPLOYMENT, POD, SERVICE
from apps.cluster.backends.local import LocalBackend
from apps.cluster.backends.local.pods import group_alive
from apps.core.models import AuditEntry
from apps.core.principal import system
from apps.llm import manifests, packaged, routing
from apps.llm.local_registry import register_local_models
from apps.llm.models import InferenceService, Runtime, ServicePhase
from apps.llm.reconciler import reconcile_inference_services
from apps.tenants.reconciler import reconcile_tenants
from tests.factories import make_key, make_tenant

from .gateway_env import metered

pytestmark = pytest.mark.django_db(transaction=True)

STAND_IN = [
    "{python}",
    "-m",
    "benchmarks.upstream",
    "--host",
    "{host}",
    "--port",
    "{port}",
    "--models",
    "{served_model}",
]
SELECTOR = manifests.SELECTOR


@pytest.fixture
def backend(tmp_path: Path, settings) -> Iterator[LocalBackend]:
    settings.GRYVIA_BACKEND = "local"
    settings.GRYVIA_LLM_LOCAL_COMMANDS = {Runtime.LLAMACPP: STAND_IN}
    be = LocalBackend(data_dir=tmp_path / "data")
    yield be
    be.close()


def until(backend: LocalBackend, done: Callable[[], Any], *, timeout: float = 30.0, message: str = "") -> Any:
    """Run reconcile passes (as the ticker does, faster) until `done()` holds."""
    deadline = time.monotonic() + timeout
    while True:
        stats = reconcile_inference_services(backend)
        value = done()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out: {message}; last pass {stats}; {_states()}")
        time.sleep(0.2)


def _states() -> list[tuple]:
    return list(InferenceService.objects.values_list("name", "status_phase", "status_message"))


def phase(name: str, tenant=None) -> str:
    return InferenceService.objects.get(name=name, tenant=tenant).status_phase


def make_service(tenant, name: str, **fields) -> InferenceService:
    fields.setdefault("runtime", Runtime.LLAMACPP)
    fields.setdefault("model", name)
    return InferenceService.objects.create(tenant=tenant, name=name, model_name=name, **fields)


def local_pids(backend: LocalBackend) -> set[int]:
    return {
        int(p["metadata"]["annotations"]["gryvia.io/local-pid"])
        for p in backend.list(POD, label_selector=SELECTOR)
        if "gryvia.io/local-pid" in p["metadata"]["annotations"]
    }


def test_a_service_runs_as_local_processes_with_one_endpoint_per_ready_replica(backend, tenant_a):
    reconcile_tenants(backend)
    service = make_service(tenant_a, "chat", replicas=2)
    before = routing.current
    until(backend, lambda: phase("chat", tenant_a) == ServicePhase.READY, message="Ready")
    service.refresh_from_db()
    assert service.status_ready_replicas == 2 and service.status_message == ""
    assert len(service.status_endpoints) == 2 and service.status_endpoint == service.status_endpoints[0]
    assert routing.current != before  # the gateway was told
    ports = set()
    for url in service.status_endpoints:
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        ports.add(url.split(":")[2].split("/")[0])
        models = httpx.get(f"{url}/models", timeout=5).json()
        assert [m["id"] for m in models["data"]] == ["chat"]  # --served-model-name came through
    assert len(ports) == 2
    deployment = backend.list(DEPLOYMENT, label_selector=SELECTOR, namespace="tenant-alpha")
    assert [d["metadata"]["name"] for d in deployment] == ["llm-chat"]
    assert backend.list(SERVICE, label_selector=SELECTOR, namespace="tenant-alpha")

    # Settled: a pass changes nothing, in the cluster or the database.
    with CaptureQueriesContext(connection) as queries:
        stats = reconcile_inference_services(backend)
    assert stats.applied == stats.deleted == stats.reconciled == 0
    assert not [q for q in queries.captured_queries if q["sql"].lstrip().upper().startswith(("UPDATE", "INSERT"))]

    # Scaled down: one replica, one endpoint; then disabled: Stopped, and no process is left.
    InferenceService.objects.filter(pk=service.pk).update(replicas=1, generation=service.generation + 1)
    until(backend, lambda: len(InferenceService.objects.get(pk=service.pk).status_endpoints) == 1, message="1 left")
    pids = local_pids(backend)
    assert len(pids) == 1
    InferenceService.objects.filter(pk=service.pk).update(enabled=False, generation=service.generation + 2)
    until(backend, lambda: phase("chat", tenant_a) == ServicePhase.STOPPED, message="Stopped")
    service.refresh_from_db()
    assert service.status_endpoints == [] and service.status_endpoint == "" and service.status_message == "disabled"
    assert not backend.list(DEPLOYMENT, label_selector=SELECTOR) and not backend.list(SERVICE, label_selector=SELECTOR)
    until(backend, lambda: not any(group_alive(p) for p in pids), timeout=15, message="the process stopped")


def test_a_deleted_service_loses_its_processes(backend):
    make_service(None, "shared-chat")
    until(backend, lambda: phase("shared-chat") == ServicePhase.READY, message="Ready")
    assert backend.list(DEPLOYMENT, label_selector=SELECTOR, namespace="gryvia-system")  # the platform namespace
    pids = local_pids(backend)
    InferenceService.objects.filter(name="shared-chat").delete()
    stats = reconcile_inference_services(backend)
    assert stats.orphans == 2 and not backend.list(DEPLOYMENT, label_selector=SELECTOR)
    until(backend, lambda: not any(group_alive(p) for p in pids), timeout=15, message="the process stopped")


def test_a_crashing_server_is_reported_with_its_exit_code(backend, settings):
    settings.GRYVIA_LLM_LOCAL_COMMANDS = {Runtime.LLAMACPP: ["{python}", "-c", "raise SystemExit(3)"]}
    make_service(None, "broken")
    until(
        backend,
        lambda: "exited with code 3" in InferenceService.objects.get(name="broken").status_message,
        message="the exit code in the message",
    )
    service = InferenceService.objects.get(name="broken")
    assert service.status_phase in (ServicePhase.DEPLOYING, ServicePhase.FAILED)
    assert service.status_message.startswith("0/1 replicas ready; pod llm-broken-")
    assert service.status_endpoints == []


def test_what_cannot_run_here_fails_with_the_reason(backend, monkeypatch):
    make_service(None, "big", runtime=Runtime.VLLM, model="meta-llama/Llama-3.1-70B")
    make_service(None, "nowhere", runtime=Runtime.SENTENCE_TRANSFORMERS, model="/no/such/model")
    make_service(None, "remote", runtime=Runtime.EXTERNAL, model="gpt-4o", url="https://api.example/v1/")
    make_service(None, "off", enabled=False)
    make_service(None, "zero", replicas=0)
    reconcile_inference_services(backend)
    rows = {s.name: s for s in InferenceService.objects.all()}
    assert rows["big"].status_phase == ServicePhase.FAILED and "kubernetes backend" in rows["big"].status_message
    assert rows["nowhere"].status_phase == ServicePhase.FAILED
    assert "'/no/such/model' is neither a packaged local model (minilm)" in rows["nowhere"].status_message
    assert rows["remote"].status_phase == ServicePhase.READY
    assert rows["remote"].status_endpoints == ["https://api.example/v1"]
    assert rows["off"].status_phase == rows["zero"].status_phase == ServicePhase.STOPPED
    assert rows["zero"].status_message == "scaled to 0 replicas"
    assert not backend.list(DEPLOYMENT, label_selector=SELECTOR)
    # A packaged model without the extra: says what to run.
    monkeypatch.setattr(packaged, "installed", lambda: [])
    minilm = make_service(None, "minilm", runtime=Runtime.SENTENCE_TRANSFORMERS)
    reconcile_inference_services(backend)
    minilm.refresh_from_db()
    assert minilm.status_phase == ServicePhase.FAILED and "make models" in minilm.status_message


def test_readyz_waits_for_the_local_models_registered_at_start(backend, client, settings, monkeypatch):
    monkeypatch.setattr(packaged, "installed", lambda: list(packaged.MODELS))
    assert client.get("/readyz").status_code == 200  # nothing registered yet: nothing to wait for
    result = register_local_models(actor=system("test"))
    assert result.registered == ["tiny-chat", "minilm"]
    # minilm runs the stand-in too (the real models are the slow test's).
    settings.GRYVIA_LLM_LOCAL_COMMANDS = {**settings.GRYVIA_LLM_LOCAL_COMMANDS, Runtime.SENTENCE_TRANSFORMERS: STAND_IN}
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert [(s["name"], s["phase"]) for s in body["inference_services"]] == [
        ("minilm", ServicePhase.PENDING),
        ("tiny-chat", ServicePhase.PENDING),
    ]
    assert "local inference services not ready: minilm (Pending), tiny-chat (Pending)" in body["problems"]
    InferenceService.objects.create(tenant=None, name="other", runtime=Runtime.VLLM, model="m", model_name="m")
    until(backend, lambda: InferenceService.objects.filter(status_phase=ServicePhase.READY).count() == 2)
    response = client.get("/readyz")
    assert response.status_code == 200, response.json()  # the vLLM one (Failed here) is not a local model
    assert response.json() == {"status": "ok", "problems": []}


def test_register_local_models_creates_them_once_with_an_audit_entry(db, settings, monkeypatch):
    settings.GRYVIA_BACKEND = "local"
    monkeypatch.setattr(packaged, "installed", lambda: [])
    assert "models extra is not installed" in register_local_models(actor=system("test")).summary()
    assert not InferenceService.objects.exists()
    monkeypatch.setattr(packaged, "installed", lambda: list(packaged.MODELS))
    out = io.StringIO()
    call_command("bootstrap", stdout=out)
    assert "Local models: registered tiny-chat, minilm" in out.getvalue()
    chat, embed = InferenceService.objects.get(name="tiny-chat"), InferenceService.objects.get(name="minilm")
    assert chat.tenant_id is None and chat.runtime == Runtime.LLAMACPP and chat.task == "chat"
    assert embed.runtime == Runtime.SENTENCE_TRANSFORMERS and embed.task == "embeddings"
    assert chat.model == chat.model_name == chat.upstream_model == "tiny-chat" and chat.context_length == 1024
    entries = AuditEntry.all_tenants.filter(action="inference_service.create")
    assert sorted(e.object_id for e in entries) == ["minilm", "tiny-chat"]
    InferenceService.objects.filter(name="minilm").update(enabled=False)  # an operator's change stays
    again = register_local_models(actor=system("test"))
    assert again.registered == [] and again.existing == ["tiny-chat", "minilm"]
    assert InferenceService.objects.get(name="minilm").enabled is False and entries.count() == 2
    settings.GRYVIA_BACKEND = "kubernetes"
    assert "only on this machine" in register_local_models(actor=system("test")).summary()


@pytest.mark.slow
def test_the_real_local_models_run_through_the_reconciler_and_the_gateway(backend, settings, gateway):
    """tiny-chat and minilm start as local Deployments, turn Ready, and answer through /v1/ as shared models any
    tenant may call (as `demo` does after `make models` and `make run`), each request metered."""
    missing = [m.name for m in packaged.MODELS if m not in packaged.installed()]
    if missing:
        why = f"{', '.join(missing)} need the models extra (`make models`)"
        if os.environ.get("GRYVIA_REQUIRE_MODELS") == "1":  # CI installs the extra: a skip there is a failure
            pytest.fail(why)
        pytest.skip(why)
    settings.GRYVIA_LLM_LOCAL_COMMANDS = {}
    assert register_local_models(actor=system("test")).registered == ["tiny-chat", "minilm"]
    until(
        backend,
        lambda: InferenceService.objects.filter(status_phase=ServicePhase.READY).count() == 2,
        timeout=240,
        message="tiny-chat and minilm Ready",
    )
    chat, embed = InferenceService.objects.get(name="tiny-chat"), InferenceService.objects.get(name="minilm")
    pod = backend.list(POD, label_selector=f"{manifests.SERVICE_LABEL}=tiny-chat")[0]
    assert pod["spec"]["containers"][0]["command"][:3] == [sys.executable, "-m", "llama_cpp.server"]
    answer = httpx.post(
        f"{chat.status_endpoint}/chat/completions",
        json={"model": "tiny-chat", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8},
        timeout=120,
    ).json()
    assert answer["usage"]["completion_tokens"] > 0
    vectors = httpx.post(
        f"{embed.status_endpoint}/embeddings", json={"model": "minilm", "input": ["hello"]}, timeout=60
    ).json()
    assert len(vectors["data"][0]["embedding"]) == 384
    tenant = make_tenant("demo-like")
    with openai.OpenAI(base_url=gateway.url, api_key=make_key(tenant, ["llm:invoke"]), max_retries=0) as llm:
        assert {"tiny-chat", "minilm"} <= {m.id for m in llm.models.list()}
        reply = llm.chat.completions.create(
            model="tiny-chat", messages=[{"role": "user", "content": "Say hello."}], max_tokens=8, timeout=120
        )
        assert reply.choices[0].message.content and reply.usage.completion_tokens > 0
        streamed = list(
            llm.chat.completions.create(
                model="tiny-chat",
                messages=[{"role": "user", "content": "Count to five."}],
                max_tokens=8,
                stream=True,
                temperature=0,
            )
        )
        # A 270M model may stop at once (one chunk) or say only blanks; what matters is that the stream ends whole.
        assert streamed and streamed[-1].choices[0].finish_reason
        # ...even when another request reaches the server while it streams (a readiness probe does, every period).
        stream = llm.chat.completions.create(
            model="tiny-chat", messages=[{"role": "user", "content": "Tell a story."}], max_tokens=24, stream=True
        )
        first = next(iter(stream))
        assert httpx.get(f"{chat.status_endpoint}/models", timeout=30).status_code == 200
        rest = list(stream)
        assert (rest or [first])[-1].choices[0].finish_reason
        embedding = llm.embeddings.create(model="minilm", input="GPU node is out of memory", timeout=60)
        assert len(embedding.data[0].embedding) == 384
    rows = metered(4, tenant=tenant)
    assert [(r.model, r.service, r.status) for r in rows] == [("tiny-chat", "tiny-chat", 200)] * 3 + [
        ("minilm", "minilm", 200)
    ]
    assert rows[0].input_tokens > 0 and rows[0].output_tokens == reply.usage.completion_tokens
    assert rows[1].estimated and rows[2].estimated  # llama.cpp streams no usage: counted by its tokenizer endpoint
    assert rows[3].input_tokens > 0 and rows[3].output_tokens == 0

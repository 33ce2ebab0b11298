"""/api/v1/inference-services/ and /api/v1/model-aliases/: tenant isolation, shared objects, the write-only
credential, manifests; and the LLM gateway limits of tenants and API keys through /api/v1/."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.core.models import AuditEntry
from apps.llm import routing, services
from apps.llm.models import InferenceService, ModelAlias
from apps.tenants.models import ApiKey, Tenant
from tests.factories import ACTOR, client_for, make_key

pytestmark = pytest.mark.django_db
SERVICES = "/api/v1/inference-services/"
ALIASES = "/api/v1/model-aliases/"
SECRET = "sk-upstream-never-shown-42"
EXTERNAL = {"name": "gpt", "runtime": "external", "model": "gpt-4o-mini", "url": "https://api.example.com/v1"}


@pytest.fixture
def platform(platform_key):
    return client_for(platform_key)


def _error(response, status=400):
    assert response.status_code == status, response.content
    return response.json()["error"]


def _names(response) -> set[tuple[str, str | None]]:
    assert response.status_code == 200, response.content
    return {(r["name"], r["tenant"]) for r in response.json()["results"]}


def make(tenant, name="gpt", **kw) -> InferenceService:
    return services.inference_service_create(actor=ACTOR, tenant=tenant, **{**EXTERNAL, "name": name, **kw})


# --- inference services ----------------------------------------------------------------------------------------


def test_create_read_update_delete_and_the_credential_never_comes_back(client_a, tenant_a):
    created = client_a.post(SERVICES, {**EXTERNAL, "credential": SECRET, "price_input_per_1m": "0.15"}, format="json")
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["tenant"] == "alpha" and body["shared"] is False and body["has_credential"] is True
    assert body["model_name"] == "gpt" and body["upstream_model"] == "gpt-4o-mini" and body["task"] == "chat"
    assert body["price_input_per_1m"] == "0.150000" and body["generation"] == 1
    assert body["status"] == {
        "phase": "Pending",
        "message": "",
        "ready_replicas": 0,
        "endpoint": "",
        "observed_generation": 0,
    }
    assert "credential" not in body and "credential_encrypted" not in body
    responses = [created, client_a.get(SERVICES), client_a.get(f"{SERVICES}gpt/")]
    patched = client_a.patch(f"{SERVICES}gpt/", {"weight": 3, "credential": ""}, format="json")
    responses.append(patched)
    assert patched.status_code == 200 and patched.json()["has_credential"] is False
    assert patched.json()["generation"] == 2 and patched.json()["weight"] == 3
    assert all(SECRET not in r.content.decode() for r in responses)
    assert _error(client_a.patch(f"{SERVICES}gpt/", {"name": "x"}, format="json"))["fields"]["name"]
    assert client_a.put(f"{SERVICES}gpt/", EXTERNAL, format="json").status_code == 405
    assert client_a.delete(f"{SERVICES}gpt/").status_code == 204
    assert client_a.get(f"{SERVICES}gpt/").status_code == 404
    actions = list(AuditEntry.all_tenants.filter(object_type="inference_service").values_list("action", flat=True))
    assert sorted(actions) == ["inference_service.create", "inference_service.delete", "inference_service.update"]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"url": ""}, "url"),
        ({"url": "https://me:pw@api.example.com/v1"}, "url"),
        ({"runtime": "llamacpp", "url": "", "model": "nope"}, "model"),
        ({"weight": 10_001}, "weight"),
        ({"replicas": 99}, "replicas"),
        ({"resources": {"gpu": 1}}, "resources"),
        ({"price_output_per_1m": "-1"}, "price_output_per_1m"),
        ({"price_output_per_1m": "0.0000001"}, "price_output_per_1m"),
        ({"model_name": "bad name"}, "model_name"),
        ({"name": "Not_DNS"}, "name"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_bad_input_is_400_naming_the_field_and_writes_nothing(client_a, changes, field):
    audits = AuditEntry.all_tenants.count()
    error = _error(client_a.post(SERVICES, {**EXTERNAL, **changes}, format="json"))
    assert field in error["fields"], error
    assert not InferenceService.objects.exists() and AuditEntry.all_tenants.count() == audits


def test_another_tenants_service_is_404_and_shared_ones_are_listed_for_all(client_a, client_b, tenant_a, tenant_b):
    make(tenant_a, "mine")
    make(tenant_b, "theirs")
    make(None, "everyone")
    assert _names(client_a.get(SERVICES)) == {("mine", "alpha"), ("everyone", None)}
    assert _names(client_b.get(SERVICES)) == {("theirs", "bravo"), ("everyone", None)}
    shared = client_a.get(f"{SERVICES}everyone/").json()
    assert shared["shared"] is True and shared["tenant"] is None
    for method in ("get", "delete"):
        assert getattr(client_b, method)(f"{SERVICES}mine/").status_code == 404
    assert client_b.patch(f"{SERVICES}mine/", {"weight": 1}, format="json").status_code == 404
    assert _names(client_a.get(SERVICES, {"shared": "true"})) == {("everyone", None)}


def test_a_tenant_cannot_create_change_or_delete_shared_services(client_a, platform, tenant_a):
    make(None, "everyone")
    assert _error(client_a.patch(f"{SERVICES}everyone/", {"weight": 1}, format="json"), 403)
    assert _error(client_a.delete(f"{SERVICES}everyone/"), 403)
    assert _error(client_a.post(SERVICES, {**EXTERNAL, "shared": True}, format="json"), 403)
    assert InferenceService.objects.get(name="everyone").weight == 100
    assert not InferenceService.objects.filter(name="gpt").exists()
    created = platform.post(SERVICES, {**EXTERNAL, "shared": True}, format="json")
    assert created.status_code == 201 and created.json()["shared"] is True, created.content
    assert platform.patch(f"{SERVICES}gpt/", {"enabled": False}, format="json").json()["enabled"] is False
    assert _error(platform.patch(f"{SERVICES}gpt/", {"shared": False}, format="json"))["fields"]["shared"]
    entry = AuditEntry.all_tenants.filter(action="inference_service.create", object_id="gpt").get()
    assert entry.tenant_id is None


def test_scopes_models_read_and_write(tenant_a):
    make(tenant_a)
    reader = client_for(make_key(tenant_a, ["models:read"]))
    assert reader.get(SERVICES).status_code == 200
    assert _error(reader.post(SERVICES, {**EXTERNAL, "name": "other"}, format="json"), 403)
    assert _error(reader.patch(f"{SERVICES}gpt/", {"weight": 1}, format="json"), 403)
    assert _error(client_for(make_key(tenant_a, ["jobs:read"])).get(SERVICES), 403)
    writer = client_for(make_key(tenant_a, ["models:write"]))
    assert writer.post(SERVICES, {**EXTERNAL, "name": "other"}, format="json").status_code == 201
    assert client_for().get(SERVICES).status_code == 401


def test_a_name_resolves_to_the_tenants_own_service_before_the_shared_one(client_a, platform, tenant_a, tenant_b):
    make(tenant_a, "dup", model="tenant-model")
    make(None, "dup", model="shared-model")
    assert client_a.get(f"{SERVICES}dup/").json()["model"] == "tenant-model"
    assert platform.get(f"{SERVICES}dup/").json()["model"] == "shared-model"  # no tenant named: shared first
    narrowed = client_for(platform._credentials["HTTP_AUTHORIZATION"].split()[1], HTTP_X_GRYVIA_TENANT="alpha")
    assert narrowed.get(f"{SERVICES}dup/").json()["model"] == "tenant-model"
    make(tenant_b, "twice")
    make(tenant_a, "twice")
    assert "X-Gryvia-Tenant" in _error(platform.get(f"{SERVICES}twice/"))["message"]


def test_manifest_form(client_a):
    manifest = """
apiVersion: gryvia.io/v1alpha1
kind: GryviaInferenceService
metadata:
  name: llama
spec:
  runtime: vllm
  model: meta-llama/Llama-3.1-8B-Instruct
  modelName: llama-3.1-8b
  replicas: 2
  resources: {gpus: 1, memory: 32Gi}
  priceInputPer1M: 0.2
  priceOutputPer1m: "0.8"
  contextLength: 8192
"""
    created = client_a.post(SERVICES, manifest, content_type="application/yaml")
    assert created.status_code == 201, created.content
    body = created.json()
    assert (body["model_name"], body["replicas"], body["context_length"]) == ("llama-3.1-8b", 2, 8192)
    assert (body["price_input_per_1m"], body["price_output_per_1m"]) == ("0.200000", "0.800000")
    wrong = client_a.post(
        SERVICES, manifest.replace("GryviaInferenceService", "GryviaAIJob"), content_type="application/yaml"
    )
    assert "kind" in _error(wrong)["fields"]


def test_list_query_count_does_not_grow(client_a, tenant_a):
    make(tenant_a, "s0")
    client_a.get(SERVICES)
    with CaptureQueriesContext(connection) as one:
        assert client_a.get(SERVICES).status_code == 200
    for i in range(1, 7):
        make(tenant_a if i % 2 else None, f"s{i}")
    with CaptureQueriesContext(connection) as many:
        assert client_a.get(SERVICES).json()["count"] == 7
    assert len(many) == len(one)


# --- model aliases ---------------------------------------------------------------------------------------------


def test_aliases_crud_isolation_and_shared(client_a, client_b, platform):
    created = client_a.post(ALIASES, {"name": "org/fast:v1", "targets": ["gpt", "tiny-chat"]}, format="json")
    assert created.status_code == 201 and created.json()["shared"] is False, created.content
    assert client_a.get(f"{ALIASES}org/fast:v1/").json()["targets"] == ["gpt", "tiny-chat"]
    assert client_b.get(f"{ALIASES}org/fast:v1/").status_code == 404
    patched = client_a.patch(f"{ALIASES}org/fast:v1/", {"targets": ["tiny-chat"]}, format="json")
    assert patched.status_code == 200 and patched.json()["targets"] == ["tiny-chat"]
    assert (
        "targets"
        in _error(client_a.patch(f"{ALIASES}org/fast:v1/", {"targets": ["org/fast:v1"]}, format="json"))["fields"]
    )
    assert "targets" in _error(client_a.post(ALIASES, {"name": "x", "targets": []}, format="json"))["fields"]
    assert (
        platform.post(ALIASES, {"name": "best", "targets": ["gpt"], "shared": True}, format="json").status_code == 201
    )
    assert {a["name"] for a in client_b.get(ALIASES).json()["results"]} == {"best"}
    assert _error(client_b.delete(f"{ALIASES}best/"), 403)
    assert client_a.delete(f"{ALIASES}org/fast:v1/").status_code == 204
    assert list(ModelAlias.objects.values_list("name", flat=True)) == ["best"]


# --- tenants and keys ------------------------------------------------------------------------------------------


def test_tenant_tokens_per_day(platform, client_a, tenant_a, django_capture_on_commit_callbacks):
    assert client_a.get("/api/v1/tenants/alpha/").json()["tokens_per_day"] is None
    before = routing.current
    with django_capture_on_commit_callbacks(execute=True):
        changed = platform.patch("/api/v1/tenants/alpha/", {"tokens_per_day": 100_000}, format="json")
    assert changed.status_code == 200 and changed.json()["tokens_per_day"] == 100_000
    assert routing.current != before  # the gateway reloads the tenant's quota
    assert (
        "tokens_per_day"
        in _error(platform.patch("/api/v1/tenants/alpha/", {"tokens_per_day": 0}, format="json"))["fields"]
    )
    manifest = "apiVersion: gryvia.io/v1alpha1\nkind: GryviaTenant\nmetadata: {name: llm}\nspec: {tokensPerDay: 5000}\n"
    assert platform.post("/api/v1/tenants/", manifest, content_type="application/yaml").status_code == 201
    assert Tenant.objects.get(slug="llm").tokens_per_day == 5000


def test_key_limits_through_the_api(client_a, tenant_a, django_capture_on_commit_callbacks):
    body = {
        "scopes": ["llm:invoke"],
        "allowed_models": ["tiny-chat", "gpt"],
        "requests_per_minute": 5,
        "tokens_per_minute": 1000,
        "tokens_per_day": 50_000,
    }
    created = client_a.post("/api/v1/api-keys/", body, format="json")
    assert created.status_code == 201, created.content
    key = created.json()
    assert key["allowed_models"] == ["gpt", "tiny-chat"] and key["requests_per_minute"] == 5
    assert (key["tokens_per_minute"], key["tokens_per_day"]) == (1000, 50_000)
    path = f"/api/v1/api-keys/{key['id']}/"
    before = routing.current
    with django_capture_on_commit_callbacks(execute=True):
        patched = client_a.patch(path, {"requests_per_minute": None, "allowed_models": []}, format="json")
    assert patched.status_code == 200 and patched.json()["requests_per_minute"] is None, patched.content
    assert routing.current != before  # the gateway drops its cached key
    stored = ApiKey.all_tenants.get(key_id=key["id"])
    assert (stored.allowed_models, stored.requests_per_minute, stored.tokens_per_day) == ([], None, 50_000)
    update = AuditEntry.all_tenants.get(action="api_key.update", object_id=key["id"])
    assert update.before["requests_per_minute"] == 5 and update.after["requests_per_minute"] is None
    for bad in ({"allowed_models": ["no spaces please"]}, {"tokens_per_minute": 0}, {"tokens_per_day": -1}):
        assert set(bad) <= set(_error(client_a.patch(path, bad, format="json"))["fields"])
        assert set(bad) <= set(_error(client_a.post("/api/v1/api-keys/", {**body, **bad}, format="json"))["fields"])
    assert _error(client_a.patch(path, {"scopes": ["admin"]}, format="json"))["fields"]["scopes"]
    for action in ("revoke", "rotate"):
        before = routing.current
        with django_capture_on_commit_callbacks(execute=True):
            fresh = client_a.post("/api/v1/api-keys/", {"scopes": ["llm:invoke"]}, format="json").json()
            assert client_a.post(f"/api/v1/api-keys/{fresh['id']}/{action}/", {}, format="json").status_code == 200
        assert routing.current != before

"""apps.llm.services: inference services and model aliases are checked field by field, audited, the upstream
credential is stored only encrypted, shared objects are for platform admins, and the gateway hears of changes."""

from __future__ import annotations

import io
import json
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.db import connection

from apps.core import scopes as S
from apps.core.models import AuditEntry
from apps.core.principal import Principal
from apps.llm import routing, services
from apps.llm.models import InferenceService, ModelAlias
from tests.factories import ACTOR

pytestmark = pytest.mark.django_db
SECRET = "sk-upstream-very-secret-0123456789"


def member(tenant, *scopes: str) -> Principal:
    return Principal(label="key:member", kind="api_key", tenant_scopes={tenant.pk: S.expand(scopes)})


def external(tenant, name="gpt", **kw) -> InferenceService:
    spec = {"runtime": "external", "model": "gpt-4o-mini", "url": "https://api.example.com/v1", **kw}
    return services.inference_service_create(actor=ACTOR, tenant=tenant, name=name, **spec)


def _audits(action: str) -> list[AuditEntry]:
    return list(AuditEntry.all_tenants.filter(action=action).order_by("id"))


# --- defaults and validation -----------------------------------------------------------------------------------


def test_defaults_follow_the_runtime(tenant_a):
    ext = external(tenant_a)
    assert (ext.model_name, ext.upstream_model, ext.task, ext.generation) == ("gpt", "gpt-4o-mini", "chat", 1)
    local = services.inference_service_create(
        actor=ACTOR, tenant=tenant_a, name="chat", runtime="llamacpp", model="tiny-chat", model_name="team/chat"
    )
    assert (local.upstream_model, local.url) == ("team/chat", "")
    embed = services.inference_service_create(
        actor=ACTOR, tenant=tenant_a, name="embed", runtime="sentence-transformers", model="minilm"
    )
    assert embed.task == "embeddings"
    vllm = services.inference_service_create(
        actor=ACTOR,
        tenant=tenant_a,
        name="llama",
        runtime="vllm",
        model="meta-llama/Llama-3.1-8B-Instruct",
        resources={"gpus": 1, "cpu": 4, "memory": "16Gi"},
        price_input_per_1m="0.15",
        price_output_per_1m=Decimal("0.6"),
    )
    vllm.refresh_from_db()
    assert vllm.resources == {"gpus": 1, "cpu": "4", "memory": "16Gi"}
    assert (vllm.price_input_per_1m, vllm.price_output_per_1m) == (Decimal("0.15"), Decimal("0.6"))


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"name": "Bad_Name"}, "name"),
        ({"name": "x" * 64}, "name"),
        ({"runtime": "ollama"}, "runtime"),
        ({"task": "images"}, "task"),
        ({"runtime": "sentence-transformers", "model": "minilm", "url": "", "task": "chat"}, "task"),
        ({"url": ""}, "url"),
        ({"url": "ftp://files.example.com/v1"}, "url"),
        ({"url": "https://user:pw@api.example.com/v1"}, "url"),
        ({"url": "https://api.example.com/v1?key=x"}, "url"),
        ({"url": "not a url"}, "url"),
        ({"model": ""}, "model"),
        ({"model": "has space"}, "model"),
        ({"runtime": "llamacpp", "url": "", "model": "gpt2"}, "model"),
        ({"runtime": "llamacpp", "url": "", "model": "minilm"}, "model"),
        ({"runtime": "llamacpp", "url": "", "model": "/models/x.bin"}, "model"),
        ({"runtime": "sentence-transformers", "url": "", "model": "../etc"}, "model"),
        ({"runtime": "vllm", "url": "", "model": "not a model id"}, "model"),
        ({"runtime": "vllm", "url": "https://api.example.com/v1"}, "url"),
        ({"model_name": "-starts-with-dash"}, "model_name"),
        ({"model_name": "a" * 101}, "model_name"),
        ({"upstream_model": "with space"}, "upstream_model"),
        ({"version": "v 1"}, "version"),
        ({"weight": -1}, "weight"),
        ({"weight": 10_001}, "weight"),
        ({"weight": True}, "weight"),
        ({"replicas": 65}, "replicas"),
        ({"replicas": "2"}, "replicas"),
        ({"resources": {"gpus": 1, "disk": "1Gi"}}, "resources"),
        ({"resources": {"gpus": -1}}, "resources"),
        ({"resources": {"cpu": "lots"}}, "resources"),
        ({"resources": {"memory": "0"}}, "resources"),
        ({"resources": ["gpus"]}, "resources"),
        ({"args": "--flag"}, "args"),
        ({"args": [1]}, "args"),
        ({"price_input_per_1m": -1}, "price_input_per_1m"),
        ({"price_input_per_1m": "0.0000001"}, "price_input_per_1m"),
        ({"price_output_per_1m": "NaN"}, "price_output_per_1m"),
        ({"price_output_per_1m": "abc"}, "price_output_per_1m"),
        ({"context_length": 0}, "context_length"),
        ({"enabled": "yes"}, "enabled"),
        ({"credential": "two\nlines"}, "credential"),
    ],
)
def test_each_bad_field_is_named_and_nothing_is_written(tenant_a, changes, field):
    spec = {"name": "svc", "runtime": "external", "model": "m", "url": "https://api.example.com/v1", **changes}
    audits = AuditEntry.all_tenants.count()
    with pytest.raises(ValidationError) as info:
        services.inference_service_create(actor=ACTOR, tenant=tenant_a, **spec)
    assert field in info.value.message_dict, info.value.message_dict
    assert InferenceService.objects.count() == 0 and AuditEntry.all_tenants.count() == audits


def test_local_runtimes_take_packaged_models_or_absolute_paths(tenant_a):
    for name, runtime, model in [
        ("a", "llamacpp", "tiny-chat"),
        ("b", "llamacpp", "/models/gemma.gguf"),
        ("c", "sentence-transformers", "minilm"),
        ("d", "sentence-transformers", "/models/all-MiniLM-L6-v2"),
        ("e", "tgi", "/data/model"),
    ]:
        services.inference_service_create(actor=ACTOR, tenant=tenant_a, name=name, runtime=runtime, model=model)
    assert InferenceService.objects.count() == 5


def test_names_are_unique_per_tenant_and_among_shared(tenant_a, tenant_b):
    external(tenant_a)
    external(tenant_b)  # another tenant may use the name
    external(None)  # and so may a shared service
    with pytest.raises(ValidationError) as info:
        external(tenant_a)
    assert "already exists in tenant alpha" in info.value.message_dict["name"][0]
    with pytest.raises(ValidationError) as info:
        external(None)
    assert "shared" in info.value.message_dict["name"][0]


# --- who may write -----------------------------------------------------------------------------------------------


def test_a_tenant_needs_models_write_and_cannot_touch_shared(tenant_a, tenant_b):
    spec = {"runtime": "external", "model": "m", "url": "https://api.example.com/v1"}
    with pytest.raises(PermissionError, match="models:write"):
        services.inference_service_create(actor=member(tenant_a, "models:read"), tenant=tenant_a, name="x", **spec)
    with pytest.raises(PermissionError, match="models:write"):
        services.inference_service_create(actor=member(tenant_a, "models:write"), tenant=tenant_b, name="x", **spec)
    writer = member(tenant_a, "models:write")
    own = services.inference_service_create(actor=writer, tenant=tenant_a, name="x", **spec)
    services.inference_service_update(actor=writer, service=own, weight=5)
    shared = external(None, name="shared")
    for call in (
        lambda actor: services.inference_service_create(actor=actor, tenant=None, name="y", **spec),
        lambda actor: services.inference_service_update(actor=actor, service=shared, weight=1),
        lambda actor: services.inference_service_delete(actor=actor, service=shared),
        lambda actor: services.model_alias_create(actor=actor, tenant=None, name="al", targets=["x"]),
    ):
        with pytest.raises(PermissionError, match="platform staff"):
            call(member(tenant_a, "admin"))
        reader = Principal(label="staff", kind="session", is_platform=True, platform_scopes=S.READ_SCOPES)
        with pytest.raises(PermissionError, match="platform staff"):
            call(reader)
    assert InferenceService.objects.get(pk=shared.pk).weight == 100


# --- the credential ----------------------------------------------------------------------------------------------


def test_credential_is_encrypted_at_rest_and_absent_from_audit_and_dumps(tenant_a):
    service = external(tenant_a, credential=SECRET)
    assert service.has_credential and services.upstream_credential(service) == SECRET
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {InferenceService._meta.db_table}")
        rows = cursor.fetchall()
    assert rows and SECRET not in repr(rows)
    dump = io.StringIO()
    call_command("dumpdata", "llm", "core", stdout=dump)
    assert "credential_encrypted" in dump.getvalue() and SECRET not in dump.getvalue()
    (created,) = _audits("inference_service.create")
    assert created.after["credential"] == "set" and SECRET not in json.dumps([created.before, created.after])
    assert "credential_encrypted" not in created.after


def test_credential_changes_are_audited_by_what_happened(tenant_a):
    service = external(tenant_a)
    assert "credential" not in _audits("inference_service.create")[0].after
    services.inference_service_update(actor=ACTOR, service=service, credential=SECRET)
    services.inference_service_update(actor=ACTOR, service=service, credential=SECRET)  # the same: no change
    services.inference_service_update(actor=ACTOR, service=service, credential="sk-other")
    services.inference_service_update(actor=ACTOR, service=service, weight=7)  # omitted: kept
    assert services.upstream_credential(InferenceService.objects.get(pk=service.pk)) == "sk-other"
    services.inference_service_update(actor=ACTOR, service=service, credential="")
    updates = _audits("inference_service.update")
    assert [u.after.get("credential") for u in updates] == ["set", "changed", None, "removed"]
    service.refresh_from_db()
    assert not service.has_credential and service.generation == 5
    assert all(SECRET not in json.dumps([u.before, u.after]) for u in updates)


# --- updates and deletes -----------------------------------------------------------------------------------------


def test_update_bumps_generation_only_on_a_change(tenant_a):
    service = external(tenant_a)
    same = services.inference_service_update(actor=ACTOR, service=service, weight=100, url="https://api.example.com/v1")
    assert same.generation == 1 and not _audits("inference_service.update")
    changed = services.inference_service_update(actor=ACTOR, service=service, model="gpt-4o", replicas=2)
    assert changed.generation == 2 and changed.upstream_model == "gpt-4o"  # the default follows model
    (update,) = _audits("inference_service.update")
    assert update.before["model"] == "gpt-4o-mini" and update.after["model"] == "gpt-4o"
    pinned = services.inference_service_update(actor=ACTOR, service=service, upstream_model="pinned")
    assert services.inference_service_update(actor=ACTOR, service=pinned, model="gpt-5").upstream_model == "pinned"
    with pytest.raises(ValidationError) as info:
        services.inference_service_update(actor=ACTOR, service=service, name="renamed", tenant=None)
    assert set(info.value.message_dict) == {"name", "tenant"}
    with pytest.raises(ValidationError) as info:
        services.inference_service_update(actor=ACTOR, service=service, runtime="vllm")  # a url it cannot have
    assert "url" in info.value.message_dict


def test_changing_the_runtime_to_sentence_transformers_makes_it_embeddings(tenant_a):
    service = services.inference_service_create(
        actor=ACTOR, tenant=tenant_a, name="x", runtime="llamacpp", model="tiny-chat"
    )
    service = services.inference_service_update(
        actor=ACTOR, service=service, runtime="sentence-transformers", model="minilm"
    )
    assert service.task == "embeddings"


def test_delete_is_audited(tenant_a):
    service = external(tenant_a, credential=SECRET)
    services.inference_service_delete(actor=ACTOR, service=service)
    (deleted,) = _audits("inference_service.delete")
    assert deleted.after is None and deleted.before["name"] == "gpt" and deleted.before["credential"] == "set"
    assert deleted.tenant_id == tenant_a.pk and not InferenceService.objects.exists()


def test_each_change_tells_the_gateway_after_commit(tenant_a, django_capture_on_commit_callbacks, monkeypatch):
    nudged: list[str] = []
    monkeypatch.setattr(services, "nudge", nudged.append)
    before = routing.current
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        external(tenant_a)
        assert routing.current == before  # not before the commit
    assert routing.routes_changed in callbacks and routing.current != before
    # The periodic entry is scheduled: the reconciler is nudged once, after the commit.
    assert nudged == [services.RECONCILE]


def test_every_write_nudges_the_reconciler(tenant_a, monkeypatch):
    nudged: list[str] = []
    monkeypatch.setattr(services, "nudge", nudged.append)
    service = external(tenant_a)
    services.inference_service_update(actor=ACTOR, service=service, weight=1)
    services.inference_service_delete(actor=ACTOR, service=service)
    assert nudged == [services.RECONCILE] * 3


# --- aliases -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "targets", "field"),
    [
        ("fast", [], "targets"),
        ("fast", "gpt", "targets"),
        ("fast", ["fast"], "targets"),
        ("fast", ["a", "a"], "targets"),
        ("fast", [f"m{i}" for i in range(9)], "targets"),
        ("fast", ["bad name"], "targets"),
        ("-bad", ["gpt"], "name"),
    ],
)
def test_alias_validation(tenant_a, name, targets, field):
    with pytest.raises(ValidationError) as info:
        services.model_alias_create(actor=ACTOR, tenant=tenant_a, name=name, targets=targets)
    assert field in info.value.message_dict
    assert not ModelAlias.objects.exists()


def test_alias_create_update_delete(tenant_a):
    alias = services.model_alias_create(actor=ACTOR, tenant=tenant_a, name="org/fast:1", targets=["gpt", "tiny-chat"])
    services.model_alias_create(actor=ACTOR, tenant=None, name="org/fast:1", targets=["gpt"])
    with pytest.raises(ValidationError, match="already exists"):
        services.model_alias_create(actor=ACTOR, tenant=tenant_a, name="org/fast:1", targets=["x"])
    services.model_alias_update(actor=ACTOR, alias=alias, targets=["tiny-chat"])
    with pytest.raises(ValidationError):
        services.model_alias_update(actor=ACTOR, alias=alias, name="other")
    services.model_alias_delete(actor=ACTOR, alias=alias)
    actions = [e.action for e in AuditEntry.all_tenants.filter(object_type="model_alias").order_by("id")]
    assert actions == ["model_alias.create", "model_alias.create", "model_alias.update", "model_alias.delete"]
    update = _audits("model_alias.update")[0]
    assert update.before["targets"] == ["gpt", "tiny-chat"] and update.after["targets"] == ["tiny-chat"]


# --- key limits --------------------------------------------------------------------------------------------------


def test_key_limits_are_checked():
    assert services.validate_key_limits({"allowed_models": ["b", "a", "b"], "tokens_per_day": 10**12}) == {
        "allowed_models": ["a", "b"],
        "tokens_per_day": 10**12,
    }
    for limits, field in [
        ({"allowed_models": "gpt"}, "allowed_models"),
        ({"allowed_models": ["bad name"]}, "allowed_models"),
        ({"requests_per_minute": 0}, "requests_per_minute"),
        ({"tokens_per_minute": 2**31}, "tokens_per_minute"),
        ({"tokens_per_day": -5}, "tokens_per_day"),
        ({"requests_per_minute": True}, "requests_per_minute"),
    ]:
        with pytest.raises(ValidationError) as info:
            services.validate_key_limits(limits)
        assert field in info.value.message_dict

"""The admin of apps.llm: pages render, saves go through the services (audited), the credential is write-only,
usage is read-only."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib import admin
from django.urls import reverse
from django.utils import timezone

from apps.core.models import AuditEntry
from apps.llm import services
from apps.llm.models import InferenceService, LlmUsage, LlmUsageHourly, ModelAlias
from tests.factories import ACTOR

pytestmark = pytest.mark.django_db
SECRET = "sk-from-the-admin-form-77"


def _form(**changes) -> dict[str, str]:
    data = {
        "tenant": "",
        "name": "gpt",
        "runtime": "external",
        "task": "",
        "model": "gpt-4o-mini",
        "model_name": "",
        "upstream_model": "",
        "version": "",
        "weight": "100",
        "url": "https://api.example.com/v1",
        "replicas": "1",
        "resources": "{}",
        "args": "[]",
        "price_input_per_1m": "0",
        "price_output_per_1m": "0",
        "context_length": "",
        "enabled": "on",
        "credential": "",
    }
    data.update(changes)
    return data


def test_every_llm_page_renders(staff_client, tenant_a):
    service = services.inference_service_create(
        actor=ACTOR, tenant=tenant_a, name="gpt", runtime="external", model="m", url="https://x.example/v1"
    )
    alias = services.model_alias_create(actor=ACTOR, tenant=None, name="fast", targets=["gpt"])
    now = timezone.now()
    usage = LlmUsage.objects.create(
        request_id="r1",
        tenant=tenant_a,
        key_id="k1",
        model="gpt",
        endpoint="chat.completions",
        status=200,
        created_at=now,
    )
    hourly = LlmUsageHourly.objects.create(tenant=tenant_a, key_id="k1", model="gpt", hour=now - dt.timedelta(hours=1))
    for obj in (service, alias, usage, hourly):
        meta = obj._meta
        changelist = staff_client.get(reverse(f"admin:llm_{meta.model_name}_changelist") + "?q=g")
        assert changelist.status_code == 200, meta.model_name
        assert staff_client.get(reverse(f"admin:llm_{meta.model_name}_change", args=[obj.pk])).status_code == 200
        model_admin = admin.site._registry[type(obj)]
        assert model_admin.search_fields and model_admin.list_filter
    page = staff_client.get(reverse("admin:llm_inferenceservice_changelist")).content.decode()
    assert "alpha" in page
    for model in (LlmUsage, LlmUsageHourly):
        model_admin = admin.site._registry[model]
        assert not model_admin.has_add_permission(None) and not model_admin.has_delete_permission(None)
    shared_only = staff_client.get(reverse("admin:llm_inferenceservice_changelist") + "?shared=true")
    assert "x.example" not in shared_only.content.decode() and shared_only.status_code == 200


def test_add_and_change_go_through_the_services_and_the_credential_is_write_only(staff_client):
    added = staff_client.post(reverse("admin:llm_inferenceservice_add"), _form(credential=SECRET))
    assert added.status_code == 302, added.content.decode()[:3000]
    service = InferenceService.objects.get(name="gpt")
    assert service.tenant_id is None and service.upstream_model == "gpt-4o-mini" and service.task == "chat"
    assert services.upstream_credential(service) == SECRET and SECRET not in service.credential_encrypted
    created = AuditEntry.all_tenants.get(action="inference_service.create")
    assert created.actor == "user:root" and created.after["credential"] == "set"

    change_url = reverse("admin:llm_inferenceservice_change", args=[service.pk])
    page = staff_client.get(change_url).content.decode()
    assert SECRET not in page and service.credential_encrypted not in page
    kept = staff_client.post(change_url, _form(weight="7"))
    assert kept.status_code == 302, kept.content.decode()[:3000]
    service.refresh_from_db()
    assert service.weight == 7 and services.upstream_credential(service) == SECRET and service.generation == 2
    removed = staff_client.post(change_url, _form(weight="7", remove_credential="on"))
    assert removed.status_code == 302
    service.refresh_from_db()
    assert not service.has_credential
    updates = AuditEntry.all_tenants.filter(action="inference_service.update").order_by("id")
    assert [u.after.get("credential") for u in updates] == [None, "removed"]


def test_bad_input_is_a_form_error_and_writes_nothing(staff_client):
    response = staff_client.post(reverse("admin:llm_inferenceservice_add"), _form(url="https://u:p@x.example/v1"))
    assert response.status_code == 200 and "user name or password" in response.content.decode()
    response = staff_client.post(reverse("admin:llm_inferenceservice_add"), _form(runtime="llamacpp", url=""))
    assert response.status_code == 200 and "packaged" in response.content.decode()
    assert not InferenceService.objects.exists() and not AuditEntry.all_tenants.exists()


def test_alias_admin_uses_the_services(staff_client, tenant_a):
    response = staff_client.post(
        reverse("admin:llm_modelalias_add"), {"tenant": tenant_a.pk, "name": "fast", "targets": '["gpt", "tiny"]'}
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    alias = ModelAlias.objects.get(name="fast")
    assert alias.tenant_id == tenant_a.pk and alias.targets == ["gpt", "tiny"]
    bad = staff_client.post(reverse("admin:llm_modelalias_change", args=[alias.pk]), {"targets": '["fast"]'})
    assert bad.status_code == 200 and "itself" in bad.content.decode()
    staff_client.post(reverse("admin:llm_modelalias_delete", args=[alias.pk]), {"post": "yes"})
    assert not ModelAlias.objects.exists()
    actions = list(AuditEntry.all_tenants.order_by("id").values_list("action", flat=True))
    assert actions[-2:] == ["model_alias.create", "model_alias.delete"]

"""The admin: every model's pages render for staff, and changes go through services (audited)."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.urls import reverse

from apps.core.models import AuditEntry
from apps.tenants.models import Tenant
from tests.factories import make_key

pytestmark = pytest.mark.django_db


def test_every_model_has_a_working_admin(staff_client, tenant_a):
    make_key(tenant_a)
    for model, model_admin in admin.site._registry.items():
        if model._meta.app_label not in {"core", "tenants"}:
            continue
        url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
        response = staff_client.get(url + "?q=a")
        assert response.status_code == 200, url
        assert model_admin.search_fields, f"{model.__name__} admin has no search"
        assert model_admin.list_filter, f"{model.__name__} admin has no filters"
        obj = model._default_manager.first()
        if obj is not None:
            change = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_change", args=[obj.pk])
            assert staff_client.get(change).status_code == 200, change


def test_admin_changes_go_through_services(staff_client):
    response = staff_client.post(
        reverse("admin:tenants_tenant_add"),
        {
            "slug": "from-admin",
            "display_name": "From admin",
            "labels": "{}",
            "gpu_type_ceilings": "{}",
            "max_cpu": "",
            "max_memory": "",
            "max_gpus": "4",
        },
    )
    assert response.status_code in (200, 302)
    tenant = Tenant.objects.filter(slug="from-admin").first()
    import re

    assert tenant is not None, re.findall(r"errorlist[^>]*>(.*?)</ul>", response.content.decode(), re.S)
    entry = AuditEntry.all_tenants.get(object_id="from-admin", action="tenant.create")
    assert entry.actor == "user:root"
    staff_client.post(
        reverse("admin:tenants_tenant_changelist"), {"action": "suspend", "_selected_action": [tenant.pk]}
    )
    tenant.refresh_from_db()
    assert tenant.suspended
    assert AuditEntry.all_tenants.filter(object_id="from-admin", action="tenant.update").count() == 1


def test_status_fields_are_read_only_in_the_admin():
    tenant_admin = admin.site._registry[Tenant]
    assert {"status_phase", "status_message", "status_applied", "observed_generation"} <= set(
        tenant_admin.readonly_fields
    )


def test_admin_lists_take_the_api_filtersets(staff_client, tenant_a):
    from apps.tenants import services
    from tests.factories import ACTOR

    services.api_key_create(actor=ACTOR, tenant=tenant_a, scopes=["jobs:read"], name="ci-runner")
    key, _ = services.api_key_create(actor=ACTOR, tenant=tenant_a, scopes=["jobs:read"], name="laptop")
    services.api_key_revoke(actor=ACTOR, key=key)
    url = reverse("admin:tenants_apikey_changelist")
    names = lambda response: {k.name for k in response.context["cl"].result_list}  # noqa: E731
    assert names(staff_client.get(url + "?name=runner")) == {"ci-runner"}
    assert names(staff_client.get(url + "?revoked=true")) == {"laptop"}
    audit = staff_client.get(reverse("admin:core_auditentry_changelist") + "?action=api_key.revoke")
    assert [e.action for e in audit.context["cl"].result_list] == ["api_key.revoke"]

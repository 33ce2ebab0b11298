"""Admin actions say what they did, and warn when they did nothing (issue 27, item 10); API keys are read and
revoked, never edited, and their list shows their scopes."""

from __future__ import annotations

import pytest
from django.contrib.messages import constants
from django.urls import reverse

from apps.core.models import AuditEntry
from apps.tenants import services
from apps.tenants.models import Tenant
from tests.factories import ACTOR

pytestmark = pytest.mark.django_db


def _act(client, model: str, action: str, *pks) -> list[tuple[int, str]]:
    response = client.post(
        reverse(f"admin:tenants_{model}_changelist"), {"action": action, "_selected_action": list(pks)}, follow=True
    )
    assert response.status_code == 200
    return [(m.level, m.message) for m in response.context["messages"]]


def test_revoke_reports_each_key_and_warns_on_a_revoked_one(staff_client, tenant_a):
    key, _ = services.api_key_create(actor=ACTOR, tenant=tenant_a, scopes=["jobs:read"], name="ci")
    assert _act(staff_client, "apikey", "revoke", key.pk) == [(constants.SUCCESS, f"Revoked 1 key(s): {key.key_id}")]
    assert _act(staff_client, "apikey", "revoke", key.pk) == [
        (constants.WARNING, f"Nothing done: key {key.key_id} is already revoked")
    ]
    assert AuditEntry.all_tenants.filter(action="api_key.revoke", object_id=key.key_id).count() == 1


def test_an_api_key_is_read_only_and_its_list_shows_its_scopes(staff_client, tenant_a):
    key, _ = services.api_key_create(actor=ACTOR, tenant=tenant_a, scopes=["jobs:read", "keys:read"], name="ci")
    listing = staff_client.get(reverse("admin:tenants_apikey_changelist")).content.decode()
    assert '<td class="field-scope_list">jobs:read, keys:read</td>' in listing
    assert '<th scope="col" class="column-scope_list">' in listing
    url = reverse("admin:tenants_apikey_change", args=[key.pk])
    page = staff_client.get(url).content.decode()
    assert 'name="_save"' not in page and 'name="_continue"' not in page
    response = staff_client.post(url, {"name": "renamed"})
    assert response.status_code == 403 and "changed successfully" not in response.content.decode()
    key.refresh_from_db()
    assert key.name == "ci"


def test_suspend_and_resume_report_and_warn_when_already_so(staff_client, tenant_a, tenant_b):
    services.tenant_update(actor=ACTOR, tenant=tenant_b, suspended=True)
    a, b = tenant_a.slug, tenant_b.slug
    assert _act(staff_client, "tenant", "suspend", tenant_a.pk, tenant_b.pk) == [
        (constants.SUCCESS, f"Suspended 1 tenant(s): {a}"),
        (constants.WARNING, f"tenant {b} is already suspended"),
    ]
    assert _act(staff_client, "tenant", "suspend", tenant_a.pk) == [
        (constants.WARNING, f"Nothing done: tenant {a} is already suspended")
    ]
    assert _act(staff_client, "tenant", "resume", tenant_a.pk, tenant_b.pk) == [
        (constants.SUCCESS, f"Resumed 2 tenant(s): {a}, {b}")
    ]
    assert _act(staff_client, "tenant", "resume", tenant_b.pk) == [
        (constants.WARNING, f"Nothing done: tenant {b} is already active")
    ]
    assert not Tenant.objects.get(pk=tenant_a.pk).suspended


def test_archive_warns_on_an_archived_tenant(staff_client, tenant_a):
    assert _act(staff_client, "tenant", "archive", tenant_a.pk) == [
        (constants.SUCCESS, f"Archived 1 tenant(s): {tenant_a.slug}")
    ]
    assert _act(staff_client, "tenant", "archive", tenant_a.pk) == [
        (constants.WARNING, f"Nothing done: tenant {tenant_a.slug} is already archived")
    ]
    assert AuditEntry.all_tenants.filter(action="tenant.archive", object_id=tenant_a.slug).count() == 1


def _as_posted(form) -> dict:
    """What a browser posts back for a form left as it was shown."""
    data = {}
    for name in form.fields:
        value = form[name].value()
        if value is not None and value is not False:
            data[name] = "on" if value is True else value
            if form.fields[name].show_hidden_initial:  # fields with a callable default render their initial too
                data[form[name].html_initial_name] = data[name]
    return data


def test_a_save_that_changed_nothing_says_so(staff_client, tenant_a):
    url = reverse("admin:tenants_tenant_change", args=[tenant_a.pk])
    shown = _as_posted(staff_client.get(url).context["adminform"].form)
    response = staff_client.post(url, shown, follow=True)
    assert [(m.level, m.message) for m in response.context["messages"]] == [
        (constants.WARNING, "Nothing changed: no field was edited.")
    ]
    assert not AuditEntry.all_tenants.filter(action="tenant.update", object_id=tenant_a.slug).exists()
    response = staff_client.post(url, {**shown, "display_name": "Renamed"}, follow=True)
    [(level, message)] = [(m.level, m.message) for m in response.context["messages"]]
    assert level == constants.SUCCESS and "changed successfully" in message
    assert Tenant.objects.get(pk=tenant_a.pk).display_name == "Renamed"

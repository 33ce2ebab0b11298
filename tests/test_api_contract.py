"""Runs the API contract (tests/api_contract.py) against every registered tenant-owned endpoint."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.core.models import AuditEntry
from tests.api_contract import load
from tests.factories import client_for, make_key

ENDPOINTS = load()
WRITABLE = [e for e in ENDPOINTS if e.write_scope]
CREATABLE = [e for e in ENDPOINTS if e.create_payload]
ids = lambda e: e.name  # noqa: E731

pytestmark = pytest.mark.django_db


def _ids_in(endpoint, response) -> set[str]:
    body = response.json()
    rows = body["results"] if isinstance(body, dict) and "results" in body else body
    return {endpoint.id_of(r) for r in rows}


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=ids)
def test_each_tenant_lists_only_its_own(endpoint, tenant_a, tenant_b, client_a, client_b):
    a_id, b_id = endpoint.make(tenant_a), endpoint.make(tenant_b)
    res_a = client_a.get(endpoint.list_path(tenant_a))
    res_b = client_b.get(endpoint.list_path(tenant_b))
    assert res_a.status_code == res_b.status_code == 200, res_a.content
    assert a_id in _ids_in(endpoint, res_a) and b_id not in _ids_in(endpoint, res_a)
    assert b_id in _ids_in(endpoint, res_b) and a_id not in _ids_in(endpoint, res_b)


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=ids)
def test_other_tenants_object_is_404(endpoint, tenant_a, tenant_b, client_a, client_b):
    a_id = endpoint.make(tenant_a)
    assert client_a.get(endpoint.detail_path(tenant_a, a_id)).status_code == 200
    # B asks for A's object, through B's own path and through A's.
    assert client_b.get(endpoint.detail_path(tenant_b, a_id)).status_code == 404
    assert client_b.get(endpoint.detail_path(tenant_a, a_id)).status_code == 404
    if endpoint.deletes:
        assert client_b.delete(endpoint.detail_path(tenant_a, a_id)).status_code == 404
    if endpoint.update_payload is not None:
        assert client_b.patch(endpoint.detail_path(tenant_a, a_id), {}, format="json").status_code == 404


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=ids)
@pytest.mark.parametrize(
    "header",
    [None, "Bearer gry_AAAAAAAAAAAA_" + "x" * 40, "Bearer not-a-key", "Basic dXNlcjpwYXNz", "Bearer "],
    ids=["none", "wrong-key", "garbage-token", "basic", "empty"],
)
def test_missing_or_bad_credential_is_401(endpoint, tenant_a, header):
    a_id = endpoint.make(tenant_a)
    client = client_for(HTTP_AUTHORIZATION=header) if header else client_for()
    for response in (client.get(endpoint.list_path(tenant_a)), client.get(endpoint.detail_path(tenant_a, a_id))):
        assert response.status_code == 401, response.content
        assert response["WWW-Authenticate"].startswith("Bearer")
        assert response.json()["error"]["type"] == "authentication_failed"


@pytest.mark.parametrize("endpoint", WRITABLE, ids=ids)
def test_key_without_write_scope_is_403(endpoint, tenant_a):
    a_id = endpoint.make(tenant_a)
    for scopes in [endpoint.read_only_scopes, ["jobs:read"]]:
        client = client_for(make_key(tenant_a, scopes))
        if endpoint.create_payload:
            response = client.post(endpoint.list_path(tenant_a), endpoint.create_payload(tenant_a), format="json")
            assert response.status_code == 403, (scopes, response.content)
        if endpoint.deletes:
            # A key that may read gets 403 on its own tenant's object; one that may not read at all gets 404 or 403.
            assert client.delete(endpoint.detail_path(tenant_a, a_id)).status_code in (403, 404)


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=ids)
def test_read_needs_its_scope(endpoint, tenant_a):
    endpoint.make(tenant_a)
    if endpoint.read_scope is None:  # readable with any access to the tenant, and with none elsewhere
        assert client_for(make_key(tenant_a, ["jobs:read"])).get(endpoint.list_path(tenant_a)).status_code == 200
        return
    other = "webhooks:read" if endpoint.read_scope != "webhooks:read" else "jobs:read"
    assert client_for(make_key(tenant_a, [other])).get(endpoint.list_path(tenant_a)).status_code == 403


@pytest.mark.parametrize("endpoint", CREATABLE, ids=ids)
def test_each_write_makes_one_audit_row(endpoint, tenant_a, client_a):
    before = AuditEntry.all_tenants.count()
    response = client_a.post(endpoint.list_path(tenant_a), endpoint.create_payload(tenant_a), format="json")
    assert response.status_code == 201, response.content
    created = AuditEntry.all_tenants.order_by("-id")
    assert AuditEntry.all_tenants.count() == before + 1
    row = created.first()
    assert row.tenant_id == tenant_a.pk and row.before is None and row.after
    new_id = endpoint.id_of(response.json())
    if endpoint.update_payload:
        response = client_a.patch(endpoint.detail_path(tenant_a, new_id), endpoint.update_payload, format="json")
        assert response.status_code == 200, response.content
        assert AuditEntry.all_tenants.count() == before + 2
        row = created.first()
        assert row.before and row.after and row.before != row.after
    if endpoint.deletes:
        count = AuditEntry.all_tenants.count()
        assert client_a.delete(endpoint.detail_path(tenant_a, new_id)).status_code == 204
        assert AuditEntry.all_tenants.count() == count + 1
        assert created.first().before is not None


@pytest.mark.parametrize("endpoint", CREATABLE, ids=ids)
def test_unknown_field_is_400_naming_it_and_writes_nothing(endpoint, tenant_a, client_a):
    rows, audits = endpoint.model._default_manager.count(), AuditEntry.all_tenants.count()
    payload = {**endpoint.create_payload(tenant_a), "surprise": 1}
    response = client_a.post(endpoint.list_path(tenant_a), payload, format="json")
    assert response.status_code == 400
    error = response.json()["error"]
    assert "surprise" in error["fields"] and "surprise" in error["message"]
    assert endpoint.model._default_manager.count() == rows and AuditEntry.all_tenants.count() == audits


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=ids)
def test_list_query_count_does_not_grow_with_page(endpoint, tenant_a, client_a):
    endpoint.make(tenant_a)
    path = endpoint.list_path(tenant_a)
    client_a.get(path)  # the key's first use records last_used_at once
    with CaptureQueriesContext(connection) as one:
        assert client_a.get(path).status_code == 200
    for _ in range(6):
        endpoint.make(tenant_a)
    with CaptureQueriesContext(connection) as many:
        response = client_a.get(path)
    assert response.status_code == 200 and response.json()["count"] >= 7
    assert len(many) == len(one), [q["sql"] for q in many]

"""The SKU catalog: platform admins write, every tenant reads; overlapping windows are refused; the SKU in force."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from apps.billing import selectors, services
from apps.core.models import AuditEntry
from tests.factories import ACTOR, client_for, make_key

from .conftest import T0, make_sku

pytestmark = pytest.mark.django_db

SKU = {
    "name": "a100",
    "gpu_type": "A100-80G",
    "hourly_rate": "4.000000",
    "cpu_core_hour_rate": "0.050000",
    "effective_from": "2026-01-01T00:00:00Z",
}


def test_platform_admins_write_and_every_tenant_reads(platform_client, client_a, tenant_b):
    created = platform_client.post("/api/v1/skus/", SKU, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["hourly_rate"] == "4.000000" and created.json()["currency"] == "USD"
    assert AuditEntry.all_tenants.filter(action="gpu_sku.create", object_id="a100").count() == 1
    viewer = client_for(make_key(tenant_b, ["billing:read"]))
    assert [s["name"] for s in viewer.get("/api/v1/skus/").json()["results"]] == ["a100"]
    assert viewer.get("/api/v1/skus/a100/").json()["gpu_type"] == "A100-80G"
    # A tenant's own admin is not a platform admin.
    assert client_a.post("/api/v1/skus/", {**SKU, "name": "x"}, format="json").status_code == 403
    assert client_a.patch("/api/v1/skus/a100/", {"hourly_rate": "0"}, format="json").status_code == 403
    assert client_a.delete("/api/v1/skus/a100/").status_code == 403
    assert client_for(make_key(tenant_b, ["jobs:read"])).get("/api/v1/skus/").status_code == 403


def test_a_manifest_is_accepted(platform_client):
    manifest = {
        "apiVersion": "gryvia.io/v1alpha1",
        "kind": "GryviaGpuSku",
        "metadata": {"name": "h100"},
        "spec": {"gpuType": "H100", "hourlyRate": 8, "effectiveFrom": "2026-01-01T00:00:00Z"},
    }
    response = platform_client.post("/api/v1/skus/", manifest, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["gpu_type"] == "H100"


def test_an_overlapping_window_of_the_same_gpu_type_is_refused(platform_client):
    assert (
        platform_client.post(
            "/api/v1/skus/", {**SKU, "effective_to": "2026-07-01T00:00:00Z"}, format="json"
        ).status_code
        == 201
    )
    overlapping = {**SKU, "name": "a100-new", "gpu_type": "a100-80g", "effective_from": "2026-06-01T00:00:00Z"}
    response = platform_client.post("/api/v1/skus/", overlapping, format="json")
    assert response.status_code == 400
    assert "overlaps SKU 'a100'" in str(response.json()) and "end that SKU's window first" in str(response.json())
    after = {**overlapping, "effective_from": "2026-07-01T00:00:00Z"}  # back to back is fine
    assert platform_client.post("/api/v1/skus/", after, format="json").status_code == 201
    other_type = {**SKU, "name": "l40", "gpu_type": "L40"}
    assert platform_client.post("/api/v1/skus/", other_type, format="json").status_code == 201
    bad = {**SKU, "name": "bad", "gpu_type": "T4", "effective_to": "2025-01-01T00:00:00Z"}
    assert "effective_to" in platform_client.post("/api/v1/skus/", bad, format="json").json()["error"]["fields"]


def test_bad_input_is_a_400_naming_the_field(platform_client):
    for field, value in [("gpu_type", "bad type!"), ("currency", "usd"), ("hourly_rate", "-1"), ("bogus", 1)]:
        response = platform_client.post("/api/v1/skus/", {**SKU, field: value}, format="json")
        assert response.status_code == 400, (field, response.content)
        assert field in response.json()["error"]["fields"], response.json()


def test_the_sku_in_force_follows_the_windows(db):
    old = make_sku("h100-2025", effective_from=T0 - dt.timedelta(days=100), effective_to=T0)
    new = make_sku("h100-2026", rate="3", effective_from=T0)
    assert selectors.sku_in_force("h100", T0 - dt.timedelta(seconds=1)) == old
    assert selectors.sku_in_force("H100", T0) == new and selectors.sku_in_force("H100", T0 + dt.timedelta(days=900))
    assert selectors.sku_in_force("H100", T0 - dt.timedelta(days=101)) is None
    assert selectors.sku_in_force("T4", T0) is None


def test_a_price_that_priced_usage_cannot_change_only_end(db, tenant_a, platform_client):
    sku = make_sku()
    services.usage_events_ingest(
        tenant=tenant_a,
        events=[{"id": "e1", "gpu_type": "H100", "start": "2026-09-03T10:00:00Z", "end": "2026-09-03T11:00:00Z"}],
    )
    response = platform_client.patch("/api/v1/skus/h100/", {"hourly_rate": "1"}, format="json")
    assert response.status_code == 409 and "set effective_to" in response.json()["error"]["message"]
    assert platform_client.delete("/api/v1/skus/h100/").status_code == 409
    ended = platform_client.patch("/api/v1/skus/h100/", {"effective_to": "2026-10-01T00:00:00Z"}, format="json")
    assert ended.status_code == 200 and ended.json()["effective_to"].startswith("2026-10-01")
    sku.refresh_from_db()
    assert sku.hourly_rate == Decimal("2.5")


def test_an_unused_sku_can_be_changed_and_deleted(platform_client):
    make_sku("t4", "T4", "1")
    assert (
        platform_client.patch("/api/v1/skus/t4/", {"hourly_rate": "1.5"}, format="json").json()["hourly_rate"]
        == "1.500000"
    )
    assert platform_client.delete("/api/v1/skus/t4/").status_code == 204
    assert platform_client.get("/api/v1/skus/t4/").status_code == 404


def test_the_admin_refuses_an_overlap_with_the_reason(client):
    from tests.factories import make_user

    make_sku()
    root = make_user("root", staff=True)
    root.is_superuser = True
    root.save()
    client.force_login(root)
    form = {
        "name": "h100-b",
        "gpu_type": "h100",
        "hourly_rate": "3",
        "cpu_core_hour_rate": "0",
        "memory_gib_hour_rate": "0",
        "currency": "USD",
        "effective_from_0": "2026-09-03",
        "effective_from_1": "10:00:00",
        "description": "",
    }
    response = client.post("/admin/billing/gpusku/add/", form)
    assert response.status_code == 200 and b"overlaps SKU" in response.content
    assert services.sku_create is not None and selectors.skus().count() == 1
    _ = ACTOR

"""Queues, cohorts, priority classes and reservations through /api/v1/, and the quantity parser."""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.core.models import AuditEntry
from apps.core.quantities import QuantityError, cpu_millicores, memory_bytes, parse_quantity
from apps.queueing import selectors, services
from apps.queueing.models import Cohort, PriorityClass, Queue, Reservation
from tests.factories import ACTOR, client_for, make_key, make_tenant
from tests.queueing.endpoints import make_reservation

pytestmark = pytest.mark.django_db
GPU = "nvidia.com/gpu"


@pytest.fixture
def platform(platform_key):
    return client_for(platform_key)


def _error(response, status=400):
    assert response.status_code == status, response.content
    return response.json()["error"]


def _audits() -> int:
    return AuditEntry.all_tenants.count()


# --- quantities ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("64", Decimal(64)),
        ("500m", Decimal("0.5")),
        ("1.5", Decimal("1.5")),
        ("256Gi", Decimal(256 * 2**30)),
        ("1Ki", Decimal(1024)),
        ("2k", Decimal(2000)),
        ("3M", Decimal(3_000_000)),
        ("1E", Decimal(10**18)),
        ("1e3", Decimal(1000)),
        ("5E-1", Decimal("0.5")),
        ("100n", Decimal("1E-7")),
        (".5", Decimal("0.5")),
        (8, Decimal(8)),
        (0.25, Decimal("0.25")),
    ],
)
def test_parse_quantity(raw, expected):
    assert parse_quantity(raw) == expected


@pytest.mark.parametrize("raw", ["", "abc", "1.2.3", "10 Gi", "1gi", "1KiB", "Gi", "1e", True, None, [], float("inf")])
def test_parse_quantity_refuses_non_quantities(raw):
    with pytest.raises(QuantityError):
        parse_quantity(raw)


def test_cpu_and_memory_units_round_up():
    assert cpu_millicores("2") == 2000 and cpu_millicores("500m") == 500 and cpu_millicores("0.0001") == 1
    assert memory_bytes("256Gi") == 274877906944 and memory_bytes("1k") == 1000 and memory_bytes("0.5") == 1


# --- queues ----------------------------------------------------------------------------------------------------


def test_queue_create_read_update_delete(client_a, tenant_a):
    Cohort.objects.create(name="shared")
    payload = {
        "name": "training",
        "cohort": "shared",
        "weight": 2,
        "quotas": [
            {"resource": GPU, "flavor": "H100", "nominal": 8, "borrowingLimit": 4},
            {"resource": "cpu", "nominal": "64", "lendingLimit": "500m"},
            {"resource": "memory", "nominal": "256Gi"},
        ],
    }
    created = client_a.post("/api/v1/queues/", payload, format="json")
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["cohort"] == "shared" and body["weight"] == 2 and body["tenant"] == tenant_a.slug
    assert body["quotas"][0] == {
        "resource": GPU,
        "flavor": "H100",
        "nominal": 8,
        "borrowingLimit": 4,
        "lendingLimit": None,
    }
    assert body["status"] == {"admitted": {}, "pending": 0, "updated_at": None}
    assert client_a.get("/api/v1/queues/training/").json()["name"] == "training"
    assert client_a.put("/api/v1/queues/training/", payload, format="json").status_code == 405
    updated = client_a.patch("/api/v1/queues/training/", {"cohort": None}, format="json")
    assert updated.status_code == 200 and updated.json()["cohort"] is None and updated.json()["generation"] == 2
    assert _error(client_a.patch("/api/v1/queues/training/", {"name": "x"}, format="json"))["fields"]["name"]
    assert client_a.delete("/api/v1/queues/training/").status_code == 204
    assert not Queue.all_tenants.filter(name="training").exists()


def test_queue_names_are_unique_per_tenant_and_default_is_allowed(client_a, client_b):
    assert client_a.post("/api/v1/queues/", {"name": "default"}, format="json").status_code == 201
    assert client_b.post("/api/v1/queues/", {"name": "default"}, format="json").status_code == 201
    error = _error(client_a.post("/api/v1/queues/", {"name": "default"}, format="json"))
    assert "name" in error["fields"]
    assert "name" in _error(client_a.post("/api/v1/queues/", {"name": "Bad_Name"}, format="json"))["fields"]


def test_queue_manifest_form(client_a):
    manifest = {
        "apiVersion": "gryvia.io/v1alpha1",
        "kind": "GryviaQueue",
        "metadata": {"name": "from-manifest"},
        "spec": {"weight": 0.5, "quotas": [{"resource": GPU, "nominal": 2}]},
    }
    response = client_a.post("/api/v1/queues/", manifest, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["quotas"][0]["flavor"] == ""


@pytest.mark.parametrize(
    ("quotas", "needle"),
    [
        ([{"resource": "tpu", "nominal": 1}], "resource"),
        ([{"resource": "cpu", "flavor": "H100", "nominal": "4"}], "flavor"),
        ([{"resource": "memory", "nominal": "lots"}], "nominal"),
        ([{"resource": GPU, "nominal": 1.5}], "nominal"),
        ([{"resource": GPU, "nominal": 1}, {"resource": GPU, "nominal": 2}], "duplicate"),
        ([{"resource": GPU, "nominal": -1}], "nominal"),
        ([{"resource": "cpu", "nominal": "-2"}], "negative"),
        ([{"resource": GPU, "nominal": 2, "borrowingLimit": -1}], "borrowingLimit"),
        ([{"resource": GPU, "nominal": 2, "lendingLimit": 3}], "lendingLimit"),
        ([{"resource": GPU}], "nominal"),
        ([{"resource": GPU, "nominal": 1, "extra": 1}], "extra"),
        ({"resource": GPU}, "list"),
    ],
)
def test_bad_quotas_are_400_naming_quotas(client_a, quotas, needle):
    rows, audits = Queue.all_tenants.count(), _audits()
    error = _error(client_a.post("/api/v1/queues/", {"name": "bad", "quotas": quotas}, format="json"))
    assert list(error["fields"]) == ["quotas"], error
    assert "quotas" in error["message"] and needle in error["message"], error["message"]
    assert Queue.all_tenants.count() == rows and _audits() == audits


def test_bad_weight_is_400(client_a):
    for weight in (0, -1):
        assert (
            "weight"
            in _error(client_a.post("/api/v1/queues/", {"name": "w", "weight": weight}, format="json"))["fields"]
        )


def test_ceilings_bound_the_sum_of_queues(db):
    tenant = make_tenant("capped", max_gpus=8, gpu_type_ceilings={"H100": 4}, max_cpu="16", max_memory="64Gi")
    client = client_for(make_key(tenant, ["queues:write"]))

    def post(name, quotas):
        return client.post("/api/v1/queues/", {"name": name, "quotas": quotas}, format="json")

    assert post("one", [{"resource": GPU, "nominal": 6}]).status_code == 201
    error = _error(post("two", [{"resource": GPU, "nominal": 6}]))  # 12 GPUs in all, above max_gpus 8
    assert list(error["fields"]) == ["quotas"] and "max_gpus" in error["message"]
    assert post("two", [{"resource": GPU, "nominal": 2}]).status_code == 201
    # Changing a queue counts its new quota in place of its old one.
    assert (
        client.patch("/api/v1/queues/one/", {"quotas": [{"resource": GPU, "nominal": 10}]}, format="json").status_code
        == 400
    )
    assert (
        client.patch("/api/v1/queues/one/", {"quotas": [{"resource": GPU, "nominal": 5}]}, format="json").status_code
        == 200
    )
    assert "H100" in _error(post("h", [{"resource": GPU, "flavor": "H100", "nominal": 5}]))["message"]
    assert "max_cpu" in _error(post("c", [{"resource": "cpu", "nominal": "16500m"}]))["message"]
    assert "max_memory" in _error(post("m", [{"resource": "memory", "nominal": "65Gi"}]))["message"]
    assert (
        post("cm", [{"resource": "cpu", "nominal": "16"}, {"resource": "memory", "nominal": "64Gi"}]).status_code == 201
    )
    assert Queue.all_tenants.filter(tenant=tenant).count() == 3


def test_queue_needs_queues_write(tenant_a):
    member = client_for(make_key(tenant_a, ["jobs:write", "queues:read"]))
    assert member.get("/api/v1/queues/").status_code == 200
    assert member.post("/api/v1/queues/", {"name": "q"}, format="json").status_code == 403


def test_quota_vector():
    tenant = make_tenant("vector")
    queue = services.queue_create(
        actor=ACTOR,
        tenant=tenant,
        name="v",
        quotas=[
            {"resource": GPU, "nominal": 2, "lendingLimit": 1},
            {"resource": GPU, "flavor": "H100", "nominal": 8, "borrowingLimit": 4},
            {"resource": "cpu", "nominal": "500m"},
            {"resource": "memory", "nominal": "1Gi", "borrowingLimit": "512Mi"},
        ],
    )
    vector = selectors.queue_quota_vector(queue)
    assert vector.nominal == {GPU: 2, f"{GPU}:H100": 8, "cpu": 500, "memory": 2**30}
    assert vector.borrowing_limit == {GPU: math.inf, f"{GPU}:H100": 4, "cpu": math.inf, "memory": 2**29}
    assert vector.lending_limit[GPU] == 1 and vector.lending_limit["memory"] == math.inf
    assert list(selectors.queues_of_tenant(tenant.pk)) == [queue]


# --- cohorts and priority classes ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "payload", "update"),
    [
        ("/api/v1/cohorts/", {"name": "pool", "description": "shared H100s"}, {"description": "changed"}),
        ("/api/v1/priority-classes/", {"name": "high", "value": 1000}, {"value": 2000}),
    ],
)
def test_platform_objects_are_written_by_platform_staff_only(client_a, client_b, platform, path, payload, update):
    reader = client_for(make_key(make_tenant(), ["jobs:read"]))
    before = _audits()
    assert _error(client_a.post(path, payload, format="json"), 403)["type"] == "permission_denied"
    created = platform.post(path, payload, format="json")
    assert created.status_code == 201, created.content
    assert _audits() == before + 1
    row = AuditEntry.all_tenants.latest("id")
    assert row.tenant_id is None and row.before is None and row.after["name"] == payload["name"]
    detail = f"{path}{payload['name']}/"
    # Any credential reads them, even one with no scope that names them.
    assert reader.get(detail).status_code == 200
    assert client_b.get(path).json()["count"] == 1
    assert client_a.patch(detail, update, format="json").status_code == 403
    assert client_a.delete(detail).status_code == 403
    assert client_a.patch(f"{path}nope/", update, format="json").status_code == 403
    assert platform.patch(detail, update, format="json").status_code == 200
    assert _audits() == before + 2
    assert platform.delete(detail).status_code == 204
    assert _audits() == before + 3 and AuditEntry.all_tenants.latest("id").after is None
    assert platform.get(detail).status_code == 404
    assert client_for().get(path).status_code == 401


def test_queue_in_cohort_keeps_quota_when_cohort_is_deleted(client_a, platform):
    assert platform.post("/api/v1/cohorts/", {"name": "pool"}, format="json").status_code == 201
    assert client_a.post("/api/v1/queues/", {"name": "q", "cohort": "pool"}, format="json").status_code == 201
    assert (
        "cohort" in _error(client_a.post("/api/v1/queues/", {"name": "r", "cohort": "nope"}, format="json"))["fields"]
    )
    assert platform.delete("/api/v1/cohorts/pool/").status_code == 204
    assert client_a.get("/api/v1/queues/q/").json()["cohort"] is None


def test_one_default_priority_class(platform):
    assert (
        platform.post(
            "/api/v1/priority-classes/", {"name": "normal", "value": 0, "is_default": True}, format="json"
        ).status_code
        == 201
    )
    error = _error(
        platform.post("/api/v1/priority-classes/", {"name": "other", "value": 1, "is_default": True}, format="json")
    )
    assert "is_default" in error["fields"] and "normal" in error["message"]
    assert platform.post("/api/v1/priority-classes/", {"name": "other", "value": 1}, format="json").status_code == 201
    assert platform.patch("/api/v1/priority-classes/other/", {"is_default": True}, format="json").status_code == 400
    assert platform.patch("/api/v1/priority-classes/normal/", {"is_default": False}, format="json").status_code == 200
    assert platform.patch("/api/v1/priority-classes/other/", {"is_default": True}, format="json").status_code == 200
    assert selectors.priority_class_default().name == "other"
    assert PriorityClass.objects.filter(is_default=True).count() == 1


def test_priority_class_validation(platform):
    bad = [
        ({"name": "x", "value": 2_000_000_000}, "value"),
        ({"name": "x", "value": 1, "preemption_policy": "Sometimes"}, "preemption_policy"),
        ({"name": "X_bad", "value": 1}, "name"),
    ]
    for payload, field in bad:
        assert field in _error(platform.post("/api/v1/priority-classes/", payload, format="json"))["fields"]
    created = platform.post("/api/v1/priority-classes/", {"name": "x", "value": -5}, format="json").json()
    assert created["preemption_policy"] == "PreemptLowerPriority" and created["is_default"] is False


def test_platform_object_services_refuse_tenant_actors(tenant_a):
    from apps.tenants.services import api_key_authenticate

    _user, principal = api_key_authenticate(raw_key=make_key(tenant_a, ["admin"]))
    with pytest.raises(PermissionError):
        services.cohort_create(actor=principal, name="nope")
    with pytest.raises(PermissionError):
        services.priority_class_create(actor=principal, name="nope", value=1)
    with pytest.raises(PermissionError):
        now = timezone.now()
        services.reservation_create(
            actor=principal, tenant=tenant_a, gpu_type="H100", count=1, start_at=now, end_at=now + dt.timedelta(hours=1)
        )


# --- reservations ----------------------------------------------------------------------------------------------


def _window(hours_from_now: float = 0, hours: float = 4) -> dict[str, str]:
    start = timezone.now() + dt.timedelta(hours=hours_from_now)
    return {"start_at": start.isoformat(), "end_at": (start + dt.timedelta(hours=hours)).isoformat()}


def test_reservations_are_set_by_platform_staff_only(client_a, client_b, tenant_a, platform):
    reader = client_for(make_key(tenant_a, ["queues:read"]))
    payload = {"gpu_type": "H100", "count": 4, "description": "launch week", **_window()}
    before = _audits()
    assert _error(client_a.post("/api/v1/reservations/", payload, format="json"), 403)["type"] == "permission_denied"
    assert Reservation.all_tenants.count() == 0 and _audits() == before
    # A platform credential names the tenant.
    assert "tenant" in _error(platform.post("/api/v1/reservations/", payload, format="json"))["fields"]
    created = platform.post("/api/v1/reservations/", payload, format="json", HTTP_X_GRYVIA_TENANT=tenant_a.slug)
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["tenant"] == tenant_a.slug and body["active"] is True and body["count"] == 4
    assert _audits() == before + 1
    row = AuditEntry.all_tenants.latest("id")
    assert row.object_type == "reservation" and row.tenant_id == tenant_a.pk and row.actor.startswith("key:")
    detail = f"/api/v1/reservations/{body['id']}/"
    # The tenant reads its reservation (queues:read suffices), cannot change it; another tenant cannot see it.
    assert reader.get(detail).status_code == 200
    assert client_a.patch(detail, {"count": 8}, format="json").status_code == 403
    assert client_a.patch(detail, {"count": 0}, format="json").status_code == 403
    assert client_a.delete(detail).status_code == 403
    assert client_b.get(detail).status_code == 404 and client_b.delete(detail).status_code == 404
    assert platform.patch(detail, {"count": 8}, format="json").json()["count"] == 8
    assert _audits() == before + 2
    assert platform.delete(detail).status_code == 204
    assert _audits() == before + 3 and Reservation.all_tenants.count() == 0


def test_reservation_end_must_follow_start(tenant_a, platform):
    start = timezone.now()
    payload = {"gpu_type": "H100", "count": 1, "start_at": start.isoformat(), "end_at": start.isoformat()}
    headers = {"HTTP_X_GRYVIA_TENANT": tenant_a.slug}
    error = _error(platform.post("/api/v1/reservations/", payload, format="json", **headers))
    assert list(error["fields"]) == ["end_at"] and "start_at" in error["message"]
    ok = platform.post("/api/v1/reservations/", {**payload, **_window()}, format="json", **headers).json()
    error = _error(platform.patch(f"/api/v1/reservations/{ok['id']}/", {"end_at": payload["start_at"]}, format="json"))
    assert "end_at" in error["fields"]
    for bad, field in (
        ({"count": 0}, "count"),
        ({"gpu_type": "not a label"}, "gpu_type"),
        ({"surprise": 1}, "surprise"),
    ):
        response = platform.post("/api/v1/reservations/", {**payload, **_window(), **bad}, format="json", **headers)
        assert field in _error(response)["fields"]
    assert Reservation.all_tenants.count() == 1


def test_reservation_activity(tenant_a, client_a):
    past = make_reservation(
        tenant_a, start_at=timezone.now() - dt.timedelta(days=2), end_at=timezone.now() - dt.timedelta(days=1)
    )
    current = make_reservation(tenant_a)
    future = Reservation.all_tenants.get(
        pk=make_reservation(
            tenant_a, start_at=timezone.now() + dt.timedelta(days=1), end_at=timezone.now() + dt.timedelta(days=2)
        )
    )
    assert not future.is_active() and future.is_active(future.start_at) and not future.is_active(future.end_at)
    assert [str(r.pk) for r in selectors.reservations_active(tenant_a.pk)] == [current]
    listed = client_a.get("/api/v1/reservations/?active=true").json()["results"]
    assert [str(r["id"]) for r in listed] == [current]
    assert {str(r["id"]) for r in client_a.get("/api/v1/reservations/?active=false").json()["results"]} == {
        past,
        str(future.pk),
    }


# --- admin -----------------------------------------------------------------------------------------------------


def test_admin_pages_render_and_save_through_services(django_user_model, tenant_a):
    from django.contrib import admin
    from django.test import Client
    from django.urls import reverse

    user = django_user_model.objects.create_superuser("root", "root@example.com", "pw-for-tests-1")
    client = Client()
    client.force_login(user)
    services.cohort_create(actor=ACTOR, name="pool")
    services.priority_class_create(actor=ACTOR, name="high", value=10)
    services.queue_create(actor=ACTOR, tenant=tenant_a, name="q", quotas=[{"resource": GPU, "nominal": 1}])
    make_reservation(tenant_a)
    for model in (Cohort, Queue, PriorityClass, Reservation):
        model_admin = admin.site._registry[model]
        assert model_admin.search_fields and model_admin.list_filter
        name = f"admin:queueing_{model._meta.model_name}"
        assert client.get(reverse(f"{name}_changelist") + "?q=a").status_code == 200
        assert client.get(reverse(f"{name}_add")).status_code == 200
        obj = model._default_manager.first()
        assert client.get(reverse(f"{name}_change", args=[obj.pk])).status_code == 200
    response = client.post(
        reverse("admin:queueing_queue_add"),
        {"tenant": tenant_a.pk, "name": "from-admin", "cohort": "", "weight": "1", "quotas": '[{"resource": "tpu"}]'},
    )
    assert response.status_code == 200 and b"quotas" in response.content  # the form shows the service's error
    response = client.post(
        reverse("admin:queueing_queue_add"),
        {"tenant": tenant_a.pk, "name": "from-admin", "cohort": "", "weight": "2", "quotas": "[]"},
    )
    assert response.status_code == 302, response.content
    entry = AuditEntry.all_tenants.get(object_id="from-admin", action="queue.create")
    assert entry.actor == "user:root" and entry.tenant_id == tenant_a.pk
    response = client.post(
        reverse("admin:queueing_queue_change", args=[Queue.all_tenants.get(name="from-admin").pk]),
        {"cohort": "", "weight": "3", "quotas": "[]"},
    )
    assert response.status_code == 302, response.content
    assert AuditEntry.all_tenants.filter(object_id="from-admin", action="queue.update").count() == 1

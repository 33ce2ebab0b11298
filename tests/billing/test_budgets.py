"""Budgets: REST CRUD with field errors and tenant isolation, spend (prorated, open records priced to now), states,
and thresholds that fire once each per period (idempotent even when another evaluator recorded one first)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from apps.billing import services
from apps.billing.models import Budget, BudgetEvent, CostCenter, TenantCostCenter
from apps.billing.selectors import spend
from apps.billing.services import budgets
from apps.core.models import AuditEntry
from apps.webhooks import services as webhooks
from apps.webhooks.models import Event
from tests.factories import ACTOR, client_for, make_key, make_tenant

from .conftest import T0, make_sku

pytestmark = pytest.mark.django_db
SEPT = dt.datetime(2026, 9, 1, tzinfo=dt.UTC)


def usage(tenant, event_id: str, start: dt.datetime, hours: float, gpus: int = 2) -> None:
    """One external usage event of `gpus` H100s (2.50 per GPU-hour) from `start` for `hours`."""
    end = start + dt.timedelta(hours=hours)
    event = {"id": event_id, "gpu_type": "H100", "gpus": gpus, "start": start.isoformat(), "end": end.isoformat()}
    services.usage_events_ingest(tenant=tenant, events=[event])


def budget(tenant, name="monthly", amount="100", **fields) -> Budget:
    return services.budget_create(actor=ACTOR, tenant=tenant, name=name, amount=Decimal(amount), **fields)


def emitted(tenant) -> list[dict]:
    rows = Event.all_tenants.filter(tenant=tenant, type="budget.threshold_crossed").order_by("id")
    return [e.data["budget"] for e in rows]


# --- REST ------------------------------------------------------------------------------------------------------


def test_create_list_show_update_delete_over_rest(tenant_a, client_a):
    response = client_a.post(
        "/api/v1/budgets/", {"name": "team-a-monthly", "amount": "500", "hard_limit": True}, format="json"
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["name"], body["tenant"], body["period"], body["amount"]) == (
        "team-a-monthly",
        "alpha",
        "monthly",
        "500.000000",
    )
    assert body["thresholds"] == [50, 80, 100] and body["currency"] == "USD" and body["hard_limit"] is True
    assert body["status"]["state"] == "ok" and body["status"]["spent"] == "0.000000"
    assert body["status"]["message"].startswith("0.00 of 500.00 USD spent (0.00 %)")
    assert client_a.get("/api/v1/budgets/").json()["count"] == 1
    changed = client_a.patch("/api/v1/budgets/team-a-monthly/", {"amount": "750", "thresholds": [90]}, format="json")
    assert changed.status_code == 200, changed.content
    assert changed.json()["amount"] == "750.000000" and changed.json()["thresholds"] == [90]
    actions = list(AuditEntry.all_tenants.filter(object_type="budget").values_list("action", flat=True))
    assert sorted(actions) == ["budget.create", "budget.update"]
    assert client_a.delete("/api/v1/budgets/team-a-monthly/").status_code == 204
    assert not Budget.all_tenants.exists()


@pytest.mark.parametrize(
    ("payload", "field", "words"),
    [
        ({"name": "b"}, "amount", "required"),
        ({"name": "b", "amount": "0"}, "amount", "greater than 0"),
        ({"name": "B_1", "amount": "5"}, "name", "DNS label"),
        ({"name": "b", "amount": "5", "thresholds": [50, 50]}, "thresholds", "once"),
        ({"name": "b", "amount": "5", "thresholds": [0]}, "thresholds", "thresholds[0]: must be a whole percentage"),
        ({"name": "b", "amount": "5", "period": "custom", "start": "2026-09-01T00:00:00Z"}, "end", "required"),
        (
            {"name": "b", "amount": "5", "period": "custom", "start": "2026-09-02T00:00:00Z", "end": "2026-09-01"},
            "end",
            "after start",
        ),
        ({"name": "b", "amount": "5", "start": "2026-09-01T00:00:00Z"}, "start", "only a custom period"),
        ({"name": "b", "amount": "5", "currency": "usd"}, "currency", "ISO 4217"),
        ({"name": "b", "amount": "5", "period": "weekly"}, "period", "not a valid choice"),
        ({"name": "b", "amount": "5", "limit": 3}, "limit", "unknown field"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_writes_nothing(tenant_a, client_a, payload, field, words):
    response = client_a.post("/api/v1/budgets/", payload, format="json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert field in error["fields"], error
    assert words in " ".join(error["fields"][field]), error
    assert not Budget.all_tenants.exists() and not AuditEntry.all_tenants.filter(object_type="budget").exists()


def test_a_second_budget_with_the_same_name_is_refused(tenant_a, client_a):
    budget(tenant_a, "same")
    response = client_a.post("/api/v1/budgets/", {"name": "same", "amount": "5"}, format="json")
    assert response.status_code == 400 and "already exists" in response.json()["error"]["fields"]["name"][0]


def test_tenants_see_only_their_own_and_readers_cannot_write(tenant_a, tenant_b, client_a, client_b):
    budget(tenant_b, "theirs")
    assert client_a.get("/api/v1/budgets/theirs/").status_code == 404
    assert client_a.delete("/api/v1/budgets/theirs/").status_code == 404
    assert client_a.get("/api/v1/budgets/").json()["count"] == 0
    viewer = client_for(make_key(tenant_b, ["billing:read"]))
    assert viewer.get("/api/v1/budgets/theirs/").status_code == 200
    assert viewer.patch("/api/v1/budgets/theirs/", {"amount": "1"}, format="json").status_code == 403
    assert viewer.post("/api/v1/budgets/", {"name": "x", "amount": "1"}, format="json").status_code == 403
    member = client_for(make_key(tenant_b, ["jobs:write", "billing:read"]))
    assert member.delete("/api/v1/budgets/theirs/").status_code == 403


def test_platform_staff_write_a_tenants_budget_and_cost_center_budgets(tenant_a, platform_key):
    platform = client_for(platform_key)
    response = platform.post(
        "/api/v1/budgets/", {"name": "cap", "amount": "10"}, format="json", HTTP_X_GRYVIA_TENANT="alpha"
    )
    assert response.status_code == 201 and response.json()["tenant"] == "alpha"
    center = CostCenter.objects.create(code="research", name="Research")
    made = platform.post(
        "/api/v1/budgets/", {"name": "research-q", "amount": "90", "cost_center": "research"}, format="json"
    )
    assert made.status_code == 201, made.content
    assert made.json()["tenant"] is None and made.json()["cost_center"] == "research"
    tenant_admin = client_for(make_key(tenant_a, ["admin"]))
    assert tenant_admin.get("/api/v1/budgets/research-q/").status_code == 404  # not a tenant's
    refused = tenant_admin.post(
        "/api/v1/budgets/", {"name": "cc", "amount": "1", "cost_center": "research"}, format="json"
    )
    assert refused.status_code == 403
    assert Budget.all_tenants.filter(cost_center=center).count() == 1


# --- spend and state -------------------------------------------------------------------------------------------


def test_spend_prorates_records_that_cross_the_period_and_prices_open_ones_to_now(tenant_a):
    make_sku()
    usage(tenant_a, "inside", SEPT + dt.timedelta(days=2), 1)  # 2 GPUs x 1 h x 2.50 = 5.00
    usage(tenant_a, "crossing", SEPT - dt.timedelta(hours=3), 4)  # 20.00, of which 1 h of 4 in September: 5.00
    usage(tenant_a, "august", SEPT - dt.timedelta(days=3), 1)  # not September's
    got = spend.usage_spend(tenant_ids=[tenant_a.pk], start=SEPT, end=SEPT.replace(month=10), now=T0)
    assert got == {(tenant_a.pk, "USD"): Decimal("10.000000")}


def test_states_follow_the_percentage_and_the_hard_limit():
    state = budgets.state_of
    assert state(spent=Decimal("49.99"), amount=Decimal(100), thresholds=[50, 80, 100], hard_limit=True) == "ok"
    assert state(spent=Decimal("50"), amount=Decimal(100), thresholds=[50, 80, 100], hard_limit=True) == "warning"
    assert state(spent=Decimal("79"), amount=Decimal(100), thresholds=[], hard_limit=False) == "ok"
    assert state(spent=Decimal("80"), amount=Decimal(100), thresholds=[], hard_limit=False) == "warning"
    assert state(spent=Decimal("100"), amount=Decimal(100), thresholds=[50], hard_limit=False) == "exceeded"
    assert state(spent=Decimal("100"), amount=Decimal(100), thresholds=[50], hard_limit=True) == "blocked"


# --- thresholds fire once each per period ----------------------------------------------------------------------


def test_thresholds_fire_once_each_per_period(tenant_a):
    make_sku()
    webhooks.endpoint_create(
        actor=ACTOR, tenant=tenant_a, url="https://hooks.example.com/b", events=["budget.threshold_crossed"]
    )
    monthly = budget(tenant_a, amount="100")
    usage(tenant_a, "e1", SEPT + dt.timedelta(days=1), 11)  # 55.00: past 50 %
    assert services.budgets_evaluate(now=T0) == {"budgets": 1, "events": 1}
    assert services.budgets_evaluate(now=T0)["events"] == 0  # evaluated again: nothing new
    monthly.refresh_from_db()
    assert (monthly.status_state, monthly.status_spent) == ("warning", Decimal("55.000000"))
    assert [(e["threshold"], e["spent"], e["percent"]) for e in emitted(tenant_a)] == [(50, "55.000000", "55.00")]

    usage(tenant_a, "e2", SEPT + dt.timedelta(days=2), 6)  # +30.00 = 85.00: past 80 %
    assert services.budgets_evaluate(now=T0)["events"] == 1
    assert services.budgets_evaluate(now=T0)["events"] == 0
    assert [e["threshold"] for e in emitted(tenant_a)] == [50, 80]
    rows = BudgetEvent.all_tenants.filter(budget=monthly).order_by("threshold")
    assert [(r.threshold, r.period_start) for r in rows] == [(50, SEPT), (80, SEPT)]

    # October is a new period: 50 % fires again once October's spend reaches it, and only then.
    october = T0.replace(month=10)
    assert services.budgets_evaluate(now=october)["events"] == 0
    usage(tenant_a, "e3", SEPT.replace(month=10), 12)  # 60.00 in October
    assert services.budgets_evaluate(now=october)["events"] == 1
    assert services.budgets_evaluate(now=october)["events"] == 0
    fired = emitted(tenant_a)
    assert [(e["threshold"], e["period_start"][:10]) for e in fired] == [
        (50, "2026-09-01"),
        (80, "2026-09-01"),
        (50, "2026-10-01"),
    ]
    monthly.refresh_from_db()
    assert monthly.status_period_start == SEPT.replace(month=10) and monthly.status_state == "warning"


def test_a_threshold_another_evaluator_recorded_first_is_not_emitted_again(tenant_a, monkeypatch):
    make_sku()
    webhooks.endpoint_create(
        actor=ACTOR, tenant=tenant_a, url="https://hooks.example.com/b", events=["budget.threshold_crossed"]
    )
    budget(tenant_a, amount="10", thresholds=[50])
    usage(tenant_a, "e1", SEPT + dt.timedelta(days=1), 2)  # 10.00: 100 %
    assert services.budgets_evaluate(now=T0)["events"] == 1
    # A concurrent evaluator that read "nothing recorded yet" just before this row was inserted: its insert fails
    # on the unique (budget, period start, threshold) and it emits nothing.
    monkeypatch.setattr(budgets.evaluation, "_recorded", lambda budget_ids: set())
    assert services.budgets_evaluate(now=T0)["events"] == 0
    assert len(emitted(tenant_a)) == 1 and BudgetEvent.all_tenants.count() == 1


def test_a_cost_center_budget_adds_up_its_tenants(tenant_a, tenant_b):
    make_sku()
    center = CostCenter.objects.create(code="research", name="Research")
    for tenant in (tenant_a, tenant_b):
        TenantCostCenter.objects.create(tenant=tenant, cost_center=center)
    make_tenant("outside")
    shared = services.budget_create(actor=ACTOR, cost_center=center, name="research", amount=Decimal("40"))
    usage(tenant_a, "a1", SEPT + dt.timedelta(days=1), 3)  # 15.00
    usage(tenant_b, "b1", SEPT + dt.timedelta(days=1), 2)  # 10.00
    services.budgets_evaluate(now=T0)
    shared.refresh_from_db()
    assert shared.status_spent == Decimal("25.000000") and shared.status_tenants == sorted([tenant_a.pk, tenant_b.pk])
    assert shared.status_state == "warning"  # 62.5 % >= 50 %

"""Cost centers (CRUD, one cost center per tenant, audited, platform only) and the chargeback report, which sums to
the invoices of the period exactly (JSON and CSV; from finalized invoices or from estimates)."""

from __future__ import annotations

import csv
import datetime as dt
import io
from decimal import Decimal

import pytest

from apps.billing.models import CostCenter, Invoice, TenantCostCenter
from apps.billing.services import invoicing
from apps.core.models import AuditEntry
from tests.factories import ACTOR, client_for, make_key, make_tenant

from .conftest import make_sku
from .invoice_tools import OCT, SEPT, event, ingest

pytestmark = pytest.mark.django_db
CENTERS = "/api/v1/cost-centers/"
REPORT = "/api/v1/chargeback/"


def _center(client, code: str, **body):
    response = client.post(CENTERS, {"code": code, "name": code.title(), **body}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def test_cost_centers_crud_with_their_tenants(tenant_a, tenant_b, platform_client):
    eng = _center(platform_client, "eng", overhead_percent="12.5", tenants=["alpha"])
    assert (eng["code"], eng["overhead_percent"], eng["tenants"]) == ("eng", "12.500", ["alpha"])
    taken = platform_client.post(CENTERS, {"code": "ops", "name": "Ops", "tenants": ["alpha"]}, format="json")
    assert taken.status_code == 400 and "is in cost center 'eng'" in taken.json()["error"]["fields"]["tenants"][0]
    assert not CostCenter.objects.filter(code="ops").exists()  # nothing half-written
    changed = platform_client.patch(f"{CENTERS}eng/", {"tenants": ["alpha", "bravo"], "name": "Engineering"},
                                    format="json")  # fmt: skip
    assert changed.json()["tenants"] == ["alpha", "bravo"] and changed.json()["name"] == "Engineering"
    assert platform_client.get(CENTERS).json()["results"][0]["tenants"] == ["alpha", "bravo"]
    assert platform_client.patch(f"{CENTERS}eng/", {"code": "x"}, format="json").status_code == 400
    assert platform_client.delete(f"{CENTERS}eng/").status_code == 204
    assert TenantCostCenter.objects.count() == 0
    actions = list(
        AuditEntry.all_tenants.filter(object_type="cost_center").order_by("id").values_list("action", flat=True)
    )
    assert actions == ["cost_center.create", "cost_center.update", "cost_center.delete"]
    deleted = AuditEntry.all_tenants.filter(action="cost_center.delete").get()
    assert deleted.before["tenants"] == ["alpha", "bravo"] and deleted.after is None


def test_bad_cost_center_input_names_the_field(tenant_a, platform_client):
    cases = [
        ({"code": "unassigned", "name": "x"}, "code"),
        ({"code": "Bad Code", "name": "x"}, "code"),
        ({"code": "ok", "name": "x", "overhead_percent": "-1"}, "overhead_percent"),
        ({"code": "ok", "name": "x", "tenants": ["nope"]}, "tenants"),
        ({"code": "ok"}, "name"),
        ({"code": "ok", "name": "x", "color": "red"}, "color"),
    ]
    for body, field in cases:
        response = platform_client.post(CENTERS, body, format="json")
        assert response.status_code == 400 and field in response.json()["error"]["fields"], (body, response.content)
    _center(platform_client, "ok")
    again = platform_client.post(CENTERS, {"code": "ok", "name": "again"}, format="json")
    assert again.status_code == 400 and "already exists" in again.json()["error"]["fields"]["code"][0]
    assert CostCenter.objects.count() == 1


def test_cost_centers_and_chargeback_are_the_platforms(tenant_a, client_a, platform_client):
    _center(platform_client, "eng")
    for request in (
        lambda c: c.get(CENTERS),
        lambda c: c.get(f"{CENTERS}eng/"),
        lambda c: c.post(CENTERS, {"code": "mine", "name": "Mine"}, format="json"),
        lambda c: c.delete(f"{CENTERS}eng/"),
        lambda c: c.get(f"{REPORT}?month=2026-09"),
    ):
        assert request(client_a).status_code == 403
    reader = client_for(make_key(tenant_a, ["billing:read"], platform=True))
    assert reader.get(f"{REPORT}?month=2026-09").status_code == 200
    assert reader.post(CENTERS, {"code": "x", "name": "X"}, format="json").status_code == 403
    assert CostCenter.objects.count() == 1


def _invoice(tenant, month_start: dt.datetime, month_end: dt.datetime) -> Invoice:
    draft = invoicing.invoice_create(actor=ACTOR, tenant=tenant, start=month_start, end=month_end)
    return invoicing.invoice_finalize(actor=ACTOR, invoice=draft)


def test_the_report_sums_to_the_invoices_of_the_period(clean_ledger, tenant_a, tenant_b, platform_client):
    charlie = make_tenant("charlie")
    make_sku("h100", rate="2.4999")
    make_sku("a100-eu", gpu_type="A100", rate="3.3333", currency="EUR")
    ingest(tenant_a, event(SEPT, 4321, gpus=3), event(SEPT + dt.timedelta(days=9), 777))
    ingest(tenant_b, event(SEPT + dt.timedelta(days=1), 9999, gpus=2))
    ingest(charlie, event(SEPT + dt.timedelta(days=2), 5555, gpu_type="A100"), event(OCT, 3600))
    mid = SEPT + dt.timedelta(days=5)
    invoices = [_invoice(tenant_a, SEPT, mid), _invoice(tenant_a, mid, OCT), _invoice(tenant_b, SEPT, OCT)]
    invoices.append(_invoice(charlie, SEPT, OCT))
    invoicing.invoice_mark_paid(actor=ACTOR, invoice=invoices[2])
    voided = _invoice(charlie, OCT, OCT + dt.timedelta(days=30))  # the next period: not in September's report
    invoicing.invoice_void(actor=ACTOR, invoice=voided, reason="test")
    invoicing.invoice_create(actor=ACTOR, tenant=tenant_b, start=OCT, end=OCT + dt.timedelta(days=1))  # a draft
    _center(platform_client, "eng", overhead_percent="10", tenants=["alpha", "bravo"])
    _center(platform_client, "idle", overhead_percent="5")

    report = platform_client.get(f"{REPORT}?start=2026-09-01&end=2026-09-30").json()
    by_currency: dict[str, Decimal] = {}
    for invoice in invoices:
        by_currency[invoice.currency] = by_currency.get(invoice.currency, Decimal(0)) + invoice.subtotal
    for total in report["totals"]:
        assert Decimal(total["amount"]) == by_currency[total["currency"]]  # the report sums to the invoices
    assert {t["currency"] for t in report["totals"]} == set(by_currency) == {"EUR", "USD"}
    assert sum(Decimal(r["amount"]) for r in report["rows"] if r["currency"] == "USD") == by_currency["USD"]
    assert sum(t["invoices"] for t in report["totals"]) == 4

    eng, unassigned = report["rows"]
    assert (eng["cost_center"], eng["currency"]) == ("eng", "USD")
    assert [t["tenant"] for t in eng["tenants"]] == ["alpha", "bravo"]
    alpha = eng["tenants"][0]
    assert alpha["invoices"] == [invoices[0].number, invoices[1].number]
    assert Decimal(alpha["amount"]) == invoices[0].subtotal + invoices[1].subtotal
    assert Decimal(alpha["overhead"]) == invoicing.round_money(Decimal(alpha["amount"]) / 10, "USD")
    assert Decimal(eng["overhead"]) == sum(Decimal(t["overhead"]) for t in eng["tenants"])
    assert Decimal(eng["total"]) == Decimal(eng["amount"]) + Decimal(eng["overhead"])
    assert (unassigned["cost_center"], unassigned["currency"], unassigned["overhead"]) == ("unassigned", "EUR", "0.00")
    assert unassigned["tenants"][0]["tenant"] == "charlie"

    exported = platform_client.get(f"{REPORT}?month=2026-09&format=csv")
    rows = list(csv.DictReader(io.StringIO(exported.content.decode())))
    assert [(r["cost_center"], r["tenant"], r["currency"]) for r in rows] == [
        ("eng", "alpha", "USD"), ("eng", "bravo", "USD"), ("unassigned", "charlie", "EUR"),
        ("TOTAL", "", "EUR"), ("TOTAL", "", "USD"),
    ]  # fmt: skip
    assert Decimal(rows[-1]["amount"]) == by_currency["USD"]
    assert sum(Decimal(r["amount"]) for r in rows[:2]) == by_currency["USD"]


def test_the_estimates_report_uses_the_invoice_computation(clean_ledger, tenant_a, tenant_b, platform_client):
    make_sku("h100", rate="1.2345")
    ingest(tenant_a, event(SEPT, 1234, gpus=3), event(SEPT + dt.timedelta(days=3), 4567))
    ingest(tenant_b, event(SEPT + dt.timedelta(days=4), 8910))
    _center(platform_client, "eng", overhead_percent="7.5", tenants=["bravo"])
    assert platform_client.get(f"{REPORT}?month=2026-09").json()["rows"] == []  # nothing finalized yet
    report = platform_client.get(f"{REPORT}?month=2026-09&source=estimates").json()
    estimates = {
        t.slug: invoicing.invoice_estimate(tenant=t, start=SEPT, end=OCT).subtotal for t in (tenant_a, tenant_b)
    }
    charged = {t["tenant"]: Decimal(t["amount"]) for r in report["rows"] for t in r["tenants"]}
    assert charged == estimates and report["source"] == "estimates"
    assert Decimal(report["totals"][0]["amount"]) == sum(estimates.values())
    bravo = report["rows"][0]["tenants"][0]
    assert Decimal(bravo["overhead"]) == invoicing.round_money(estimates["bravo"] * Decimal("0.075"), "USD")


def test_bad_report_input_is_a_400_naming_the_field(platform_client):
    for query, field in (("", "start"), ("?month=2026-09&source=magic", "source"), ("?month=09-2026", "month"),
                         ("?month=2026-09&format=pdf", "format")):  # fmt: skip
        response = platform_client.get(f"{REPORT}{query}")
        assert response.status_code == 400 and field in response.json()["error"]["fields"], (query, response.content)

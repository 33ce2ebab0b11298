"""Invoices: estimates (JSON, CSV), the lifecycle and its audit rows, finalization's refusals (nothing written), totals
that equal the ledger to the cent, numbering, tenancy, immutability, and the printable page."""

from __future__ import annotations

import csv
import datetime as dt
import io
from decimal import Decimal

import pytest
from django.db import connection

from apps.billing.choices import UsageKind
from apps.billing.models import ImmutableError, Invoice, InvoiceCounter, InvoiceLine, UsageRecord, triggers
from apps.billing.services import invoicing
from apps.core.models import AuditEntry
from apps.webhooks import services as webhooks
from apps.webhooks.models import Event
from tests.factories import ACTOR, client_for, make_key, make_user

from .conftest import make_sku
from .invoice_tools import OCT, SEPT, cents, event, ingest, ledger_lines

pytestmark = pytest.mark.django_db
URL = "/api/v1/invoices/"


def _draft(client, tenant: str = "alpha", **body) -> dict:
    body = {k: v for k, v in {"tenant": tenant, "month": "2026-09", **body}.items() if v is not None}
    response = client.post(URL, body, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def _finalize(client, invoice_id: int):
    return client.post(f"{URL}{invoice_id}/finalize/", format="json")


def test_the_estimate_has_a_line_per_kind_and_sku_from_the_ledger(clean_ledger, tenant_a, client_a, h100):
    make_sku("l40s", gpu_type="L40S", rate="1.2")
    ingest(tenant_a, event(SEPT + dt.timedelta(days=2), 5400, gpus=2), event(SEPT + dt.timedelta(days=3), 3600))
    ingest(tenant_a, event(SEPT + dt.timedelta(days=4), 1800, gpu_type="L40S", gpus=4))
    ingest(tenant_a, event(OCT, 3600))  # the next period
    ingest(tenant_a, event(SEPT - dt.timedelta(seconds=1), 3600))  # started the second before
    body = client_a.get(f"{URL}estimate/?start=2026-09-01&end=2026-09-30").json()
    lines = [(ln["kind"], ln["sku"], ln["entries"], ln["gpu_hours"], ln["rate"], ln["amount"]) for ln in body["lines"]]
    assert lines == [
        ("external", "h100", 2, "4.000000", "2.500000", "10.00"),
        ("external", "l40s", 1, "2.000000", "1.200000", "2.40"),
    ]
    assert (body["tenant"], body["currency"], body["subtotal"], body["ledger_entries"]) == ("alpha", "USD", "12.40", 3)
    assert body["problems"] == [] and body["totals"] == [
        {"currency": "USD", "subtotal": "12.40", "ledger_total": "12.400000"}
    ]
    assert client_a.get(f"{URL}estimate/?month=2026-09").json()["subtotal"] == "12.40"

    exported = client_a.get(f"{URL}estimate/?month=2026-09&format=csv")
    assert exported.status_code == 200 and exported["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(exported.content.decode())))
    assert [(r["invoice"], r["sku"], r["gpu_hours"], r["amount"]) for r in rows] == [
        ("estimate", "h100", "4.000000", "10.00"),
        ("estimate", "l40s", "2.000000", "2.40"),
        ("estimate", "", "", "12.40"),
    ]
    assert rows[-1]["description"] == "TOTAL" and rows[0]["period_start"] == "2026-09-01T00:00:00+00:00"


def test_token_usage_is_a_line_per_model_with_its_tokens(clean_ledger, tenant_a, client_a):
    from apps.billing import services
    from apps.llm.models import InferenceService, LlmUsageHourly

    InferenceService.objects.create(
        tenant=None, name="chat", runtime="external", model="m", model_name="chat",
        price_input_per_1m=Decimal("0.5"), price_output_per_1m=Decimal("1.5"),
    )  # fmt: skip
    hour = SEPT + dt.timedelta(days=5)
    LlmUsageHourly.objects.create(tenant=tenant_a, key_id="k", model="chat", hour=hour, input_tokens=10**6,
                                  output_tokens=2 * 10**6)  # fmt: skip
    assert services.usage_tokens_collect(now=hour + dt.timedelta(hours=2)) == 1
    (line,) = client_a.get(f"{URL}estimate/?month=2026-09").json()["lines"]
    assert (line["kind"], line["model"], line["input_tokens"], line["output_tokens"]) == (
        "tokens",
        "chat",
        10**6,
        2 * 10**6,
    )
    assert (line["amount"], line["rate"], line["description"]) == ("3.50", None, "LLM tokens, model chat")


def test_lines_round_half_up_and_the_subtotal_sums_the_rounded_lines(clean_ledger, tenant_a, platform_client):
    make_sku("cheap-a", gpu_type="A10", rate="0.01")
    make_sku("cheap-b", gpu_type="T4", rate="0.01")
    # 2.5 GPU-hours at 0.01 = 0.025 on each line: half-up gives 0.03 (half-even would give 0.02).
    ingest(tenant_a, event(SEPT, 9000, gpu_type="A10"), event(SEPT, 9000, gpu_type="T4"))
    invoice = _draft(platform_client)
    invoice = _finalize(platform_client, invoice["id"]).json()
    assert [ln["amount"] for ln in invoice["lines"]] == ["0.03", "0.03"]
    assert [ln["amount_exact"] for ln in invoice["lines"]] == ["0.025000", "0.025000"]
    assert invoice["subtotal"] == "0.06" and invoice["ledger_total"] == "0.050000"


def test_minor_units_follow_the_currency():
    assert invoicing.money_text(Decimal("1234.5"), "JPY") == "1235"
    assert invoicing.money_text(Decimal("1.0005"), "KWD") == "1.001"
    assert invoicing.money_text(Decimal("0.125"), "EUR") == "0.13"


def test_finalized_totals_equal_the_ledger_entries_of_the_period_to_the_cent(clean_ledger, tenant_a, platform_client):
    make_sku("h100", gpu_type="H100", rate="2.4999")
    make_sku("l40s", gpu_type="L40S", rate="0.7777", cpu_core_hour_rate="0.0311")
    make_sku("cpu", gpu_type="cpu", rate="0", cpu_core_hour_rate="0.0433")
    events = []
    for n in range(120):  # odd durations, so costs have 6 significant decimals
        start = SEPT + dt.timedelta(hours=5 * n, seconds=n)
        kind = n % 3
        if kind == 0:
            events.append(event(start, 37 + 61 * n, gpus=1 + n % 3))
        elif kind == 1:
            events.append(event(start, 13 + 47 * n, gpu_type="L40S", gpus=2, cpu_cores=1.5))
        else:
            events.append(event(start, 29 + 53 * n, gpu_type="cpu", gpus=0, cpu_cores=3))
    events += [event(OCT, 3600), event(SEPT - dt.timedelta(hours=1), 7200)]  # outside the period
    ingest(tenant_a, *events)
    invoice = _finalize(platform_client, _draft(platform_client)["id"])
    assert invoice.status_code == 200, invoice.content
    body = invoice.json()

    exact = ledger_lines(tenant_a, SEPT, OCT)
    assert len(exact) == len(body["lines"]) == 3
    assert {(ln["kind"], ln["sku"]): ln["amount"] for ln in body["lines"]} == {
        (kind, sku): str(cents(total)) for (kind, sku, _currency), total in exact.items()
    }
    assert Decimal(body["subtotal"]) == sum(cents(total) for total in exact.values())
    assert Decimal(body["ledger_total"]) == sum(exact.values())
    assert abs(Decimal(body["subtotal"]) - sum(exact.values())) <= Decimal("0.005") * len(exact)
    assert body["ledger_entries"] == 120 and body["state"] == "finalized"


def test_the_lifecycle_numbers_without_gaps_and_audits_each_change(
    clean_ledger, tenant_a, client_a, platform_client, h100
):
    ingest(tenant_a, event(SEPT, 3600), event(OCT, 3600))
    audits = AuditEntry.all_tenants.filter(object_type="invoice")
    draft = _draft(platform_client, note="September")
    assert (draft["state"], draft["number"], draft["subtotal"], draft["note"]) == ("draft", None, "2.50", "September")
    assert client_a.get(f"{URL}{draft['id']}/").status_code == 404  # drafts are the platform's
    assert client_a.get(URL).json()["count"] == 0
    first = _finalize(platform_client, draft["id"]).json()
    assert (first["state"], first["number"]) == ("finalized", "INV-alpha-000001")
    assert first["finalized_by"].startswith("key:") and first["finalized_at"]
    assert client_a.get(f"{URL}{draft['id']}/").json()["number"] == "INV-alpha-000001"
    assert _finalize(platform_client, draft["id"]).status_code == 409
    paid = platform_client.post(f"{URL}{draft['id']}/mark-paid/", {"reference": "wire 42"}, format="json").json()
    assert (paid["state"], paid["payment_reference"]) == ("paid", "wire 42") and paid["paid_at"]
    refused = platform_client.post(f"{URL}{draft['id']}/void/", {"reason": "mistake"}, format="json")
    assert refused.status_code == 409 and "paid" in refused.json()["error"]["message"]

    second = _draft(platform_client, month=None, start="2026-10-01", end="2026-10-31")
    second = _finalize(platform_client, second["id"]).json()
    assert second["number"] == "INV-alpha-000002"
    voided = platform_client.post(f"{URL}{second['id']}/void/", {"reason": "wrong period"}, format="json").json()
    assert (voided["state"], voided["number"], voided["void_reason"]) == ("void", "INV-alpha-000002", "wrong period")
    again = _finalize(platform_client, _draft(platform_client, month=None, start="2026-10-01", end="2026-10-31")["id"])
    assert again.json()["number"] == "INV-alpha-000003"  # the void one keeps its number: no gap, no reuse

    spare = _draft(platform_client, month=None, start="2026-11-01", end="2026-11-30")
    assert platform_client.delete(f"{URL}{spare['id']}/").status_code == 204
    assert platform_client.delete(f"{URL}{second['id']}/").status_code == 409
    assert [a.action for a in audits.order_by("id")] == [
        "invoice.create", "invoice.finalize", "invoice.pay",
        "invoice.create", "invoice.finalize", "invoice.void",
        "invoice.create", "invoice.finalize",
        "invoice.create", "invoice.delete",
    ]  # fmt: skip
    finalize_row = audits.filter(action="invoice.finalize").order_by("id").first()
    assert finalize_row.before["state"] == "draft" and finalize_row.after["number"] == "INV-alpha-000001"
    assert finalize_row.tenant_id == tenant_a.pk
    numbers = [i["number"] for i in client_a.get(URL).json()["results"]]  # newest period first; no drafts
    assert numbers == ["INV-alpha-000003", "INV-alpha-000002", "INV-alpha-000001"]
    assert client_a.get(f"{URL}?state=void").json()["results"][0]["number"] == "INV-alpha-000002"
    assert client_a.get(f"{URL}?number=INV-alpha-000003").json()["count"] == 1


def test_finalizing_and_paying_emit_events_for_webhooks(clean_ledger, tenant_a, platform_client, h100):
    webhooks.endpoint_create(
        actor=ACTOR, tenant=tenant_a, url="https://hooks.example.com/x", events=["invoice.finalized", "invoice.paid"]
    )
    ingest(tenant_a, event(SEPT, 3600))
    invoice = _finalize(platform_client, _draft(platform_client)["id"]).json()
    platform_client.post(f"{URL}{invoice['id']}/mark-paid/", {}, format="json")
    sent = list(Event.all_tenants.filter(tenant=tenant_a).order_by("id").values_list("type", "data"))
    assert [t for t, _d in sent] == ["invoice.finalized", "invoice.paid"]
    assert sent[0][1]["number"] == "INV-alpha-000001" and sent[0][1]["subtotal"] == "2.50"


def _refused(platform_client, invoice_id: int, words: str) -> None:
    counter_before = InvoiceCounter.objects.filter(last__gt=0).count()
    audits = AuditEntry.all_tenants.count()
    lines = list(InvoiceLine.objects.filter(invoice_id=invoice_id).values_list("id", "amount"))
    response = _finalize(platform_client, invoice_id)
    assert response.status_code == 409, response.content
    assert words in response.json()["error"]["message"], response.json()
    invoice = Invoice.all_tenants.get(pk=invoice_id)
    assert (invoice.state, invoice.number, invoice.sequence) == ("draft", None, None)
    assert list(InvoiceLine.objects.filter(invoice_id=invoice_id).values_list("id", "amount")) == lines
    assert InvoiceCounter.objects.filter(last__gt=0).count() == counter_before
    assert AuditEntry.all_tenants.count() == audits


def test_open_usage_overlapping_the_period_refuses_finalizing(clean_ledger, tenant_a, platform_client, h100):
    ingest(tenant_a, event(SEPT, 3600))
    draft = _draft(platform_client)
    open_run = UsageRecord.all_tenants.create(
        tenant=tenant_a, name="usage-still-running", kind=UsageKind.GPU, start=SEPT - dt.timedelta(days=2), gpus=1
    )
    _refused(platform_client, draft["id"], "1 usage record(s) overlapping the period are still open (usage-still")
    open_run.delete()
    assert _finalize(platform_client, draft["id"]).status_code == 200


def test_final_usage_not_in_the_ledger_refuses_finalizing(clean_ledger, tenant_a, platform_client, h100):
    ingest(tenant_a, event(SEPT, 3600))
    draft = _draft(platform_client)
    UsageRecord.all_tenants.create(
        tenant=tenant_a, name="event-unsealed", kind=UsageKind.EXTERNAL, start=SEPT, end=SEPT, final=True
    )
    _refused(
        platform_client, draft["id"], "1 final usage record(s) of the period are not in the ledger (event-unsealed)"
    )
    assert (
        "not in the ledger"
        in client_for(make_key(tenant_a, ["billing:read"])).get(f"{URL}estimate/?month=2026-09").json()["problems"][0]
    )


def test_a_broken_chain_refuses_finalizing_naming_the_sequence(clean_ledger, tenant_a, platform_client, h100):
    ingest(tenant_a, event(SEPT - dt.timedelta(days=40), 3600), event(SEPT, 3600))  # entry 1 is in August
    draft = _draft(platform_client)
    triggers.drop(connection)
    try:
        with connection.cursor() as cursor:
            cursor.execute("UPDATE billing_ledgerentry SET cost = '0.000000' WHERE sequence = 1")
    finally:
        triggers.create(connection)
    _refused(platform_client, draft["id"], "ledger chain of tenant alpha is broken (sequence 1: hash does not match")


def test_mixed_currencies_refuse_finalizing(clean_ledger, tenant_a, platform_client, h100):
    make_sku("a100-eu", gpu_type="A100", rate="3", currency="EUR")
    ingest(tenant_a, event(SEPT, 3600), event(SEPT, 3600, gpu_type="A100"))
    draft = _draft(platform_client)
    assert draft["currency"] == "" and {ln["currency"] for ln in draft["lines"]} == {"EUR", "USD"}
    _refused(platform_client, draft["id"], "several currencies (EUR, USD)")
    estimate = platform_client.get(f"{URL}estimate/?tenant=alpha&month=2026-09").json()
    assert estimate["subtotal"] is None and [t["subtotal"] for t in estimate["totals"]] == ["3.00", "2.50"]


def test_an_overlapping_finalized_invoice_refuses_a_second_one(clean_ledger, tenant_a, platform_client, h100):
    ingest(tenant_a, event(SEPT, 3600))
    first, second = _draft(platform_client), _draft(platform_client, month=None, start="2026-09-15", end="2026-10-15")
    assert _finalize(platform_client, first["id"]).status_code == 200
    _refused(platform_client, second["id"], "overlaps invoice INV-alpha-000001")
    again = platform_client.post(URL, {"tenant": "alpha", "month": "2026-09"}, format="json")
    assert again.status_code == 409 and "void it first" in again.json()["error"]["message"]


def test_a_period_without_usage_or_not_ended_is_refused(clean_ledger, tenant_a, platform_client, h100):
    _refused(platform_client, _draft(platform_client)["id"], "no ledgered usage in the period")
    future = _draft(platform_client, month=None, start="2026-09-01", end="2099-01-01")
    _refused(platform_client, future["id"], "in the future")


def test_tenants_see_only_their_own_invoices_and_cannot_change_them(
    clean_ledger, tenant_a, tenant_b, client_a, client_b, platform_client, h100
):
    ingest(tenant_a, event(SEPT, 3600))
    ingest(tenant_b, event(SEPT, 7200))
    a = _finalize(platform_client, _draft(platform_client)["id"]).json()
    b = _finalize(platform_client, _draft(platform_client, tenant="bravo")["id"]).json()
    assert b["number"] == "INV-bravo-000001"  # numbers are per tenant
    assert [i["number"] for i in client_a.get(URL).json()["results"]] == ["INV-alpha-000001"]
    for path in (f"{URL}{a['id']}/", f"{URL}{a['id']}/html/", f"{URL}{a['id']}/?format=csv"):
        assert client_b.get(path).status_code == 404, path
    assert client_b.post(f"{URL}{a['id']}/void/", {"reason": "not mine"}, format="json").status_code == 404
    assert client_b.get(f"{URL}estimate/?tenant=alpha&month=2026-09").status_code == 404
    # A tenant admin reads its invoices but cannot create, finalize, void or pay them.
    assert client_a.post(URL, {"tenant": "alpha", "month": "2026-08"}, format="json").status_code == 403
    assert client_a.post(f"{URL}{a['id']}/void/", {"reason": "I'd rather not"}, format="json").status_code == 403
    assert client_a.post(f"{URL}{a['id']}/mark-paid/", {}, format="json").status_code == 403
    reader = client_for(make_key(tenant_a, ["billing:read"]))
    assert reader.get(f"{URL}{a['id']}/").json()["subtotal"] == "2.50"
    assert reader.post(f"{URL}{a['id']}/finalize/").status_code == 403
    assert client_for(make_key(tenant_a, ["jobs:read"])).get(URL).status_code == 403
    assert Invoice.all_tenants.get(pk=a["id"]).state == "finalized"


def test_a_finalized_invoice_and_its_lines_cannot_change(clean_ledger, tenant_a, platform_client, client, h100):
    ingest(tenant_a, event(SEPT, 3600))
    invoice = Invoice.all_tenants.get(pk=_finalize(platform_client, _draft(platform_client)["id"]).json()["id"])
    line = invoice.lines.get()
    invoice.subtotal = Decimal(0)
    line.amount = Decimal(0)
    for attempt in (invoice.save, invoice.delete, line.save, line.delete):
        with pytest.raises(ImmutableError):
            attempt()
    root = make_user("root-inv", staff=True)
    root.is_superuser = True
    root.save()
    client.force_login(root)
    url = f"/admin/billing/invoice/{invoice.pk}/"
    assert client.get(url + "change/").status_code == 200  # readable
    assert client.post(url + "change/", {"note": "changed"}).status_code == 403
    assert client.post(url + "delete/", {"post": "yes"}).status_code == 403
    stored = Invoice.all_tenants.get(pk=invoice.pk)
    assert (stored.subtotal, stored.note, stored.lines.get().amount) == (Decimal("2.5"), "", Decimal("2.5"))


def test_the_admin_finalizes_a_draft_through_the_service(clean_ledger, tenant_a, platform_client, client, h100):
    ingest(tenant_a, event(SEPT, 3600))
    draft = _draft(platform_client)
    root = make_user("root-inv2", staff=True)
    root.is_superuser = True
    root.save()
    client.force_login(root)
    response = client.post(
        "/admin/billing/invoice/", {"action": "finalize", "_selected_action": [draft["id"]]}, follow=True
    )
    assert response.status_code == 200
    invoice = Invoice.all_tenants.get(pk=draft["id"])
    assert (invoice.state, invoice.number, invoice.finalized_by) == ("finalized", "INV-alpha-000001", "user:root-inv2")


def test_the_printable_page(clean_ledger, tenant_a, client_a, platform_client, h100):
    ingest(tenant_a, event(SEPT, 5400, gpus=2))
    invoice = _finalize(platform_client, _draft(platform_client)["id"]).json()
    page = client_a.get(f"{URL}{invoice['id']}/html/")
    assert page.status_code == 200 and page["Content-Type"].startswith("text/html")
    html = page.content.decode()
    assert "Invoice INV-alpha-000001" in html and "External usage, SKU h100" in html
    assert "7.50 USD" in html and "@media print" in html and "3.000000" in html
    exported = client_a.get(f"{URL}{invoice['id']}/?format=csv")
    rows = list(csv.DictReader(io.StringIO(exported.content.decode())))
    assert [(r["invoice"], r["description"], r["amount"]) for r in rows] == [
        ("INV-alpha-000001", "External usage, SKU h100", "7.50"),
        ("INV-alpha-000001", "TOTAL", "7.50"),
    ]
    assert 'filename="INV-alpha-000001.csv"' in exported["Content-Disposition"]


def test_bad_input_is_a_400_naming_the_field(clean_ledger, tenant_a, client_a, platform_client, h100):
    def error(response) -> dict:
        assert response.status_code == 400, response.content
        return response.json()["error"]["fields"]

    assert "end" in error(platform_client.post(URL, {"tenant": "alpha", "start": "2026-09-01"}, format="json"))
    assert "month" in error(platform_client.post(URL, {"tenant": "alpha", "month": "2026-13"}, format="json"))
    both = {"tenant": "alpha", "month": "2026-09", "start": "2026-09-01"}
    assert "month" in error(platform_client.post(URL, both, format="json"))
    assert "tenant" in error(platform_client.post(URL, {"tenant": "nope", "month": "2026-09"}, format="json"))
    assert "surprise" in error(
        platform_client.post(URL, {"tenant": "alpha", "month": "2026-09", "surprise": 1}, format="json")
    )
    backwards = {"tenant": "alpha", "start": "2026-09-10", "end": "2026-09-01"}
    assert "end" in error(platform_client.post(URL, backwards, format="json"))
    assert "start" in error(client_a.get(f"{URL}estimate/?start=yesterday"))
    assert "format" in error(client_a.get(f"{URL}estimate/?format=xml"))
    assert "tenant" in error(platform_client.get(f"{URL}estimate/?month=2026-09"))  # platform: name one
    draft = _draft(platform_client)
    assert "reason" in error(platform_client.post(f"{URL}{draft['id']}/void/", {"reason": "x"}, format="json"))
    assert "reason" in error(platform_client.post(f"{URL}{draft['id']}/void/", {}, format="json"))
    ingest(tenant_a, event(SEPT, 60))
    _finalize(platform_client, draft["id"])
    future = {"paid_at": "2099-01-01T00:00:00Z"}
    assert "paid_at" in error(platform_client.post(f"{URL}{draft['id']}/mark-paid/", future, format="json"))
    assert Invoice.all_tenants.count() == 1 and Invoice.all_tenants.get().state == "finalized"

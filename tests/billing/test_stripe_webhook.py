"""Stripe's signed webhook: `invoice.paid` marks the invoice Paid and `invoice.payment_failed` is recorded and emitted,
each event once (also when the same event arrives twice at once, on PostgreSQL); a bad signature, an old timestamp
(the tolerance is a setting) or a live-mode event is refused and changes nothing; other events and other invoices are
acknowledged and ignored; Stripe paying a void invoice is a conflict. Events and their Stripe-Signature headers are
built by hand here; invoices are marked sent directly (`_as_sent`) except in the first test, which sends one.

Stripe's side (localstripe and an HTTP-level fake, on loopback: nothing leaves the machine) and the invoice helpers
are in tests/billing/stripe_fakes.py, the fixtures (`localstripe`, `fake`, `skus`) in tests/billing/conftest.py.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import itertools
import json
import time

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from apps.billing.models import Invoice, StripeEvent
from apps.billing.services import invoicing, stripe_sync
from apps.core.models import AuditEntry
from apps.webhooks import services as webhooks
from apps.webhooks.models import Event
from tests.factories import ACTOR

from .stripe_fakes import SECRET, STRIPE_MARKS, _finalized, _send

pytestmark = STRIPE_MARKS
WEBHOOK = "/api/v1/billing/stripe/webhook/"
_events = itertools.count(1)


def _event(type_: str, stripe_id: str, *, event_id: str | None = None, created: int | None = None, **obj) -> dict:
    return {
        "id": event_id or f"evt_test{next(_events):06d}",
        "object": "event",
        "type": type_,
        "livemode": False,
        "created": created or int(time.time()),
        "api_version": "2026-10-28.endive",
        "data": {"object": {"id": stripe_id, "object": "invoice", "livemode": False, **obj}},
    }


def _signed(body: dict, *, secret: str = SECRET, at: int | None = None) -> tuple[bytes, str]:
    """The body and its Stripe-Signature header, built by hand: t=<ts>,v1=<HMAC-SHA256 of "<ts>.<body>">."""
    payload = json.dumps(body).encode()
    ts = int(time.time()) if at is None else at
    signature = hmac.new(secret.encode(), f"{ts}.".encode() + payload, hashlib.sha256).hexdigest()
    return payload, f"t={ts},v1={signature}"


def _deliver(payload: bytes, header: str | None):
    extra = {"HTTP_STRIPE_SIGNATURE": header} if header is not None else {}
    return APIClient().post(WEBHOOK, data=payload, content_type="application/json", **extra)


def _as_sent(invoice: Invoice, stripe_id: str) -> Invoice:
    Invoice.all_tenants.filter(pk=invoice.pk).update(
        stripe_invoice_id=stripe_id,
        stripe_customer_id="cus_test",
        stripe_status="open",
        stripe_hosted_url=f"https://invoice.stripe.test/i/{stripe_id}",
        stripe_sent_at=timezone.now(),
    )
    return Invoice.all_tenants.get(pk=invoice.pk)


@pytest.fixture
def webhook_secret(settings):
    settings.GRYVIA_STRIPE_WEBHOOK_SECRET = SECRET


def test_invoice_paid_with_a_valid_signature_marks_the_invoice_paid_once(
    clean_ledger, tenant_a, platform_client, skus, fake
):
    webhooks.endpoint_create(actor=ACTOR, tenant=tenant_a, url="https://hooks.example.com/p", events=["invoice.paid"])
    invoice = _finalized(tenant_a)
    stripe_id = _send(platform_client, invoice).json()["stripe"]["invoice_id"]
    paid_at = int(time.time()) - 60
    payload, header = _signed(_event("invoice.paid", stripe_id, status="paid", status_transitions={"paid_at": paid_at}))

    response = _deliver(payload, header)
    assert response.status_code == 200, response.content
    assert response.json() | {"event": "-"} == {
        "received": True,
        "event": "-",
        "type": "invoice.paid",
        "handled": True,
        "duplicate": False,
        "outcome": "INV-alpha-000001 marked paid",
        "invoice": invoice.pk,
    }
    paid = Invoice.all_tenants.get(pk=invoice.pk)
    assert (paid.state, paid.paid_at, paid.payment_reference) == (
        "paid",
        dt.datetime.fromtimestamp(paid_at, dt.UTC),
        stripe_id,
    )
    assert (paid.paid_by, paid.stripe_status) == ("system:stripe", "paid")
    pay = AuditEntry.all_tenants.get(action="invoice.pay")
    assert pay.actor == "system:stripe" and pay.before["state"] == "finalized" and pay.after["state"] == "paid"
    assert list(Event.all_tenants.filter(tenant=tenant_a).values_list("type", flat=True)) == ["invoice.paid"]

    audits, emitted = AuditEntry.all_tenants.count(), Event.all_tenants.count()
    again = _deliver(payload, header)
    assert again.status_code == 200 and again.json()["duplicate"] is True and again.json()["handled"] is True
    assert "marked paid" in again.json()["outcome"]
    assert AuditEntry.all_tenants.count() == audits and Event.all_tenants.count() == emitted
    assert StripeEvent.objects.count() == 1 and Invoice.all_tenants.get(pk=invoice.pk).paid_at == paid.paid_at

    # Another event about the same payment (Stripe also sends one when a paid invoice is re-sent) changes nothing.
    later, later_header = _signed(_event("invoice.paid", stripe_id, status="paid"))
    assert _deliver(later, later_header).json()["outcome"] == "INV-alpha-000001 was already paid"
    assert AuditEntry.all_tenants.count() == audits


def test_a_bad_signature_or_an_old_timestamp_is_refused_and_changes_nothing(
    clean_ledger, tenant_a, skus, webhook_secret
):
    invoice = _as_sent(_finalized(tenant_a), "in_test_refused")
    body = _event("invoice.paid", "in_test_refused", status="paid")
    payload, header = _signed(body)
    now = int(time.time())
    refusals = {
        "wrong secret": (payload, _signed(body, secret="whsec_someoneelse")[1]),
        "tampered body": (payload.replace(b'"paid"', b'"open"'), header),
        "old timestamp": _signed(body, at=now - 301),
        "no header": (payload, None),
        "garbage header": (payload, "v1=abc"),
        "other scheme": (payload, header.replace("v1=", "v0=")),
    }
    audits = AuditEntry.all_tenants.count()
    for name, (body_bytes, sig) in refusals.items():
        response = _deliver(body_bytes, sig)
        assert response.status_code == 400, name
        assert "Stripe-Signature does not verify" in response.json()["error"]["message"], name
    assert "tolerance" in _deliver(*refusals["old timestamp"]).json()["error"]["message"]
    stored = Invoice.all_tenants.get(pk=invoice.pk)
    assert stored.state == "finalized" and StripeEvent.objects.count() == 0
    assert AuditEntry.all_tenants.count() == audits

    live = _event("invoice.paid", "in_test_refused", status="paid") | {"livemode": True}
    response = _deliver(*_signed(live))
    assert response.status_code == 400 and "live-mode event" in response.json()["error"]["message"]
    within = _deliver(*_signed(body, at=now - 250))  # inside the 300 s tolerance
    assert within.status_code == 200 and Invoice.all_tenants.get(pk=invoice.pk).state == "paid"


def test_the_tolerance_is_a_setting(clean_ledger, tenant_a, skus, webhook_secret, settings):
    _as_sent(_finalized(tenant_a), "in_test_tol")
    settings.GRYVIA_STRIPE_WEBHOOK_TOLERANCE_S = 30
    response = _deliver(*_signed(_event("invoice.paid", "in_test_tol"), at=int(time.time()) - 60))
    assert response.status_code == 400 and "tolerance" in response.json()["error"]["message"]


def test_without_a_webhook_secret_the_webhook_answers_503(settings):
    settings.GRYVIA_STRIPE_WEBHOOK_SECRET = ""
    response = _deliver(*_signed(_event("invoice.paid", "in_x")))
    assert response.status_code == 503 and "GRYVIA_STRIPE_WEBHOOK_SECRET" in response.json()["error"]["message"]


def test_a_failed_payment_is_recorded_and_emitted_once(clean_ledger, tenant_a, skus, webhook_secret):
    webhooks.endpoint_create(
        actor=ACTOR, tenant=tenant_a, url="https://hooks.example.com/f", events=["invoice.payment_failed"]
    )
    invoice = _as_sent(_finalized(tenant_a), "in_test_failed")
    created = int(time.time()) - 5
    payload, header = _signed(
        _event("invoice.payment_failed", "in_test_failed", created=created, status="open", attempt_count=1)
    )
    response = _deliver(payload, header)
    assert response.status_code == 200 and response.json()["handled"] is True
    failed = Invoice.all_tenants.get(pk=invoice.pk)
    assert failed.state == "finalized" and failed.stripe_payment_failed_at == dt.datetime.fromtimestamp(created, dt.UTC)
    assert failed.stripe_last_error == (
        "payment attempt 1 failed; the tenant can pay at https://invoice.stripe.test/i/in_test_failed"
    )
    row = AuditEntry.all_tenants.get(action="invoice.stripe_payment_failed")
    assert row.actor == "system:stripe" and row.before["stripe_payment_failed_at"] is None
    (sent,) = Event.all_tenants.filter(tenant=tenant_a, type="invoice.payment_failed")
    assert sent.data["number"] == "INV-alpha-000001" and sent.data["stripe_invoice_id"] == "in_test_failed"
    assert sent.data["attempt_count"] == 1 and sent.data["message"] == failed.stripe_last_error

    again = _deliver(payload, header)
    assert again.status_code == 200 and again.json()["duplicate"] is True
    assert Event.all_tenants.filter(type="invoice.payment_failed").count() == 1
    assert AuditEntry.all_tenants.filter(action="invoice.stripe_payment_failed").count() == 1

    retry_at = int(time.time()) + 3600
    _deliver(
        *_signed(_event("invoice.payment_failed", "in_test_failed", attempt_count=2, next_payment_attempt=retry_at))
    )
    assert "attempt 2 failed; Stripe tries again at" in Invoice.all_tenants.get(pk=invoice.pk).stripe_last_error

    paid = _deliver(*_signed(_event("invoice.paid", "in_test_failed", status="paid")))
    assert paid.status_code == 200
    stored = Invoice.all_tenants.get(pk=invoice.pk)
    assert stored.state == "paid" and stored.stripe_last_error == "" and stored.stripe_payment_failed_at is not None


def test_other_events_and_other_invoices_are_acknowledged_and_ignored(clean_ledger, tenant_a, skus, webhook_secret):
    invoice = _as_sent(_finalized(tenant_a), "in_test_ours")
    other = _event("customer.created", "cus_x")
    response = _deliver(*_signed(other))
    assert response.status_code == 200 and response.json()["handled"] is False
    assert "handles invoice.paid and invoice.payment_failed only" in response.json()["outcome"]
    foreign = _deliver(*_signed(_event("invoice.paid", "in_not_gryvias", status="paid")))
    assert foreign.status_code == 200 and foreign.json()["handled"] is False
    assert "no Gryvia invoice" in foreign.json()["outcome"]
    assert Invoice.all_tenants.get(pk=invoice.pk).state == "finalized"
    not_an_invoice = _event("invoice.paid", "in_x")
    not_an_invoice["data"]["object"]["object"] = "charge"
    assert _deliver(*_signed(not_an_invoice)).status_code == 400


def test_stripe_paying_a_void_invoice_is_a_conflict_and_records_nothing(clean_ledger, tenant_a, skus, webhook_secret):
    invoice = _as_sent(_finalized(tenant_a), "in_test_void")
    invoicing.invoice_void(actor=ACTOR, invoice=invoice, reason="sent by mistake")
    response = _deliver(*_signed(_event("invoice.paid", "in_test_void", status="paid")))
    assert response.status_code == 409 and "refund the payment in Stripe" in response.json()["error"]["message"]
    assert Invoice.all_tenants.get(pk=invoice.pk).state == "void" and StripeEvent.objects.count() == 0


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_same_event_delivered_twice_at_once_is_applied_once(tenant_a, skus, webhook_secret):
    from .test_invoice_concurrency import _run_together

    invoice = _as_sent(_finalized(tenant_a), "in_test_race")
    payload, header = _signed(_event("invoice.paid", "in_test_race", status="paid"))
    results: list[stripe_sync.WebhookResult] = []
    work = lambda _n: results.append(stripe_sync.stripe_webhook_receive(payload=payload, signature=header))  # noqa: E731
    assert _run_together(work, [1, 2, 3, 4]) == []
    assert sorted(r.duplicate for r in results) == [False, True, True, True]
    assert Invoice.all_tenants.get(pk=invoice.pk).state == "paid" and StripeEvent.objects.count() == 1
    assert AuditEntry.all_tenants.filter(action="invoice.pay").count() == 1

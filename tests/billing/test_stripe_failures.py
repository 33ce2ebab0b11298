"""Stripe test mode, when sending goes wrong: a lost answer is retried under the same idempotency key, a send cut off
part-way resumes from what Stripe already has without creating anything twice, a draft deleted in Stripe is made again
under new keys, and items Gryvia did not create stop finalization. Test keys only: any other key is refused before a
request leaves (and by the system check, which also refuses unsafe API addresses and webhook secrets), a key Stripe
refuses is reported without any of it, and an answer in live mode is refused.

Stripe's side (localstripe and an HTTP-level fake, on loopback: nothing leaves the machine) and the invoice helpers
are in tests/billing/stripe_fakes.py, the fixtures (`localstripe`, `fake`, `skus`) in tests/billing/conftest.py.
"""

from __future__ import annotations

import pytest

from apps.billing import checks
from apps.billing.models import Invoice
from apps.billing.services import stripe_sync
from tests.factories import ACTOR

from .stripe_fakes import KEY, STRIPE_MARKS, _finalized, _send

pytestmark = STRIPE_MARKS


# --- retries and resuming ---------------------------------------------------------------------------------------------


def test_a_lost_answer_is_retried_with_the_same_key_and_nothing_is_created_twice(
    clean_ledger, tenant_a, skus, fake, settings
):
    settings.GRYVIA_STRIPE_MAX_RETRIES = 1
    fake.lose_answer_once("POST", "/v1/invoiceitems")
    sent = stripe_sync.invoice_send_to_stripe(actor=ACTOR, invoice=_finalized(tenant_a))
    assert sent.stripe_status == "open"
    items = fake.posts("/v1/invoiceitems")
    assert [r.idempotency_key.rsplit("-", 1)[-1] for r in items] == ["1", "1", "2"]  # the library retried item 1
    assert [r.replayed for r in items] == [False, True, False]
    assert len(fake.items) == 2 and fake.invoices[sent.stripe_invoice_id]["total"] == 990


def test_a_send_cut_off_after_stripe_created_the_invoice_resumes_without_a_second_one(
    clean_ledger, tenant_a, platform_client, skus, fake
):
    invoice = _finalized(tenant_a)
    fake.lose_answer_once("POST", "/v1/invoices")
    failed = _send(platform_client, invoice)
    assert failed.status_code == 502, failed.content
    assert "Sending again is safe" in failed.json()["error"]["message"]
    stored = Invoice.all_tenants.get(pk=invoice.pk)
    assert stored.stripe_invoice_id == "" and "create an invoice" in stored.stripe_last_error
    assert stored.stripe_sent_at is None and len(fake.invoices) == 1  # Stripe made it; Gryvia never heard back

    resumed = _send(platform_client, invoice)
    assert resumed.status_code == 200, resumed.content
    (stripe_id,) = fake.invoices
    assert resumed.json()["stripe"]["invoice_id"] == stripe_id and resumed.json()["stripe"]["last_error"] == ""
    creates = fake.posts("/v1/invoices")
    assert len(creates) == 2 and creates[0].idempotency_key == creates[1].idempotency_key and creates[1].replayed
    customers = fake.posts("/v1/customers")
    assert len(customers) == 1, "the customer id was kept from the first attempt"
    assert len(fake.items) == 2 and fake.invoices[stripe_id]["status"] == "open"


def test_a_send_cut_off_between_items_resumes_from_the_items_stripe_has(clean_ledger, tenant_a, skus, fake):
    invoice = _finalized(tenant_a)
    fake.lose_answer_once("POST", "/v1/invoiceitems")
    with pytest.raises(stripe_sync.StripeCallFailed, match="create an invoice item"):
        stripe_sync.invoice_send_to_stripe(actor=ACTOR, invoice=invoice)
    assert Invoice.all_tenants.get(pk=invoice.pk).stripe_invoice_id in fake.invoices
    assert len(fake.items) == 1

    sent = stripe_sync.invoice_send_to_stripe(actor=ACTOR, invoice=invoice)
    assert (
        sent.stripe_status == "open" and len(fake.items) == 2 and fake.invoices[sent.stripe_invoice_id]["total"] == 990
    )
    items = fake.posts("/v1/invoiceitems")
    assert [r.idempotency_key.rsplit("-", 1)[-1] for r in items] == ["1", "2"], "item 1 was found, not sent again"
    listed = [r for r in fake.requests if r.method == "GET" and r.path == "/v1/invoiceitems"]
    assert [r.query["invoice"] for r in listed] == [sent.stripe_invoice_id]


def test_a_draft_deleted_in_stripe_is_made_again_under_new_keys(clean_ledger, tenant_a, skus, fake):
    invoice = _finalized(tenant_a)
    fake.refuse_once("POST", "/v1/invoiceitems")
    with pytest.raises(stripe_sync.StripeCallFailed):
        stripe_sync.invoice_send_to_stripe(actor=ACTOR, invoice=invoice)
    first = Invoice.all_tenants.get(pk=invoice.pk)
    del fake.invoices[first.stripe_invoice_id]  # deleted in the dashboard

    sent = stripe_sync.invoice_send_to_stripe(actor=ACTOR, invoice=invoice)
    assert sent.stripe_invoice_id != first.stripe_invoice_id and sent.stripe_ref != first.stripe_ref
    assert sent.stripe_customer_id == first.stripe_customer_id and fake.invoices[sent.stripe_invoice_id]["total"] == 990
    assert [r.idempotency_key for r in fake.posts("/v1/invoices")] == [
        f"gryvia-inv-{first.stripe_ref}-invoice",
        f"gryvia-inv-{sent.stripe_ref}-invoice",
    ]


def test_items_gryvia_did_not_create_stop_finalization(clean_ledger, tenant_a, skus, fake):
    invoice = _finalized(tenant_a)
    fake.refuse_once("POST", "/v1/invoiceitems")
    with pytest.raises(stripe_sync.StripeCallFailed, match="HTTP 429"):
        stripe_sync.invoice_send_to_stripe(actor=ACTOR, invoice=invoice)
    stripe_id = Invoice.all_tenants.get(pk=invoice.pk).stripe_invoice_id
    fake.add_item(stripe_id, 100)
    with pytest.raises(stripe_sync.StripeCallFailed, match=r"totals 1090 usd .* not 990 usd"):
        stripe_sync.invoice_send_to_stripe(actor=ACTOR, invoice=invoice)
    assert fake.invoices[stripe_id]["status"] == "draft" and not fake.posts(rf"/v1/invoices/{stripe_id}/finalize")
    assert "Gryvia did not create" in Invoice.all_tenants.get(pk=invoice.pk).stripe_last_error


# --- test keys only ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "kind"),
    [
        ("sk_live_51HxxxxREALLYLIVE", "live-mode secret key"),
        ("rk_live_51HxxxxRESTRICTED", "live-mode restricted key"),
        ("rk_test_51HxxxxRESTRICTED", "restricted key"),
        ("pk_test_51HxxxxPUBLISHABLE", "publishable key"),
        ("not-a-key-at-all", "not a Stripe secret key"),
        ("sk_test_abc-def 0", "not a well-formed test-mode secret key"),
    ],
)
def test_a_key_that_is_not_a_test_secret_key_is_refused(
    clean_ledger, tenant_a, platform_client, skus, fake, settings, key, kind
):
    settings.GRYVIA_STRIPE_API_KEY = key
    invoice = _finalized(tenant_a)
    response = _send(platform_client, invoice)
    assert response.status_code == 503
    message = response.json()["error"]["message"]
    assert kind in message and "sk_test_" in message and key not in message
    assert fake.requests == [], "nothing reached Stripe"
    assert Invoice.all_tenants.get(pk=invoice.pk).stripe_ref == ""
    errors = checks.stripe_settings()
    assert [e.id for e in errors] == ["billing.E001"] and kind in errors[0].msg and key not in errors[0].msg


def test_without_a_key_sending_answers_503(clean_ledger, tenant_a, platform_client, skus, settings):
    settings.GRYVIA_STRIPE_API_KEY = ""
    response = _send(platform_client, _finalized(tenant_a))
    assert response.status_code == 503 and "GRYVIA_STRIPE_API_KEY" in response.json()["error"]["message"]
    assert checks.stripe_settings() == []


def test_the_system_check_refuses_unsafe_addresses_and_secrets(settings):
    settings.GRYVIA_STRIPE_API_KEY = KEY
    for base in ("https://api.stripe.com", "http://127.0.0.1:8420", "http://localhost:12111", "http://[::1]:9"):
        settings.GRYVIA_STRIPE_API_BASE = base
        assert checks.stripe_settings() == [], base
    for base in ("http://stripe.internal:8420", "ftp://api.stripe.com", "https://u:p@api.stripe.com", "https://x/v1"):
        settings.GRYVIA_STRIPE_API_BASE = base
        assert [e.id for e in checks.stripe_settings()] == ["billing.E002"], base
    settings.GRYVIA_STRIPE_API_BASE = "https://api.stripe.com"
    settings.GRYVIA_STRIPE_WEBHOOK_SECRET = "not-a-secret"
    assert [e.id for e in checks.stripe_settings()] == ["billing.E003"]


def test_a_key_stripe_refuses_is_reported_without_any_of_it(clean_ledger, tenant_a, platform_client, skus, fake):
    fake.accept_only = "sk_test_theotherkey0000"
    invoice = _finalized(tenant_a)
    response = _send(platform_client, invoice)
    assert response.status_code == 502
    message = response.json()["error"]["message"]
    stored = Invoice.all_tenants.get(pk=invoice.pk).stripe_last_error
    assert "HTTP 401: Invalid API Key provided: sk_test_…" in message and stored in message
    assert KEY[-4:] not in message and KEY[8:] not in stored


def test_an_answer_in_live_mode_is_refused(clean_ledger, tenant_a, skus, fake):
    fake.livemode = True
    with pytest.raises(stripe_sync.StripeCallFailed, match="live mode"):
        stripe_sync.invoice_send_to_stripe(actor=ACTOR, invoice=_finalized(tenant_a))

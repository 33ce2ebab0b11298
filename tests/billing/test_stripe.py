"""Stripe test mode: a finalized invoice sent to Stripe (customer found or created by metadata, a draft invoice, its
items, finalized there), retries that create nothing twice, test keys only, and the signed webhook (`invoice.paid`
marks the invoice Paid, `invoice.payment_failed` is recorded; each event once).

Customers live in localstripe, run in this process on loopback; invoices and items, which localstripe cannot do for
one-off invoices, in the HTTP-level fake of tests/billing/stripe_fakes.py (which forwards customer calls to
localstripe). Nothing leaves the machine.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import itertools
import json
import re
import time
from decimal import Decimal

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from apps.billing import checks, invoicing, stripe_sync
from apps.billing.models import Invoice, StripeEvent
from apps.core.models import AuditEntry
from apps.webhooks import services as webhooks
from apps.webhooks.models import Event
from tests.cli.conftest import Run, cli  # noqa: F401 - the fixture
from tests.factories import ACTOR, client_for, make_key, make_tenant

from .conftest import make_sku
from .invoice_tools import OCT, SEPT, event, ingest
from .stripe_fakes import FakeStripe, LocalStripe

pytestmark = [
    pytest.mark.django_db,
    # localstripe registers plain functions as aiohttp handlers, which aiohttp deprecates.
    pytest.mark.filterwarnings("ignore:Bare functions are deprecated:DeprecationWarning"),
]
KEY = "sk_test_gryvia0123456789"
SECRET = "whsec_gryviatestsecret0123456789"
WEBHOOK = "/api/v1/billing/stripe/webhook/"
NOV = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
AUG = dt.datetime(2026, 8, 1, tzinfo=dt.UTC)
_events = itertools.count(1)


@pytest.fixture(scope="session")
def localstripe_server():
    server = LocalStripe().start()
    yield server
    server.stop()


@pytest.fixture
def localstripe(localstripe_server, settings):
    localstripe_server.reset()
    settings.GRYVIA_STRIPE_API_KEY = KEY
    settings.GRYVIA_STRIPE_API_BASE = localstripe_server.url
    settings.GRYVIA_STRIPE_MAX_RETRIES = 0
    settings.GRYVIA_STRIPE_TIMEOUT_S = 5
    yield localstripe_server
    localstripe_server.reset()


@pytest.fixture
def fake(localstripe, settings):
    """The HTTP fake in front of localstripe, and the settings pointing at it."""
    server = FakeStripe(upstream=localstripe)
    settings.GRYVIA_STRIPE_API_BASE = server.url
    settings.GRYVIA_STRIPE_WEBHOOK_SECRET = SECRET
    yield server
    server.stop()


@pytest.fixture
def skus(db):
    make_sku()
    make_sku("l40s", gpu_type="L40S", rate="1.2")


def _finalized(tenant, start=SEPT, end=OCT) -> Invoice:
    """A finalized invoice of [start, end) with two lines: 2 H100 for 1.5 h (7.50) and 4 L40S for 0.5 h (2.40)."""
    ingest(tenant, event(start + dt.timedelta(days=2), 5400, gpus=2))
    ingest(tenant, event(start + dt.timedelta(days=3), 1800, gpu_type="L40S", gpus=4))
    draft = invoicing.invoice_create(actor=ACTOR, tenant=tenant, start=start, end=end)
    return invoicing.invoice_finalize(actor=ACTOR, invoice=draft)


def _send(client, invoice: Invoice):
    return client.post(f"/api/v1/invoices/{invoice.pk}/stripe/", format="json")


def _keys(fake: FakeStripe) -> list[str | None]:
    return [r.idempotency_key for r in fake.posts()]


# --- sending -------------------------------------------------------------------------------------------------------


def test_send_creates_customer_items_invoice_and_finalizes(
    clean_ledger, tenant_a, platform_client, client_a, skus, fake, localstripe
):
    invoice = _finalized(tenant_a)
    response = _send(platform_client, invoice)
    assert response.status_code == 200, response.content
    body = response.json()
    stripe_id = body["stripe"]["invoice_id"]
    assert body["state"] == "finalized" and body["stripe"]["status"] == "open"
    assert body["stripe"]["hosted_url"] == f"https://invoice.stripe.test/i/{stripe_id}"
    assert body["stripe"]["sent_at"] and body["stripe"]["last_error"] == ""

    # The customer is localstripe's, found by nothing and so created, with the tenant in its metadata.
    (customer,) = localstripe.customers()
    assert customer["id"] == body["stripe"]["customer_id"] and customer["metadata"] == {"gryvia_tenant": "alpha"}
    assert customer["name"] == "alpha" and customer["livemode"] is False

    # The Stripe invoice: sent for payment, only our items, in cents, finalized.
    remote = fake.invoices[stripe_id]
    assert (remote["customer"], remote["currency"], remote["collection_method"]) == (
        customer["id"],
        "usd",
        "send_invoice",
    )
    assert remote["days_until_due"] == 30 and remote["status"] == "open" and remote["total"] == 990
    assert remote["metadata"]["gryvia_invoice"] == str(invoice.pk)
    assert remote["metadata"]["gryvia_number"] == "INV-alpha-000001" and remote["metadata"]["gryvia_tenant"] == "alpha"
    (create,) = fake.posts("/v1/invoices")
    assert create.params["pending_invoice_items_behavior"] == "exclude" and create.params["auto_advance"] == "false"
    items = sorted(fake.items.values(), key=lambda i: i["metadata"]["gryvia_line"])
    assert [(i["amount"], i["currency"], i["invoice"], i["metadata"]["gryvia_line"]) for i in items] == [
        (750, "usd", stripe_id, "1"),
        (240, "usd", stripe_id, "2"),
    ]
    assert items[0]["description"].startswith("External usage, SKU h100 (3.000000 GPU-hours at 2.500000/h, 1 usage")

    # Every write carried a key derived from the invoice; the key went to Stripe only as the credential.
    ref = Invoice.all_tenants.get(pk=invoice.pk).stripe_ref
    assert _keys(fake) == [
        f"gryvia-inv-{ref}-customer",
        f"gryvia-inv-{ref}-invoice",
        f"gryvia-inv-{ref}-item-1",
        f"gryvia-inv-{ref}-item-2",
        f"gryvia-inv-{ref}-finalize",
    ]
    assert {r.authorization for r in fake.requests} == {f"Bearer {KEY}"}

    row = AuditEntry.all_tenants.get(action="invoice.stripe_send")
    assert row.before["stripe_invoice_id"] == "" and row.after["stripe_invoice_id"] == stripe_id
    assert row.after["stripe_status"] == "open" and row.tenant_id == tenant_a.pk
    assert client_a.get(f"/api/v1/invoices/{invoice.pk}/").json()["stripe"]["invoice_id"] == stripe_id

    again = _send(platform_client, invoice)
    assert again.status_code == 409 and stripe_id in again.json()["error"]["message"]
    assert len(fake.posts()) == 5


def test_a_tenants_customer_is_found_by_metadata_and_kept_up_to_date(
    clean_ledger, tenant_a, skus, fake, localstripe, settings
):
    """On localstripe (no search: the list is filtered by metadata): an existing customer is reused and renamed;
    the next invoice goes to the same customer; another tenant gets its own."""
    from apps.tenants import services as tenants

    with stripe_sync.StripeGateway(stripe_sync.stripe_config()) as gateway:
        existing = gateway.customer_create(
            name="old name", description="made earlier", metadata={"gryvia_tenant": "alpha"}, key="earlier-1"
        )
        gateway.customer_create(name="someone", description="", metadata={"gryvia_tenant": "alphabet"}, key="e-2")
    tenants.tenant_update(actor=ACTOR, tenant=tenant_a, display_name="Alpha Labs")
    del fake.requests[:]
    first = stripe_sync.invoice_send_to_stripe(actor=ACTOR, invoice=_finalized(tenant_a))
    assert first.stripe_customer_id == existing["id"]
    assert not fake.posts("/v1/customers"), "no customer created"
    assert [r.path for r in fake.requests][:2] == ["/v1/customers/search", "/v1/customers"]  # no search: the list
    (rename,) = fake.posts(f"/v1/customers/{existing['id']}")
    assert rename.params == {"name": "Alpha Labs"}
    assert {c["id"]: c["name"] for c in localstripe.customers()}[existing["id"]] == "Alpha Labs"

    del fake.requests[:]
    second = stripe_sync.invoice_send_to_stripe(actor=ACTOR, invoice=_finalized(tenant_a, OCT, NOV))
    assert second.stripe_customer_id == existing["id"] and second.stripe_invoice_id != first.stripe_invoice_id
    assert fake.requests[0].path == f"/v1/customers/{existing['id']}", "the customer of its earlier invoice, read"
    assert not [r for r in fake.requests if r.path == "/v1/customers/search"]

    bravo = make_tenant("bravo")
    third = stripe_sync.invoice_send_to_stripe(actor=ACTOR, invoice=_finalized(bravo))
    assert third.stripe_customer_id not in (existing["id"], "")
    assert sorted(c["metadata"]["gryvia_tenant"] for c in localstripe.customers()) == ["alpha", "alphabet", "bravo"]

    # A customer deleted in Stripe is not used again: the tenant gets a new one.
    with stripe_sync.StripeGateway(stripe_sync.stripe_config()) as gateway:
        gateway.client.v1.customers.delete(existing["id"])
    fourth = stripe_sync.invoice_send_to_stripe(actor=ACTOR, invoice=_finalized(tenant_a, AUG, SEPT))
    assert fourth.stripe_customer_id not in (existing["id"], "")
    assert {c["id"]: c["metadata"]["gryvia_tenant"] for c in localstripe.customers()}[
        fourth.stripe_customer_id
    ] == "alpha"


def test_stripes_customer_search_is_used_where_the_api_has_it(clean_ledger, tenant_a, skus, localstripe, settings):
    fake = FakeStripe(upstream=localstripe, search=True)
    settings.GRYVIA_STRIPE_API_BASE = fake.url
    try:
        with stripe_sync.StripeGateway(stripe_sync.stripe_config()) as gateway:
            existing = gateway.customer_create(
                name="alpha", description="", metadata={"gryvia_tenant": "alpha"}, key="earlier-1"
            )
        sent = stripe_sync.invoice_send_to_stripe(actor=ACTOR, invoice=_finalized(tenant_a))
    finally:
        fake.stop()
    assert sent.stripe_customer_id == existing["id"]
    searches = [r for r in fake.requests if r.path == "/v1/customers/search"]
    assert [r.query["query"] for r in searches] == ["metadata['gryvia_tenant']:'alpha'"]
    assert not [r for r in fake.requests if r.method == "GET" and r.path == "/v1/customers"], "no listing"


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


def test_amounts_are_sent_in_stripes_minor_units(clean_ledger, tenant_a, fake):
    make_sku("a100-jpy", gpu_type="A100", rate="350", currency="JPY")
    ingest(tenant_a, event(SEPT, 3600, gpu_type="A100"))
    draft = invoicing.invoice_create(actor=ACTOR, tenant=tenant_a, start=SEPT, end=OCT)
    sent = stripe_sync.invoice_send_to_stripe(
        actor=ACTOR, invoice=invoicing.invoice_finalize(actor=ACTOR, invoice=draft)
    )
    ((item),) = fake.items.values()
    assert (item["amount"], item["currency"]) == (350, "jpy") and fake.invoices[sent.stripe_invoice_id]["total"] == 350
    assert stripe_sync.stripe_amount(Decimal("12.50"), "USD") == 1250
    assert stripe_sync.stripe_amount(Decimal("1.250"), "KWD") == 1250
    assert stripe_sync.stripe_amount(Decimal("100"), "ISK") == 10000
    with pytest.raises(invoicing.InvoiceConflict, match="units of 0.010"):
        stripe_sync.stripe_amount(Decimal("1.255"), "KWD")


def test_only_a_finalized_invoice_is_sent_by_a_platform_admin(
    clean_ledger, tenant_a, platform_client, client_a, skus, fake
):
    ingest(tenant_a, event(SEPT, 3600))
    draft = invoicing.invoice_create(actor=ACTOR, tenant=tenant_a, start=SEPT, end=OCT)
    response = _send(platform_client, draft)
    assert response.status_code == 409 and "only a finalized invoice" in response.json()["error"]["message"]
    finalized = invoicing.invoice_finalize(actor=ACTOR, invoice=draft)
    assert _send(client_a, finalized).status_code == 403
    assert _send(client_for(make_key(tenant_a, ["billing:read"])), finalized).status_code == 403
    void = invoicing.invoice_void(actor=ACTOR, invoice=finalized, reason="wrong period")
    assert _send(platform_client, void).status_code == 409
    assert fake.requests == [] and not AuditEntry.all_tenants.filter(action="invoice.stripe_send").exists()


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


# --- the webhook ---------------------------------------------------------------------------------------------------


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


def test_a_zero_total_invoice_is_paid_when_stripe_finalizes_it(clean_ledger, tenant_a, fake):
    make_sku("free", gpu_type="T4", rate="0")
    ingest(tenant_a, event(SEPT, 3600, gpu_type="T4"))
    draft = invoicing.invoice_create(actor=ACTOR, tenant=tenant_a, start=SEPT, end=OCT)
    sent = stripe_sync.invoice_send_to_stripe(
        actor=ACTOR, invoice=invoicing.invoice_finalize(actor=ACTOR, invoice=draft)
    )
    assert (sent.stripe_status, sent.state, sent.payment_reference) == ("paid", "paid", sent.stripe_invoice_id)


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


# --- the CLI -------------------------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_gryvia_invoices_send(live_server, cli: Run, skus, fake):  # noqa: F811
    tenant = make_tenant("cli-stripe")
    platform = make_key(tenant, ["admin"], platform=True)
    invoice = _finalized(tenant)
    result = cli("--url", live_server.url, "--api-key", platform, "invoices", "send", invoice.number)
    assert result.code == 0, result.err
    stripe_id = Invoice.all_tenants.get(pk=invoice.pk).stripe_invoice_id
    assert re.search(rf"invoice {invoice.number} sent to Stripe as {stripe_id} \(open\)", result.out)
    assert f"payable at https://invoice.stripe.test/i/{stripe_id}" in result.out
    again = cli("--url", live_server.url, "--api-key", platform, "invoices", "send", invoice.number)
    assert again.code == 1 and "was sent to Stripe" in again.err

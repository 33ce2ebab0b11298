"""Stripe test mode, sending: a finalized invoice sent to Stripe (customer found or created by metadata and kept up to
date, a draft invoice, its items in Stripe's minor units, finalized there), by a platform admin only, through the API
and `gryvia invoices send`; a zero-total invoice comes back paid. What happens when a send goes wrong, and which keys
are accepted, is in test_stripe_failures.py; the webhook in test_stripe_webhook.py.

Stripe's side (localstripe and an HTTP-level fake, on loopback: nothing leaves the machine) and the invoice helpers
are in tests/billing/stripe_fakes.py, the fixtures (`localstripe`, `fake`, `skus`) in tests/billing/conftest.py.
"""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal

import pytest

from apps.billing.models import Invoice
from apps.billing.services import invoicing, stripe_sync
from apps.core.models import AuditEntry
from tests.cli.conftest import Run, cli  # noqa: F401 - the fixture
from tests.factories import ACTOR, client_for, make_key, make_tenant

from .conftest import make_sku
from .invoice_tools import OCT, SEPT, event, ingest
from .stripe_fakes import KEY, STRIPE_MARKS, FakeStripe, _finalized, _send

pytestmark = STRIPE_MARKS
NOV = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
AUG = dt.datetime(2026, 8, 1, tzinfo=dt.UTC)


def _keys(fake: FakeStripe) -> list[str | None]:
    return [r.idempotency_key for r in fake.posts()]


# --- sending ----------------------------------------------------------------------------------------------------------


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


def test_a_zero_total_invoice_is_paid_when_stripe_finalizes_it(clean_ledger, tenant_a, fake):
    make_sku("free", gpu_type="T4", rate="0")
    ingest(tenant_a, event(SEPT, 3600, gpu_type="T4"))
    draft = invoicing.invoice_create(actor=ACTOR, tenant=tenant_a, start=SEPT, end=OCT)
    sent = stripe_sync.invoice_send_to_stripe(
        actor=ACTOR, invoice=invoicing.invoice_finalize(actor=ACTOR, invoice=draft)
    )
    assert (sent.stripe_status, sent.state, sent.payment_reference) == ("paid", "paid", sent.stripe_invoice_id)


# --- the CLI ----------------------------------------------------------------------------------------------------------


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

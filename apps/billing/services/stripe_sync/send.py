"""Sending a finalized Gryvia invoice to Stripe (test mode): the tenant's customer, a draft Stripe invoice, one
item per line, a check of Stripe's total against Gryvia's, then Stripe's finalization (which makes it payable at
its hosted page).

No database transaction is open during a Stripe call. Progress (the customer id, the Stripe invoice id) is written
as soon as it is known, and every write to Stripe has an idempotency key derived from the invoice
(`gryvia-inv-<ref>-…`, `ref` a random id stored on the invoice at the first attempt), so sending again after a
crash or an error resumes: Stripe answers a repeated call from its idempotency record, and an interrupted send's
items are found on the Stripe invoice and not created again.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from apps.core import scopes as S
from apps.core.audit import audit_record, snapshot
from apps.core.principal import Principal, system

from ...choices import InvoiceState
from ...models import Invoice, InvoiceLine
from ..invoicing import InvoiceConflict, invoice_mark_paid, money_text
from .config import stripe_config
from .gateway import StripeCallFailed, StripeGateway

TENANT_KEY = "gryvia_tenant"
# Who Stripe-driven changes are audited as (a paid invoice seen when sending it, the webhook).
STRIPE_ACTOR = system("stripe")
STRIPE_FIELDS = (
    "stripe_customer_id",
    "stripe_invoice_id",
    "stripe_status",
    "stripe_hosted_url",
    "stripe_sent_at",
    "stripe_payment_failed_at",
    "stripe_last_error",
)
AUDIT_FIELDS = ("state", "number", *STRIPE_FIELDS)
FINAL_STATUSES = ("open", "paid", "uncollectible", "void")

# Stripe's currency exponents where they differ from 2 (https://docs.stripe.com/currencies#zero-decimal). ISK is
# zero-decimal but Stripe takes it in hundredths; three-decimal amounts must end in 0.
ZERO_DECIMAL = frozenset("BIF CLP DJF GNF JPY KMF KRW MGA PYG RWF UGX VND VUV XAF XOF XPF".split())
THREE_DECIMAL = frozenset(("BHD", "JOD", "KWD", "OMR", "TND"))


def _moment(value: Any, fallback: dt.datetime) -> dt.datetime:
    return dt.datetime.fromtimestamp(value, dt.UTC) if isinstance(value, int) and value > 0 else fallback


def paid_moment(stripe_invoice: Any, now: dt.datetime) -> dt.datetime:
    """When Stripe says the invoice was paid (never later than now: the lifecycle refuses a future payment)."""
    transitions = stripe_invoice.get("status_transitions") or {}
    return min(_moment(transitions.get("paid_at"), now), now)


def stripe_amount(amount: Decimal, currency: str) -> int:
    """An amount in the integer minor units Stripe takes: 12.50 USD -> 1250, 13 JPY -> 13, 1.250 KWD -> 1250.

    Raises:
        InvoiceConflict: the amount has more decimals than Stripe takes in that currency.
    """
    currency = currency.upper()
    exponent = 0 if currency in ZERO_DECIMAL else 3 if currency in THREE_DECIMAL else 2
    scaled = Decimal(amount).scaleb(exponent)
    if scaled != scaled.to_integral_value() or (exponent == 3 and scaled % 10):
        raise InvoiceConflict(
            f"{amount:f} {currency} cannot be sent to Stripe: it takes {currency} amounts in units of "
            f"{Decimal(10 if exponent == 3 else 1).scaleb(-exponent):f}"
        )
    return int(scaled)


def idempotency_key(invoice: Invoice, step: str) -> str:
    """`gryvia-inv-<ref>-<step>`: the same for every attempt to send this invoice, unique to it."""
    return f"gryvia-inv-{invoice.stripe_ref}-{step}"


def _require_platform(actor: Principal) -> None:
    if not (actor.is_platform and S.ADMIN in actor.platform_scopes):
        raise PermissionError("only platform staff with admin can send invoices to Stripe")


def _audit(actor: Principal, action: str, invoice: Invoice, before: dict[str, Any]) -> None:
    audit_record(
        actor=actor,
        action=action,
        obj=invoice,
        object_type="invoice",
        object_id=str(invoice.pk),
        tenant_id=invoice.tenant_id,
        tenant_slug=invoice.tenant.slug,
        before=before,
        after=snapshot(invoice, AUDIT_FIELDS),
    )


def _locked(invoice: Invoice) -> Invoice:
    return Invoice.all_tenants.select_for_update(of=("self",)).select_related("tenant").get(pk=invoice.pk)


def _store(invoice: Invoice, **fields: Any) -> None:
    """Record progress at once (its own statement; no transaction is held across Stripe calls)."""
    Invoice.all_tenants.filter(pk=invoice.pk).update(**fields)
    for key, value in fields.items():
        setattr(invoice, key, value)


@transaction.atomic
def _prepare(invoice: Invoice) -> Invoice:
    """Check that the invoice can be sent, and give it the base of its idempotency keys once."""
    invoice = _locked(invoice)
    if invoice.state != InvoiceState.FINALIZED:
        raise InvoiceConflict(
            f"invoice {invoice} is {invoice.state}: only a finalized invoice can be sent to Stripe"
            + (" (finalize it first)" if invoice.state == InvoiceState.DRAFT else "")
        )
    if invoice.stripe_sent_at is not None:
        raise InvoiceConflict(
            f"invoice {invoice} was sent to Stripe at {invoice.stripe_sent_at.isoformat()} as "
            f"{invoice.stripe_invoice_id} ({invoice.stripe_status}); it is payable at {invoice.stripe_hosted_url}"
        )
    if not invoice.stripe_ref:
        _store(invoice, stripe_ref=secrets.token_hex(16))
    return invoice


def _customer(gateway: StripeGateway, invoice: Invoice) -> str:
    """The tenant's Stripe customer: the one its earlier invoices went to, else the one whose metadata names the
    tenant (Stripe's search lags behind writes, hence the first), else a new one. Renamed with the tenant."""
    tenant = invoice.tenant
    name = tenant.display_name or tenant.slug
    known = (
        Invoice.all_tenants.filter(tenant=tenant)
        .exclude(stripe_customer_id="")
        .order_by(F("stripe_sent_at").desc(nulls_last=True), "-id")
        .values_list("stripe_customer_id", flat=True)
        .first()
    )
    customer = gateway.customer_retrieve(known) if known else None
    if customer is not None and (customer.get("metadata") or {}).get(TENANT_KEY) != tenant.slug:
        customer = None
    if customer is None:
        found = gateway.customers_with_metadata(TENANT_KEY, tenant.slug)
        customer = min(found, key=lambda c: (c.get("created") or 0, c["id"])) if found else None  # the oldest
    if customer is None:
        return gateway.customer_create(
            name=name,
            description=f"Gryvia tenant {tenant.slug}",
            metadata={TENANT_KEY: tenant.slug},
            key=idempotency_key(invoice, "customer"),
        )["id"]
    if customer.get("name") != name:
        step = f"customer-name-{hashlib.sha256(name.encode()).hexdigest()[:12]}"  # a later rename: another key
        gateway.customer_rename(customer["id"], name=name, key=idempotency_key(invoice, step))
    return customer["id"]


def _metadata(invoice: Invoice) -> dict[str, str]:
    return {
        "gryvia_invoice": str(invoice.pk),
        "gryvia_number": invoice.number or "",
        TENANT_KEY: invoice.tenant.slug,
        "gryvia_period_start": invoice.period_start.isoformat(),
        "gryvia_period_end": invoice.period_end.isoformat(),
    }


def _item_description(line: InvoiceLine) -> str:
    details = [f"{line.entries} usage record{'s' if line.entries != 1 else ''}"]
    if line.gpu_hours:
        details.insert(0, f"{line.gpu_hours:f} GPU-hours" + (f" at {line.rate:f}/h" if line.rate is not None else ""))
    if line.input_tokens or line.output_tokens:
        details.insert(0, f"{line.input_tokens} input and {line.output_tokens} output tokens")
    return f"{line.description} ({', '.join(details)})"[:500]


def _send(
    gateway: StripeGateway, invoice: Invoice, lines: list[tuple[InvoiceLine, int]], due_days: int
) -> dict[str, Any]:
    """The Stripe calls, resuming what an earlier attempt did. Returns Stripe's finalized invoice."""
    if not invoice.stripe_customer_id:
        _store(invoice, stripe_customer_id=_customer(gateway, invoice))
    remote = gateway.invoice_find(invoice.stripe_invoice_id) if invoice.stripe_invoice_id else None
    resumed = remote is not None
    if invoice.stripe_invoice_id and remote is None:
        # The draft an earlier attempt made was deleted in Stripe: start over with new keys (a replay of the old
        # ones would answer with the deleted objects). The customer stays.
        _store(invoice, stripe_invoice_id="", stripe_status="", stripe_ref=secrets.token_hex(16))
    if remote is None:
        remote = gateway.invoice_create(
            customer=invoice.stripe_customer_id,
            currency=invoice.currency.lower(),
            description=f"Gryvia usage {invoice.number}, {invoice.period_start:%Y-%m-%d} to "
            f"{invoice.period_end:%Y-%m-%d} (exclusive)",
            days_until_due=due_days,
            metadata=_metadata(invoice),
            key=idempotency_key(invoice, "invoice"),
        )
        _store(invoice, stripe_invoice_id=remote["id"], stripe_status=remote["status"])
    if remote["status"] == "void":
        raise InvoiceConflict(
            f"Stripe invoice {remote['id']} of {invoice} was voided in Stripe: Gryvia does not send it again"
        )
    if remote["status"] == "draft":
        # An interrupted attempt's items are on the Stripe invoice already (also after its idempotency records expire).
        items = gateway.invoice_items(remote["id"]) if resumed else []
        present = {(item.get("metadata") or {}).get("gryvia_line") for item in items}
        for line, amount in lines:
            if str(line.position) in present:
                continue
            gateway.invoice_item_create(
                customer=invoice.stripe_customer_id,
                invoice=remote["id"],
                currency=invoice.currency.lower(),
                amount=amount,
                description=_item_description(line),
                metadata={"gryvia_invoice": str(invoice.pk), "gryvia_line": str(line.position)},
                key=idempotency_key(invoice, f"item-{line.position}"),
            )
        remote = gateway.invoice_retrieve(remote["id"])
    expected = sum(amount for _line, amount in lines)
    if remote.get("total") != expected or (remote.get("currency") or "").upper() != invoice.currency:
        raise StripeCallFailed(
            f"Stripe invoice {remote['id']} totals {remote.get('total')} {remote.get('currency')} (minor units), not "
            f"{expected} {invoice.currency.lower()} as {invoice} does: it holds items Gryvia did not create; delete "
            "them in Stripe (or void that invoice there) and send again"
        )
    if remote["status"] == "draft":
        remote = gateway.invoice_finalize(remote["id"], key=idempotency_key(invoice, "finalize"))
    return remote


def invoice_send_to_stripe(*, actor: Principal, invoice: Invoice, now: dt.datetime | None = None) -> Invoice:
    """Send a Finalized invoice to Stripe (test mode): customer, invoice, one item per line, finalized there, so the
    tenant can pay it at Stripe's hosted page. Platform admins only; audited (`invoice.stripe_send`).

    Sending again after a failure resumes and creates nothing twice. An invoice already sent is a conflict.
    A Stripe invoice of total 0 is paid on finalization; the Gryvia invoice is then marked paid too.

    Raises:
        PermissionError: not a platform admin. StripeUnavailable: no key, or a key that is not a test key (nothing is
        sent). InvoiceConflict: not finalized, already sent, or an amount Stripe cannot take. StripeCallFailed: Stripe
        refused or could not be reached (recorded in `stripe_last_error`; send again).
    """
    _require_platform(actor)
    config = stripe_config()
    invoice = _prepare(invoice)
    before = snapshot(invoice, AUDIT_FIELDS)  # what the audit row shows as before: ahead of any Stripe call
    lines = [(line, stripe_amount(line.amount, invoice.currency)) for line in invoice.lines.order_by("position")]
    try:
        with StripeGateway(config) as gateway:
            remote = _send(gateway, invoice, lines, config.days_until_due)
    except (StripeCallFailed, InvoiceConflict) as exc:
        _store(invoice, stripe_last_error=str(exc)[:500])
        raise
    return _record_sent(actor=actor, invoice=invoice, remote=remote, before=before, now=now or timezone.now())


@transaction.atomic
def _record_sent(
    *, actor: Principal, invoice: Invoice, remote: dict[str, Any], before: dict[str, Any], now: dt.datetime
) -> Invoice:
    invoice = _locked(invoice)
    _store(
        invoice,
        stripe_invoice_id=remote["id"],
        stripe_status=remote["status"],
        stripe_hosted_url=(remote.get("hosted_invoice_url") or "")[:500],
        stripe_sent_at=now,
        stripe_sent_by=actor.label[:200],
        stripe_last_error="",
    )
    _audit(actor, "invoice.stripe_send", invoice, before)
    if remote["status"] == "paid" and invoice.state == InvoiceState.FINALIZED:
        invoice = invoice_mark_paid(
            actor=STRIPE_ACTOR, invoice=invoice, paid_at=paid_moment(remote, now), reference=remote["id"], now=now
        )
    return invoice


def stripe_state(invoice: Invoice) -> dict[str, Any]:
    """What an event or the API says about the invoice's Stripe side."""
    return {
        "id": invoice.pk,
        "number": invoice.number,
        "tenant": invoice.tenant.slug,
        "currency": invoice.currency,
        "subtotal": money_text(invoice.subtotal, invoice.currency),
        "state": invoice.state,
        "stripe_invoice_id": invoice.stripe_invoice_id,
        "stripe_status": invoice.stripe_status,
        "stripe_hosted_url": invoice.stripe_hosted_url,
    }

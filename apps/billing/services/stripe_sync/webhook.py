"""Stripe's webhook: a verified event about a Gryvia invoice is applied once.

`Stripe-Signature` is checked with the endpoint's signing secret by the `stripe` package (HMAC-SHA256 over
`<t>.<body>`, and `t` no older than GRYVIA_STRIPE_WEBHOOK_TOLERANCE_S); a live-mode event is refused. Handled:
`invoice.paid` (the Gryvia invoice becomes Paid, through the invoice lifecycle) and `invoice.payment_failed`
(recorded on the invoice, audited, and emitted as `invoice.payment_failed`). Each handled event's id is stored
(StripeEvent, unique) in the transaction that applies it, so a second delivery changes nothing. Other event types,
and invoices that are not Gryvia's, are acknowledged and ignored.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from dataclasses import dataclass
from typing import Any

import stripe
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.core import events
from apps.core.audit import snapshot

from ...choices import InvoiceState
from ...models import Invoice, StripeEvent
from ..invoicing import InvoiceConflict, invoice_mark_paid
from .config import webhook_secret
from .send import AUDIT_FIELDS, STRIPE_ACTOR, _audit, _locked, _moment, _store, paid_moment, stripe_state

logger = logging.getLogger(__name__)
HANDLED = ("invoice.paid", "invoice.payment_failed")
MAX_BODY_BYTES = 256 * 1024


class WebhookRefused(Exception):
    """The request is not a verified Stripe test-mode event (400); nothing was changed."""


@dataclass(frozen=True)
class WebhookResult:
    """What the webhook did with one event."""

    event_id: str
    type: str
    handled: bool
    duplicate: bool
    outcome: str
    invoice_id: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "received": True,
            "event": self.event_id,
            "type": self.type,
            "handled": self.handled,
            "duplicate": self.duplicate,
            "outcome": self.outcome,
            "invoice": self.invoice_id,
        }


def _verified_event(payload: bytes, signature: str | None) -> dict[str, Any]:
    if len(payload) > MAX_BODY_BYTES:
        raise WebhookRefused(f"the body is larger than {MAX_BODY_BYTES} bytes")
    tolerance = settings.GRYVIA_STRIPE_WEBHOOK_TOLERANCE_S
    try:
        stripe.WebhookSignature.verify_header(payload, signature, webhook_secret(), tolerance)
    except stripe.SignatureVerificationError as exc:
        raise WebhookRefused(f"Stripe-Signature does not verify: {exc.user_message or exc}") from exc
    except UnicodeDecodeError as exc:
        raise WebhookRefused("the body is not UTF-8") from exc
    try:
        event = json.loads(payload)
    except ValueError as exc:
        raise WebhookRefused("the body is not JSON") from exc
    if not isinstance(event, dict) or event.get("object") != "event" or not isinstance(event.get("id"), str):
        raise WebhookRefused("the body is not a Stripe event (object 'event' with an id)")
    if event.get("livemode") is not False:
        raise WebhookRefused("a live-mode event (or one without livemode): Gryvia uses Stripe in test mode only")
    return event


def stripe_webhook_receive(*, payload: bytes, signature: str | None, now: dt.datetime | None = None) -> WebhookResult:
    """Verify one delivery of Stripe's webhook and apply its event once.

    Raises:
        StripeUnavailable: no (or a malformed) webhook secret is configured. WebhookRefused: a bad or missing
        signature, a timestamp outside the tolerance, a body that is not a test-mode event. InvoiceConflict: Stripe
        says a Gryvia invoice was paid that is void (nothing is recorded; Stripe delivers it again).
    """
    event = _verified_event(payload, signature)
    event_id, type_ = event["id"], str(event.get("type", ""))
    if type_ not in HANDLED:
        return WebhookResult(event_id, type_, False, False, f"ignored: Gryvia handles {' and '.join(HANDLED)} only")
    obj = (event.get("data") or {}).get("object")
    if not isinstance(obj, dict) or obj.get("object") != "invoice" or not isinstance(obj.get("id"), str):
        raise WebhookRefused(f"a {type_} event without an invoice in data.object")
    now = now or timezone.now()
    return _apply(event, obj, now)


@transaction.atomic
def _apply(event: dict[str, Any], obj: dict[str, Any], now: dt.datetime) -> WebhookResult:
    event_id, type_ = event["id"], event["type"]
    try:
        with transaction.atomic():
            record = StripeEvent.objects.create(
                event_id=event_id,
                type=type_,
                stripe_invoice_id=obj["id"],
                created=_moment(event.get("created"), now),
                outcome="processing",
            )
    except IntegrityError:
        previous = StripeEvent.objects.get(event_id=event_id)
        outcome = f"already processed at {previous.received_at.isoformat()}: {previous.outcome}"
        return WebhookResult(event_id, type_, True, True, outcome, previous.invoice_id)
    found = Invoice.all_tenants.filter(stripe_invoice_id=obj["id"]).first()
    if found is None:
        record.outcome = f"ignored: no Gryvia invoice was sent to Stripe as {obj['id']}"
        record.save(update_fields=["outcome"])
        return WebhookResult(event_id, type_, False, False, record.outcome)
    invoice = _locked(found)
    if type_ == "invoice.paid":
        outcome = _paid(invoice, obj, now)
    else:
        outcome = _payment_failed(invoice, obj, record.created)
    record.invoice, record.outcome = invoice, outcome[:300]
    record.save(update_fields=["invoice", "outcome"])
    return WebhookResult(event_id, type_, True, False, record.outcome, invoice.pk)


def _paid(invoice: Invoice, obj: dict[str, Any], now: dt.datetime) -> str:
    if invoice.state == InvoiceState.PAID:
        if invoice.stripe_status != "paid":
            _store(invoice, stripe_status="paid")
        return f"{invoice} was already paid"
    if invoice.state != InvoiceState.FINALIZED:
        logger.warning("Stripe invoice %s was paid, but Gryvia invoice %s is %s", obj["id"], invoice, invoice.state)
        raise InvoiceConflict(
            f"Stripe invoice {obj['id']} was paid, but Gryvia invoice {invoice} is {invoice.state}: refund the "
            "payment in Stripe (a void invoice cannot be paid)"
        )
    invoice_mark_paid(actor=STRIPE_ACTOR, invoice=invoice, paid_at=paid_moment(obj, now), reference=obj["id"], now=now)
    _store(invoice, stripe_status="paid", stripe_last_error="")
    return f"{invoice} marked paid"


def _payment_failed(invoice: Invoice, obj: dict[str, Any], failed_at: dt.datetime) -> str:
    if invoice.state != InvoiceState.FINALIZED:
        return f"ignored: {invoice} is {invoice.state}"
    if invoice.stripe_payment_failed_at and invoice.stripe_payment_failed_at > failed_at:
        return f"ignored: a later failure of {invoice} is recorded"
    attempt = obj.get("attempt_count")
    retry = obj.get("next_payment_attempt")
    message = f"payment attempt {attempt} failed" if isinstance(attempt, int) else "a payment failed"
    if isinstance(retry, int) and retry > 0:
        message += f"; Stripe tries again at {_moment(retry, failed_at).isoformat()}"
    elif invoice.stripe_hosted_url:
        message += f"; the tenant can pay at {invoice.stripe_hosted_url}"
    before = snapshot(invoice, AUDIT_FIELDS)
    _store(
        invoice,
        stripe_payment_failed_at=failed_at,
        stripe_last_error=message[:500],
        stripe_status=str(obj.get("status") or invoice.stripe_status)[:20],
    )
    _audit(STRIPE_ACTOR, "invoice.stripe_payment_failed", invoice, before)
    data = {**stripe_state(invoice), "failed_at": failed_at.isoformat(), "message": message}
    data["attempt_count"] = attempt if isinstance(attempt, int) else None
    events.emit(tenant=invoice.tenant, type="invoice.payment_failed", data=data, subject=f"invoice/{invoice.number}")
    return f"{invoice}: {message}"

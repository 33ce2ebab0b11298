"""The database refuses changes to a finalized invoice and its lines (apps.billing.models.triggers, migration 0006),
whoever sends them (raw SQL here), while the lifecycle's own moves (Finalized -> Paid or Void, the Stripe fields)
and a Draft's edits still go through."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.db import IntegrityError, connection, transaction

from apps.billing.models import Invoice, InvoiceLine
from apps.billing.services import invoicing
from tests.factories import ACTOR

from .invoice_tools import SEPT, event, ingest

pytestmark = pytest.mark.django_db
NOW = dt.datetime(2026, 10, 2, tzinfo=dt.UTC)


def _sql(statement: str, *params) -> int:
    with connection.cursor() as cursor:
        cursor.execute(statement, list(params))
        return cursor.rowcount


def _refused(statement: str, *params) -> None:
    with pytest.raises(IntegrityError, match="a finalized invoice is immutable"), transaction.atomic():
        _sql(statement, *params)


def _invoice(tenant, *, finalize: bool = True) -> Invoice:
    invoice = invoicing.invoice_create(actor=ACTOR, tenant=tenant, start=SEPT, end=SEPT + dt.timedelta(days=30))
    return invoicing.invoice_finalize(actor=ACTOR, invoice=invoice, now=NOW) if finalize else invoice


def test_a_finalized_invoice_and_its_lines_are_refused_changes_by_the_database(clean_ledger, tenant_a, h100):
    ingest(tenant_a, event(SEPT, 3600))
    invoice = _invoice(tenant_a)
    line = invoice.lines.get()
    _refused("UPDATE billing_invoice SET subtotal = 0 WHERE id = %s", invoice.pk)
    _refused("UPDATE billing_invoice SET number = 'INV-x' WHERE id = %s", invoice.pk)
    _refused("UPDATE billing_invoice SET state = 'draft' WHERE id = %s", invoice.pk)
    _refused("UPDATE billing_invoice SET paid_by = 'someone' WHERE id = %s", invoice.pk)  # not in a move to Paid
    _refused("DELETE FROM billing_invoice WHERE id = %s", invoice.pk)
    _refused("UPDATE billing_invoiceline SET amount = 0 WHERE id = %s", line.pk)
    _refused("DELETE FROM billing_invoiceline WHERE id = %s", line.pk)
    with pytest.raises(IntegrityError, match="a finalized invoice is immutable"), transaction.atomic():
        InvoiceLine.objects.bulk_create([InvoiceLine(invoice=invoice, position=9, kind="external", description="x",
                                                     entries=1, amount_exact=1, amount=1, currency="USD")])  # fmt: skip
    stored = Invoice.all_tenants.get(pk=invoice.pk)
    assert (stored.state, stored.subtotal, stored.lines.count()) == ("finalized", Decimal("2.5"), 1)
    # What the lifecycle still does: the Stripe fields follow Stripe, and Finalized moves to Paid once.
    assert _sql("UPDATE billing_invoice SET stripe_status = 'open' WHERE id = %s", invoice.pk) == 1
    invoicing.invoice_mark_paid(actor=ACTOR, invoice=invoice, reference="wire-1", now=NOW)
    _refused("UPDATE billing_invoice SET payment_reference = 'wire-2' WHERE id = %s", invoice.pk)
    _refused("UPDATE billing_invoice SET state = 'void' WHERE id = %s", invoice.pk)  # Paid is terminal
    assert Invoice.all_tenants.get(pk=invoice.pk).payment_reference == "wire-1"


def test_a_draft_stays_editable_and_a_finalized_invoice_can_be_voided(clean_ledger, tenant_a, h100):
    ingest(tenant_a, event(SEPT, 3600))
    draft = _invoice(tenant_a, finalize=False)
    assert _sql("UPDATE billing_invoice SET note = 'checked' WHERE id = %s", draft.pk) == 1
    assert _sql("UPDATE billing_invoiceline SET description = 'H100' WHERE invoice_id = %s", draft.pk) == 1
    invoicing.invoice_void(actor=ACTOR, invoice=draft, reason="wrong period")
    final = _invoice(tenant_a)
    invoicing.invoice_void(actor=ACTOR, invoice=final, reason="billed twice")
    assert Invoice.all_tenants.get(pk=final.pk).void_reason == "billed twice"
    _refused("UPDATE billing_invoice SET void_reason = 'other' WHERE id = %s", final.pk)

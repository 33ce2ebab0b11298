"""Clearing billing history in tests: the database refuses it, so the triggers are dropped, the rows deleted and
the triggers created again (in the caller's transaction where there is one)."""

from __future__ import annotations

from django.db import connection

from apps.billing.models import triggers

# In the order they are deleted: invoice lines before their invoices (Stripe events that name an invoice are
# unlinked first).
TABLES = ("billing_ledgerentry", "billing_ledgerhead", "billing_usagerecord", "billing_invoiceline", "billing_invoice")


def billing_rows() -> int:
    with connection.cursor() as cursor:
        total = 0
        for table in TABLES:
            cursor.execute(f"SELECT count(*) FROM {table}")  # noqa: S608 - constant table names
            total += cursor.fetchone()[0]
        return total


def clear_billing_history() -> None:
    """Delete every ledger entry, chain head, usage record and invoice; the triggers are back afterwards."""
    triggers.drop(connection)
    try:
        with connection.cursor() as cursor:
            cursor.execute("UPDATE billing_stripeevent SET invoice_id = NULL WHERE invoice_id IS NOT NULL")
            for table in TABLES:
                cursor.execute(f"DELETE FROM {table}")  # noqa: S608
    finally:
        triggers.create(connection)

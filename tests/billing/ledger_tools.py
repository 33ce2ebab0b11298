"""Clearing billing history in tests: the database refuses it, so the triggers are dropped, the rows deleted and
the triggers created again (in the caller's transaction where there is one)."""

from __future__ import annotations

from django.db import connection

from apps.billing import triggers

TABLES = ("billing_ledgerentry", "billing_ledgerhead", "billing_usagerecord")


def billing_rows() -> int:
    with connection.cursor() as cursor:
        total = 0
        for table in TABLES:
            cursor.execute(f"SELECT count(*) FROM {table}")  # noqa: S608 - constant table names
            total += cursor.fetchone()[0]
        return total


def clear_billing_history() -> None:
    """Delete every ledger entry, chain head and usage record; the triggers are back afterwards."""
    triggers.drop(connection)
    try:
        with connection.cursor() as cursor:
            for table in TABLES:
                cursor.execute(f"DELETE FROM {table}")  # noqa: S608
    finally:
        triggers.create(connection)

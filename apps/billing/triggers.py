"""The database's own refusal to change billing history: triggers on PostgreSQL and SQLite.

`billing_ledgerentry`: every UPDATE and DELETE is refused. `billing_usagerecord`: UPDATE and DELETE of a final row
are refused (open rows are refreshed and closed). Both raise an integrity error (SQLSTATE 23001 on PostgreSQL,
SQLITE_CONSTRAINT on SQLite), whoever sends the statement: the ORM, the admin or raw SQL.

TRUNCATE is not covered (Django's test flush truncates every table): production revokes TRUNCATE and DDL from the
application's role. `drop()` and `create()` exist for the maintenance fixture that clears a test ledger.
"""

from __future__ import annotations

from typing import Any

MESSAGE_LEDGER = "gryvia billing: ledger entries are append-only"
MESSAGE_USAGE = "gryvia billing: a final usage record is immutable"

_POSTGRESQL_CREATE = [
    f"""
    CREATE OR REPLACE FUNCTION billing_ledger_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION '{MESSAGE_LEDGER}: % refused (sequence %)', TG_OP, OLD.sequence USING ERRCODE = '23001';
    END $$
    """,
    f"""
    CREATE OR REPLACE FUNCTION billing_usage_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF OLD.final THEN
            RAISE EXCEPTION '{MESSAGE_USAGE}: % refused (%)', TG_OP, OLD.name USING ERRCODE = '23001';
        END IF;
        IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
        RETURN NEW;
    END $$
    """,
    "CREATE TRIGGER billing_ledger_append_only BEFORE UPDATE OR DELETE ON billing_ledgerentry "
    "FOR EACH ROW EXECUTE FUNCTION billing_ledger_refuse()",
    "CREATE TRIGGER billing_usage_final_immutable BEFORE UPDATE OR DELETE ON billing_usagerecord "
    "FOR EACH ROW EXECUTE FUNCTION billing_usage_refuse()",
]
_POSTGRESQL_DROP = [
    "DROP TRIGGER IF EXISTS billing_ledger_append_only ON billing_ledgerentry",
    "DROP TRIGGER IF EXISTS billing_usage_final_immutable ON billing_usagerecord",
]
_POSTGRESQL_DROP_FUNCTIONS = [
    "DROP FUNCTION IF EXISTS billing_ledger_refuse()",
    "DROP FUNCTION IF EXISTS billing_usage_refuse()",
]

_SQLITE_CREATE = [
    f"CREATE TRIGGER billing_ledger_no_update BEFORE UPDATE ON billing_ledgerentry "
    f"BEGIN SELECT RAISE(ABORT, '{MESSAGE_LEDGER}: UPDATE refused'); END",
    f"CREATE TRIGGER billing_ledger_no_delete BEFORE DELETE ON billing_ledgerentry "
    f"BEGIN SELECT RAISE(ABORT, '{MESSAGE_LEDGER}: DELETE refused'); END",
    f"CREATE TRIGGER billing_usage_final_no_update BEFORE UPDATE ON billing_usagerecord WHEN OLD.final "
    f"BEGIN SELECT RAISE(ABORT, '{MESSAGE_USAGE}: UPDATE refused'); END",
    f"CREATE TRIGGER billing_usage_final_no_delete BEFORE DELETE ON billing_usagerecord WHEN OLD.final "
    f"BEGIN SELECT RAISE(ABORT, '{MESSAGE_USAGE}: DELETE refused'); END",
]
_SQLITE_DROP = [
    "DROP TRIGGER IF EXISTS billing_ledger_no_update",
    "DROP TRIGGER IF EXISTS billing_ledger_no_delete",
    "DROP TRIGGER IF EXISTS billing_usage_final_no_update",
    "DROP TRIGGER IF EXISTS billing_usage_final_no_delete",
]


def _statements(vendor: str, create: bool) -> list[str]:
    if vendor == "postgresql":
        return _POSTGRESQL_CREATE if create else _POSTGRESQL_DROP
    if vendor == "sqlite":
        return _SQLITE_CREATE if create else _SQLITE_DROP
    raise NotImplementedError(f"billing triggers: no statements for the {vendor} database")


def create(connection: Any) -> None:
    """Install the triggers (idempotent: drops them first)."""
    drop(connection)
    with connection.cursor() as cursor:
        for sql in _statements(connection.vendor, True):
            cursor.execute(sql)


def drop(connection: Any) -> None:
    """Remove the triggers (maintenance and tests only; `create` puts them back)."""
    with connection.cursor() as cursor:
        for sql in _statements(connection.vendor, False):
            cursor.execute(sql)


def installed(connection: Any) -> int:
    """How many of the billing triggers the database has."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT count(*) FROM pg_trigger WHERE tgname IN "
                "('billing_ledger_append_only', 'billing_usage_final_immutable') AND NOT tgisinternal"
            )
        else:
            cursor.execute("SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'billing_%'")
        return int(cursor.fetchone()[0])


# Migration entry points (apps/billing/migrations/0002_triggers.py).
def forwards(apps: Any, schema_editor: Any) -> None:
    create(schema_editor.connection)


def backwards(apps: Any, schema_editor: Any) -> None:
    drop(schema_editor.connection)
    if schema_editor.connection.vendor == "postgresql":
        with schema_editor.connection.cursor() as cursor:
            for sql in _POSTGRESQL_DROP_FUNCTIONS:
                cursor.execute(sql)

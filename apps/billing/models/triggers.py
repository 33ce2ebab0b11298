"""The database's own refusal to change billing history: triggers on PostgreSQL and SQLite.

`billing_ledgerentry`: every UPDATE and DELETE is refused. `billing_usagerecord`: UPDATE and DELETE of a final row
are refused (open rows are refreshed and closed). Both raise an integrity error (SQLSTATE 23001 on PostgreSQL,
SQLITE_CONSTRAINT on SQLite), whoever sends the statement: the ORM, the admin or raw SQL (migration 0002).

`billing_invoice` and `billing_invoiceline` (migration 0006): once an invoice is no longer a Draft, its amounts,
period, number and ledger summary never change and it is never deleted; its state only moves Finalized -> Paid or
Void, with its payment or void fields set in that same UPDATE; its lines are never inserted, changed or deleted.
Its Stripe fields (`stripe_*`) stay writable: they follow the Stripe invoice after finalization.

TRUNCATE is not covered (Django's test flush truncates every table): production revokes TRUNCATE and DDL from the
application's role. `drop()` and `create()` exist for the maintenance fixture that clears a test ledger. A SQLite
migration that rebuilds one of these tables drops its triggers: it must run `forwards` again (as 0004 does).
"""

from __future__ import annotations

from typing import Any

MESSAGE_LEDGER = "gryvia billing: ledger entries are append-only"
MESSAGE_USAGE = "gryvia billing: a final usage record is immutable"
MESSAGE_INVOICE = "gryvia billing: a finalized invoice is immutable"

# An invoice past Draft keeps these as finalizing wrote them.
_INVOICE_FROZEN = (
    "tenant_id", "sequence", "number", "period_start", "period_end", "currency", "subtotal", "ledger_entries",
    "ledger_first_sequence", "ledger_last_sequence", "ledger_head_sequence", "ledger_head_hash", "ledger_total",
    "note", "computed_at", "created_at", "created_by", "finalized_at", "finalized_by",
)  # fmt: skip
# Set once, by the UPDATE that moves a Finalized invoice to Paid or Void.
_INVOICE_SETTLEMENT = ("paid_at", "paid_by", "payment_reference", "voided_at", "voided_by", "void_reason")
_MOVES = "OLD.state = 'finalized' AND NEW.state IN ('paid', 'void')"


def _pg_row(prefix: str, columns: tuple[str, ...]) -> str:
    return "ROW(" + ", ".join(f"{prefix}.{c}" for c in columns) + ")"


def _sqlite_changed(columns: tuple[str, ...]) -> str:
    return "(" + " OR ".join(f"NEW.{c} IS NOT OLD.{c}" for c in columns) + ")"


_HISTORY_POSTGRESQL_CREATE = [
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
_INVOICE_POSTGRESQL_CREATE = [
    f"""
    CREATE OR REPLACE FUNCTION billing_invoice_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF OLD.state = 'draft' THEN
            IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
            RETURN NEW;
        END IF;
        IF TG_OP = 'DELETE'
            OR {_pg_row("NEW", _INVOICE_FROZEN)} IS DISTINCT FROM {_pg_row("OLD", _INVOICE_FROZEN)}
            OR (NEW.state <> OLD.state AND NOT ({_MOVES}))
            OR (NEW.state = OLD.state
                AND {_pg_row("NEW", _INVOICE_SETTLEMENT)} IS DISTINCT FROM {_pg_row("OLD", _INVOICE_SETTLEMENT)})
        THEN
            RAISE EXCEPTION '{MESSAGE_INVOICE}: % refused (%, %)', TG_OP, OLD.number, OLD.state
                USING ERRCODE = '23001';
        END IF;
        RETURN NEW;
    END $$
    """,
    f"""
    CREATE OR REPLACE FUNCTION billing_invoice_line_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF EXISTS (
            SELECT 1 FROM billing_invoice WHERE state <> 'draft' AND id IN (
                CASE WHEN TG_OP = 'DELETE' THEN NULL ELSE NEW.invoice_id END,
                CASE WHEN TG_OP = 'INSERT' THEN NULL ELSE OLD.invoice_id END
            )
        ) THEN
            RAISE EXCEPTION '{MESSAGE_INVOICE}: % of a line refused', TG_OP USING ERRCODE = '23001';
        END IF;
        IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
        RETURN NEW;
    END $$
    """,
    "CREATE TRIGGER billing_invoice_final_immutable BEFORE UPDATE OR DELETE ON billing_invoice "
    "FOR EACH ROW EXECUTE FUNCTION billing_invoice_refuse()",
    "CREATE TRIGGER billing_invoice_line_final_immutable BEFORE INSERT OR UPDATE OR DELETE ON billing_invoiceline "
    "FOR EACH ROW EXECUTE FUNCTION billing_invoice_line_refuse()",
]
_HISTORY_POSTGRESQL_DROP = [
    "DROP TRIGGER IF EXISTS billing_ledger_append_only ON billing_ledgerentry",
    "DROP TRIGGER IF EXISTS billing_usage_final_immutable ON billing_usagerecord",
]
_INVOICE_POSTGRESQL_DROP = [
    "DROP TRIGGER IF EXISTS billing_invoice_final_immutable ON billing_invoice",
    "DROP TRIGGER IF EXISTS billing_invoice_line_final_immutable ON billing_invoiceline",
]
_HISTORY_POSTGRESQL_DROP_FUNCTIONS = [
    "DROP FUNCTION IF EXISTS billing_ledger_refuse()",
    "DROP FUNCTION IF EXISTS billing_usage_refuse()",
]
_INVOICE_POSTGRESQL_DROP_FUNCTIONS = [
    "DROP FUNCTION IF EXISTS billing_invoice_refuse()",
    "DROP FUNCTION IF EXISTS billing_invoice_line_refuse()",
]

_HISTORY_SQLITE_CREATE = [
    f"CREATE TRIGGER billing_ledger_no_update BEFORE UPDATE ON billing_ledgerentry "
    f"BEGIN SELECT RAISE(ABORT, '{MESSAGE_LEDGER}: UPDATE refused'); END",
    f"CREATE TRIGGER billing_ledger_no_delete BEFORE DELETE ON billing_ledgerentry "
    f"BEGIN SELECT RAISE(ABORT, '{MESSAGE_LEDGER}: DELETE refused'); END",
    f"CREATE TRIGGER billing_usage_final_no_update BEFORE UPDATE ON billing_usagerecord WHEN OLD.final "
    f"BEGIN SELECT RAISE(ABORT, '{MESSAGE_USAGE}: UPDATE refused'); END",
    f"CREATE TRIGGER billing_usage_final_no_delete BEFORE DELETE ON billing_usagerecord WHEN OLD.final "
    f"BEGIN SELECT RAISE(ABORT, '{MESSAGE_USAGE}: DELETE refused'); END",
]
_LINE_FROZEN = "(SELECT state FROM billing_invoice WHERE id = {row}.invoice_id) <> 'draft'"
_INVOICE_SQLITE_CREATE = [
    f"CREATE TRIGGER billing_invoice_final_no_update BEFORE UPDATE ON billing_invoice WHEN OLD.state <> 'draft' AND ("
    f"{_sqlite_changed(_INVOICE_FROZEN)} OR (NEW.state <> OLD.state AND NOT ({_MOVES})) "
    f"OR (NEW.state = OLD.state AND {_sqlite_changed(_INVOICE_SETTLEMENT)})) "
    f"BEGIN SELECT RAISE(ABORT, '{MESSAGE_INVOICE}: UPDATE refused'); END",
    f"CREATE TRIGGER billing_invoice_final_no_delete BEFORE DELETE ON billing_invoice WHEN OLD.state <> 'draft' "
    f"BEGIN SELECT RAISE(ABORT, '{MESSAGE_INVOICE}: DELETE refused'); END",
    f"CREATE TRIGGER billing_invoice_line_final_no_insert BEFORE INSERT ON billing_invoiceline "
    f"WHEN {_LINE_FROZEN.format(row='NEW')} "
    f"BEGIN SELECT RAISE(ABORT, '{MESSAGE_INVOICE}: INSERT of a line refused'); END",
    f"CREATE TRIGGER billing_invoice_line_final_no_update BEFORE UPDATE ON billing_invoiceline "
    f"WHEN {_LINE_FROZEN.format(row='OLD')} OR {_LINE_FROZEN.format(row='NEW')} "
    f"BEGIN SELECT RAISE(ABORT, '{MESSAGE_INVOICE}: UPDATE of a line refused'); END",
    f"CREATE TRIGGER billing_invoice_line_final_no_delete BEFORE DELETE ON billing_invoiceline "
    f"WHEN {_LINE_FROZEN.format(row='OLD')} "
    f"BEGIN SELECT RAISE(ABORT, '{MESSAGE_INVOICE}: DELETE of a line refused'); END",
]
_HISTORY_SQLITE_DROP = [
    "DROP TRIGGER IF EXISTS billing_ledger_no_update",
    "DROP TRIGGER IF EXISTS billing_ledger_no_delete",
    "DROP TRIGGER IF EXISTS billing_usage_final_no_update",
    "DROP TRIGGER IF EXISTS billing_usage_final_no_delete",
]
_INVOICE_SQLITE_DROP = [
    "DROP TRIGGER IF EXISTS billing_invoice_final_no_update",
    "DROP TRIGGER IF EXISTS billing_invoice_final_no_delete",
    "DROP TRIGGER IF EXISTS billing_invoice_line_final_no_insert",
    "DROP TRIGGER IF EXISTS billing_invoice_line_final_no_update",
    "DROP TRIGGER IF EXISTS billing_invoice_line_final_no_delete",
]

# group -> vendor -> (create, drop, drop functions)
_GROUPS: dict[str, dict[str, tuple[list[str], list[str], list[str]]]] = {
    "history": {
        "postgresql": (_HISTORY_POSTGRESQL_CREATE, _HISTORY_POSTGRESQL_DROP, _HISTORY_POSTGRESQL_DROP_FUNCTIONS),
        "sqlite": (_HISTORY_SQLITE_CREATE, _HISTORY_SQLITE_DROP, []),
    },
    "invoices": {
        "postgresql": (_INVOICE_POSTGRESQL_CREATE, _INVOICE_POSTGRESQL_DROP, _INVOICE_POSTGRESQL_DROP_FUNCTIONS),
        "sqlite": (_INVOICE_SQLITE_CREATE, _INVOICE_SQLITE_DROP, []),
    },
}
GROUPS = tuple(_GROUPS)
_NAMES = {
    vendor: [s.split()[2] for group in _GROUPS.values() for s in group[vendor][0] if s.startswith("CREATE TRIGGER")]
    for vendor in ("postgresql", "sqlite")
}


def _statements(vendor: str, groups: tuple[str, ...], which: int) -> list[str]:
    if vendor not in _NAMES:
        raise NotImplementedError(f"billing triggers: no statements for the {vendor} database")
    return [sql for group in groups for sql in _GROUPS[group][vendor][which]]


def create(connection: Any, groups: tuple[str, ...] = GROUPS) -> None:
    """Install the triggers (idempotent: drops them first)."""
    drop(connection, groups)
    with connection.cursor() as cursor:
        for sql in _statements(connection.vendor, groups, 0):
            cursor.execute(sql)


def drop(connection: Any, groups: tuple[str, ...] = GROUPS) -> None:
    """Remove the triggers (maintenance and tests only; `create` puts them back)."""
    with connection.cursor() as cursor:
        for sql in _statements(connection.vendor, groups, 1):
            cursor.execute(sql)


def installed(connection: Any) -> int:
    """How many of the billing triggers the database has (of `expected(connection)`)."""
    names = _NAMES.get(connection.vendor, [])
    marks = ", ".join(["%s"] * len(names))
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"SELECT count(*) FROM pg_trigger WHERE tgname IN ({marks}) AND NOT tgisinternal", names)
        else:
            cursor.execute(f"SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND name IN ({marks})", names)
        return int(cursor.fetchone()[0])


def expected(connection: Any) -> int:
    """How many billing triggers this database should have."""
    return len(_NAMES[connection.vendor])


def _backwards(schema_editor: Any, groups: tuple[str, ...]) -> None:
    drop(schema_editor.connection, groups)
    with schema_editor.connection.cursor() as cursor:
        for sql in _statements(schema_editor.connection.vendor, groups, 2):
            cursor.execute(sql)


# Migration entry points: the history triggers (apps/billing/migrations/0002_triggers.py, again after 0004's table
# rebuilds), the invoice triggers (0006_invoice_triggers.py).
def forwards(apps: Any, schema_editor: Any) -> None:
    create(schema_editor.connection, ("history",))


def backwards(apps: Any, schema_editor: Any) -> None:
    _backwards(schema_editor, ("history",))


def invoices_forwards(apps: Any, schema_editor: Any) -> None:
    create(schema_editor.connection, ("invoices",))


def invoices_backwards(apps: Any, schema_editor: Any) -> None:
    _backwards(schema_editor, ("invoices",))

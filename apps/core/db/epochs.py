"""Table epochs: a value per table that changes with every write to it, so a small table read every reconcile pass
(queues, tenants' ceilings and slugs, webhook endpoints, the SKU catalog, the GPU nodes) is read again only when it
changed.

Database triggers keep `core_tableepoch` (one row per watched table): every INSERT, DELETE and UPDATE of a watched
column, whoever makes it (the ORM, a bulk write, raw SQL, another process), sets the table's epoch to a new value
in the writer's own transaction, so the new epoch is visible exactly when the write is. New values are never
reused, even after a rollback (a sequence on PostgreSQL, `random()` on SQLite), so an epoch names one state of
its table. The triggers are installed after every `migrate` (a `post_migrate` receiver), which also puts them back
on a SQLite table a migration rebuilt.

A reader: `EpochCached(("queueing_queue", "queueing_cohort"), load)`. Inside `with epochs.snapshot():` (the job
reconciler's pass) its `get()` reads every epoch once for the whole snapshot (one query, on first use) and calls
`load()` only when one of its tables has a new epoch since this process last loaded it; outside a snapshot it
always calls `load()`. Values are shared between passes: callers treat them as read-only.

`WATCHED` lists the tables, each with the columns whose UPDATE leaves its epoch alone: status a reconciler writes
often, which no cached read uses (the queue status every pass writes). A cached read must not use them. Every other
column, those later migrations add included, changes the epoch.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from django.db import DEFAULT_DB_ALIAS, connections

T = TypeVar("T")
TABLE = "core_tableepoch"
SEQUENCE = "core_tableepoch_seq"
# table -> the columns whose UPDATE does not change its epoch (INSERT and DELETE always do).
WATCHED: dict[str, tuple[str, ...]] = {
    "tenants_tenant": (),  # every column: the job reconciler keeps whole Tenant rows
    "queueing_cohort": (),
    "queueing_queue": ("status_admitted", "status_pending", "status_updated_at", "updated_at"),
    "webhooks_webhookendpoint": (),
    "billing_gpusku": (),
    "queueing_gpunode": (),  # written only when a Node changed (apps.queueing.inventory)
}
_VENDORS = ("postgresql", "sqlite")

_snapshot: contextvars.ContextVar[_Snapshot | None] = contextvars.ContextVar("gryvia_epochs", default=None)


class _Snapshot:
    def __init__(self) -> None:
        self.epochs: dict[str, dict[str, int]] = {}  # alias -> table -> epoch (0: never written)

    def of(self, using: str) -> dict[str, int] | None:
        """The epochs (None: a database without the triggers, where every read loads)."""
        epochs = self.epochs.get(using)
        if epochs is None:
            if connections[using].vendor not in _VENDORS:
                return None
            with connections[using].cursor() as cursor:
                cursor.execute(_READ)
                epochs = self.epochs[using] = dict(cursor.fetchall())
        return epochs


_READ = f"SELECT table_name, epoch FROM {TABLE}"  # noqa: S608 (a constant)


@contextlib.contextmanager
def snapshot() -> Iterator[None]:
    """Reads of `EpochCached` values inside share one read of the epochs (taken when first needed)."""
    token = _snapshot.set(_Snapshot())
    try:
        yield
    finally:
        _snapshot.reset(token)


def snapshot_reads(using: str = DEFAULT_DB_ALIAS) -> list[tuple[str, list[Any], Callable[[list[tuple]], None]]]:
    """The current snapshot's read of the epochs, for a caller to send with a statement of its own (a lock attempt:
    apps.core.locks.try_advisory_lock's `reads`): [(sql, params, what receives the rows)], or [] outside a snapshot,
    once it has read them, or on a database without the triggers."""
    current = _snapshot.get()
    if current is None or using in current.epochs or connections[using].vendor not in _VENDORS:
        return []

    def receive(rows: list[tuple]) -> None:
        current.epochs[using] = dict(rows)

    return [(_READ, [], receive)]


class EpochCached(Generic[T]):
    """`load()`'s value, loaded again only when one of `tables` changed (inside a snapshot)."""

    def __init__(self, tables: tuple[str, ...], load: Callable[[], T]) -> None:
        unknown = set(tables) - WATCHED.keys()
        if unknown:
            raise ValueError(f"EpochCached: {', '.join(sorted(unknown))} not in apps.core.db.epochs.WATCHED")
        self.tables, self._load = tables, load
        self._entries: dict[str, tuple[tuple[int, ...], T]] = {}  # alias -> (the tables' epochs, value)

    def get(self, using: str = DEFAULT_DB_ALIAS) -> T:
        current = _snapshot.get()
        if current is None:
            return self._load()
        epochs = current.of(using)
        if epochs is None:
            return self._load()
        key = tuple(epochs.get(table, 0) for table in self.tables)
        entry = self._entries.get(using)
        if entry is not None and entry[0] == key:
            return entry[1]
        value = self._load()
        self._entries[using] = (key, value)
        return value


# -- the triggers ------------------------------------------------------------------------------------------------


def _postgresql(table: str, columns: list[str]) -> list[str]:
    of = f" OF {', '.join(columns)}"
    return [
        f"DROP TRIGGER IF EXISTS gryvia_epoch ON {table}",
        f"DROP TRIGGER IF EXISTS gryvia_epoch_update ON {table}",
        f"CREATE TRIGGER gryvia_epoch AFTER INSERT OR DELETE OR TRUNCATE ON {table} "
        "FOR EACH STATEMENT EXECUTE FUNCTION gryvia_bump_epoch()",
        f"CREATE TRIGGER gryvia_epoch_update AFTER UPDATE{of} ON {table} "
        "FOR EACH STATEMENT EXECUTE FUNCTION gryvia_bump_epoch()",
    ]


_BUMP_FUNCTION = f"""
CREATE OR REPLACE FUNCTION gryvia_bump_epoch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {TABLE} (table_name, epoch) VALUES (TG_TABLE_NAME, nextval('{SEQUENCE}'))
    ON CONFLICT (table_name) DO UPDATE SET epoch = EXCLUDED.epoch;
    RETURN NULL;
END $$
"""


def _sqlite(table: str, columns: list[str]) -> list[str]:
    bump = (
        f"INSERT INTO {TABLE} (table_name, epoch) VALUES ('{table}', random()) "
        "ON CONFLICT (table_name) DO UPDATE SET epoch = excluded.epoch;"
    )
    of = f" OF {', '.join(columns)}"
    statements = []
    for event, name in (("INSERT", "insert"), ("DELETE", "delete"), (f"UPDATE{of}", "update")):
        trigger = f"gryvia_epoch_{table}_{name}"
        statements += [
            f"DROP TRIGGER IF EXISTS {trigger}",
            f"CREATE TRIGGER {trigger} AFTER {event} ON {table} FOR EACH ROW BEGIN {bump} END",
        ]
    return statements


def install_triggers(using: str = DEFAULT_DB_ALIAS) -> None:
    """(Re)create the triggers of every watched table that exists (idempotent)."""
    connection = connections[using]
    existing = set(connection.introspection.table_names())
    if TABLE not in existing:
        return
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"CREATE SEQUENCE IF NOT EXISTS {SEQUENCE}")
            cursor.execute(_BUMP_FUNCTION)
            build = _postgresql
        elif connection.vendor == "sqlite":
            build = _sqlite
        else:  # no triggers: every read loads (see _Snapshot.of)
            return
        for table, unwatched in WATCHED.items():
            if table in existing:
                described = connection.introspection.get_table_description(cursor, table)
                columns = [connection.ops.quote_name(c.name) for c in described if c.name not in unwatched]
                for statement in build(table, columns):
                    cursor.execute(statement)


def on_post_migrate(sender: Any, using: str = DEFAULT_DB_ALIAS, **kwargs: Any) -> None:
    """`post_migrate` receiver: the triggers, after every migrate (once per run: sent once per app)."""
    if getattr(sender, "label", None) == "core":
        install_triggers(using)

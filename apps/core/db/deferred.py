"""Writes nobody reads the result of, sent together: one round trip where each would take its own.

A reconcile pass ends with a dozen writes (status, events, audit rows, usage records, ledger entries, revoked keys,
queue status), most of whose results nobody reads. Inside `with deferred_writes():` such a write, made through
`execute_or_defer(sql, params)`, is kept, and the writes kept are sent as one multi-statement execute: before the
block's next statement of any other kind (so every statement still runs in the order the code issued it, and a
read sees every write made before it), and when the block ends. A block inside another joins it.

Only PostgreSQL through psycopg's client-side binding cursor (Django's default) takes several statements with
parameters in one execute; anywhere else each write runs at once, as outside a block. The batch passes through
Django's execute wrappers like any statement: query counters count it once, as the one round trip it is. An error
in a kept write is raised by the statement that sends it, in the caller's transaction (a block belongs inside
`transaction.atomic()`); an exception leaving the block drops what it kept.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Sequence
from typing import Any

from django.db import connection, transaction

try:  # psycopg 3's client-side binding cursor: the one Django uses unless OPTIONS["server_side_binding"] is set
    from psycopg import ClientCursor
except ImportError:  # pragma: no cover (psycopg is a dependency)
    ClientCursor = None


class _Batch:
    def __init__(self) -> None:
        self.statements: list[tuple[str, Sequence[Any]]] = []
        self.sending = False

    def send(self, *, commit: bool = False) -> None:
        """Run the kept writes (one execute), if any; with `commit`, a COMMIT after them in the same execute."""
        if not self.statements:
            return
        statements, self.statements = self.statements, []
        if commit:
            statements.append(("COMMIT", []))
        self.sending = True
        try:
            with connection.cursor() as cursor:
                cursor.execute(*_joined(statements, cursor.cursor))
        finally:
            self.sending = False

    def __call__(self, execute, sql, params, many, context):
        """Django execute wrapper: the kept writes go first, as the statements before this one, in its execute
        (one round trip); the caller sees this statement's result. A statement whose text is not bound by the
        driver (no parameters: a COPY, a text with a literal `%`), is run many times or through a named cursor gets
        the writes as an execute of their own."""
        if self.sending or not self.statements:
            return execute(sql, params, many, context)
        cursor = context["cursor"].cursor
        if many or not isinstance(params, list | tuple) or not isinstance(cursor, ClientCursor):
            self.send()  # (a named cursor's statement goes into a DECLARE: one statement only)
            return execute(sql, params, many, context)
        kept, self.statements = self.statements, []
        result = execute(*_joined([*kept, (sql, params)], cursor), many, context)
        for _ in kept:
            cursor.nextset()
        return result


def _joined(statements: Sequence[tuple[str, Sequence[Any]]], cursor: Any) -> tuple[str, list[Any] | None]:
    """One execute's text and parameters for these statements (a single one as it is). Several are bound each on
    its own (`cursor`: psycopg's client-side binding cursor) and joined into a text sent as it is: the driver parses
    a statement's text for its placeholders once per distinct text (cached) when it is short, but a long one, as
    joined statements are, every time."""
    if len(statements) == 1:
        return statements[0][0], list(statements[0][1])
    mogrify = cursor.mogrify
    return ";\n".join(mogrify(sql, params) for sql, params in statements), None


_batch: contextvars.ContextVar[_Batch | None] = contextvars.ContextVar("gryvia_deferred_writes", default=None)


def _batches() -> bool:
    """Whether this connection takes several statements with parameters in one execute."""
    if connection.vendor != "postgresql" or ClientCursor is None:
        return False
    connection.ensure_connection()
    return issubclass(connection.connection.cursor_factory, ClientCursor)


@contextlib.contextmanager
def deferred_writes() -> Iterator[None]:
    """Writes made through `execute_or_defer` inside are sent together (see the module docstring)."""
    with _kept(commit=False):
        yield


@contextlib.contextmanager
def atomic_deferred_writes() -> Iterator[None]:
    """`transaction.atomic()` around `deferred_writes()`. Where the block opens the transaction (none was open
    and the connection autocommits), the writes kept at its end go to the server with its COMMIT, in one execute:
    one round trip for both. Django's own commit then finds nothing to do (psycopg sends no COMMIT outside a
    transaction). A failing write leaves the transaction aborted and the block rolls it back, as any error would."""
    opens = not connection.in_atomic_block and connection.get_autocommit()
    with transaction.atomic(), _kept(commit=opens):
        yield


@contextlib.contextmanager
def _kept(*, commit: bool) -> Iterator[None]:
    if _batch.get() is not None or not _batches():
        yield
        return
    batch = _Batch()
    token = _batch.set(batch)
    try:
        with connection.execute_wrapper(batch):
            yield
            batch.send(commit=commit and not connection.needs_rollback)
    finally:
        _batch.reset(token)


def read_together(statements: Sequence[tuple[str, Sequence[Any]]]) -> list[list[tuple]]:
    """Run these reads (each returning rows; `%s` placeholders) and, inside `deferred_writes()`, the writes kept
    before them, in one execute: one round trip. Returns each read's rows, as the driver gives them, in order.
    Where several statements cannot share an execute, the kept writes go first, then each read on its own."""
    batch = _batch.get()
    if not _batches():
        if batch is not None:
            batch.send()
        out = []
        with connection.cursor() as cursor:
            for sql, params in statements:
                cursor.execute(sql, params)
                out.append(cursor.fetchall())
        return out
    writes: list[tuple[str, Sequence[Any]]] = []
    if batch is not None:
        writes, batch.statements = batch.statements, []
    with connection.cursor() as cursor:
        cursor.execute(*_joined([*writes, *statements], cursor.cursor))
        for _ in writes:
            cursor.nextset()
        out = []
        for index in range(len(statements)):
            if index:
                cursor.nextset()
            out.append(cursor.fetchall())
    return out


def execute_or_defer(sql: str, params: Sequence[Any]) -> int | None:
    """Run a write whose result the caller does not need (`params`: a list, `%s` placeholders): at once, returning
    its row count, or inside `deferred_writes()` kept to be sent with the block's next statement (None)."""
    batch = _batch.get()
    if batch is not None:
        batch.statements.append((sql, list(params)))
        return None
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount

"""Idempotent appends: insert the rows whose unique key is new and say which were (usage events, thousands a call).
The rest of apps.core.db.bulk's statements: apps.core.db.bulk."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.db import connection, models

from .bulk import _array_type, _columns_of, _copy_ready, copy_rows


def bulk_insert_new(
    model: type[models.Model], rows: Sequence[Mapping[str, Any]], *, conflict: Sequence[str], returning: str
) -> list[Any]:
    """Insert the rows that do not conflict on the unique columns `conflict` (`ON CONFLICT DO NOTHING`) and return
    the `returning` column of those inserted: idempotent appends (usage events), thousands per call.

    PostgreSQL: COPY into a session-local staging table, then one `INSERT … SELECT … ON CONFLICT DO NOTHING
    RETURNING`. SQLite: multi-row `INSERT … VALUES … ON CONFLICT DO NOTHING RETURNING`. Every row must give every
    field without a constant default (a callable default such as uuid4 is evaluated once per call here).
    """
    if not rows:
        return []
    meta = model._meta
    quote = connection.ops.quote_name
    table = quote(meta.db_table)
    pg = connection.vendor == "postgresql"
    fields, columns = _columns_of(model, rows, raw=pg)
    names = ", ".join(quote(f.column) for f in fields)
    target = ", ".join(quote(meta.get_field(name).column) for name in conflict)
    tail = f"ON CONFLICT ({target}) DO NOTHING RETURNING {quote(meta.get_field(returning).column)}"
    out: list[Any] = []
    with connection.cursor() as cursor:
        if pg:
            columns = _copy_ready(fields, columns)
            out = _copy_new(cursor, meta, fields, columns, conflict=conflict, returning=returning, tail=tail)
        else:
            values = list(zip(*columns, strict=True))
            per = max(1, 30000 // len(fields))  # SQLite's limit on parameters per statement is 32766
            marks = "(" + ", ".join(["%s"] * len(fields)) + ")"
            for start in range(0, len(values), per):
                chunk = values[start : start + per]
                params = [value for row in chunk for value in row]
                sql = f"INSERT INTO {table} ({names}) VALUES {', '.join([marks] * len(chunk))} {tail}"
                cursor.execute(sql, params)
                out += [row[0] for row in cursor.fetchall()]
    return out


def _copy_new(cursor: Any, meta: Any, fields: list, columns: list, *, conflict, returning, tail) -> list[Any]:
    """PostgreSQL: leave out the rows whose keys exist, then COPY the rest straight in; if a concurrent writer
    inserted one of them meanwhile (unique violation), COPY into a staging table and `INSERT … ON CONFLICT`."""
    from django.db import IntegrityError, transaction

    quote = connection.ops.quote_name
    table = quote(meta.db_table)
    names = ", ".join(quote(f.column) for f in fields)
    index = {f.attname: i for i, f in enumerate(fields)}
    keys = [meta.get_field(name) for name in conflict]
    key_columns = [columns[index[f.attname]] for f in keys]
    existing = _existing_keys(cursor, table, keys, key_columns)
    rows = [row for row in zip(*columns, strict=True) if tuple(row[index[f.attname]] for f in keys) not in existing]
    seen: set[tuple] = set()
    fresh = []
    for row in rows:  # the same key twice in one call: the first one
        key = tuple(row[index[f.attname]] for f in keys)
        if key not in seen:
            seen.add(key)
            fresh.append(row)
    position = index[meta.get_field(returning).attname]
    try:
        with transaction.atomic():
            copy_rows(f"COPY {table} ({names}) FROM STDIN", fresh, cursor)
        return [row[position] for row in fresh]
    except IntegrityError:
        pass
    stage = quote(f"_stage_{meta.db_table}")
    cursor.execute(
        f"CREATE TEMP TABLE IF NOT EXISTS {stage} ON COMMIT DELETE ROWS AS SELECT {names} FROM {table} WITH NO DATA"
    )
    cursor.execute(f"TRUNCATE {stage}")
    copy_rows(f"COPY {stage} ({names}) FROM STDIN", fresh, cursor)
    cursor.execute(f"INSERT INTO {table} ({names}) SELECT {names} FROM {stage} {tail}")
    out = [row[0] for row in cursor.fetchall()]
    cursor.execute(f"TRUNCATE {stage}")
    return out


def _existing_keys(cursor: Any, table: str, keys: list, key_columns: list) -> set[tuple]:
    """Which of these unique keys the table already holds (one statement)."""
    quote = connection.ops.quote_name
    probe = " AND ".join(f"t.{quote(f.column)} = k.k{i}" for i, f in enumerate(keys))
    unnest = ", ".join(f"%s::{_array_type(f)}" for f in keys)
    aliases = ", ".join(f"k{i}" for i in range(len(keys)))
    cursor.execute(
        f"SELECT {', '.join(f't.{quote(f.column)}' for f in keys)} FROM {table} t "
        f"JOIN unnest({unnest}) AS k({aliases}) ON {probe}",
        key_columns,
    )
    return {tuple(row) for row in cursor.fetchall()}

"""Many rows in one statement: what a reconcile pass writes back (`bulk_set`) and the rows it appends (`bulk_insert`).

Django's `bulk_update` builds one `When(pk=...)` filter per row and field, and `bulk_create` one model instance and
one prepared value list per row: both cost more CPU than the round trips they save when a pass writes a few dozen
rows. Here values go through each field's `get_db_prep_value` (JSON, datetimes, UUIDs are stored as the ORM would
store them) and straight into the statement.

On PostgreSQL an update's rows travel as one JSON text parameter (`json_to_recordset(%s::json) AS v(k bigint, ...)`):
the driver escapes one string and the encoding is the C JSON encoder's, where per-column array parameters were
quoted element by element in Python (a fifth of a reconcile pass's CPU). The statement's text depends only on
which columns are written, never on how many rows. Inserts of up to a thousand rows travel the same way, as one
JSON parameter of an `INSERT … SELECT` (apps.core.db.json_rows: one round trip); larger ones, and values JSON would
not carry exactly, go through `COPY … FROM STDIN`. SQLite gets
`CASE id WHEN ... THEN ...` terms (update) and `executemany` (insert). Every statement, COPY included, passes
through Django's execute wrappers and query log, so whatever counts queries counts these.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from django.db import connection, models
from django.db.backends.utils import CursorDebugWrapper
from django.utils import timezone

from . import fastjson
from .deferred import execute_or_defer
from .json_rows import insert_json_rows
from .prepared import int_array_literal

# Field types whose Python values are already what the database driver takes: no get_db_prep_value call per value.
_PLAIN = frozenset(
    {
        "AutoField",
        "BigAutoField",
        "BigIntegerField",
        "BooleanField",
        "CharField",
        "ForeignKey",
        "IntegerField",
        "PositiveBigIntegerField",
        "PositiveIntegerField",
        "PositiveSmallIntegerField",
        "SlugField",
        "SmallIntegerField",
        "TextField",
    }
)


def _prep(field: models.Field) -> Any:
    """A function from a Python value to the value the driver is given for `field`."""
    if field.get_internal_type() in _PLAIN:
        return lambda value: value
    return lambda value: field.get_db_prep_value(value, connection)


def _array_type(field: models.Field) -> str:
    target = field.target_field if field.is_relation else field
    return f"{target.db_type(connection)}[]"


def bulk_set(
    model: type[models.Model],
    rows: Mapping[Any, Mapping[str, Any]],
    *,
    when: Mapping[Any, Mapping[str, Any]] | None = None,
    exclude: Mapping[str, Sequence[Any]] | None = None,
) -> set[Any]:
    """Set `rows[pk][field] = value` for every row in one UPDATE; returns the primary keys actually updated.

    `when[pk]` adds per-row conditions (`{"generation": 3}`: the row's values are written only while its generation
    is still 3, a compare-and-swap); `exclude` skips rows whose column has one of the values (`{"phase": [...]}`).
    A row a condition leaves out keeps every one of its columns and is not in the result.
    """
    if not rows:
        return set()
    sql, params, updated = bulk_set_statement(model, rows, when=when, exclude=exclude)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return updated(cursor.fetchall())


def bulk_set_statement(
    model: type[models.Model],
    rows: Mapping[Any, Mapping[str, Any]],
    *,
    when: Mapping[Any, Mapping[str, Any]] | None = None,
    exclude: Mapping[str, Sequence[Any]] | None = None,
) -> tuple[str, list[Any], Callable[[list[tuple]], set[Any]]]:
    """`bulk_set`'s UPDATE (`rows` not empty), for a caller to send with other statements
    (apps.core.db.deferred.read_together): (sql, params, what turns its rows into the primary keys updated)."""
    pk = model._meta.pk
    return (*_update_statement(model, rows, when, exclude), lambda fetched: {pk.to_python(row[0]) for row in fetched})


def bulk_set_deferred(
    model: type[models.Model],
    rows: Mapping[Any, Mapping[str, Any]],
    *,
    when: Mapping[Any, Mapping[str, Any]] | None = None,
    exclude: Mapping[str, Sequence[Any]] | None = None,
) -> None:
    """`bulk_set` whose result the caller does not need: inside `apps.core.db.deferred.deferred_writes()` sent with the
    block's next statement, at once otherwise."""
    if rows:
        execute_or_defer(*_update_statement(model, rows, when, exclude))


def _update_statement(
    model: type[models.Model], rows: Mapping[Any, Mapping[str, Any]], when: Any, exclude: Any
) -> tuple[str, list[Any]]:
    update = _update_postgresql if connection.vendor == "postgresql" else _update_case
    return update(model._meta, rows, when or {}, exclude or {})


def _exclusions(meta: Any, exclude: Mapping[str, Sequence[Any]], column: Any) -> tuple[list[str], list[Any]]:
    terms, params = [], []
    for name, values in exclude.items():
        field = meta.get_field(name)
        terms.append(f"{column(field)} NOT IN ({', '.join(['%s'] * len(values))})")
        params += [field.get_db_prep_value(value, connection) for value in values]
    return terms, params


def _json_default(value: Any) -> Any:
    """Values the JSON encoder does not know, as the text PostgreSQL reads back into their column's type."""
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, dt.timedelta):
        return f"{value.total_seconds()} seconds"
    raise TypeError(f"bulk_set: cannot send a {type(value).__name__} value: {value!r}")


_RECORD_TYPES: dict[tuple[str, models.Field], str] = {}


def _record_type(field: models.Field) -> str:
    """The column type a field's value is read as from a JSON record (remembered: Django formats it on each call)."""
    cached = _RECORD_TYPES.get((connection.vendor, field))
    if cached is None:
        target = field.target_field if field.is_relation else field
        # A JSON value is nested in the row as JSON ({"j": value}, so None stays JSON null).
        cached = "json" if target.get_internal_type() == "JSONField" else target.db_type(connection)
        _RECORD_TYPES[(connection.vendor, field)] = cached
    return cached


_UPDATES: dict[tuple, tuple[str, dict, dict, list[str], list[Any]]] = {}  # statement shape -> what a call reuses


def _update_shape(meta: Any, fields: tuple[str, ...], conditions: tuple[str, ...], exclude: tuple) -> tuple:
    """The statement for these columns, conditions and exclusions (the same text whatever the rows), how each field
    and condition travels in a row object, the flags a row must send, and the exclusions' parameters."""
    quote = connection.ops.quote_name
    table = quote(meta.db_table)
    columns = [f"k {_record_type(meta.pk)}"]
    # The keys again, as an array: the planner then finds the rows by primary key whatever it guesses of the
    # table's size and of the recordset's (a function it estimates at 100 rows), never by scanning the table.
    pk_column = f"{table}.{quote(meta.pk.column)}"
    sets, wheres = [], [f"{pk_column} = ANY(%s::{_record_type(meta.pk)}[])", f"{pk_column} = v.k"]
    for index, name in enumerate(fields):
        field = meta.get_field(name)
        column = quote(field.column)
        value = f"(v.v{index} -> 'j')::jsonb" if _record_type(field) == "json" else f"v.v{index}"
        columns += [f"h{index} boolean", f"v{index} {_record_type(field)}"]
        sets.append(f"{column} = CASE WHEN v.h{index} THEN {value} ELSE {table}.{column} END")
    for index, name in enumerate(conditions):
        field = meta.get_field(name)
        value = f"(v.w{index} -> 'j')::jsonb" if _record_type(field) == "json" else f"v.w{index}"
        columns += [f"wh{index} boolean", f"w{index} {_record_type(field)}"]
        wheres.append(f"(NOT v.wh{index} OR {table}.{quote(field.column)} = {value})")
    json_fields = {name for name in (*fields, *conditions) if _record_type(meta.get_field(name)) == "json"}
    positions = {name: (f"h{index}", f"v{index}", name in json_fields) for index, name in enumerate(fields)}
    checked = {name: (f"wh{index}", f"w{index}", name in json_fields) for index, name in enumerate(conditions)}
    # A row leaves out the fields it does not set: json_to_recordset reads them as NULL, so the flags need
    # COALESCE; cheaper to send them false.
    flags = [f"h{i}" for i in range(len(fields))] + [f"wh{i}" for i in range(len(conditions))]
    terms, extra = _exclusions(meta, dict(exclude), lambda field: f"{table}.{quote(field.column)}")
    sql = (
        f"UPDATE {table} SET {', '.join(sets)} FROM json_to_recordset(%s::json) AS v({', '.join(columns)}) "
        f"WHERE {' AND '.join(wheres + terms)} RETURNING {table}.{quote(meta.pk.column)}"
    )
    return sql, positions, checked, flags, extra


def _update_postgresql(meta: Any, rows: Mapping, when: Mapping, exclude: Mapping) -> tuple[str, list[Any]]:
    """`UPDATE … FROM json_to_recordset(%s::json)`: one row object per primary key, `hN` saying whether the row sets
    field N and `vN` its value; `whN`/`wN` the same for conditions. JSON null is SQL NULL. The statement of a shape
    (table, columns, conditions, exclusions) is built once per process."""
    fields = tuple(sorted({name for changes in rows.values() for name in changes}))
    conditions = tuple(sorted({name for checks in when.values() for name in checks}))
    excluded = tuple((name, tuple(values)) for name, values in sorted(exclude.items()))
    key = (meta.label, fields, conditions, excluded)
    shape = _UPDATES.get(key)
    if shape is None:
        if len(_UPDATES) >= 1024:  # shapes are few in practice; a caller varying them endlessly only rebuilds
            _UPDATES.clear()
        shape = _UPDATES.setdefault(key, _update_shape(meta, fields, conditions, excluded))
    sql, positions, checked, flags, extra = shape
    records = []
    for pk, changes in rows.items():
        record: dict[str, Any] = dict.fromkeys(flags, False)
        record["k"] = pk
        for names, values in ((positions, changes), (checked, when.get(pk) or {})):
            for name, value in values.items():
                flag, key_, nested = names[name]
                record[flag], record[key_] = True, {"j": value} if nested else value
        records.append(record)
    keys = list(rows)
    return sql, [fastjson.compact(records, _json_default), int_array_literal(keys) or keys, *extra]


def _update_case(meta: Any, rows: Mapping, when: Mapping, exclude: Mapping) -> tuple[str, list[Any]]:
    quote = connection.ops.quote_name
    pk_column = quote(meta.pk.column)
    fields = sorted({name for changes in rows.values() for name in changes})
    sets, params = [], []
    pk_prep = meta.pk.get_db_prep_value

    def condition(pk: Any) -> str:
        terms = [f"{pk_column} = %s"]
        params.append(pk if type(pk) is int else pk_prep(pk, connection))
        for name, value in (when.get(pk) or {}).items():
            field = meta.get_field(name)
            terms.append(f"{quote(field.column)} = %s")
            params.append(field.get_db_prep_value(value, connection))
        return " AND ".join(terms)

    for name in fields:
        field = meta.get_field(name)
        column = quote(field.column)
        cases = []
        for pk, changes in rows.items():
            if name in changes:
                cases.append(f"WHEN {condition(pk)} THEN %s")
                params.append(field.get_db_prep_value(changes[name], connection))
        sets.append(f"{column} = CASE {' '.join(cases)} ELSE {column} END")
    pks = list(rows)
    where = [f"{pk_column} IN ({', '.join(['%s'] * len(pks))})"]
    params += [pk if type(pk) is int else pk_prep(pk, connection) for pk in pks]
    terms, extra = _exclusions(meta, exclude, lambda field: quote(field.column))
    where += terms
    params += extra
    if when:  # a row whose conditions fail must not be reported as updated
        where.append("(" + " OR ".join(f"({condition(pk)})" for pk in pks) + ")")
    sql = f"UPDATE {quote(meta.db_table)} SET {', '.join(sets)} WHERE {' AND '.join(where)} RETURNING {pk_column}"
    return sql, params


def bulk_insert(model: type[models.Model], rows: Sequence[Mapping[str, Any]]) -> int:
    """Insert rows given as {field attname: value} dicts (`job_id`, not `job`) in one statement; returns the count.

    Fields a row leaves out get their default (`auto_now`/`auto_now_add`: now; nullable: NULL). No model
    instances are built, no signals are sent and no primary keys come back: for append-only rows (events, audit
    entries, usage records) written in bulk. PostgreSQL: one `INSERT … SELECT` from a JSON parameter (or COPY,
    apps.core.db.json_rows); SQLite: `executemany`.
    """
    if not rows:
        return 0
    meta = model._meta
    pg = connection.vendor == "postgresql"
    fields, columns = _columns_of(model, rows, raw=pg)
    quote = connection.ops.quote_name
    names = ", ".join(quote(f.column) for f in fields)
    if pg:
        if not insert_json_rows(meta, fields, list(zip(*columns, strict=True))):
            values = zip(*_copy_ready(fields, columns), strict=True)
            copy_rows(f"COPY {quote(meta.db_table)} ({names}) FROM STDIN", values)
    else:
        values = zip(*columns, strict=True)
        marks = ", ".join(["%s"] * len(fields))
        with connection.cursor() as cursor:
            cursor.executemany(f"INSERT INTO {quote(meta.db_table)} ({names}) VALUES ({marks})", list(values))
    return len(rows)


def copy_rows(sql: str, rows: Iterable[Sequence[Any]], cursor: Any = None) -> None:
    """PostgreSQL: run `COPY … FROM STDIN` with these rows of driver values, as one statement that Django's execute
    wrappers and query log see like any other (query counters count it), with Django's database errors."""

    def run(sql: str, params: Any, many: bool, context: dict[str, Any]) -> None:
        with context["cursor"].cursor.copy(sql) as copy:
            write = copy.write_row
            for row in rows:
                write(row)

    def go(wrapper: Any) -> None:
        with connection.wrap_database_errors:
            if isinstance(wrapper, CursorDebugWrapper):
                with wrapper.debug_sql(sql):
                    wrapper._execute_with_wrappers(sql, None, False, run)
            else:
                wrapper._execute_with_wrappers(sql, None, False, run)

    if cursor is not None:
        go(cursor)
        return
    with connection.cursor() as own:
        go(own)


class _Missing:
    def __init__(self, field: models.Field) -> None:
        self.field = field


def _given(default: Any) -> Any:
    if isinstance(default, _Missing):
        raise ValueError(f"bulk_insert: {default.field.model.__name__}.{default.field.attname} has no default")
    return default


def _columns_of(model: type[models.Model], rows: Sequence[Mapping[str, Any]], *, raw: bool) -> tuple[list, list]:
    """The fields to write and one list of values per field (`raw`: Python values as given, JSON values included,
    for PostgreSQL, whose paths adapt datetimes, Decimals and UUIDs themselves (COPY: after `_copy_ready`); else
    prepared as the ORM would)."""
    meta = model._meta
    now = timezone.now()
    given = rows[0].keys()
    uniform = all(row.keys() == given for row in rows)  # (the usual case: every row names the same fields)
    fields = [
        f
        for f in meta.concrete_fields
        if not f.primary_key or (f.attname in given if uniform else any(f.attname in r for r in rows))
    ]
    columns = []
    for field in fields:
        name = field.attname
        if name in given and (uniform or all(name in row for row in rows)):
            values = [row[name] for row in rows]
        else:
            if getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False):
                default: Any = now
            elif field.has_default():
                default = field.get_default()
            elif field.null:
                default = None
            else:
                default = _Missing(field)
            values = [row[name] if name in row else _given(default) for row in rows]
        if not raw or (field.get_internal_type() == "JSONField" and field.encoder is not None):
            prep = _prep(field)
            values = [prep(value) for value in values]
        columns.append(values)
    return fields, columns


def _copy_ready(fields: list, columns: list) -> list:
    """`_columns_of(raw=True)`'s columns for COPY, whose text format takes a JSON column's JSON text itself (encoded
    by orjson; None is JSON null, as get_db_prep_value gives the other path and SQLite)."""
    return [
        [fastjson.compact(value, fastjson.not_json) for value in values]
        if field.get_internal_type() == "JSONField" and field.encoder is None
        else values
        for field, values in zip(fields, columns, strict=True)
    ]


def copy_insert_rows(model: type[models.Model], names: Sequence[str], rows: Sequence[Sequence[Any]]) -> int:
    """Insert rows given as tuples of plain driver values (str, int, Decimal, aware datetimes, UUIDs, None) in the
    order of the field attnames `names`, in one statement: on PostgreSQL one `INSERT … SELECT` from a JSON parameter
    (or COPY, apps.core.db.json_rows), `bulk_insert` elsewhere. For hot
    append paths that build their rows directly, with no dict per row. On PostgreSQL a field left out gets only the
    database's default (Django declares none), so name every column that is not nullable."""
    if not rows:
        return 0
    if connection.vendor != "postgresql":
        return bulk_insert(model, [dict(zip(names, row, strict=True)) for row in rows])
    meta = model._meta
    quote = connection.ops.quote_name
    by_attname = {field.attname: field for field in meta.concrete_fields}
    fields = [by_attname[name] for name in names]
    if not insert_json_rows(meta, fields, rows):
        columns = ", ".join(quote(field.column) for field in fields)
        copy_rows(f"COPY {quote(meta.db_table)} ({columns}) FROM STDIN", rows)
    return len(rows)

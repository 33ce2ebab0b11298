"""PostgreSQL: a batch of rows inserted by one statement, the rows travelling as one JSON parameter.

`INSERT INTO t (...) SELECT (e.v ->> 0)::bigint, e.v ->> 1, (e.v -> 2)::jsonb, ... FROM json_array_elements(%s::json)`:
the rows are encoded by orjson (C) into one text parameter, and the statement is one round trip. COPY takes two (the
server's "ready for data", then the result) and formats each value in Python: for the few dozen rows a reconcile
pass appends (events, audit rows, usage records, ledger entries, tokens), three times this client CPU. COPY stays the
path for large batches, the server's fastest load.

A value travels as JSON only when it reads back exactly: strings, integers of 64 bits, booleans, None (SQL NULL, or
JSON null in a JSON column, as the COPY path stores it), finite floats, Decimals and timedeltas (as text), datetimes
and dates (ISO 8601), UUIDs, and plain JSON in a JSON column (no custom encoder). For anything else
`insert_json_rows` returns False and the caller COPYs, whose own adaptation then decides (and names what it refuses).
Text columns take the value without a cast (`varchar(n)` still refuses a longer value, as an INSERT does).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Sequence
from typing import Any

import orjson
from django.db import connection, models

from . import fastjson
from .deferred import execute_or_defer

# At most this many rows per statement (a larger batch is COPY's).
MAX_ROWS = 1000
# Datetimes are orjson's to write (ISO 8601, as isoformat() writes them) unless the rows hold JSON columns, where
# one nested in a JSON value must be refused (not_json), as the ORM refuses it: then the datetime columns are
# converted first.
_OPTIONS = orjson.OPT_NON_STR_KEYS
_OPTIONS_JSON = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME
_TEXT = frozenset({"CharField", "SlugField", "TextField", "EmailField", "URLField"})
_CAST = frozenset(
    {
        "AutoField",
        "BigAutoField",
        "BigIntegerField",
        "BooleanField",
        "ForeignKey",
        "IntegerField",
        "PositiveBigIntegerField",
        "PositiveIntegerField",
        "PositiveSmallIntegerField",
        "SmallIntegerField",
        "UUIDField",
    }
)


_UNSET = object()


class _NotExact(Exception):
    """A value JSON would not carry exactly (a float that is not finite)."""


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        raise _NotExact
    return value


# Values of another type (a string a caller already formatted) travel as they are, for the column's cast to read.
def _iso(value: Any) -> Any:
    return value.isoformat() if isinstance(value, dt.date) else value


def _text(value: Any) -> Any:
    return None if value is None else str(value)


def _seconds(value: Any) -> Any:
    return f"{value.total_seconds()} seconds" if isinstance(value, dt.timedelta) else value


_CONVERT: dict[str, Callable[[Any], Any]] = {
    "DateTimeField": _iso,
    "DateField": _iso,
    "DecimalField": _text,
    "DurationField": _seconds,
    "FloatField": _finite,
}
# The statement, (column, conversion) pairs, orjson's options.
_Shape = tuple[str, tuple[tuple[int, Callable[[Any], Any]], ...], int]
_SHAPES: dict[tuple, _Shape | None] = {}
_DATES = frozenset({"DateTimeField", "DateField"})


def _shape(meta: Any, fields: Sequence[models.Field]) -> _Shape | None:
    """The statement for these columns and the conversions their values need first; None when a column's type does
    not travel as JSON exactly."""
    quote = connection.ops.quote_name
    expressions, convert = [], []
    has_json = any(field.get_internal_type() == "JSONField" for field in fields)
    for index, field in enumerate(fields):
        kind = field.get_internal_type()
        if kind == "JSONField" and field.encoder is None:
            expressions.append(f"(e.v -> {index})::jsonb")
        elif kind in _TEXT:
            expressions.append(f"e.v ->> {index}")
        elif kind in _CAST or kind in _CONVERT:
            expressions.append(f"(e.v ->> {index})::{field.db_type(connection)}")
            if kind in _CONVERT and (has_json or kind not in _DATES):
                convert.append((index, _CONVERT[kind]))
        else:
            return None
    names = ", ".join(quote(field.column) for field in fields)
    sql = (
        f"INSERT INTO {quote(meta.db_table)} ({names}) SELECT {', '.join(expressions)} "
        "FROM json_array_elements(%s::json) WITH ORDINALITY AS e(v, n) ORDER BY e.n"
    )
    return sql, tuple(convert), _OPTIONS_JSON if has_json else _OPTIONS


def insert_json_rows(meta: Any, fields: Sequence[models.Field], rows: Sequence[Sequence[Any]]) -> bool:
    """Insert `rows` (sequences of Python values in `fields` order) in one statement; False, with nothing written,
    when the batch is too large or a column or value would not travel exactly (the caller then COPYs them)."""
    if len(rows) > MAX_ROWS:
        return False
    key = (connection.vendor, meta.label, tuple(fields))
    shape = _SHAPES.get(key, False)
    if shape is False:
        if len(_SHAPES) >= 256:  # shapes are few in practice; a caller varying them endlessly only rebuilds
            _SHAPES.clear()
        shape = _SHAPES.setdefault(key, _shape(meta, fields))
    if shape is None:
        return False
    sql, convert, options = shape
    try:
        if convert:
            rows = [list(row) for row in rows]
            for index, function in convert:
                last, out = _UNSET, None  # rows of a batch mostly share a value (its `now`): converted once
                for row in rows:
                    value = row[index]
                    if value is not last:
                        last, out = value, function(value)
                    row[index] = out
        payload = orjson.dumps(rows, default=fastjson.not_json, option=options)
    except (orjson.JSONEncodeError, _NotExact):  # an integer beyond 64 bits, a set, bytes, NaN, a lone surrogate...
        return False
    execute_or_defer(sql, [payload.decode()])  # (inside apps.core.db.deferred's block: with the next statement)
    return True

"""One UPDATE for many rows with different values: what a reconcile pass writes back, in one statement.

Django's `bulk_update` builds one `When(pk=...)` filter per row and field, which costs more CPU than the rows it
saves; a pass that writes the status of a hundred jobs wants one statement of plain `CASE id WHEN ... THEN ...`
terms instead. Values go through each field's `get_db_prep_value`, so JSON, datetimes and booleans are stored as
the ORM would store them. Works on PostgreSQL and SQLite (both have `RETURNING`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.db import connection, models


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
    meta = model._meta
    quote = connection.ops.quote_name
    pk_column = quote(meta.pk.column)
    fields = sorted({name for changes in rows.values() for name in changes})
    when = when or {}
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
    for name, values in (exclude or {}).items():
        field = meta.get_field(name)
        where.append(f"{quote(field.column)} NOT IN ({', '.join(['%s'] * len(values))})")
        params += [field.get_db_prep_value(value, connection) for value in values]
    if when:  # a row whose conditions fail must not be reported as updated
        where.append("(" + " OR ".join(f"({condition(pk)})" for pk in pks) + ")")
    sql = f"UPDATE {quote(meta.db_table)} SET {', '.join(sets)} WHERE {' AND '.join(where)} RETURNING {pk_column}"
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {meta.pk.to_python(row[0]) for row in cursor.fetchall()}

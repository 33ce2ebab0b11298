"""Reads a pass makes every cycle whose rows mostly did not change since the last one: the server sends a row's
columns only when the row changed, and the client reuses what it built of it otherwise (PostgreSQL).

A row's change stamp is its version's `xmin` and `ctid`. Every UPDATE writes a new row version, whoever makes it
(the ORM, a bulk write, raw SQL, another process): a version written by another transaction has another `xmin`, and
one written later by the same transaction another `ctid` (the versions a transaction wrote stay in place until it
ends). The client sends the (id, stamp) pairs it holds; each row whose pair is among them comes back as its id,
stamp and NULLs, and only the others bring their columns, which the driver then converts.

    rows = StampedRows()
    sql = f"SELECT t.id, {stamp('t')}, {known()}, {fresh_only(['t.a', 't.b'])}, t.c FROM t {join('t')}"
    params, finish = rows.read(build, width=2)
    cursor.execute(sql, params)
    built = finish(cursor.fetchall())  # [(build(id, a, b), c)]: for a row as last read, what was built then

`read` takes the memo as it is when the statement is made, so the rows fetched match the pairs sent, and keeps,
for the next read, the rows this one returned only. Objects are shared between reads: treat them as read-only.
A row moved without a change (VACUUM FULL, CLUSTER) gets a new stamp: it is built again, no more.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from .prepared import int_array_literal

T = TypeVar("T")


def stamp(table: str) -> str:
    """A row version's stamp (`table`: its name or alias in the query), as text: `12345(0,7)` (xmin, ctid)."""
    return f"{table}.xmin::text || {table}.ctid::text"


def join(table: str, alias: str = "k", *, stamped: str = "") -> str:
    """The join of the client's (id, stamp) pairs to `table`'s rows: two parameters (`StampedRows.read`).
    `stamped`: the column that has the row's stamp already (a subquery's), instead of `stamp(table)`."""
    return (
        f"LEFT JOIN unnest(%s::bigint[], %s::text[]) AS {alias}(id, stamp) "
        f"ON {alias}.id = {table}.id AND {alias}.stamp = {stamped or stamp(table)}"
    )


def known(alias: str = "k") -> str:
    """Whether the client holds the row's version (a boolean column)."""
    return f"{alias}.id IS NOT NULL"


def fresh_only(columns: Sequence[str], alias: str = "k") -> str:
    """The columns, each NULL where the client holds the row's version (no value to send, none to convert)."""
    return ", ".join(f"CASE WHEN {alias}.id IS NULL THEN {column} END" for column in columns)


class StampedRows(Generic[T]):
    """What was built of the rows of the last read (id -> (stamp, object)); see the module docstring."""

    def __init__(self) -> None:
        self._built: dict[int, tuple[str, T]] = {}

    def read(self, build: Callable[..., T], width: int) -> tuple[list[str], Callable[[list[tuple]], list[tuple]]]:
        """The two parameters of `join()` (the ids and stamps held, as array texts), and what turns the fetched rows
        `(id, stamp, known, *columns, *rest)` (`columns`: `width` values, NULL where known) into `(object, *rest)`
        tuples, in order; a row's object is `build(id, *columns)`, or the one built of its version before."""
        previous = self._built
        # (A stamp is digits, parentheses and a comma: quoted, it needs no escape.)
        params = [
            int_array_literal(list(previous)) or "{}",
            "{" + ",".join(f'"{s}"' for s, _ in previous.values()) + "}",
        ]

        def finish(fetched: list[tuple]) -> list[tuple]:
            memo: dict[int, tuple[str, T]] = {}
            out = []
            for row in fetched:
                pk, stamp = row[0], row[1]
                found = previous[pk] if row[2] else None  # (known: sent from `previous`, at this stamp)
                if found is None:
                    found = (stamp, build(pk, *row[3 : 3 + width]))
                memo[pk] = found
                out.append((found[1], *row[3 + width :]))
            self._built = memo
            return out

        return params, finish

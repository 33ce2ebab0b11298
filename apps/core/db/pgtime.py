"""PostgreSQL `timestamptz` values parsed by psycopg's C loader, not its pure-Python one.

Django's psycopg 3 support registers its own `timestamptz` loader on every connection
(`django.db.backends.postgresql.psycopg_any.BaseTzLoader`: the value with Django's connection time zone as its
tzinfo). It subclasses psycopg's pure-Python `TimestamptzLoader`, because the C one that `psycopg[binary]` brings is
final, so every timestamp a query returns is parsed in Python (Django ticket #36960, psycopg issue #1273). A
reconcile pass reads a few thousand of them.

On each new PostgreSQL connection, `install` registers a loader with Django's contract (same class hierarchy, same
`timezone` attribute, so Django's cursors keep it) whose parsing is the C loader's: about three times less CPU per
value. Without psycopg's C implementation nothing changes.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

TIMESTAMPTZ = "timestamptz"


@lru_cache(maxsize=8)
def fast_loader(timezone: Any) -> type | None:
    """A Django-compatible timestamptz loader for `timezone` that parses in C (None: no C loader installed)."""
    import psycopg
    from django.db.backends.postgresql.psycopg_any import BaseTzLoader
    from psycopg.pq import Format
    from psycopg.types.datetime import TimestamptzLoader

    optimised = psycopg.adapters.get_loader(psycopg.adapters.types[TIMESTAMPTZ].oid, Format.TEXT)
    if optimised is None or issubclass(optimised, TimestamptzLoader):
        return None  # the pure-Python implementation: Django's own loader is as fast

    class FastTzLoader(BaseTzLoader):
        def __init__(self, oid: int, context: Any = None) -> None:
            super().__init__(oid, context)
            self._parse = optimised(oid, context).load

        def load(self, data: Any) -> Any:
            value = self._parse(data)
            # Django's contract: the value with its connection's tzinfo. psycopg already gives that one when the
            # session time zone is Django's (UTC: both datetime.timezone.utc), and replace() costs a new object.
            return value if value.tzinfo is self.timezone else value.replace(tzinfo=self.timezone)

    FastTzLoader.timezone = timezone
    return FastTzLoader


def install(sender: Any, connection: Any, **kwargs: Any) -> None:
    """`connection_created` receiver: the fast loader on a new psycopg 3 connection."""
    if connection.vendor != "postgresql":
        return
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    if not is_psycopg3:
        return
    loader = fast_loader(connection.timezone)
    if loader is not None:
        connection.connection.adapters.register_loader(TIMESTAMPTZ, loader)

"""`PreparedUpdate`: an UPDATE of a fixed shape compiled once per database (the write side of apps.core.db.prepared):
a pass's key revocations and finalize writes."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.models import Expression, QuerySet
from django.db.models.sql.subqueries import UpdateQuery

from .prepared import Arg, _Bound


class _ArgValue(Expression):
    """An `Arg` given as an UPDATE's new value: one placeholder, its value prepared for the field at each call."""

    def __init__(self, arg: Arg) -> None:
        super().__init__()
        self.arg = arg

    def resolve_expression(self, *args: Any, **kwargs: Any) -> _ArgValue:
        return self

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        field = self.target

        def pack(value: Any) -> Any:
            return field.get_db_prep_save(value, connection=connection)

        return "%s", [_Bound(self.arg.name, pack)]


class PreparedUpdate:
    """`PreparedUpdate(lambda: Model.objects.filter(pk__any_of=Arg("pks")), done=True).run(pks=[...])`: an UPDATE
    of a fixed shape compiled once per database, as `QuerySet.update()` would run it; returns the rows updated.
    New values may be constants, expressions or `Arg`s (given at each call, prepared as the field prepares them)."""

    def __init__(self, build: Callable[[], QuerySet], **values: Any) -> None:
        self._build, self._values = build, values
        self._compiled: dict[str, tuple[str, tuple]] = {}

    def _compile(self, using: str) -> tuple[str, tuple]:
        entry = self._compiled.get(using)
        if entry is None:
            query = self._build().query.chain(UpdateQuery)
            values = {}
            for name, value in self._values.items():
                if isinstance(value, Arg):
                    value = _ArgValue(value)
                    value.target = query.get_meta().get_field(name)
                values[name] = value
            query.add_update_values(values)
            if query.related_updates or query.order_by:
                raise TypeError("PreparedUpdate: one table, no ordering")
            query.clear_select_clause()
            sql, params = query.get_compiler(using).as_sql()
            entry = self._compiled.setdefault(using, (sql, tuple(params)))
        return entry

    def _bound(self, using: str, arguments: Mapping[str, Any]) -> tuple[str, tuple]:
        sql, params = self._compile(using)
        missing = {p.name for p in params if type(p) is _Bound} - arguments.keys()
        if missing:
            raise TypeError(f"PreparedUpdate: missing argument(s) {', '.join(sorted(missing))}")
        return sql, tuple(p.pack(arguments[p.name]) if type(p) is _Bound else p for p in params)

    def run(self, using: str = DEFAULT_DB_ALIAS, **arguments: Any) -> int:
        sql, params = self._bound(using, arguments)
        with transaction.mark_for_rollback_on_error(using=using), connections[using].cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.rowcount

    def run_deferred(self, **arguments: Any) -> None:
        """`run` whose row count the caller does not need: inside `apps.core.db.deferred.deferred_writes()` sent with
        the block's next statement, at once otherwise (default database)."""
        from .deferred import execute_or_defer

        execute_or_defer(*self._bound(DEFAULT_DB_ALIAS, arguments))

    def sql(self, using: str = DEFAULT_DB_ALIAS) -> tuple[str, tuple]:
        """The statement and its parameters, `Arg`s unbound (for tests)."""
        return self._compile(using)

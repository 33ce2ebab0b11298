"""Reads of a fixed shape that a reconcile pass runs every cycle, compiled to SQL once per database.

Building a QuerySet (`filter`, `annotate`, window expressions) and compiling it costs Django more CPU than the
server spends answering a query of a few hundred rows. A `PreparedRead` builds its `values_list` QuerySet once per
database alias, keeps the compiler with its SQL and parameters, and then only executes: Django's own execute path
(execute wrappers, the debug query log, database error wrapping) and its own converters (JSON, datetimes, UUIDs),
so rows are exactly what iterating the QuerySet gives. `models()` turns them into model instances as the ORM does.

What varies between calls is a list argument: `filter(pk__any_of=Arg("pks"))` in the QuerySet, `rows(pks=[...])`
at the call. The `any_of` lookup takes a whole list as one parameter (PostgreSQL `= ANY(%s::type[])`, SQLite
`IN (SELECT value FROM json_each(%s))`), so the statement's text does not depend on how many values there are; it
also works in any QuerySet (`Job.all_tenants.filter(pk__any_of=[1, 2])`), where `__in` would compile one
placeholder per value. Nothing else may vary: no `timezone.now()` in a prepared QuerySet.

One compiled statement per alias serves every thread: each call runs a copy of the compiler bound to the calling
thread's connection, and the kept one holds no connection, so a finished thread's connection is not kept open.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Field, Lookup, Model, QuerySet
from django.db.models.fields.related import ForeignObject
from django.db.models.query import ValuesListIterable


class Arg:
    """A list argument of a prepared read, named in its QuerySet and given at each call."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Arg({self.name!r})"


class _Bound:
    """An `Arg` inside compiled parameters: how to turn the call's values into the one parameter."""

    def __init__(self, name: str, pack: Callable[[Iterable[Any]], Any]) -> None:
        self.name, self.pack = name, pack


class AnyOf(Lookup):
    """`field__any_of=values`: the field equals one of the values, which travel as one parameter."""

    lookup_name = "any_of"
    prepare_rhs = False

    def get_prep_lookup(self) -> Any:
        if not isinstance(self.rhs, Arg | list | tuple | set | frozenset):
            raise TypeError(f"any_of takes a list of values or an Arg, not {type(self.rhs).__name__}")
        return self.rhs

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        lhs_sql, lhs_params = self.process_lhs(compiler, connection)
        field = self.lhs.output_field
        postgresql = connection.vendor == "postgresql"

        def pack(values: Iterable[Any]) -> Any:
            prepped = [field.get_db_prep_value(value, connection, prepared=False) for value in values]
            return prepped if postgresql else json.dumps(prepped)

        param = _Bound(self.rhs.name, pack) if isinstance(self.rhs, Arg) else pack(self.rhs)
        if postgresql:
            return f"{lhs_sql} = ANY(%s::{field.db_type(connection)}[])", [*lhs_params, param]
        return f"{lhs_sql} IN (SELECT value FROM json_each(%s))", [*lhs_params, param]


Field.register_lookup(AnyOf)
ForeignObject.register_lookup(AnyOf)  # relations take their lookups from ForeignObject down, not from Field


class PreparedRead:
    """`PreparedRead(lambda: Model.objects.filter(...).values_list(...)).rows()`: the QuerySet's rows as tuples."""

    def __init__(self, build: Callable[[], QuerySet]) -> None:
        self._build = build
        self._compiled: dict[str, tuple[Any, str, tuple, bool]] = {}  # alias -> (unbound compiler, sql, params, args)

    def _compile(self, using: str) -> tuple[Any, str, tuple, bool]:
        entry = self._compiled.get(using)
        if entry is None:
            queryset = self._build()
            if queryset._iterable_class is not ValuesListIterable:
                raise TypeError("PreparedRead: build() must return a values_list() QuerySet (not flat, not named)")
            template = queryset.query.get_compiler(using=using)
            sql, params = template.as_sql()  # also sets up the select list the converters are read from
            template.connection = None
            entry = (template, sql, tuple(params), any(type(p) is _Bound for p in params))
            entry = self._compiled.setdefault(using, entry)
        return entry

    def _compiler(self, using: str, arguments: Mapping[str, Iterable[Any]]) -> Any:
        template, sql, params, has_args = self._compile(using)
        if has_args:
            missing = {p.name for p in params if type(p) is _Bound} - arguments.keys()
            if missing:
                raise TypeError(f"PreparedRead: missing argument(s) {', '.join(sorted(missing))}")
            params = tuple(p.pack(arguments[p.name]) if type(p) is _Bound else p for p in params)
        compiler = copy.copy(template)
        compiler.connection = connections[using]
        compiler.as_sql = lambda *a, **k: (sql, params)
        return compiler

    def rows(self, using: str = DEFAULT_DB_ALIAS, **arguments: Iterable[Any]) -> list[tuple]:
        return list(self._compiler(using, arguments).results_iter(tuple_expected=True))

    def models(self, model: type[Model], using: str = DEFAULT_DB_ALIAS, **arguments: Iterable[Any]) -> list[Model]:
        """The rows as `model` instances, for a read of `model_fields(model)` (what the ORM would load); a read of
        `model_fields(model, only=...)` gives instances whose other fields load on access."""
        query = self._compile(using)[0].query
        names = list(query.values_select)
        if names != model_fields(model, only=set(names)) or query.annotation_select:
            raise TypeError(f"PreparedRead.models: read {model.__name__}'s fields in field order, as model_fields()")
        from_db = model.from_db
        return [from_db(using, names, row) for row in self.rows(using, **arguments)]

    def sql(self, using: str = DEFAULT_DB_ALIAS, **arguments: Iterable[Any]) -> tuple[str, tuple]:
        """The statement and parameters a call runs (for tests and EXPLAIN)."""
        return self._compiler(using, arguments).as_sql()


def model_fields(model: type[Model], only: set[str] | None = None) -> list[str]:
    """The attnames a model instance is loaded from, in field order: `values_list(*model_fields(M))`. With `only`,
    those of them, still in field order (what `Model.from_db` needs of a partial row)."""
    return [field.attname for field in model._meta.concrete_fields if only is None or field.attname in only]

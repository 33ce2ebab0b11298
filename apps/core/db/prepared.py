"""Reads of a fixed shape that a reconcile pass runs every cycle, compiled to SQL once per database.

Building a QuerySet (`filter`, `annotate`, window expressions) and compiling it costs Django more CPU than the
server spends answering a query of a few hundred rows. A `PreparedRead` builds its `values_list` QuerySet once per
database alias, keeps the compiler with its SQL and parameters, and then only executes: Django's own execute path
(execute wrappers, the debug query log, database error wrapping) and its own converters (JSON, datetimes, UUIDs),
so rows are exactly what iterating the QuerySet gives. `models()` turns them into model instances as the ORM does.

Converting rows is most of what a read of a few hundred rows costs the client, so it is planned once per connection:
a column whose only converter is `JSONField.from_db_value` (no custom decoder) is decoded without Django's
per-value dispatch (by orjson, where it gives the same values), any other column keeps
Django's converters, called as Django calls them. Models without `pre_init`/`post_init`
receivers and without their own `__init__` or `from_db` are built without going through `Model.__init__`, as
`Model.from_db` would build them: the same attributes, the same state.

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
import functools
import json
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import orjson
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Field, JSONField, Lookup, Model, QuerySet, signals
from django.db.models.base import ModelState
from django.db.models.fields.related import ForeignObject
from django.db.models.fields.related_descriptors import ForeignKeyDeferredAttribute
from django.db.models.query import ValuesListIterable
from django.db.models.query_utils import DeferredAttribute
from django.db.models.sql.constants import CURSOR

T = TypeVar("T")


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

        integers = postgresql and _integer_column(field)

        def pack(values: Iterable[Any]) -> Any:
            if integers:
                values = values if isinstance(values, list | tuple) else list(values)
                literal = int_array_literal(values)
                if literal is not None:
                    return literal
            prepped = [field.get_db_prep_value(value, connection, prepared=False) for value in values]
            return prepped if postgresql else json.dumps(prepped)

        param = _Bound(self.rhs.name, pack) if isinstance(self.rhs, Arg) else pack(self.rhs)
        if postgresql:
            return f"{lhs_sql} = ANY(%s::{field.db_type(connection)}[])", [*lhs_params, param]
        return f"{lhs_sql} IN (SELECT value FROM json_each(%s))", [*lhs_params, param]


_INTEGER_TYPES = frozenset(
    {
        "AutoField",
        "BigAutoField",
        "SmallAutoField",
        "IntegerField",
        "BigIntegerField",
        "SmallIntegerField",
        "PositiveIntegerField",
        "PositiveBigIntegerField",
        "PositiveSmallIntegerField",
    }
)


def _integer_column(field: Field) -> bool:
    target = field.target_field if field.is_relation else field
    return target.get_internal_type() in _INTEGER_TYPES


def int_array_literal(values: list[Any] | tuple[Any, ...]) -> str | None:
    """PostgreSQL array text (`{1,2,3}`) of a list of plain ints, for a `%s::bigint[]` parameter: one string the
    driver passes as it is, where it would adapt a list element by element in Python. None if any value is not an
    int (bool included), for the caller to send the list."""
    for value in values:
        if type(value) is not int:
            return None
    return "{" + ",".join(map(str, values)) + "}"


Field.register_lookup(AnyOf)
ForeignObject.register_lookup(AnyOf)  # relations take their lookups from ForeignObject down, not from Field


# 19 digits in a row: what an integer orjson cannot read exactly (beyond 64 bits; it gives a float) must contain.
# Found by mapping every digit to "0" (bytes.translate, a table lookup in C) and looking for 19 of them: several
# times cheaper than a regular expression over a document, and UTF-8 never puts an ASCII digit inside a wider letter.
_DIGITS_AS_ZERO = bytes.maketrans(b"0123456789", b"0000000000")
_LONG_DIGITS = b"0" * 19


def _json_value(value: Any, loads: Callable[[Any], Any] = orjson.loads) -> Any:
    """`JSONField.from_db_value` for a field without a custom decoder. A document that cannot hold an integer
    beyond 64 bits (no 19 digits in a row) is decoded by orjson, which gives the same values as `json.loads` for
    it; any other (and any orjson refuses, such as NaN) by `json.loads`."""
    if value.__class__ is str:
        try:
            if len(value) < 19 or _LONG_DIGITS not in value.encode().translate(_DIGITS_AS_ZERO):
                return loads(value)
        except (orjson.JSONDecodeError, UnicodeEncodeError):  # (a lone surrogate: json.loads reads it)
            pass
    elif value is None or not isinstance(value, bytes):
        return value  # NULL; or a key transform SQLite extracted as its SQL type
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


json_from_db = _json_value  # a plain JSONField's stored text, decoded as the ORM (and PreparedRead) decodes it


def _column_converter(converters: list[Callable], expression: Any, connection: Any) -> Callable[[Any], Any]:
    """One function for a column's converters: orjson for a plain JSONField's, Django's own otherwise."""
    if len(converters) == 1:
        only = converters[0]
        field = getattr(only, "__self__", None)
        if (
            isinstance(field, JSONField)
            and field.decoder is None
            and getattr(only, "__func__", None) is JSONField.from_db_value
        ):
            return _json_value
        return lambda value: only(value, expression, connection)

    def convert(value: Any) -> Any:
        for converter in converters:
            value = converter(value, expression, connection)
        return value

    return convert


@functools.cache
def _plain_fields(model: type[Model]) -> bool:
    """Whether setting each of `model`'s concrete fields on a new instance only stores the value (no descriptor of
    a field type that converts or records what it is given)."""
    plain = (DeferredAttribute, ForeignKeyDeferredAttribute)
    return all(
        type(model.__dict__.get(f.attname, getattr(model, f.attname, None))) in plain
        for f in model._meta.concrete_fields
    )


def _fast_init(model: type[Model]) -> bool:
    """Whether instances of `model` may be built from a row without Model.__init__ (nothing would observe it)."""
    return (
        model.__init__ is Model.__init__
        and model.from_db.__func__ is Model.from_db.__func__
        and not signals.pre_init.has_listeners(model)
        and not signals.post_init.has_listeners(model)
        and _plain_fields(model)
    )


def _converted(row: Any, columns: list[tuple[int, Callable[[Any], Any]]]) -> tuple:
    if not columns:
        return tuple(row)
    row = list(row)
    for index, convert in columns:
        row[index] = convert(row[index])
    return tuple(row)


def _rows_of(fetched: list, columns: list[tuple[int, Callable[[Any], Any]]]) -> list[tuple]:
    if not columns:
        return [tuple(row) for row in fetched] if fetched and type(fetched[0]) is not tuple else fetched
    return [_converted(row, columns) for row in fetched]


def reuse_built(
    previous: Mapping[tuple, T], rows: Iterable[tuple], build: Callable[[tuple], T], key_from: int = 0
) -> tuple[list[T], dict[tuple, T]]:
    """`[build(row) for row in rows]`, except that a row equal to one in `previous` (a fetched row -> what was built
    of it) gets what was built then; also returns the memo of these rows only, what the next call may meet again.
    A row with an unhashable value (an array column) is built each time. `key_from`: the columns before it are
    determined by the others (a job's uid by its id) and are left out of the comparison (a UUID hashes and compares
    in Python)."""
    memo: dict[tuple, T] = {}
    out = []
    for row in rows:
        key = row[key_from:] if key_from else row
        try:
            found = previous.get(key)
        except TypeError:
            out.append(build(row))
            continue
        if found is None:
            found = build(row)
        memo[key] = found
        out.append(found)
    return out, memo


class PreparedRead:
    """`PreparedRead(lambda: Model.objects.filter(...).values_list(...)).rows()`: the QuerySet's rows as tuples."""

    def __init__(self, build: Callable[[], QuerySet], *, key_from: int = 0) -> None:
        """`key_from`: for `built()`, the leading columns that the others determine (see `reuse_built`)."""
        self._build = build
        self._key_from = key_from
        self._compiled: dict[str, tuple[Any, str, tuple, bool]] = {}  # alias -> (unbound compiler, sql, params, args)
        # connection -> (column count, (index, converter) pairs): converters may be bound to a connection's ops.
        self._plans: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._built: dict[Callable, dict[tuple, Any]] = {}  # make -> {fetched row: what it built}, last call

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

    def _plan(self, compiler: Any) -> tuple[int | None, list[tuple[int, Callable[[Any], Any]]]]:
        connection = compiler.connection
        plan = self._plans.get(connection)
        if plan is None:
            fields = [s[0] for s in compiler.select[0 : compiler.col_count]]
            if compiler.has_composite_fields(fields):
                raise TypeError("PreparedRead: composite fields are not supported")
            converters = compiler.get_converters(fields)
            columns = [(i, _column_converter(c, e, connection)) for i, (c, e) in sorted(converters.items())]
            plan = self._plans[connection] = (compiler.col_count if compiler.has_extra_select else None, columns)
        return plan

    def _fetch(self, using: str, arguments: Mapping[str, Iterable[Any]]) -> tuple[list, list]:
        """The rows as the driver gives them (extra columns cut), and the plan of their converters."""
        compiler = self._compiler(using, arguments)
        width, columns = self._plan(compiler)
        cursor = compiler.execute_sql(CURSOR)
        try:
            fetched = cursor.fetchall()
        finally:
            cursor.close()
        if width is not None:
            fetched = [row[:width] for row in fetched]
        return fetched, columns

    def rows(self, using: str = DEFAULT_DB_ALIAS, **arguments: Iterable[Any]) -> list[tuple]:
        fetched, columns = self._fetch(using, arguments)
        return _rows_of(fetched, columns)

    def _planned(self, using: str, arguments: Mapping[str, Iterable[Any]]) -> tuple[str, tuple, Any, list]:
        """The statement, its parameters, and the plan of its rows (width to cut to, converters)."""
        compiler = self._compiler(using, arguments)
        width, columns = self._plan(compiler)
        return *compiler.as_sql(), width, columns

    def statement(
        self, using: str = DEFAULT_DB_ALIAS, **arguments: Iterable[Any]
    ) -> tuple[str, tuple, Callable[[list], list[tuple]]]:
        """The statement, its parameters, and what turns the rows the driver fetched for it into `rows()`'s: for a
        read sent with others in one round trip (apps.core.db.deferred.read_together)."""
        sql, params, width, columns = self._planned(using, arguments)

        def finish(fetched: list) -> list[tuple]:
            return _rows_of([row[:width] for row in fetched] if width is not None else fetched, columns)

        return sql, params, finish

    def _reused(self, make: Callable[..., T], fetched: list, columns: list) -> list[T]:
        """`make`'s objects of the fetched rows, reusing those of the rows the previous call fetched too."""
        previous = self._built.get(make) or {}
        out, self._built[make] = reuse_built(
            previous, fetched, lambda row: make(*_converted(row, columns)), self._key_from
        )
        return out

    def built(self, make: Callable[..., T], using: str = DEFAULT_DB_ALIAS, **arguments: Iterable[Any]) -> list[T]:
        """`[make(*row) for row in self.rows(...)]`, except that a row equal to one the previous call of `built`
        fetched (as the driver gives it: before conversion) gets the object built then: no conversion, no new
        object. For a read a pass runs every cycle whose rows mostly stay as they were (the admitted jobs, the
        queue heads). The objects, and the values in them, are shared between calls: treat them as read-only."""
        fetched, columns = self._fetch(using, arguments)
        return self._reused(make, fetched, columns)

    def models(self, model: type[Model], using: str = DEFAULT_DB_ALIAS, **arguments: Iterable[Any]) -> list[Model]:
        """The rows as `model` instances, for a read of `model_fields(model)` (what the ORM would load); a read of
        `model_fields(model, only=...)` gives instances whose other fields load on access."""
        names = self._model_names(model, using)
        return _models_of(model, using, names, self.rows(using, **arguments))

    def models_statement(
        self, model: type[Model], using: str = DEFAULT_DB_ALIAS, **arguments: Iterable[Any]
    ) -> tuple[str, tuple, Callable[[list], list[Model]]]:
        """`statement()` for `models(model)`: what turns the fetched rows into its instances."""
        names = self._model_names(model, using)
        sql, params, finish = self.statement(using, **arguments)
        return sql, params, lambda fetched: _models_of(model, using, names, finish(fetched))

    def _model_names(self, model: type[Model], using: str) -> list[str]:
        query = self._compile(using)[0].query
        names = list(query.values_select)
        if names != model_fields(model, only=set(names)) or query.annotation_select:
            raise TypeError(f"PreparedRead.models: read {model.__name__}'s fields in field order, as model_fields()")
        return names

    def sql(self, using: str = DEFAULT_DB_ALIAS, **arguments: Iterable[Any]) -> tuple[str, tuple]:
        """The statement and parameters a call runs (for tests and EXPLAIN)."""
        return self._compiler(using, arguments).as_sql()


def _models_of(model: type[Model], using: str, names: list[str], rows: list[tuple]) -> list[Model]:
    """Rows of `names` (a model's attnames, in field order) as instances loaded from `using`."""
    if not _fast_init(model):
        from_db = model.from_db
        return [from_db(using, names, row) for row in rows]
    # What Model.from_db does through Model.__init__, without its per-field loop: the attributes read (those left out
    # load on access, as deferred fields), then the state of an instance loaded from `using`.
    new, out = model.__new__, []
    for row in rows:
        instance = new(model)
        state = instance.__dict__
        state.update(zip(names, row, strict=True))
        instance._state = state_ = ModelState()
        state_.adding, state_.db = False, using
        out.append(instance)
    return out


def model_fields(model: type[Model], only: set[str] | None = None) -> list[str]:
    """The attnames a model instance is loaded from, in field order: `values_list(*model_fields(M))`. With `only`,
    those of them, still in field order (what `Model.from_db` needs of a partial row)."""
    return [field.attname for field in model._meta.concrete_fields if only is None or field.attname in only]

"""Reads of a fixed shape that a reconcile pass runs every cycle, compiled to SQL once per database connection.

Building a QuerySet (`filter`, `annotate`, window expressions) and compiling it costs Django more CPU than the
server spends answering a query of a few hundred rows. A `PreparedRead` builds its `values_list` QuerySet once per
connection, keeps the compiler with its SQL and parameters, and then only executes: Django's own execute path
(execute wrappers, the debug query log, database error wrapping) and its own converters (JSON, datetimes, UUIDs),
so rows are exactly what iterating the QuerySet gives.

Only for queries whose SQL and parameters never change: no `timezone.now()`, no values that vary between calls
(those are arguments, and a call with other arguments is another query). One compiled statement per database
alias serves every thread: each call runs a copy of the compiler bound to the calling thread's connection, and the
kept one holds no connection, so a finished thread's connection is not kept open by it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import QuerySet
from django.db.models.query import ValuesListIterable


class PreparedRead:
    """`PreparedRead(lambda: Model.objects.filter(...).values_list(...)).rows()`: the QuerySet's rows as tuples."""

    def __init__(self, build: Callable[[], QuerySet]) -> None:
        self._build = build
        self._compiled: dict[str, Any] = {}  # database alias -> its compiler, unbound

    def _compiler(self, using: str) -> Any:
        template = self._compiled.get(using)
        if template is None:
            queryset = self._build()
            if queryset._iterable_class is not ValuesListIterable:
                raise TypeError("PreparedRead: build() must return a values_list() QuerySet (not flat, not named)")
            template = queryset.query.get_compiler(using=using)
            compiled = template.as_sql()  # also sets up the select list the converters are read from
            template.as_sql = lambda *args, **kwargs: compiled
            template.connection = None
            template = self._compiled.setdefault(using, template)
        compiler = copy.copy(template)
        compiler.connection = connections[using]
        return compiler

    def rows(self, using: str = DEFAULT_DB_ALIAS) -> list[tuple]:
        return list(self._compiler(using).results_iter(tuple_expected=True))

    def sql(self, using: str = DEFAULT_DB_ALIAS) -> tuple[str, tuple]:
        """The statement and parameters it runs (for tests and EXPLAIN)."""
        return self._compiler(using).as_sql()

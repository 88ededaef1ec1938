"""One-row lookups the ORM compiles once per process: each call only binds its values and runs the SQL.

A lookup that every API request makes (the bearer token's agent, the
claim-next project) paid the ORM's query building and compilation on every
call, several times the cost of running the statement (issue 20, measured:
~200 µs against ~20 µs). `PrebuiltRow` builds the queryset once, with a
placeholder value for each argument, takes the SQL the ORM compiles for it,
and from then on runs that SQL with the call's values and makes the model
instance the way the ORM does (the backend's and the fields' converters,
`Model.from_db`). Nothing is cached but the statement: every call reads the
database.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from django.db import connections
from django.db.models import Model, QuerySet

M = TypeVar("M", bound=Model)


class _Compiled:
    def __init__(self, queryset: QuerySet[Any], placeholders: dict[str, Any]) -> None:
        compiler = queryset[:1].query.get_compiler(using=queryset.db)
        self.sql, params = compiler.as_sql()
        self.alias = queryset.db
        self.model = queryset.model
        by_value = {(type(value), value): name for name, value in placeholders.items()}
        # Each parameter is a call's argument (by name) or a constant of the query (None, value).
        self.params: list[tuple[str | None, Any]] = [(by_value.get((type(value), value)), value) for value in params]
        named = [name for name, _ in self.params if name is not None]
        if sorted(named) != sorted(placeholders):
            raise ValueError(f"each placeholder must reach the SQL as one parameter; found {named}")
        fields = self.model._meta.concrete_fields
        if [column.target for column, _, _ in compiler.select] != list(fields):
            raise ValueError("a prebuilt row selects exactly its model's concrete fields")
        self.attnames = [field.attname for field in fields]
        self.converters = compiler.get_converters([column for column, _, _ in compiler.select])


class PrebuiltRow(Generic[M]):
    """`PrebuiltRow(lambda p: Agent.objects.filter(token_hash=p["digest"]), digest="…")`, then `.get(digest=…)`.

    `build` receives the placeholders' values by name and returns a queryset
    of one model, without `only`, `defer`, annotations or `select_related`;
    its first row is the answer. Placeholder values must be ones no real call
    passes, and each must reach the SQL as one parameter. Compiled at the
    first call, for the database that queryset reads.
    """

    def __init__(self, build: Callable[[dict[str, Any]], QuerySet[M]], **placeholders: Any) -> None:
        self.build = build
        self.placeholders = placeholders
        self._compiled: _Compiled | None = None
        self._lock = threading.Lock()

    def _statement(self) -> _Compiled:
        if self._compiled is None:
            with self._lock:
                if self._compiled is None:
                    self._compiled = _Compiled(self.build(dict(self.placeholders)), self.placeholders)
        return self._compiled

    def get(self, **values: Any) -> M | None:
        """The first row for these values, as the ORM would make it; None when there is none."""
        statement = self._statement()
        params = [values[name] if name is not None else constant for name, constant in statement.params]
        connection = connections[statement.alias]
        with connection.cursor() as cursor:
            cursor.execute(statement.sql, params)
            row = cursor.fetchone()
        if row is None:
            return None
        converted = list(row)
        for index, (converters, expression) in statement.converters.items():
            for converter in converters:
                converted[index] = converter(converted[index], expression, connection)
        instance: M = statement.model.from_db(statement.alias, statement.attnames, converted)
        return instance

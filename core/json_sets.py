"""JSON arrays of strings as sets, in SQL: empty, and contained in another (SPEC §23.1's `requires`).

Two boolean expressions that render per vendor, so a rule such as "every label the task requires
is among the agent's" is written once as a queryset condition and compiled on PostgreSQL (jsonb
containment) and SQLite (`json_each`) alike:

- `JsonArrayEmpty(expr)`: the array has no element. Cheap on both (a constant compare / a length
  of a short text), so a condition `JsonArrayEmpty(x) | JsonArrayWithin(x, y)` decides the common
  case (nothing required) before it reads anything else: both vendors evaluate OR left to right
  and stop at the first true operand, and PostgreSQL runs an uncorrelated subquery (an InitPlan)
  only when it is first needed.
- `JsonArrayWithin(inner, outer)`: every element of `inner` is an element of `outer`. A NULL
  `outer` (no such row) contains nothing but the empty array.

Both expect arrays of strings (the validation of every door sees to it, `ledger.label_sets`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db.models import BooleanField, Expression


class _JsonSetExpression(Expression):
    output_field = BooleanField()
    conditional = True

    def __init__(self, *expressions: Any) -> None:
        super().__init__(output_field=BooleanField())
        self.source_expressions = list(expressions)

    def get_source_expressions(self) -> list[Any]:
        return list(self.source_expressions)

    def set_source_expressions(self, exprs: Sequence[Any]) -> None:
        self.source_expressions = list(exprs)

    def resolve_expression(self, *args: Any, **kwargs: Any) -> Any:
        resolved = self.copy()
        resolved.is_summary = kwargs.get("summarize", False)
        resolved.set_source_expressions(
            [expression.resolve_expression(*args, **kwargs) for expression in self.get_source_expressions()]
        )
        return resolved

    def _compiled(self, compiler: Any, connection: Any) -> list[tuple[str, list[Any]]]:
        return [
            (sql, list(params))
            for sql, params in (compiler.compile(expression) for expression in self.get_source_expressions())
        ]

    def as_sql(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, list[Any]]:
        raise NotImplementedError(f"{type(self).__name__} renders on PostgreSQL and SQLite only.")


class JsonArrayEmpty(_JsonSetExpression):
    """The JSON array `expression` has no element."""

    def __init__(self, expression: Any) -> None:
        super().__init__(expression)

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, list[Any]]:
        ((sql, params),) = self._compiled(compiler, connection)
        return f"({sql} = '[]'::jsonb)", params

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, list[Any]]:
        ((sql, params),) = self._compiled(compiler, connection)
        return f"(json_array_length({sql}) = 0)", params


class JsonArrayWithin(_JsonSetExpression):
    """Every element of the JSON array `inner` is an element of the JSON array `outer`."""

    def __init__(self, inner: Any, outer: Any) -> None:
        super().__init__(inner, outer)

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, list[Any]]:
        (inner, inner_params), (outer, outer_params) = self._compiled(compiler, connection)
        return f"(COALESCE({inner} <@ {outer}, false))", [*inner_params, *outer_params]

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, list[Any]]:
        (inner, inner_params), (outer, outer_params) = self._compiled(compiler, connection)
        sql = (
            f"(NOT EXISTS (SELECT 1 FROM json_each({inner}) AS json_set_inner WHERE json_set_inner.value NOT IN "  # noqa: S608 - compiled operands
            f"(SELECT json_set_outer.value FROM json_each({outer}) AS json_set_outer)))"
        )
        return sql, [*inner_params, *outer_params]

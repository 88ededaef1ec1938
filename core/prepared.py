"""Hot statements compiled once: the ORM builds the query, later calls only swap its values.

Building and compiling a queryset (`add_q`, `resolve_expression`, `as_sql`) is
most of the CPU of a hot operation (SPEC §20). A `Prepared` statement builds
its queryset once per database from two sets of sample values, checks that
both compile to the same SQL and that the parameters differ exactly where a
sample went in, and afterwards runs that SQL with the call's values put in
those places. The rule stays written once, as a queryset; only its
compilation is cached.

What it refuses at preparation, so a wrong cache can never run: SQL that
differs between the samples (a value that changes the statement's shape, such
as a list's length, belongs in the key, not in the values), a parameter that
differs but is no sample's (a value computed from a sample, such as
`now + delta`, must be passed in ready-made), and a sample that went in
nowhere. Sample values should be unlike any constant of the statement
(`SAMPLE_INT`, `SAMPLE_TIME`).

On PostgreSQL they run through a server-binding cursor (`core.postgresql`), so
psycopg prepares each on a connection after `LEASEHOLD_DB_PREPARE_THRESHOLD`
uses; every other statement binds on the client (Django's cursor), which never
prepares. Off with `LEASEHOLD_DB_PREPARED_STATEMENTS=0`, and behind a
transaction pooler (`LEASEHOLD_DB_TRANSACTION_POOLING`), where a statement
prepared in one server connection is not there for the next transaction.

Rows come back through the compiler's converters (the types `values_list()` or
the model would give); `objects()` builds model instances with their
`select_related` relations, as Django's model iterable does.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.db import connections, models, transaction
from django.db.models.query import QuerySet, get_related_populators  # type: ignore[attr-defined]
from django.db.models.sql.subqueries import InsertQuery, UpdateQuery
from django.db.transaction import TransactionManagementError

M = TypeVar("M", bound=models.Model)

SAMPLE_INT = (7_340_033, 7_340_057)
SAMPLE_TIME = (
    dt.datetime(2001, 2, 3, 4, 5, 6, 789_011, tzinfo=dt.UTC),
    dt.datetime(2002, 3, 4, 5, 6, 7, 890_123, tzinfo=dt.UTC),
)


class NotPreparable(Exception):
    """The statement cannot be prepared as asked (a programming error, found at first use)."""


def _transforms(connection: Any) -> list[Callable[[Any], Any]]:
    """How a value can become a statement parameter: as is, its primary key, or adapted as a datetime."""

    def pk(value: Any) -> Any:
        return value.pk if isinstance(value, models.Model) else _NOTHING

    def as_datetime(value: Any) -> Any:
        return connection.ops.adapt_datetimefield_value(value) if isinstance(value, dt.datetime) else _NOTHING

    return [lambda value: value, pk, as_datetime]


_NOTHING = object()


@dataclass(frozen=True)
class _Compiled:
    sql: str
    params: tuple[Any, ...]
    # position in params -> (sample name, how its value becomes the parameter)
    slots: tuple[tuple[int, str, Callable[[Any], Any]], ...]
    compiler: Any
    for_update: bool
    # position -> (converters, expression): what `results_iter` would work out on every call
    converters: tuple[tuple[int, tuple[Any, ...], Any], ...]

    def convert(self, rows: list[Any], connection: Any) -> list[list[Any]]:
        """The rows as the compiler's `results_iter` gives them (converted), from converters found once.

        The converters are found once, on the thread that prepared the statement; they read no
        connection state (parsing, time zone, JSON), and each call passes its own connection.
        """
        converted = []
        for fetched in rows:
            row = list(fetched)
            for position, functions, expression in self.converters:
                value = row[position]
                for function in functions:
                    value = function(value, expression, connection)
                row[position] = value
            converted.append(row)
        return converted

    def with_columns(self, columns: Mapping[str, str]) -> _Compiled:
        """The statement with the named values read from columns of an enclosing statement instead of bound
        (`{"project": 'p."id"'}`: a subquery of a statement that reads that row itself, as authentication's
        reads the agent and its project); its other values stay parameters. For embedding only: the
        converters and compiler are the statement's own."""
        names = {position: name for position, name, _ in self.slots}
        if not set(columns) <= set(names.values()):
            raise NotPreparable(f"{sorted(set(columns) - set(names.values()))} go into no parameter.")

        def written(position: int, param: Any) -> str | None:
            name = names.get(position)
            return None if name is None else columns.get(name)

        sql, params, slots = _rewritten(self.sql, self.params, self.slots, written)
        if len(params) + sum(name in columns for name in names.values()) != len(self.params):
            raise NotPreparable("The statement's placeholders and parameters do not pair up.")
        return _Compiled(
            sql=sql,
            params=params,
            slots=tuple(slots),
            compiler=self.compiler,
            for_update=self.for_update,
            converters=self.converters,
        )

    def params_for(self, values: Mapping[str, Any]) -> list[Any]:
        params = list(self.params)
        for position, name, transform in self.slots:
            value = values[name]
            if value is None:
                # The ORM would have written `IS NULL`, not `= NULL`: a different statement.
                raise NotPreparable(f"{name} is None; a prepared statement compares with a value.")
            params[position] = transform(value)
        return params


def _cursor(connection: Any) -> Any:
    """The backend's cursor for these statements where it has one (`core.postgresql`: binding on the
    server where the settings allow it, psycopg then preparing the statement after `prepare_threshold`
    uses on the connection; each statement's placeholders converted once); Django's own elsewhere."""
    statement_cursor = getattr(connection, "statement_cursor", None)
    return statement_cursor() if statement_cursor is not None else connection.cursor()


def run_select(sql: str, params: Sequence[Any], *, using: str = "default") -> list[tuple[Any, ...]]:
    """The rows of a statement written once by its caller from the models' metadata, unconverted,
    run as this module's own statements are (server-side binding and preparing where enabled)."""
    connection = connections[using]
    with _cursor(connection) as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


def _compile_query(query: Any, using: str) -> tuple[Any, str, tuple[Any, ...]]:
    compiler = query.get_compiler(using=using)
    sql, params = compiler.as_sql()
    return compiler, sql, tuple(params)


def _prepare(
    build: Callable[[Mapping[str, Any]], Any],
    samples: tuple[Mapping[str, Any], Mapping[str, Any]],
    using: str,
    to_query: Callable[[Any], Any],
) -> _Compiled:
    first, second = samples
    if set(first) != set(second):
        raise NotPreparable("Both sample sets must name the same values.")
    compiled = [_compile_query(to_query(build(sample)), using) for sample in samples]
    (compiler, sql, params), (_, other_sql, other_params) = compiled
    if sql != other_sql or len(params) != len(other_params):
        raise NotPreparable(f"The statement's shape depends on a value: {sql!r} vs {other_sql!r}.")
    transforms = _transforms(connections[using])
    slots: list[tuple[int, str, Callable[[Any], Any]]] = []
    for position, (param, other) in enumerate(zip(params, other_params, strict=True)):
        if param == other and type(param) is type(other):
            continue
        found = [
            (name, _typed(transform, type(param)))
            for name in first
            for transform in transforms
            if _same(transform(first[name]), param) and _same(transform(second[name]), other)
        ]
        names = {name for name, _ in found}
        if len(names) != 1:
            raise NotPreparable(f"Parameter {position} ({param!r}) is not exactly one sample's value: {names}.")
        slots.append((position, *found[0]))
    missing = set(first) - {name for _, name, _ in slots}
    if missing:
        raise NotPreparable(f"Samples {sorted(missing)} go into no parameter of the statement.")
    if connections[using].vendor == "sqlite":
        sql, params, slots = _constants_inlined(sql, params, slots)
    for_update = bool(getattr(compiler.query, "select_for_update", False))
    converters: tuple[tuple[int, tuple[Any, ...], Any], ...] = ()
    if getattr(compiler, "select", None) is not None and hasattr(compiler, "col_count"):
        fields = [column[0] for column in compiler.select[0 : compiler.col_count]]
        if compiler.has_composite_fields(fields):
            raise NotPreparable("Composite fields are not prepared.")
        converters = tuple(
            (position, tuple(functions), expression)
            for position, (functions, expression) in compiler.get_converters(fields).items()
        )
    return _Compiled(
        sql=sql, params=params, slots=tuple(slots), compiler=compiler, for_update=for_update, converters=converters
    )


_PLACEHOLDER = re.compile(r"%%|%s")


def _constants_inlined(
    sql: str, params: tuple[Any, ...], slots: list[tuple[int, str, Callable[[Any], Any]]]
) -> tuple[str, tuple[Any, ...], list[tuple[int, str, Callable[[Any], Any]]]]:
    """SQLite: the statement's constant text and integer parameters (no sample's: a status, a list of
    statuses, EXISTS's `1`) written into its SQL as literals; the samples' parameters stay parameters.

    SQLite plans with a bound value where it decides whether a partial index applies (`status = ?`
    against `task_claim_queue`'s `WHERE status = 'ready'`), and then prepares the statement again at
    every new binding, planning it afresh: claim-next's emptiness read took 0.24 ms so, 0.03 ms with the
    status written in (issue 34). A literal lets the plan be made once.
    """
    variable = {position for position, _, _ in slots}

    def written(position: int, param: Any) -> str | None:
        if position not in variable and (type(param) is int or isinstance(param, str)):
            return _literal(param)
        return None

    return _rewritten(sql, params, slots, written)


def _rewritten(
    sql: str,
    params: tuple[Any, ...],
    slots: Sequence[tuple[int, str, Callable[[Any], Any]]],
    written: Callable[[int, Any], str | None],
) -> tuple[str, tuple[Any, ...], list[tuple[int, str, Callable[[Any], Any]]]]:
    """The statement with some placeholders replaced by SQL text (`written(position, param)`, None to keep
    the placeholder); the parameters left and the slots re-numbered. A statement whose placeholders and
    parameters do not pair up one to one is left as it is."""
    kept: list[Any] = []
    moved: dict[int, int] = {}
    pieces: list[str] = []
    position = 0
    end = 0
    for match in _PLACEHOLDER.finditer(sql):
        if match.group() == "%%":
            continue
        if position == len(params):  # more placeholders than parameters
            return sql, params, list(slots)
        pieces.append(sql[end : match.start()])
        end = match.end()
        param = params[position]
        text = written(position, param)
        if text is not None:
            pieces.append(text)
        else:
            moved[position] = len(kept)
            kept.append(param)
            pieces.append("%s")
        position += 1
    if position != len(params):  # fewer placeholders than parameters
        return sql, params, list(slots)
    pieces.append(sql[end:])
    return (
        "".join(pieces),
        tuple(kept),
        [(moved[position], name, how) for position, name, how in slots if position in moved],
    )


def _literal(value: int | str) -> str:
    """An SQL literal of `value`, `%` doubled as the statement's text still goes through `%s` formatting."""
    if type(value) is int:
        return str(value)
    return "'" + str.__str__(value).replace("'", "''").replace("%", "%%") + "'"


def _same(value: Any, param: Any) -> bool:
    """Whether `value` is the parameter, or the parameter is it wrapped in a subtype (psycopg's `Int4`)."""
    return value is not _NOTHING and isinstance(param, type(value)) and value == param


def _typed(transform: Callable[[Any], Any], wrapper: type) -> Callable[[Any], Any]:
    """The transform, then the parameter's own type when the backend wraps values (`Int8(7)`)."""
    if wrapper in (int, str, float, bool, dt.datetime, type(None)):
        return transform
    return lambda value: wrapper(transform(value))


class _PreparedBase:
    def __init__(self, build: Callable[..., Any], *, samples: tuple[Mapping[str, Any], Mapping[str, Any]]) -> None:
        self._build = build
        self._samples = samples
        self._compiled: dict[tuple[str, str], _Compiled] = {}

    def _to_query(self, built: Any) -> Any:
        raise NotImplementedError

    def compiled(self, using: str = "default") -> _Compiled:
        connection = connections[using]
        key = (using, connection.vendor)
        found = self._compiled.get(key)
        if found is None:
            found = _prepare(lambda values: self._build(**values), self._samples, using, self._to_query)
            self._compiled[key] = found
        return found

    def _execute(self, values: Mapping[str, Any], using: str, *, fetch: bool) -> tuple[_Compiled, Any, Any]:
        """Run the statement: (compiled, connection, the fetched rows or the row count)."""
        compiled = self.compiled(using)
        connection = connections[using]
        if compiled.for_update and connection.features.has_select_for_update and connection.get_autocommit():
            raise TransactionManagementError("select_for_update cannot be used outside of a transaction.")
        with _cursor(connection) as cursor:
            cursor.execute(compiled.sql, compiled.params_for(values))
            return compiled, connection, cursor.fetchall() if fetch else cursor.rowcount


@dataclass(frozen=True)
class _ModelRows:
    """How a row becomes a model instance: what Django's model iterable works out on every call."""

    model: type[models.Model]
    start: int
    end: int
    init_list: list[str]
    populators: list[Any]
    annotations: list[tuple[str, int]]


class Prepared(_PreparedBase, Generic[M]):
    """A SELECT: `build(**values)` returns the queryset; `rows()` or `objects()` run it."""

    def __init__(self, build: Callable[..., Any], *, samples: tuple[Mapping[str, Any], Mapping[str, Any]]) -> None:
        super().__init__(build, samples=samples)
        self._model_rows: dict[tuple[str, str], _ModelRows] = {}

    def _to_query(self, built: QuerySet[Any]) -> Any:
        # What the model iterable would attach to each row: not done here.
        if built._known_related_objects:  # type: ignore[attr-defined]
            raise NotPreparable("Querysets with known related objects are not prepared.")
        return built.query

    def rows(self, *, using: str = "default", **values: Any) -> list[tuple[Any, ...]]:
        """The rows, converted, in the statement's column order."""
        compiled, connection, fetched = self._execute(values, using, fetch=True)
        return [tuple(row) for row in compiled.convert(fetched, connection)]

    def _how(self, compiled: _Compiled, using: str) -> _ModelRows:
        key = (using, compiled.compiler.connection.vendor)
        found = self._model_rows.get(key)
        if found is None:
            compiler = compiled.compiler
            select, klass_info = compiler.select, compiler.klass_info
            start, end = klass_info["select_fields"][0], klass_info["select_fields"][-1] + 1
            found = self._model_rows[key] = _ModelRows(
                model=klass_info["model"],
                start=start,
                end=end,
                init_list=[column[0].target.attname for column in select[start:end]],
                populators=get_related_populators(klass_info, select, using),
                annotations=list((compiler.annotation_col_map or {}).items()),
            )
        return found

    def objects(self, *, using: str = "default", **values: Any) -> Iterator[M]:
        """Model instances with their select_related relations and annotations."""
        compiled, connection, fetched = self._execute(values, using, fetch=True)
        how = self._how(compiled, using)
        for row in compiled.convert(fetched, connection):
            obj = how.model.from_db(using, how.init_list, row[how.start : how.end])
            for populator in how.populators:
                populator.populate(row, obj)
            for name, position in how.annotations:
                setattr(obj, name, row[position])
            yield obj  # type: ignore[misc]  # a model of the queryset, typed by the caller

    def first(self, *, using: str = "default", **values: Any) -> M | None:
        return next(self.objects(using=using, **values), None)


class PreparedUpdate(_PreparedBase):
    """An UPDATE: `build(**values)` returns (queryset, {field: value or expression}); `run()` → rows changed."""

    def _to_query(self, built: tuple[QuerySet[Any], dict[str, Any]]) -> Any:
        queryset, changes = built
        query = queryset.query.chain(UpdateQuery)
        query.add_update_values(changes)  # type: ignore[attr-defined]
        query.annotations = {}
        return query

    def run(self, *, using: str = "default", **values: Any) -> int:
        _, _, changed = self._execute(values, using, fetch=False)
        return int(changed)


_INSERTS: dict[tuple[type[models.Model], str, str], tuple[str, tuple[Any, ...]]] = {}


def insert(obj: M, using: str = "default") -> M:
    """INSERT the unsaved `obj` as `Model.objects.create()` would, with a statement compiled once per
    model and database; sets its primary key.

    Every concrete field but an unset auto primary key goes in, through the field's own `pre_save`
    and `get_db_prep_save` (defaults, `auto_now_add`, JSON and datetime adaptation). No signals are
    sent: the models inserted this way have no receivers (a test pins it).
    """
    meta = obj._meta
    connection = connections[using]
    key = (type(obj), using, connection.vendor)
    found = _INSERTS.get(key)
    if found is None:
        fields = tuple(field for field in meta.local_concrete_fields if field is not meta.auto_field)
        query = InsertQuery(type(obj))
        query.insert_values(fields, [obj])
        compiler = query.get_compiler(using=using)
        compiler.returning_fields = [meta.pk]
        if not connection.features.can_return_columns_from_insert:
            raise NotPreparable(f"{connection.vendor} cannot return the inserted id.")
        ((sql, _),) = compiler.as_sql()
        found = _INSERTS[key] = (sql, fields)
    sql, fields = found
    params = [field.get_db_prep_save(field.pre_save(obj, add=True), connection) for field in fields]
    with transaction.mark_for_rollback_on_error(using), _cursor(connection) as cursor:
        cursor.execute(sql, params)
        (pk,) = cursor.fetchone()
    obj.pk = pk
    obj._state.adding = False
    obj._state.db = using
    return obj


_UPDATES: dict[
    tuple[type[models.Model], tuple[str, ...], tuple[str, ...], str, str], tuple[str, list[Any], list[Any]]
] = {}


def update_row_statement(
    obj: models.Model, fields: Sequence[str], using: str = "default", **where: Any
) -> tuple[str, list[Any]]:
    """The UPDATE `update_row` sends for `obj`, `fields` and `where`, and its parameters: the text is
    written once per model, field list, condition and database; the values come from `obj` through
    each field's `pre_save` and `get_db_prep_save`."""
    meta = obj._meta
    connection = connections[using]
    key = (type(obj), tuple(fields), tuple(where), using, connection.vendor)
    found = _UPDATES.get(key)
    if found is None:
        quote = connection.ops.quote_name
        setting: list[Any] = [meta.get_field(name) for name in fields]
        matching: list[Any] = [meta.pk, *(meta.get_field(name) for name in where)]
        # Only quoted names of the model's own table and columns go into the text; values are parameters.
        sql = "UPDATE {} SET {} WHERE {}".format(  # noqa: S608
            quote(meta.db_table),
            ", ".join(f"{quote(field.column)} = %s" for field in setting),
            " AND ".join(f"{quote(field.column)} = %s" for field in matching),
        )
        found = _UPDATES[key] = (sql, setting, matching)
    sql, setting, matching = found
    params = [field.get_db_prep_save(field.pre_save(obj, add=False), connection) for field in setting]
    params += [matching[0].get_db_prep_value(obj.pk, connection)]
    params += [
        field.get_db_prep_value(value, connection) for field, value in zip(matching[1:], where.values(), strict=True)
    ]
    return sql, params


def update_row(obj: models.Model, fields: Sequence[str], using: str = "default", **where: Any) -> int:
    """UPDATE `obj`'s row, setting `fields` from its attributes, where its primary key and each `where`
    field equal the values given (a compare-and-set); the rows changed (0 or 1).

    What `obj.save(update_fields=fields)` writes, through each field's `pre_save` and
    `get_db_prep_save`, with the statement written once per model, field list and condition
    (`update_row_statement`). No signals are sent (see `insert`).
    """
    sql, params = update_row_statement(obj, fields, using=using, **where)
    connection = connections[using]
    with transaction.mark_for_rollback_on_error(using), _cursor(connection) as cursor:
        cursor.execute(sql, params)
        return int(cursor.rowcount)

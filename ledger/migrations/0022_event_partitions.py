# Written by hand (SPEC §25, issue 33): the event table partitioned by month on PostgreSQL, and three of its
# eleven indexes dropped on both databases. docs/performance.md, "Event partitions"; docs/operations.md,
# "Archiving events".

"""The event log grows without hurting (SPEC §25).

Both databases: the single-column indexes on `project_id` and `task_id` go (each is the leading column of
`event_project_feed` (project, id) and `event_task_timeline` (task, id), which serve every query the single
ones could), and the one on `actor_user_id` becomes partial (`actor_user_id IS NOT NULL`): a person acts on
a handful of events, and the full index held one NULL entry for every other event. Dropping an index is a
plain DROP INDEX on SQLite too: no table rebuild, so its triggers stay.

PostgreSQL only: `ledger_event` is rebuilt as a table partitioned by RANGE (created_at), one partition per
calendar month (UTC), named `ledger_event_pYYYYMM`, plus `ledger_event_default` for a row whose month has
no partition yet. What that requires, and how it is kept:

- The primary key is (id, created_at): PostgreSQL wants the partition key in every unique constraint.
  Django keeps `id` as the model's primary key; ids still come from one identity sequence that keeps the
  name `ledger_event_id_seq` (the feed horizon of 0005 reads it by name) and its position.
- No foreign key can point at `ledger_event(id)` alone any more: the webhook deliveries' `event_id`
  constraint is dropped on PostgreSQL (the column and its index stay; the delivery worker reads the event
  by id). The model still declares the relation; a later migration must not try to re-create it there.
- Every trigger on the table is read from the catalog before the rebuild and created again on the parent
  (whatever the migrations of any app put there): PostgreSQL clones row triggers to every partition, the
  existing ones and the ones made later, so UPDATE and DELETE are refused on a partition named directly.
  Statement triggers are not cloned: each partition gets a TRUNCATE trigger of its own, which refuses
  unless the parent's `ledger_event_no_truncate` is disabled (the test suite's flush disables that one).
- `ledger_event_partition_create(month)` makes a month's partition (with that trigger); the daily job
  `operations.event_partitions` keeps the current month and the next three made. A row whose month has no
  partition lands in `ledger_event_default` and is served like any other; that month's partition can then
  not be made (PostgreSQL would have to move the rows, and the table refuses DELETE): the function says
  so, and the month stays in the default partition (`archive_events` cannot archive it).

The rows are copied with no trigger on the new table yet (no delivery, tally or NOTIFY fires twice), and
counted before the old table goes. Reversible: the reverse rebuilds a plain table from the attached
partitions (an archived month stays in its detached table).
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

from django.conf import settings
from django.db import migrations, models

TABLE = "ledger_event"
OLD = "ledger_event_rebuilding"
MONTHS_AHEAD = 3
DEFAULT_PARTITION = "ledger_event_default"
# Indexes of Django's naming (`_create_index_name(table, [column])`) dropped here; `actor_user` gets a partial one.
DROPPED_INDEX_FIELDS = ("project", "task", "actor_user")
# The foreign keys into the event table that the reverse puts back (the forward drops every one it finds).
REFERENCING = (("ledger_webhookdelivery", "event_id", "ledger_webhookdelivery_event_id_4dca3e90_fk_ledger_event_id"),)

PARTITION_FUNCTIONS = [
    # A partition's own TRUNCATE guard: the parent's trigger decides (enabled: refused; disabled: allowed).
    """
    CREATE OR REPLACE FUNCTION ledger_event_partition_refuse_truncate() RETURNS trigger AS $$
    BEGIN
        IF EXISTS (
            SELECT 1 FROM pg_trigger
            WHERE tgrelid = 'ledger_event'::regclass AND tgname = 'ledger_event_no_truncate' AND tgenabled <> 'D'
        ) THEN
            RAISE EXCEPTION USING
                MESSAGE = 'ledger_event is append-only: TRUNCATE of ' || TG_TABLE_NAME || ' refused',
                ERRCODE = 'restrict_violation';
        END IF;
        RETURN NULL;
    END;
    $$ LANGUAGE plpgsql;
    """,
    """
    CREATE OR REPLACE FUNCTION ledger_event_partition_create(month date) RETURNS text AS $$
    DECLARE
        first_day date := date_trunc('month', month)::date;
        next_day date := (date_trunc('month', month) + interval '1 month')::date;
        name text := 'ledger_event_p' || to_char(month, 'YYYYMM');
    BEGIN
        IF EXISTS (SELECT 1 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                   WHERE i.inhparent = 'ledger_event'::regclass AND c.relname = name) THEN
            RETURN name;
        END IF;
        IF to_regclass(name) IS NOT NULL THEN
            RAISE EXCEPTION USING
                MESSAGE = format('%s exists and is not a partition of ledger_event (an archived month?)', name),
                ERRCODE = 'duplicate_table';
        END IF;
        IF EXISTS (SELECT 1 FROM ledger_event_default
                   WHERE created_at >= first_day::timestamp AT TIME ZONE 'UTC'
                     AND created_at < next_day::timestamp AT TIME ZONE 'UTC') THEN
            RAISE EXCEPTION USING
                MESSAGE = format('events of %s are in ledger_event_default: that month keeps them there',
                                 to_char(month, 'YYYY-MM')),
                ERRCODE = 'object_not_in_prerequisite_state';
        END IF;
        EXECUTE format('CREATE TABLE %I PARTITION OF ledger_event FOR VALUES FROM (%L) TO (%L)', name,
                       first_day::timestamp AT TIME ZONE 'UTC', next_day::timestamp AT TIME ZONE 'UTC');
        EXECUTE format('CREATE TRIGGER ledger_event_no_truncate BEFORE TRUNCATE ON %I '
                       'FOR EACH STATEMENT EXECUTE FUNCTION ledger_event_partition_refuse_truncate()', name);
        RETURN name;
    END;
    $$ LANGUAGE plpgsql;
    """,
]
DROP_PARTITION_FUNCTIONS = [
    "DROP FUNCTION IF EXISTS ledger_event_partition_create(date);",
    "DROP FUNCTION IF EXISTS ledger_event_partition_refuse_truncate();",
]


def _rows(cursor: Any, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    cursor.execute(sql, params)
    return list(cursor.fetchall())


def _month(value: datetime) -> date:
    return date(value.year, value.month, 1)


def _next_month(month: date) -> date:
    return date(month.year + month.month // 12, month.month % 12 + 1, 1)


def _rebuild(schema_editor: Any, *, partitioned: bool) -> None:
    """Rebuild `ledger_event` (partitioned by month, or plain) with its rows, indexes, constraints and triggers."""
    with schema_editor.connection.cursor() as cursor:

        def execute(sql: str, params: tuple[Any, ...] | None = None) -> None:
            cursor.execute(sql, params)  # no parameters: `%` in a function body or a replayed definition stays

        execute(f"LOCK TABLE {TABLE} IN ACCESS EXCLUSIVE MODE")
        oid = f"'{TABLE}'::regclass"
        triggers = _rows(
            cursor,
            f"SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgrelid = {oid} AND NOT tgisinternal AND tgparentid = 0 ORDER BY tgname",
        )
        indexes = _rows(
            cursor,
            f"SELECT replace(pg_get_indexdef(i.indexrelid), ' ON ONLY ', ' ON ') FROM pg_index i "
            f"WHERE i.indrelid = {oid} AND NOT i.indisprimary ORDER BY i.indexrelid",
        )
        index_names = _rows(
            cursor,
            f"SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = {oid} AND NOT i.indisprimary",
        )
        outgoing = _rows(
            cursor,
            f"SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = {oid} AND contype = 'f'",
        )
        incoming = _rows(
            cursor,
            f"SELECT conrelid::regclass::text, conname FROM pg_constraint WHERE confrelid = {oid} AND contype = 'f'",
        )
        (sequence,) = _rows(cursor, "SELECT pg_get_serial_sequence(%s, 'id')", (TABLE,))[0]
        (count, oldest, newest) = _rows(cursor, f"SELECT count(*), min(created_at), max(created_at) FROM {TABLE}")[0]
        (now,) = _rows(cursor, "SELECT now()")[0]

        for table, name in incoming:
            execute(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"')
        for (name,) in index_names:
            execute(f'DROP INDEX "{name}"')
        for name, _ in outgoing:
            execute(f'ALTER TABLE {TABLE} DROP CONSTRAINT "{name}"')
        execute(f"ALTER TABLE {TABLE} RENAME TO {OLD}")
        execute(f"ALTER TABLE {OLD} RENAME CONSTRAINT {TABLE}_pkey TO {OLD}_pkey")
        execute(f"ALTER SEQUENCE {sequence} RENAME TO {OLD}_id_seq")
        partition_by = " PARTITION BY RANGE (created_at)" if partitioned else ""
        execute(
            f"CREATE TABLE {TABLE} (LIKE {OLD} INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY "
            f"INCLUDING STORAGE){partition_by}"
        )
        key = "id, created_at" if partitioned else "id"
        execute(f"ALTER TABLE {TABLE} ADD CONSTRAINT {TABLE}_pkey PRIMARY KEY ({key})")
        (new_sequence,) = _rows(cursor, "SELECT pg_get_serial_sequence(%s, 'id')", (TABLE,))[0]
        assert new_sequence == sequence, f"the event sequence is {new_sequence}, expected {sequence}"
        execute(f"SELECT setval('{sequence}', last_value, is_called) FROM {OLD}_id_seq")
        if partitioned:
            for sql in PARTITION_FUNCTIONS:
                execute(sql)
            execute(f"CREATE TABLE {DEFAULT_PARTITION} PARTITION OF {TABLE} DEFAULT")
            execute(
                f"CREATE TRIGGER ledger_event_no_truncate BEFORE TRUNCATE ON {DEFAULT_PARTITION} "
                "FOR EACH STATEMENT EXECUTE FUNCTION ledger_event_partition_refuse_truncate()"
            )
            month = _month(min(oldest or now, now).astimezone(UTC))
            last = _month(max(newest or now, now).astimezone(UTC))
            for _ in range(MONTHS_AHEAD):
                last = _next_month(last)
            while month <= last:
                execute("SELECT ledger_event_partition_create(%s)", (month,))
                month = _next_month(month)
        execute(f"INSERT INTO {TABLE} SELECT * FROM {OLD}")
        (copied,) = _rows(cursor, f"SELECT count(*) FROM {TABLE}")[0]
        assert copied == count, f"copied {copied} events of {count}"
        execute(f"DROP TABLE {OLD}")
        if not partitioned:
            for sql in DROP_PARTITION_FUNCTIONS:
                execute(sql)
        for (sql,) in indexes:
            execute(sql)
        for name, definition in outgoing:
            execute(f'ALTER TABLE {TABLE} ADD CONSTRAINT "{name}" {definition}')
        for (sql,) in triggers:
            execute(sql)
        if not partitioned:
            for table, column, name in REFERENCING:
                if _rows(cursor, "SELECT to_regclass(%s)", (table,))[0][0] is not None:
                    execute(
                        f'ALTER TABLE {table} ADD CONSTRAINT "{name}" FOREIGN KEY ({column}) '
                        f"REFERENCES {TABLE}(id) DEFERRABLE INITIALLY DEFERRED"
                    )


def partition(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        _rebuild(schema_editor, partitioned=True)


def unpartition(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        _rebuild(schema_editor, partitioned=False)


def _index_name(schema_editor: Any, model: Any, field: str) -> str:
    return str(schema_editor._create_index_name(model._meta.db_table, [model._meta.get_field(field).column], suffix=""))


def drop_redundant_indexes(apps: Any, schema_editor: Any) -> None:
    model = apps.get_model("ledger", "Event")
    for field in DROPPED_INDEX_FIELDS:
        schema_editor.execute(f'DROP INDEX IF EXISTS "{_index_name(schema_editor, model, field)}"')


def restore_indexes(apps: Any, schema_editor: Any) -> None:
    model = apps.get_model("ledger", "Event")
    for field in DROPPED_INDEX_FIELDS:
        schema_editor.execute(schema_editor._create_index_sql(model, fields=[model._meta.get_field(field)]))


class Migration(migrations.Migration):
    # After every migration that puts a trigger on the event table, so that migrating one of those apps back
    # un-partitions first: PostgreSQL 15 cannot CREATE OR REPLACE a row trigger that partitions hold clones of
    # ("cannot drop trigger ... on table ledger_event_default because trigger ... on table ledger_event
    # requires it"). A later migration replaces such a trigger with DROP TRIGGER then CREATE TRIGGER.
    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("ledger", "0021_task_held"),
        ("leases", "0021_task_held"),
        ("insight", "0002_incidents"),
        ("push", "0004_endpoint_last_delivered"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="event",
                    name="project",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=models.deletion.PROTECT,
                        related_name="+",
                        to="ledger.project",
                    ),
                ),
                migrations.AlterField(
                    model_name="event",
                    name="task",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=models.deletion.PROTECT,
                        related_name="events",
                        to="ledger.task",
                    ),
                ),
                migrations.AlterField(
                    model_name="event",
                    name="actor_user",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=models.deletion.PROTECT,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            database_operations=[migrations.RunPython(drop_redundant_indexes, restore_indexes)],
        ),
        migrations.AddIndex(
            model_name="event",
            index=models.Index(
                condition=models.Q(("actor_user__isnull", False)), fields=["actor_user"], name="event_actor_user"
            ),
        ),
        migrations.RunPython(partition, unpartition),
    ]

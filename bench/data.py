"""Bench data: projects and agents through the services, tasks and attempts in bulk.

Tasks and attempts are written with COPY (PostgreSQL) or one executemany
(SQLite) inside a single transaction: creating 100,000 tasks through
`task_create` would take minutes and measure nothing we report. Bulk rows
carry no `task.created` events; everything the workloads do afterwards goes
through the services (or the raw reference) and carries its events.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

TASK_COLUMNS = (
    "project_id",
    "number",
    "key",
    "title",
    "description",
    "acceptance_criteria",
    "task_class",
    "priority",
    "labels",
    "status",
    "blocked_reason",
    "version",
    "epoch",
    "ready_since",
    "created_at",
    "updated_at",
)
ATTEMPT_COLUMNS = (
    "task_id",
    "agent_id",
    "epoch",
    "status",
    "token_hash",
    "token_salt",
    "lease_seconds",
    "lease_expires_at",
    "claimed_at",
    "renew_count",
    "finished_at",
    "branch",
    "base_commit",
    "label",
    "task_version_at_claim",
    "result_summary",
    "next_steps",
    "failure_reason_code",
    "interruption_reason_code",
    "revoked_by",
    "revoke_reason",
)


@dataclass(frozen=True)
class Fleet:
    project: Any  # ledger.models.Project
    agents: list[Any]  # ledger.models.Agent


_project_counter = iter(range(1, 10_000))


def make_project(slug: str, *, agents: int = 0, agent_prefix: str | None = None) -> Fleet:
    """A project (through `project_create`) and `agents` agents that may see it (through `agent_create`)."""
    from ledger.actors import SYSTEM
    from ledger.services import agent_create, project_create

    project = project_create(slug=slug, name=f"Bench {slug}", actor=SYSTEM, key_prefix=f"B{next(_project_counter)}")
    made = []
    for index in range(agents):
        agent, _ = agent_create(
            handle=f"{agent_prefix or slug}-{index:03d}", kind="claude", projects=[project], actor=SYSTEM
        )
        made.append(agent)
    return Fleet(project=project, agents=made)


# Columns without a database default that every bulk row of a table carries the same value in
# (the model's default): the row generators stay as they were when the columns were added.
CONSTANT_COLUMNS: dict[str, dict[str, Any]] = {
    "ledger_task": {
        "paths": "[]",
        "paths_mode": "exclusive",
        "delivered_branch": "",
        "delivered_commit": "",
        "landed_commit": "",
        "landed_by": "",
        "failed_landings": 0,
        "requires": "[]",
        # SPEC §25: set by the attempt table's triggers when an active attempt is inserted.
        "held": False,
    },
    "leases_attempt": {"kind": "work", "command_token_hash": ""},
}


# Set by a caller that wants each bulk write reported (`bench.growth_seed`'s progress lines): called with the
# table, the rows written, the seconds of the whole write and the seconds spent generating its rows in Python.
copy_progress: Callable[[str, int, float, float], None] | None = None


class _TimedRows:
    """The rows of a bulk write, counting them and the time spent making them (the rest is the database's)."""

    def __init__(self, rows: Iterator[tuple[Any, ...]]) -> None:
        self.rows, self.count, self.seconds = rows, 0, 0.0

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        clock = time.perf_counter
        while True:
            began = clock()
            try:
                row = next(self.rows)
            except StopIteration:
                self.seconds += clock() - began
                return
            self.seconds += clock() - began
            self.count += 1
            yield row


def _copy_rows(table: str, columns: Sequence[str], rows: Iterator[tuple[Any, ...]]) -> None:
    """Write rows in one statement stream: COPY on PostgreSQL, executemany on SQLite."""
    from django.db import connection, transaction

    timed = _TimedRows(iter(rows)) if copy_progress is not None else None
    began = time.perf_counter()
    if timed is not None:
        rows = iter(timed)

    constants = {name: value for name, value in CONSTANT_COLUMNS.get(table, {}).items() if name not in columns}
    if constants:
        columns = (*columns, *constants)
        extra = tuple(constants.values())
        rows = (row + extra for row in rows)

    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            raw = cursor.cursor  # the psycopg cursor under Django's wrapper
            with raw.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        else:
            placeholders = ", ".join("?" for _ in columns)
            sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({placeholders})"
            raw = cursor.cursor
            batch: list[tuple[Any, ...]] = []
            for row in rows:
                batch.append(tuple(_sqlite_value(value) for value in row))
                if len(batch) >= 20_000:
                    raw.executemany(sql, batch)
                    batch.clear()
            if batch:
                raw.executemany(sql, batch)
    if timed is not None and copy_progress is not None:
        copy_progress(table, timed.count, time.perf_counter() - began, timed.seconds)


def _sqlite_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).replace(tzinfo=None).isoformat(" ")
    return value


def bulk_ready_tasks(
    project: Any, count: int, *, body_bytes: int = 0, since: datetime | None = None, task_class: str = ""
) -> tuple[int, int]:
    """`count` ready tasks in `project`, numbered after its existing ones; returns (first id, last id)."""
    from ledger.models import Project, Task

    now = since or datetime.now(UTC)
    start = Project.objects.get(pk=project.pk).task_sequence
    body = ("lorem ipsum dolor sit amet " * (body_bytes // 27 + 1))[:body_bytes]
    labels = json.dumps([])

    def rows() -> Iterator[tuple[Any, ...]]:
        for offset in range(1, count + 1):
            number = start + offset
            yield (
                project.pk,
                number,
                f"{project.key_prefix}-{number}",
                f"Bench task {number}",
                body,
                body,
                task_class,
                0,
                labels,
                "ready",
                "",
                1,
                0,
                now - timedelta(microseconds=count - offset),  # claim-next order = creation order
                now,
                now,
            )

    _copy_rows("ledger_task", TASK_COLUMNS, rows())
    Project.objects.filter(pk=project.pk).update(task_sequence=start + count)
    ids = Task.objects.filter(project=project, number__gt=start).values_list("id", flat=True)
    return min(ids), max(ids)


# A history as a fleet leaves it: some attempts completed, some released, some expired. (Without
# expired rows the planner believes `status = 'expired'` matches nothing; see docs/performance.md F5.)
FINISHED_STATUSES = ("completed", "released", "expired")


def bulk_history(
    project: Any,
    agent: Any,
    *,
    first_task: int,
    last_task: int,
    finished_per_task: int,
    lapsed: bool,
    now: datetime,
) -> int:
    """Finished attempts (`finished_per_task` per task) and, if `lapsed`, one active attempt per task
    whose lease lapsed a minute ago; sets each task's epoch to its last attempt's. Returns rows written."""
    from ledger.models import Task

    salt = secrets.token_hex(16)
    hashed = "0" * 64
    steps = json.dumps([])
    long_ago = now - timedelta(days=2)
    per_task = finished_per_task + (1 if lapsed else 0)

    def rows() -> Iterator[tuple[Any, ...]]:
        for task_id in range(first_task, last_task + 1):
            for epoch in range(1, per_task + 1):
                active = lapsed and epoch == per_task
                claimed = long_ago + timedelta(minutes=epoch) if not active else now - timedelta(minutes=16)
                expires = claimed + timedelta(seconds=900)
                status = "active" if active else FINISHED_STATUSES[epoch % len(FINISHED_STATUSES)]
                finished = None if active else (expires if status == "expired" else claimed + timedelta(seconds=30))
                yield (
                    task_id,
                    agent.pk,
                    epoch,
                    status,
                    hashed,
                    salt,
                    900,
                    expires,
                    claimed,
                    0,
                    finished,
                    "",
                    "",
                    f"owner={agent.handle};branch=-;env=-;task=T-{task_id};epoch={epoch}",
                    1,
                    "",
                    steps,
                    "",
                    "",
                    "",
                    "",
                )

    _copy_rows("leases_attempt", ATTEMPT_COLUMNS, rows())
    # Epochs follow the attempts: one UPDATE for the whole range.
    Task.objects.filter(project=project, pk__gte=first_task, pk__lte=last_task).update(epoch=per_task)
    return per_task * (last_task - first_task + 1)


def bulk_holds(agent: Any, *, first_task: int, last_task: int, now: datetime, lease_seconds: int = 3600) -> None:
    """One live lease (an active attempt, epoch 1, expiring `lease_seconds` after `now`) on each task of the
    id range; the attempt table's triggers mark the tasks held, as a claim's insert does (SPEC §25)."""
    from ledger.models import Task

    salt, hashed, steps = secrets.token_hex(16), "0" * 64, json.dumps([])
    expires = now + timedelta(seconds=lease_seconds)

    def rows() -> Iterator[tuple[Any, ...]]:
        for task_id in range(first_task, last_task + 1):
            label = f"owner={agent.handle};branch=-;env=-;task=T-{task_id};epoch=1"
            lease = (lease_seconds, expires, now, 0, None)
            yield (task_id, agent.pk, 1, "active", hashed, salt, *lease, "", "", label, 1, "", steps, "", "", "", "")

    _copy_rows("leases_attempt", ATTEMPT_COLUMNS, rows())
    Task.objects.filter(pk__gte=first_task, pk__lte=last_task).update(epoch=1)


def vacuum_analyze() -> None:
    """Reclaim dead rows and refresh statistics (PostgreSQL needs autocommit for VACUUM)."""
    from django.db import connection

    if connection.vendor != "postgresql":
        analyze()
        return
    import psycopg

    settings = connection.settings_dict
    with psycopg.connect(
        host=settings["HOST"] or None,
        port=settings["PORT"] or None,
        user=settings["USER"] or None,
        dbname=settings["NAME"],
        autocommit=True,
    ) as conn:
        conn.execute("VACUUM ANALYZE")


def analyze() -> None:
    """Fresh planner statistics after bulk loads (PostgreSQL ANALYZE, SQLite ANALYZE)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


# Ids start far apart per table, so that a captured parameter's value names
# one symbol (a task id never equals an attempt id) and stays above
# `bench.capture.SMALL_INT`.
ID_OFFSETS = {
    "ledger_project": 110_000,
    "ledger_agent": 120_000,
    "ledger_task": 1_000_000,
    "ledger_taskdependency": 3_000_000,
    "leases_attempt": 20_000_000,
    "leases_note": 40_000_000,
    "ledger_event": 60_000_000,
    "leases_allocation": 80_000_000,
    "leases_claimrefusaltally": 90_000_000,
    "environments_environment": 95_000_000,
}


def offset_ids() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        for table, start in ID_OFFSETS.items():
            if connection.vendor == "postgresql":
                cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [table])
                (sequence,) = cursor.fetchone()
                cursor.execute(f"ALTER SEQUENCE {sequence} RESTART WITH {start}")
            else:
                cursor.execute("DELETE FROM sqlite_sequence WHERE name = %s", [table])
                cursor.execute("INSERT INTO sqlite_sequence (name, seq) VALUES (%s, %s)", [table, start - 1])


NOTE_COLUMNS = ("attempt_id", "kind", "content", "next_steps", "important", "created_at")
# Note text for search: ten words of a 400-word vocabulary (each word in ~2.5 % of notes) and one
# ticket number shared by every 50,000th note (`ticket-<n>`: a rare word, ~count/50,000 notes).
_STEMS = (
    "migration flaky runner claim lease branch review merge deploy staging parser schema index cache "
    "timeout retry webhook sweep renew token budget label commit rebase conflict"
)
SEARCH_VOCABULARY = tuple(
    f"{stem}{suffix}"
    for stem in _STEMS.split()
    for suffix in (
        "",
        "s",
        "ed",
        "ing",
        "er",
        "able",
        "ness",
        "ment",
        "ful",
        "less",
        "ity",
        "ise",
        "al",
        "ous",
        "ant",
        "ish",
    )
)[:400]
TICKETS = 50_000


def note_text(number: int) -> str:
    words, state = [], number
    for _ in range(10):  # a 64-bit LCG per note: words independent of one another
        state = (state * 6364136223846793005 + 1442695040888963407) % 2**64
        words.append(SEARCH_VOCABULARY[(state >> 33) % len(SEARCH_VOCABULARY)])
    return f"Checkpoint {number}: " + " ".join(words) + f" ticket-{number % TICKETS}."


def bulk_notes(first_attempt: int, last_attempt: int, *, per_attempt: int, now: datetime) -> int:
    """`per_attempt` checkpoint notes on each attempt in the id range (the schema's triggers index them)."""
    steps = json.dumps([])

    def rows() -> Iterator[tuple[Any, ...]]:
        number = 0
        for attempt_id in range(first_attempt, last_attempt + 1):
            for _ in range(per_attempt):
                number += 1
                yield (attempt_id, "checkpoint", note_text(number), steps, False, now)

    _copy_rows("leases_note", NOTE_COLUMNS, rows())
    return per_attempt * (last_attempt - first_attempt + 1)

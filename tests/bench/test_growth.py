"""The growth workload (issue 33, `python -m bench growth`) at a tiny scale, so it cannot rot.

One scale seeded into the test database and measured in-process (the command runs each scale in a
process and database of its own); the comparison across scales is checked on that payload.
"""

from __future__ import annotations

import argparse
import os
from datetime import UTC, datetime
from typing import Any

import pytest

from bench.growth import (
    _extra,
    check_reusable,
    compare,
    kept_name,
    kept_record,
    label,
    measure_scale,
    parse_reuse,
    parse_scales,
    render,
    reuse_setup,
    seed_scale,
)
from bench.growth_seed import align_lapses
from tests.bench.test_smoke import _test_database_target

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

TASKS = 200


def test_one_tiny_scale_seeds_the_history_through_the_triggers_and_measures_every_row():
    from insight.models import EventTally, TaskFirstReady
    from leases.models import Attempt
    from ledger.models import Event, EventType, Task

    setup = seed_scale(TASKS, extra=_extra(1, 2, 10))
    # /metrics' tally has counted the seeded history: the first scrape counts none of it (at any scale).
    position = EventTally.objects.get(type="*", status="")
    assert position.through_event_id == Event.objects.order_by("-id").values_list("id", flat=True).first()
    assert setup["phases"]["total"] > 0
    assert "copy ledger_event" in setup["phases"], setup["phases"]

    alerts = Event.objects.filter(type=EventType.TASK_QUEUE_WAIT_EXCEEDED)
    seeded_alerts = alerts.count()  # the seeded history's own
    payload = measure_scale(_test_database_target(), TASKS, repeat=2, runs=1, cycles=10, held=True, setup=setup)

    # Every measurement starts with the same lapsed leases (200 from 10k tasks up; fewer ready tasks here).
    lapsed = payload["lapsed_at_start"]
    assert 0 < lapsed <= 200
    # ... and the seed's waiting backlog alerted long ago, as a running fleet's check leaves it: the
    # measurement's queue-wait checks alert none of it (the alerts they write are live work only).
    assert payload["queue_wait_aligned_at_start"] > 0
    assert alerts.count() == seeded_alerts
    sizes = payload["sizes"]
    assert (sizes["tasks"], sizes["attempts"], sizes["events"], sizes["notes"]) == (200, 600, 2000, 600)
    assert 0 < sizes["allocations"] <= TASKS
    # The triggers' effects on the bulk rows: each seeded task's first-ready row, `Task.held` for live leases.
    assert TaskFirstReady.objects.count() >= TASKS
    live = Attempt.objects.filter(status="active").values("task_id").distinct().count()
    assert Task.objects.filter(held=True).count() == live
    names = {row["name"]: row for row in payload["runs"][0]}
    expected = {
        "claim-next",
        "work context (HTTP)",
        "renew",
        "note (progress)",
        "checkpoint",
        "finish (done)",
        "claim a task, lease_seconds=900",
        "claim a task, no lease_seconds",
        "raw: claim-next",
        "raw: finish (done)",
        "search: a ticket (rare word)",
        "changes feed: the newest 100",
        "/metrics (first scrape)",
        "/metrics (warm)",
        "job: sweep (and its folds)",
        "job: reconcile",
        "job: landed-outside check, a target's first run (every delivered task)",
        "job: landed-outside check, with its cursor",
        "job: queue-wait check",
        "job: rollup folds",
        "page: dashboard",
        "page: events list",
    }
    assert expected <= set(names), expected - set(names)
    for row in payload["runs"][0]:
        assert row["n"] > 0, row
        assert row["median_ms"] > 0, row
    assert names["claim-next"]["vs_raw"] is not None
    assert names["search: two words"]["note"] == "HTTP 200"
    # The landed-outside check ran against a real target: the landing project's cursor holds its tip.
    from reconciliation.models import TargetCursor

    [cursor] = TargetCursor.objects.all()
    assert (cursor.target_branch, len(cursor.tip), cursor.pending) == ("main", 40, [])
    storage = {row["name"]: row for row in payload["storage"]}
    for table in ("task", "attempt", "note", "event", "allocation"):
        per_row = storage[f"bytes per {table}"]["per_row"]
        assert per_row is None or per_row > 0, storage  # None: a SQLite built without dbstat
    assert storage["bytes per 1,000 agent cycles"]["cycles"] == 10
    held = {row["name"]: row for row in payload["held"]}
    assert "vs_10_held" in held["held: claim-next, 500 held (service)"], held

    # The comparison: a scale against itself is 1x everywhere, and a row twice as slow is over 2x.
    rows = compare([payload, payload])
    assert all(row["scales"][-1]["ratio"] in (1.0, None) for row in rows)
    assert render([payload, payload], rows).count("Every row within 2x.") == 1
    slower = {
        **payload,
        "tasks": 400,
        "runs": [[{**row, "median_ms": row["median_ms"] * 2.5} for row in payload["runs"][0]]],
    }
    over = [row["name"] for row in compare([payload, slower]) if row["over"]]
    assert "claim-next" in over
    assert "| claim-next |" in render([payload, slower], compare([payload, slower]))

    # Measured again as a kept database (`--reuse`): refused at another scale or without its seeded rows;
    # otherwise the same project, the agent with a fresh token, fresh ready tasks, and the same lapses
    # (`bench.held`'s leases of the first measurement expired first).
    record = kept_record(setup, TASKS)
    with pytest.raises(SystemExit, match="seeded with 200 tasks, not 400"):
        check_reusable(record, 400, "kept")
    with pytest.raises(SystemExit, match="lacks rows of its seed"):
        check_reusable({**record, "sizes": {**record["sizes"], "events": 10**9}}, TASKS, "kept")
    again = reuse_setup(record, TASKS, "kept", extra=30)
    assert again["project"] == setup["project"]
    assert again["agent"] == setup["agent"]
    assert again["token"] != setup["token"]
    assert again["reused"]["rows"]["events"] > sizes["events"]
    second = measure_scale(_test_database_target(), TASKS, repeat=1, runs=1, cycles=2, held=False, setup=again)
    assert second["lapsed_at_start"] > 0
    # However many leases are live or lapsed before it, a measurement starts with exactly `count` lapsed ones.
    for _ in range(2):
        at = datetime.now(UTC)
        assert align_lapses(at, measuring_project=setup["project"], count=5) == 5
        active = Attempt.objects.filter(status="active")
        assert active.count() == 5
        assert not active.filter(lease_expires_at__gte=at).exists()
        assert not active.filter(task__project=setup["project"]).exists()
        assert Task.objects.filter(held=True).count() == 5
    assert second["reused"]["name"] == "kept"


def test_kept_databases_survive_the_cleanup_of_abandoned_runs():
    from bench.environment import KEPT_MARKER, PG_BENCH_DATABASE_PREFIX, PG_KEPT_DATABASE_PREFIX, _drop_abandoned

    dead = 999_999_999  # above any pid_max: no such process
    listed = [
        (f"{PG_BENCH_DATABASE_PREFIX}{dead}", ""),
        (f"{PG_BENCH_DATABASE_PREFIX}{dead + 1}", f'{{"marker": "{KEPT_MARKER}"}}'),
        (f"{PG_BENCH_DATABASE_PREFIX}{os.getpid()}", ""),
    ]

    class Conn:
        def __init__(self) -> None:
            self.statements: list[str] = []

        def execute(self, sql: str, params: Any = None) -> Any:
            self.statements.append(sql)
            return type("Rows", (), {"fetchall": staticmethod(lambda: listed)})()

    conn = Conn()
    _drop_abandoned(conn)
    dropped = [sql for sql in conn.statements if sql.startswith("DROP")]
    assert dropped == [f'DROP DATABASE IF EXISTS "{PG_BENCH_DATABASE_PREFIX}{dead}" WITH (FORCE)']
    name = kept_name("postgresql", 1_000_000)
    assert name.startswith(f"{PG_KEPT_DATABASE_PREFIX}growth_1m_")
    assert not name.startswith(PG_BENCH_DATABASE_PREFIX)


def test_reuse_names_kept_databases_by_scale():
    assert parse_reuse("1m=leasehold_kept_growth_1m_1, 10k=b") == {1_000_000: "leasehold_kept_growth_1m_1", 10_000: "b"}
    for text in ("1m", "1m=", "ten=b"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_reuse(text)


def test_scales_are_increasing_task_counts_with_k_and_m_suffixes():
    assert parse_scales("10k,100k,1m") == (10_000, 100_000, 1_000_000)
    assert parse_scales("200,400") == (200, 400)
    assert [label(n) for n in (10_000, 1_000_000, 200)] == ["10k", "1M", "200"]
    for text in ("100k,10k", "", "5", "ten", "10k,10k"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_scales(text)


def test_a_raw_reference_stopped_at_its_timeout_is_a_row_that_says_so():
    """`Meter.timed_out`: the sample is the timeout (a lower bound), the row counts and names it, and the
    service row beside it is still compared with it."""
    from bench.growth_measure import Meter

    meter = Meter(None)
    meter.run("read", "search: x", lambda: None)
    meter.timed_out("read", "raw: search: x", 10.0)
    meter.timed_out("read", "raw: search: x", 10.0)
    rows = {row["name"]: row for row in meter.rows({"search: x": "raw: search: x"})}
    raw = rows["raw: search: x"]
    assert (raw["n"], raw["median_ms"], raw["cpu_ms"]) == (2, 10_000.0, 0.0)
    assert raw["note"] == "2 sample(s) stopped at the statement timeout (10 s): a lower bound"
    assert rows["search: x"]["raw_ms"] == 10_000.0
    assert rows["search: x"]["vs_raw"] < 0.01

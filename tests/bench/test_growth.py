"""The growth workload (issue 33, `python -m bench growth`) at a tiny scale, so it cannot rot.

One scale seeded into the test database and measured in-process (the command runs each scale in a
process and database of its own); the comparison across scales is checked on that payload.
"""

from __future__ import annotations

import argparse

import pytest

from bench.growth import compare, label, measure_scale, parse_scales, render
from tests.bench.test_smoke import _test_database_target

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

TASKS = 200


def test_one_tiny_scale_seeds_the_history_through_the_triggers_and_measures_every_row():
    from insight.models import TaskFirstReady
    from leases.models import Attempt
    from ledger.models import Task

    payload = measure_scale(_test_database_target(), TASKS, repeat=2, runs=1, cycles=10, held=True)

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


def test_scales_are_increasing_task_counts_with_k_and_m_suffixes():
    assert parse_scales("10k,100k,1m") == (10_000, 100_000, 1_000_000)
    assert parse_scales("200,400") == (200, 400)
    assert [label(n) for n in (10_000, 1_000_000, 200)] == ["10k", "1M", "200"]
    for text in ("100k,10k", "", "5", "ten", "10k,10k"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_scales(text)

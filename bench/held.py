"""`--only held` (SPEC §25, issue 33): claim-next against 100 and against 10,000 held leases.

Per level, a project of its own with `held` tasks at the head of its queue (the oldest, each with a live
lease of an hour, written as bulk rows whose inserts fire the attempt table's triggers, as a claim's do)
and HELD_FREE ready tasks behind them. One agent then claims next for a few seconds (its claims are
kept, so the held count grows by the claims made: the row says how many). Three rows per level:

- **service**: `lease_claim_next`, as W1 runs it;
- **raw**: the replay of the same statements, captured in this run (`bench.replay`), on a twin project;
- **reference**: the candidate statement as it was before issue 33 (`claimable_tasks` with the
  `NOT EXISTS` live-attempt test, ordered, `LIMIT 1`, `FOR NO KEY UPDATE SKIP LOCKED`), on the service's
  project, in a transaction rolled back each time: what claim-next's first statement cost when held
  tasks stayed in the walk.

The 10,000 row's `vs_100_held` is its p50 over the 100 row's (the target: ≤ 2).
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from bench import data, ops
from bench.cycles import capture_ops, fresh_fleet, run_raw, run_service
from bench.environment import Target
from bench.harness import RunResult, percentile
from bench.results import Row, row_from_run, set_ratio
from bench.sizes import SMOKE, Sizes

HELD_LEVELS = (100, 10_000)
SMOKE_HELD_LEVELS = (10, 500)
HELD_FREE = 2_000
HELD_SECONDS = 3.0
REFERENCE_SECONDS = 3.0
REFERENCE_MIN_CALLS = 3


def held_fleet(name: str, *, held: int) -> data.Fleet:
    """A project whose `held` oldest ready tasks have a live lease each, HELD_FREE ready tasks behind them."""
    fleet = fresh_fleet(name, agents=2, tasks=0)
    first, _ = data.bulk_ready_tasks(fleet.project, held + HELD_FREE)
    # The second agent holds them; the first claims next.
    data.bulk_holds(fleet.agents[1], first_task=first, last_task=first + held - 1, now=datetime.now(UTC))
    return fleet


def _reference(fleet: data.Fleet, *, seconds: float) -> RunResult:
    """The pre-issue-33 candidate statement, timed in a transaction rolled back each time."""
    from django.db import transaction

    from leases.selectors import HOLDS_ANY, claimable_tasks
    from ledger import clock

    project, agent = fleet.project, fleet.agents[0]
    samples: list[float] = []
    began = time.perf_counter()
    while len(samples) < REFERENCE_MIN_CALLS or time.perf_counter() - began < seconds:
        started = time.perf_counter()
        with transaction.atomic():
            candidate = (
                claimable_tasks(project=project, now=clock.now(), agent=agent, holds=HOLDS_ANY)
                .select_related("project")
                .select_for_update(skip_locked=True, no_key=True, of=("self",))
                .first()
            )
            transaction.set_rollback(True)
        samples.append(time.perf_counter() - started)
        if candidate is None:
            raise RuntimeError("the reference found nothing to claim")
    return RunResult(
        threads=1,
        seconds=time.perf_counter() - began,
        latencies={"claim": samples},
        outcomes=Counter(),
        errors=[],
    )


def held(target: Target, sizes: Sizes) -> tuple[list[Row], dict[str, Any]]:
    captured = capture_ops("held", [ops.CLAIM_NEXT])
    levels = SMOKE_HELD_LEVELS if sizes == SMOKE else HELD_LEVELS
    seconds = min(HELD_SECONDS, sizes.w1_seconds)
    rows: list[Row] = []
    p50s: dict[int, float | None] = {}
    for level in levels:
        name = f"held: claim-next, {level:,} held"
        service_fleet = held_fleet(f"held{level}s", held=level)
        raw_fleet = held_fleet(f"held{level}r", held=level)
        # Reclaim and analyze, as autovacuum would: the triggers' marks left a dead row version per held task.
        data.vacuum_analyze()
        service_agent = fleet_of_claimer(service_fleet)
        service = run_service(service_agent, [ops.CLAIM_NEXT], threads=1, seconds=seconds, hot=False)
        raw = run_raw(target, fleet_of_claimer(raw_fleet), captured, threads=1, seconds=seconds, hot=False)
        reference = _reference(service_fleet, seconds=min(REFERENCE_SECONDS, seconds))
        level_rows = [
            row_from_run(
                target.vendor, name, "service", service, kind="claim", held_after=level + service.count("claim")
            ),
            row_from_run(target.vendor, name, "raw", raw, kind="claim"),
            row_from_run(target.vendor, name, "reference", reference, kind="claim", statement="before issue 33"),
        ]
        set_ratio(level_rows[0], level_rows[1])
        set_ratio(level_rows[2], level_rows[1])
        p50s[level] = percentile(service.latencies.get("claim", []), 0.5)
        rows += level_rows
    low, high = levels
    low_p50, high_p50 = p50s[low], p50s[high]
    if low_p50 and high_p50:
        rows[3].extra[f"vs_{low}_held"] = round(high_p50 / low_p50, 2)
    return rows, {"held_claim": {op.spec.name: {"logged": op.logged} for op in captured}}


def fleet_of_claimer(fleet: data.Fleet) -> data.Fleet:
    """The fleet as the claim loops see it: only the agent that claims (the other holds the leases)."""
    return data.Fleet(project=fleet.project, agents=fleet.agents[:1])

"""`bench --only landing` (SPEC §24) at a tiny T: what it lands, how many checks each mode runs, and its ratio."""

from __future__ import annotations

import pytest

from bench.environment import Target
from bench.landing import TASKS, landing
from bench.sizes import SMOKE


@pytest.mark.parametrize(("failing", "batched_checks"), [(10, 6), (11, 5)])
def test_batched_landing_finds_the_failing_task_in_1_plus_log2_16_checks_and_serial_runs_16(
    monkeypatch, failing, batched_checks
):
    monkeypatch.setenv("LEASEHOLD_BENCH_LANDING_T", "0.05")
    monkeypatch.setenv("LEASEHOLD_BENCH_LANDING_FAILING", str(failing))

    batched, wide, serial = landing(Target("sqlite", {}, ""), SMOKE)[0]

    for row in (batched, wide, serial):
        assert row.outcomes == {"landed": TASKS - 1, "check_failed": 1}
        assert row.errors == []
    assert (batched.mode, batched.extra["check_runs"], batched.extra["landings"]) == ("batched", batched_checks, 1)
    assert (serial.mode, serial.extra["check_runs"], serial.extra["landings"]) == ("serial", TASKS, TASKS)
    # The ratio of the unrounded walls; the rows' seconds are rounded to 3 places.
    assert batched.ratio == pytest.approx(batched.seconds / serial.seconds, abs=0.005)
    assert batched.workload == serial.workload == "landing: 16 queued, 1 failing, check T=0.05 s"
    # Checks at once (`--parallel-checks 3`): the same outcome; at least the same checks run to their end or stopped.
    assert (wide.mode, wide.extra["parallel_checks"], wide.extra["landings"]) == ("batched x3", 3, 1)
    assert wide.extra["check_runs"] + wide.extra["checks_stopped"] >= batched_checks
    assert batched.extra["merges"] >= TASKS

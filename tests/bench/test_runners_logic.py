"""The arithmetic of `--only runners` (bench/runners.py, bench/runner_cpu.py): fast, no server, no database."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from bench.runner_cpu import live_children, stat_times
from bench.runners import beyond_rest_ms, floor_rate, per_second


def test_cpu_per_second_is_a_share_of_one_core_and_zero_for_an_empty_window():
    assert per_second(3.0, 60.0) == 0.05
    assert per_second(1.0, 0.0) == 0.0


def test_cpu_per_item_counts_only_what_the_window_spent_beyond_its_rest_rate():
    # 2 s of CPU over 10 s at a rest rate of 0.1 core: 1 s beyond rest, over 50 items = 20 ms each.
    assert beyond_rest_ms(2.0, 10.0, 0.1, 50) == 20.0
    # A quieter window than rest is not a negative cost.
    assert beyond_rest_ms(0.5, 10.0, 0.1, 50) == 0.0
    # No item: the whole excess, not a division by zero.
    assert beyond_rest_ms(2.0, 10.0, 0.1, 0) == 1000.0


def test_the_sql_floor_is_the_windows_heartbeats_and_reasks_at_their_replayed_cost():
    # 400 heartbeats at 1 ms and 1,000 re-asks at 0.5 ms in 60 s: 0.9 s / 60 s = 1.5 % of a core.
    assert round(floor_rate(beats=400, reasks=1000, window=60.0, beat_cpu=0.001, reask_cpu=0.0005), 6) == 0.015


def test_stat_times_splits_a_process_own_cpu_from_its_reaped_childrens():
    burn = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\n"
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import subprocess, sys, time\nsubprocess.run([sys.executable, '-c', {burn!r}])\ntime.sleep(30)",
        ]
    )
    try:
        deadline = time.monotonic() + 20
        while stat_times(parent.pid)[1] < 0.25 and time.monotonic() < deadline:
            time.sleep(0.05)
        own, children = stat_times(parent.pid)
        assert children >= 0.25  # the reaped child's burn
        assert own < children
        assert live_children(parent.pid) == []  # reaped: nothing of it is left under the parent
        assert parent.pid in live_children(os.getpid())
    finally:
        parent.kill()
        parent.wait()

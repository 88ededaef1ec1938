"""The sizes of a run: the full run's (FULL) and the smoke mode's (SMOKE), which every workload reads."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    w1_tasks: int = 100_000
    w1_seconds: float = 8
    w2_agents: int = 64
    w2_tasks: int = 4
    w2_seconds: float = 8
    w2_processes: int = 8  # the W2 row with the same agents spread over processes
    w3_levels: tuple[int, ...] = (1, 4, 16, 64)
    w3_seconds: float = 6
    w3_tasks: int = 15_000
    w5_expired: int = 100_000
    w5_finished_per_task: int = 10
    w5_probe_agents: int = 2
    w5_probe_seconds: float = 5
    context_description_bytes: int = 1_000_000
    context_calls: int = 40
    page_tasks: int = 100
    page_body_bytes: int = 10_000
    page_calls: int = 40
    sqlite_processes: int = 4
    sqlite_threads: int = 4
    sweep_batch: int | None = None  # None: sweep_expired's own default


FULL = Sizes()
SMOKE = Sizes(
    w1_tasks=1_000,
    w1_seconds=0.7,
    w2_agents=4,
    w2_seconds=0.7,
    w2_processes=2,
    w3_levels=(1, 4),
    w3_seconds=0.7,
    w3_tasks=1_000,
    w5_expired=1_000,
    w5_probe_seconds=0.5,
    context_description_bytes=200_000,
    context_calls=5,
    page_calls=5,
    sqlite_processes=2,
    sqlite_threads=2,
)

"""Threads that run a loop until a deadline and record latencies and outcomes."""

from __future__ import annotations

import math
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Recorder:
    """One thread's measurements: latency samples (seconds) per kind, outcome counts, errors."""

    latencies: dict[str, list[float]] = field(default_factory=dict)
    outcomes: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)

    def add(self, kind: str, seconds: float) -> None:
        self.latencies.setdefault(kind, []).append(seconds)


@dataclass
class RunResult:
    threads: int
    seconds: float
    latencies: dict[str, list[float]]
    outcomes: Counter[str]
    errors: list[str]

    def count(self, kind: str) -> int:
        return len(self.latencies.get(kind, ()))


def percentile(samples: list[float], fraction: float) -> float | None:
    """Nearest-rank percentile; None for no samples."""
    if not samples:
        return None
    ordered = sorted(samples)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def merge(recorders: Iterable[Recorder], *, threads: int, seconds: float) -> RunResult:
    latencies: dict[str, list[float]] = {}
    outcomes: Counter[str] = Counter()
    errors: list[str] = []
    for recorder in recorders:
        for kind, samples in recorder.latencies.items():
            latencies.setdefault(kind, []).extend(samples)
        outcomes.update(recorder.outcomes)
        errors.extend(recorder.errors)
    return RunResult(threads=threads, seconds=seconds, latencies=latencies, outcomes=outcomes, errors=errors)


Body = Callable[[int, Recorder, float], None]


def run_threads(
    count: int,
    body: Body,
    *,
    duration: float,
    on_exit: Callable[[], Any] | None = None,
    timeout: float = 600,
) -> RunResult:
    """Start `count` threads together; each runs `body(index, recorder, deadline)` and then `on_exit()`.

    `deadline` is a `time.perf_counter()` value; bodies stop starting new
    operations once it has passed. Throughput is computed over the wall time
    from the common start to the last thread's end.
    """
    recorders = [Recorder() for _ in range(count)]
    barrier = threading.Barrier(count + 1)
    start_box: list[float] = []

    def run(index: int) -> None:
        recorder = recorders[index]
        try:
            barrier.wait(timeout=timeout)
            body(index, recorder, start_box[0] + duration)
        except BaseException as exc:  # reported in the results; the run is then marked failed
            recorder.errors.append("".join(traceback.format_exception_only(type(exc), exc)).strip())
        finally:
            if on_exit is not None:
                on_exit()

    threads = [threading.Thread(target=run, args=(index,), daemon=True) for index in range(count)]
    for thread in threads:
        thread.start()
    start_box.append(time.perf_counter() + 0.01)
    barrier.wait(timeout=timeout)
    started = time.perf_counter()
    for thread in threads:
        thread.join(timeout)
    elapsed = time.perf_counter() - started
    hung = sum(thread.is_alive() for thread in threads)
    result = merge(recorders, threads=count, seconds=elapsed)
    if hung:
        result.errors.append(f"{hung} threads did not finish within {timeout} s")
    return result

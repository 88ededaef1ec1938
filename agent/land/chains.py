"""What a landing's try is built of, below the engine and its speculator: the plan, the candidates
(`Chains`), each task's outcome, and `Abandoned` (SPEC §21.3).

`agent.land.engine` runs a try; `agent.land.speculate` checks its bisection's
probes; both build candidates through one `Chains` and report `TaskOutcome`s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent.land.git import LandTask, Merged, Merger


class Abandoned(Exception):
    """The landing stopped before its push (told to stop, or the lease was lost): the target was not touched."""


@dataclass(frozen=True)
class LandingPlan:
    """What one landing lands, and how (from `/landings/next/`, or a test)."""

    source: str  # URL or path fetched from and pushed to
    target: str
    method: str
    tasks: list[LandTask]
    check_command: str = ""
    check_timeout_seconds: float = 1800.0


@dataclass
class TaskOutcome:
    key: str
    outcome: str  # landed | conflict | check_failed | target_moved | deferred
    paths: list[str] = field(default_factory=list)
    output_tail: str = ""

    def as_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"key": self.key, "outcome": self.outcome}
        if self.paths:
            body["paths"] = self.paths
        if self.output_tail:
            body["output_tail"] = self.output_tail
        return body


class Chains:
    """The candidates built in one try: queue-ordered task keys → commit (None: it cannot be built).

    Every candidate is the tip with tasks merged on in queue order, one commit
    per task, so a candidate whose tasks begin with those of one built before
    starts from that one's commit: the whole batch's chain is built once, and a
    bisection probe merges only the tasks after its longest prefix already
    built (a probe that is a prefix of the batch merges nothing).
    """

    def __init__(self, merger: Merger, tip: str, method: str, stop_point: Callable[[], None]) -> None:
        self.merger = merger
        self.tip = tip
        self.method = method
        self.stop_point = stop_point
        self.built: dict[tuple[str, ...], str | None] = {(): tip}
        self.merges = 0

    def extend(self, keys: tuple[str, ...], task: LandTask) -> Merged:
        """Merge `task` onto the candidate `keys` (built), remembering the result."""
        self.stop_point()
        before = self.built[keys]
        if before is None:
            raise ValueError(f"the candidate {keys} could not be built")
        done = self.merger.merge(before, task, self.method)
        self.merges += 1
        self.built[(*keys, task.key)] = done.commit if done.ok else None
        return done

    def step(self, tasks: list[LandTask]) -> bool:
        """One merge towards the candidate tip + `tasks` (queue order): False when it is built or cannot be."""
        keys = tuple(task.key for task in tasks)
        start = max(size for size in range(len(keys) + 1) if keys[:size] in self.built)
        if start == len(keys) or self.built[keys[:start]] is None:
            return False
        self.extend(keys[:start], tasks[start])
        return True

    def build(self, tasks: list[LandTask]) -> str | None:
        """The commit of tip + `tasks` (in queue order), merging only what no earlier candidate did."""
        keys = tuple(task.key for task in tasks)
        start = max(size for size in range(len(keys) + 1) if keys[:size] in self.built)
        for size in range(start, len(keys)):
            if self.built[keys[:size]] is None or not self.extend(keys[:size], tasks[size]).ok:
                return None
        return self.built[keys]

"""One landing from fetch to push (SPEC §21.2, §21.3), with git alone: no server here.

A try: fetch the target and the tasks' heads; merge the tasks in queue order
by the method onto the target's tip, one commit each (a task whose head is
already in the tip lands as it is; a task that conflicts with the tip is
`conflict`, one that conflicts only with the tasks before it in the batch is
`deferred` and stays queued); the check once on the whole candidate, in a
scratch worktree; red → bisect (below); push the green set with one
compare-and-swap. A target that moved between the fetch and the push
restarts the try at the new tip, at most
`MAX_RESTARTS` times, then the landing ends `target_moved`.

Bisection. It assumes what every bisection assumes: a task fails on its own,
so a candidate is red exactly when it holds a failing task. `G` is the set
known green (the tip's, at first), `W` the tasks still unsettled, known red
together with `G`. To isolate one failing task in `U` (part of `W`) the lander splits
`U` into halves `A | B` and checks `G + D + B` (everything but `A`; `D` holds
tasks set aside): green → all of it joins `G` and the failing task is in `A`;
red → it is in `B + D`, and `A` is set aside into `D`. One task `u` left: if
`D` is empty, `G + {u}` is red and `G` green, so `u` fails — for certain;
otherwise `G + D` is checked once more: green → `u` fails and `D` joins `G`;
red → there is more than one failing task: `u` is tried again afterwards,
and from then on the halving checks `G + B` alone (`A` set aside, not
presumed green), which makes each task it isolates certain, at the price of
one more check of what was set aside. What is not settled after a failing
task is found is checked once together with `G`. The landed tree is always one that was checked green.

Check runs with n tasks and one failing: 1 + ⌈log₂ n⌉ when the last halving
check is green (the failing task is the first of its final pair: positions
1, 3, 5, 7 of 8), 2 + ⌈log₂ n⌉ otherwise. For a batch of 8 that is 4 or 5:
the issue's 1 + log₂ 8 = 4 for every position is impossible when only a
checked-green tree may land: after the first red run, three checks with two
outcomes each must tell 8 positions apart, so every one of them splits its
candidates in two, and a check whose red outcome leaves one candidate `h`
never checked the tree without `h` (that check, green, would have left one
candidate, not two) — half the positions need one run more. With k > 1
failing tasks it is at most about 1 + (k + 1)·(⌈log₂ n⌉ + 1). A probe whose candidate cannot even
be built (a task that merges only on top of one that was left out) stops the
bisection: the green set lands, the unsettled tasks are `deferred`.

Git work. Every candidate is the tip with its tasks merged on in queue order,
one commit per task, and `Chains` remembers each one built: a probe starts
from the longest run of its tasks already merged (one that is a prefix of the
batch merges nothing; a probe "everything but the first half" merges its
tasks once). `agent.land.speculate` runs the checks in a thread and, while
one runs, builds the candidates of the probes that may come next; with
`parallel_checks` > 1 it checks them at once too.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.land.chains import Abandoned, Chains, LandingPlan, TaskOutcome
from agent.land.check import CheckRun
from agent.land.git import Git, LandTask, Merger, Refs, Scratch, fetch, git_environment, push
from agent.land.speculate import Speculator

MAX_RESTARTS = 3
MAX_PARALLEL_CHECKS = 8
METHODS = ("merge", "squash", "rebase")


@dataclass
class LandingResult:
    result: str  # landed | conflict | check_failed | target_moved
    landed_commit: str | None
    check_runs: int
    tasks: list[TaskOutcome]
    tries: int = 1
    merges: int = 0  # merges built (each task onto a commit), over every try: the git work besides the checks
    checks_cancelled: int = 0  # speculative checks stopped once their outcome was no longer needed
    git_seconds: float = 0.0  # wall time in git processes (some of it while checks ran)

    def finish_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "result": self.result,
            "check_runs": self.check_runs,
            "tasks": [outcome.as_dict() for outcome in self.tasks],
        }
        if self.landed_commit:
            body["landed_commit"] = self.landed_commit
        return body


class Engine:
    """Lands one plan in the clone at `clone_path`; `run()` once."""

    def __init__(
        self,
        clone_path: Path,
        plan: LandingPlan,
        *,
        cancel: threading.Event | None = None,
        before_push: Callable[[int], None] | None = None,
        log: Callable[[str], None] | None = None,
        parallel_checks: int = 1,
    ) -> None:
        if plan.method not in METHODS:
            raise ValueError(f"unknown landing method {plan.method!r} (one of {', '.join(METHODS)})")
        if not 1 <= parallel_checks <= MAX_PARALLEL_CHECKS:
            raise ValueError(f"parallel_checks must be 1 to {MAX_PARALLEL_CHECKS}, not {parallel_checks}")
        self.plan = plan
        self.clone = Git(clone_path, git_environment(clone_path))
        self.cancel = cancel or threading.Event()
        self.before_push = before_push
        self.log = log or (lambda text: None)
        self.check_runs = 0
        self.checks_cancelled = 0
        self.merges = 0
        self.parallel_checks = parallel_checks
        self.order = {task.key: index for index, task in enumerate(plan.tasks)}

    def run(self) -> LandingResult:
        refs = Refs(self.clone)
        last: dict[str, TaskOutcome] = {}
        try:
            for attempt in range(MAX_RESTARTS + 1):
                self._stop_point()
                result, last = self._try(refs, attempt)
                if result is not None:
                    result.tries, result.merges = attempt + 1, self.merges
                    result.checks_cancelled, result.git_seconds = self.checks_cancelled, self.clone.spent[0]
                    return result
                self.log(f"the target {self.plan.target} moved; starting again at its new tip")
        finally:
            refs.remove()
        outcomes = [
            last[task.key] if last[task.key].outcome != "landed" else TaskOutcome(task.key, "target_moved")
            for task in self.plan.tasks
        ]
        return LandingResult(
            "target_moved",
            None,
            self.check_runs,
            outcomes,
            tries=MAX_RESTARTS + 1,
            merges=self.merges,
            checks_cancelled=self.checks_cancelled,
            git_seconds=self.clone.spent[0],
        )

    def _stop_point(self) -> None:
        if self.cancel.is_set():
            raise Abandoned("the landing was stopped before its push; the target was not touched")

    def _try(self, refs: Refs, attempt: int) -> tuple[LandingResult | None, dict[str, TaskOutcome]]:
        """One try; (None, outcomes so far) when the target moved before the push."""
        plan = self.plan
        tip, missing = fetch(self.clone, refs, plan.source, plan.target, plan.tasks)
        outcomes = {key: TaskOutcome(key, "conflict", output_tail=why) for key, why in missing.items()}
        self.log(f"{plan.target} is at {tip[:12]}; merging {len(plan.tasks)} task(s) by {plan.method}")
        with Scratch(self.clone) as scratch:
            chains = Chains(Merger(self.clone, scratch), tip, plan.method, self._stop_point)
            try:
                batch = self._merge_batch(chains, [task for task in plan.tasks if task.key not in missing], outcomes)
                green, commit = batch, chains.build(batch) or tip
                if batch and plan.check_command:
                    green, commit = self._check_and_bisect(chains, tip, batch, commit, outcomes)
            finally:
                self.merges += chains.merges
            for task in green:
                outcomes[task.key] = TaskOutcome(task.key, "landed")
            if green:
                self._stop_point()
                if self.before_push is not None:
                    self.before_push(attempt)
                self._stop_point()
                if not push(self.clone, plan.source, plan.target, old=tip, new=commit):
                    return None, outcomes
        landed = [outcome for outcome in outcomes.values() if outcome.outcome == "landed"]
        ordered = sorted(outcomes.values(), key=lambda outcome: self.order[outcome.key])
        if landed:
            return LandingResult("landed", commit if green else tip, self.check_runs, ordered), outcomes
        kinds = {outcome.outcome for outcome in ordered}
        result = "check_failed" if "check_failed" in kinds else "conflict"
        return LandingResult(result, None, self.check_runs, ordered), outcomes

    def _merge_batch(self, chains: Chains, tasks: list[LandTask], outcomes: dict[str, TaskOutcome]) -> list[LandTask]:
        """Merge in queue order; the tasks merged on top of the tip (already-landed ones are recorded landed)."""
        merged: list[LandTask] = []
        for task in tasks:
            done = chains.extend(tuple(each.key for each in merged), task)
            if done.ok and done.already:
                outcomes[task.key] = TaskOutcome(task.key, "landed")
            elif done.ok:
                merged.append(task)
            elif not merged:
                outcomes[task.key] = TaskOutcome(task.key, "conflict", paths=done.paths)
            else:
                # Conflicting with the batch, or with the target itself? Only the latter fails the task.
                alone = chains.extend((), task)
                kind = "deferred" if alone.ok else "conflict"
                outcomes[task.key] = TaskOutcome(task.key, kind, paths=done.paths if alone.ok else alone.paths)
        return merged

    def _check_and_bisect(
        self,
        chains: Chains,
        tip: str,
        batch: list[LandTask],
        commit: str,
        outcomes: dict[str, TaskOutcome],
    ) -> tuple[list[LandTask], str]:
        """The green set and its checked commit (the module docstring's algorithm); sets the failing outcomes.

        `agent.land.speculate` runs the checks: the whole candidate's, then the
        bisection's probes (`_bisect`), one at a time with `parallel_checks` 1,
        building the candidates of the probes that may come next while a check
        runs; with more, it also checks the next probes of both outcomes at once.
        """
        with Speculator(self, chains) as speculator:
            return speculator.check_and_bisect(tip, batch, commit, outcomes)

    def _bisect(
        self,
        probe_of: Callable[[list[LandTask]], tuple[str | None, CheckRun | None]],
        tip: str,
        batch: list[LandTask],
        run: CheckRun,
        outcomes: dict[str, TaskOutcome],
    ) -> tuple[list[LandTask], str]:
        """Bisect after the whole candidate's red `run`, asking `probe_of(tasks)` for each probe: (commit, run).

        A pure function of what `probe_of` answers (no git, no check here), so
        a speculator can replay it under assumed outcomes to learn which probes
        come next.
        """
        green: list[LandTask] = []
        green_commit = tip
        red_tail: str | None = run.output_tail
        pending: list[LandTask] = list(batch)
        later: list[LandTask] = []
        optimistic = True  # the tasks set aside are presumed green until a check says otherwise
        while pending:
            if red_tail is None:
                built, probe = probe_of(green + pending)
                if built is None or probe is None:
                    return self._unsettled(green, green_commit, pending + later, outcomes)
                if probe.green:
                    green, green_commit, pending = green + pending, built, later
                    later = []
                    continue
                red_tail = probe.output_tail
            unsettled: list[LandTask] = pending
            aside: list[LandTask] = []
            while len(unsettled) > 1:
                half = len(unsettled) // 2
                left, right = unsettled[:half], unsettled[half:]
                kept = aside if optimistic else []
                built, probe = probe_of(green + kept + right)
                if built is None or probe is None:
                    return self._unsettled(green, green_commit, unsettled + aside + later, outcomes)
                if probe.green:
                    green, green_commit, unsettled = green + kept + right, built, left
                    aside = [task for task in aside if task not in kept]
                else:
                    red_tail, aside, unsettled = probe.output_tail, aside + left, right
            suspect = unsettled[0]
            if aside and optimistic:
                built, probe = probe_of(green + aside)
                if built is None or probe is None:
                    return self._unsettled(green, green_commit, unsettled + aside + later, outcomes)
                if not probe.green:  # more than one failing task: the suspect is tried again later
                    pending, later, red_tail, optimistic = aside, [suspect, *later], probe.output_tail, False
                    continue
                green, green_commit, aside = green + aside, built, []
            outcomes[suspect.key] = TaskOutcome(suspect.key, "check_failed", output_tail=red_tail or "")
            pending, later, red_tail = aside + later, [], None
        return sorted(green, key=lambda task: self.order[task.key]), green_commit

    def _unsettled(
        self, green: list[LandTask], commit: str, rest: list[LandTask], outcomes: dict[str, TaskOutcome]
    ) -> tuple[list[LandTask], str]:
        for task in rest:
            outcomes[task.key] = TaskOutcome(task.key, "deferred")
        return green, commit

"""Speculative bisection probes (`parallel_checks` > 1): check the next probes of both outcomes at once.

A bisection is a chain of checks each of which waits for the one before:
with a check of T it costs T per probe, however idle the machine. Its next
probe depends only on the outcomes so far, and there are two outcomes, so
the probes that can come next are known in advance: the probe `p` now, `g`
if `p` is green, `r` if it is red, and so on down. With `parallel_checks`
= c the speculator checks the first c probes of that tree (breadth first,
green before red) at once, each in a scratch worktree of its own; when `p`
ends, the probes of the outcome that did not happen are stopped (their
process groups are killed, as at a check's timeout) and the next level is
started. With c = 3 two levels resolve per T: a bisection of 16 with one
failing task takes 3 rounds of checks instead of 5.

It changes nothing of what lands: the bisection is the engine's own
(`Engine._bisect`, replayed with the outcomes known so far, and with assumed
ones to see ahead), so it asks for the same probes in the same order and
lands the same checked-green commit; only more checks run, at once. Checks
that run to their end count in `check_runs` (a speculative one whose outcome
turned out not to be needed counts too: it ran); stopped ones in
`checks_cancelled`. Git work (building the probes' candidates, the
checkouts) stays in the calling thread; only the check commands run in
threads.

The default is 1 (no speculation): a real check suite uses the machine, and
c of them at once need c times its cores and its memory, and the project's
check may not even be safe to run twice at once (shared ports, a shared
database). A lander sets it (`leasehold land --parallel-checks N`) when its
machine and its check allow it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol

from agent.land.chains import Abandoned, Chains, LandingPlan, TaskOutcome
from agent.land.check import CheckRun, run_check
from agent.land.git import Git, LandTask, Scratch

Key = tuple[str, ...]
Probe = tuple[str | None, CheckRun | None]


class Engine(Protocol):
    """What the speculator uses of `agent.land.engine.Engine`, which imports this module (not the reverse)."""

    plan: LandingPlan
    clone: Git
    cancel: threading.Event
    log: Callable[[str], None]
    order: dict[str, int]
    parallel_checks: int
    check_runs: int
    checks_cancelled: int

    def _stop_point(self) -> None: ...

    def _bisect(
        self,
        probe_of: Callable[[list[LandTask]], Probe],
        tip: str,
        batch: list[LandTask],
        run: CheckRun,
        outcomes: dict[str, TaskOutcome],
    ) -> tuple[list[LandTask], str]: ...


WAIT_SECONDS = 0.05
PREBUILD_FACTOR = 2  # while checks run, build the candidates of up to 2·width + 1 probes that may come next


class _Need(Exception):
    """Raised out of a replay: the bisection asks for a probe whose outcome is not known (nor assumed)."""

    def __init__(self, key: Key, tasks: list[LandTask]) -> None:
        super().__init__(key)
        self.key = key
        self.tasks = tasks


@dataclass
class _Running:
    key: Key
    commit: str
    tasks: list[LandTask]
    scratch: Scratch
    stop: threading.Event
    thread: threading.Thread
    run: CheckRun | None = None


class Speculator:
    """One bisection with up to `engine.parallel_checks` probes checked at once; a context manager."""

    def __init__(self, engine: Engine, chains: Chains) -> None:
        self.engine = engine
        self.chains = chains
        self.width = engine.parallel_checks
        # The scratch the whole candidate was checked in stays for `rebase` merges (built in this thread);
        # the probes' checks get worktrees of their own.
        self.free = [Scratch(engine.clone) for _ in range(self.width)]
        self.all = list(self.free)
        self.known: dict[Key, Probe] = {}
        self.running: dict[Key, _Running] = {}
        self.done = threading.Condition()

    def __enter__(self) -> Speculator:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        for key in list(self.running):
            self._stop(key)
        for scratch in self.all:
            scratch.remove()

    def check_and_bisect(
        self, tip: str, batch: list[LandTask], commit: str, outcomes: dict[str, TaskOutcome]
    ) -> tuple[list[LandTask], str]:
        """Check the whole candidate, then bisect if it is red: the engine's `_check_and_bisect`."""
        whole = tuple(task.key for task in batch)
        self._start(_Need(whole, batch), commit)
        # While it runs, build what a red outcome asks for next, and the probes' worktrees.
        assumed_red = CheckRun(False, None, False, False, "", 0.0)
        ahead = self._ahead(tip, batch, assumed_red, PREBUILD_FACTOR * self.width + 1, skip=0)
        self._wait_building(whole, ahead)
        run = self.known[whole][1]
        assert run is not None  # it was built: it was checked
        if run.green:
            return batch, commit
        while True:
            self.engine._stop_point()
            wanted = self._ahead(tip, batch, run, self.width, skip=0)
            if not wanted:  # the bisection is over with what is known: replay it for real
                for key in list(self.running):
                    self._stop(key)
                return self.engine._bisect(self._answer({}), tip, batch, run, outcomes)
            for key in [key for key in self.running if key not in {need.key for need in wanted}]:
                self._stop(key)
            for need in wanted:
                if need.key in self.known or need.key in self.running or not self.free:
                    continue
                built = self.chains.build(need.tasks)
                if built is None:  # cannot be built: known at once
                    self.known[need.key] = (None, None)
                else:
                    self._start(need, built)
            ahead = self._ahead(tip, batch, run, PREBUILD_FACTOR * self.width + 1, skip=self.width)
            self._wait_building(wanted[0].key, ahead)

    def _wait_building(self, key: Key, ahead: list[_Need]) -> None:
        """Until `key`'s check ends: build the candidates of `ahead`, one merge at a time, then just wait."""
        for scratch in self.free:
            if not scratch.made:
                self._collect(wait=False)
                if key in self.known:
                    return
                scratch.checkout(self.chains.tip)
        while key not in self.known:
            building = any(need.key not in self.known and self.chains.step(need.tasks) for need in ahead)
            self._collect(wait=not building)

    def _answer(self, assumed: dict[Key, bool]) -> Callable[[list[LandTask]], Probe]:
        order = self.engine.order

        def probe_of(tasks: list[LandTask]) -> Probe:
            ordered = sorted(tasks, key=lambda task: order[task.key])
            key = tuple(task.key for task in ordered)
            if key in self.known:
                return self.known[key]
            if key in assumed:
                return "assumed", CheckRun(assumed[key], None, False, False, "", 0.0)
            raise _Need(key, ordered)

        return probe_of

    def _replay(self, tip: str, batch: list[LandTask], run: CheckRun, assumed: dict[Key, bool]) -> _Need | None:
        try:
            self.engine._bisect(self._answer(assumed), tip, batch, run, {})
        except _Need as need:
            return need
        return None

    def _ahead(self, tip: str, batch: list[LandTask], run: CheckRun, count: int, *, skip: int) -> list[_Need]:
        """The probes the bisection can ask for next, breadth first (green before red), `skip` and `count` of them.

        The first is the one it waits for now; with the outcomes of the first
        `width` all known, it will ask for one of the next ones; and so on.
        """
        first = self._replay(tip, batch, run, {})
        if first is None:
            return []
        found = [first]
        frontier: list[tuple[dict[Key, bool], _Need]] = [({}, first)]
        while frontier and len(found) < skip + count:
            assumed, need = frontier.pop(0)
            for green in (True, False):
                branch = {**assumed, need.key: green}
                following = self._replay(tip, batch, run, branch)
                if following is not None and following.key not in {each.key for each in found}:
                    found.append(following)
                    frontier.append((branch, following))
        return found[skip : skip + count]

    def _start(self, need: _Need, commit: str) -> None:
        engine = self.engine
        scratch = self.free.pop()
        scratch.checkout(commit)
        stop = threading.Event()
        env = {
            **engine.clone.env,
            "LEASEHOLD_LANDING": "1",
            "LEASEHOLD_TARGET_BRANCH": engine.plan.target,
            "LEASEHOLD_LANDING_TASKS": " ".join(task.key for task in need.tasks),
        }
        running = _Running(need.key, commit, need.tasks, scratch, stop, threading.Thread(target=lambda: None))

        def check() -> None:
            result = run_check(
                engine.plan.check_command,
                cwd=scratch.path,
                timeout_seconds=engine.plan.check_timeout_seconds,
                env=env,
                cancel=stop,
            )
            with self.done:
                running.run = result
                self.done.notify_all()

        running.thread = threading.Thread(target=check, name="land-speculative-check", daemon=True)
        self.running[need.key] = running
        engine.log(f"check (speculative, {len(self.running)} at once): on {len(need.tasks)} task(s)")
        running.thread.start()

    def _collect(self, *, wait: bool) -> None:
        """Move the checks that ended into `known` (waiting a little for one when `wait`)."""
        with self.done:
            if wait and not any(each.run is not None for each in self.running.values()):
                self.done.wait(WAIT_SECONDS)
        if self.engine.cancel.is_set():
            for key in list(self.running):
                self._stop(key)
            self.engine._stop_point()
        for key, running in list(self.running.items()):
            if running.run is None:
                continue
            running.thread.join()
            del self.running[key]
            self.free.append(running.scratch)
            if running.run.cancelled:  # never: only `_stop` stops a check, and it takes it out of `running`
                raise Abandoned("the landing was stopped during its check; the target was not touched")
            self.engine.check_runs += 1
            self.known[key] = (running.commit, running.run)

    def _stop(self, key: Key) -> None:
        running = self.running.pop(key)
        running.stop.set()
        running.thread.join()
        self.free.append(running.scratch)
        if running.run is not None and not running.run.cancelled:
            self.engine.check_runs += 1  # it ended before it was stopped: it ran
            self.known[key] = (running.commit, running.run)
        else:
            self.engine.checks_cancelled += 1

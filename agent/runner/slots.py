"""One slot of a runner (SPEC §23.1): an agent of its own (`NAME.N`) and a thread that loops until the runner stops.

A work slot, in turn:
1. Waits while the runner is cordoned or draining (the heartbeat says so; the server refuses its claims then).
2. Claims with the slot agent's token over the runner's projects in turn: instantly on all but one, and on that
   one with the server-side wait (SPEC §25, `wait_seconds`), rotating which one by slot and by round. Only one
   idle slot of the runner parks on a project at a time (`agent.runner.turns`; the others wait in the runner):
   an idle runner costs one request per project per wait, and nothing per event that is not its own. An empty
   queue never stops it.
   A drain abandons the parked claim at once (`agent.runner.parked`: what it took is given back).
3. Writes the claim's state file in the slot's own config directory (the way `leasehold claim` does), asks the
   environment providers for a sandbox (`Providers.prepare`, §23.3), and starts the `run` child
   (`agent.runner.children`): it reuses that attempt (`LEASEHOLD_RUN`/`LEASEHOLD_TASK` name it), opens the
   worktree, renews, runs the task class's command (`commands`, else `command`), finishes.
4. While it runs: a cancel from the console (heartbeat `cancel`), the end of the drain grace or a second signal
   sends it SIGTERM (`run` passes it to the command and hands off with the git facts).
5. When it ends: the sandbox is released, refusals it printed (a late report refused with STALE_EPOCH, …) are
   logged, and an attempt `run` left live (it could not start, or died) is handed off here, so no lease is
   left to lapse.

A landing slot runs `leasehold land --watch` for its project instead (§21.2), restarted if it stops, told to
stop (it finishes the landing in hand) when the runner drains or is cordoned.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path
from typing import Any, Protocol

from agent.client.api import LeaseholdClient
from agent.client.errors import LEASE_LOSS_CODES, LeaseholdError
from agent.client.models import Claim, is_past
from agent.runner.children import Child, child_environment, land_argv, run_argv
from agent.runner.config import ProjectConfig, RunnerConfig
from agent.runner.handback import give_back, hand_back
from agent.runner.log import EventLog
from agent.runner.parked import ClaimAbandoned, ParkedClaim
from agent.runner.sandboxes import Providers
from agent.runner.turns import ParkingTurns
from agent.workspace import state
from agent.workspace.state import HeldAttempt


class Runner(Protocol):
    """What a slot reads of its runner (`agent.runner.daemon.Runner`)."""

    config: RunnerConfig
    log: EventLog
    providers: Providers
    state_dir: Path
    stopping: threading.Event  # drain: no new claims
    turns: ParkingTurns  # which idle slot parks the claim wait on each project
    abandon: threading.Event  # a second signal: children stop now
    drain_deadline: float | None

    @property
    def paused(self) -> bool: ...


ERROR_PAUSE_SECONDS = 5.0
PAUSED_POLL_SECONDS = 1.0
MIN_CLAIM_INTERVAL_SECONDS = 1.0
POLL_SECONDS = 0.1
# After SIGTERM, how long a child has before its group is killed: `run` gives its command 10 s, then reports.
KILL_AFTER_SECONDS = 60.0
FENCED_CODES = ("AUTHENTICATION_FAILED", "PERMISSION_DENIED")
EXIT_AUTH = 6


class Slot:
    def __init__(self, runner: Runner, *, number: int, agent: str, token: str, landing: ProjectConfig | None) -> None:
        self.runner = runner
        self.number = number
        self.agent = agent
        self._token = token  # in memory only: it reaches the slot's own children's environment and nothing else
        self.landing = landing
        self.directory = runner.state_dir / f"slot-{number}"
        self.config_home = self.directory  # the children's XDG_CONFIG_HOME
        self.config_dir = self.directory / "leasehold"  # where their state files live
        self.client = LeaseholdClient(runner.config.server, token)
        self.parked = ParkedClaim(self.client, runner.stopping)  # the runner's drain calls `parked.abandon()`
        self.state = "idle"
        self.attempt_id: int | None = None
        self.task: str | None = None
        self.child: Child | None = None
        self.fenced = False
        self._cancels: set[int] = set()
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._main, name=f"leasehold-slot-{number}", daemon=True)

    # --- what the heartbeat reads and asks --------------------------------------------

    def report(self) -> dict[str, Any]:
        with self._lock:
            return {"number": self.number, "state": self.state, "attempt_id": self.attempt_id, "task": self.task}

    def request_cancel(self, attempt_id: int) -> bool:
        """The console cancelled `attempt_id`: if this slot runs it, its `run` child gets SIGTERM (once)."""
        with self._lock:
            if self.attempt_id != attempt_id or attempt_id in self._cancels:
                return False
            self._cancels.add(attempt_id)
            return True

    def _set(self, slot_state: str, *, attempt_id: int | None = None, task: str | None = None) -> None:
        with self._lock:
            self.state, self.attempt_id, self.task = slot_state, attempt_id, task

    def _log(self, kind: str, message: str, **fields: Any) -> None:
        self.runner.log.event(kind, message, slot=self.number, agent=self.agent, **fields)

    # --- the loop ---------------------------------------------------------------------

    def _main(self) -> None:
        self.config_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        state.remember_agent(self.config_dir, self.client.url, self._token, self.agent)
        try:
            while not self.runner.stopping.is_set() and not self.fenced:
                try:
                    if self.landing is not None:
                        self._land_loop(self.landing)
                    else:
                        self._work_loop()
                except Exception as error:  # a slot never stops on a surprise: it says so, pauses, goes on
                    self._log("error", f"unexpected error: {error!r}; going on in {ERROR_PAUSE_SECONDS:g} s")
                    self.runner.stopping.wait(ERROR_PAUSE_SECONDS)
        finally:
            self._set("idle")
            self.client.close()

    def _work_loop(self) -> None:
        rounds = 0
        stopping = self.runner.stopping
        while not stopping.is_set() and not self.fenced:
            if self.runner.paused:
                self._set("idle")
                stopping.wait(PAUSED_POLL_SECONDS)
                continue
            got = self._claim(rounds)
            rounds += 1
            if got is None:
                continue
            project, claim = got
            if stopping.is_set():
                self._give_back(claim, "the runner is draining: it takes no new work")
                break
            self._attempt(project, claim)

    def _claim(self, rounds: int) -> tuple[ProjectConfig, Claim] | None:
        """One round: the parking turn of a project (`agent.runner.turns`), then claims at once on the other
        projects and with the wait on the turn's; which project comes first rotates by slot and by round."""
        runner, projects = self.runner, list(self.runner.config.projects.values())
        turn = (self.number + rounds) % len(projects)
        order = projects[turn:] + projects[:turn]
        slug = runner.turns.take(
            [project.slug for project in reversed(order)],
            self.number,
            give_up=lambda: runner.stopping.is_set() or runner.paused or self.fenced,
        )
        if slug is None:
            return None
        try:
            return self._claim_in_turn([p for p in order if p.slug != slug] + [runner.config.projects[slug]])
        finally:
            runner.turns.give_back(slug, self.number)

    def _claim_in_turn(self, order: list[ProjectConfig]) -> tuple[ProjectConfig, Claim] | None:
        for index, project in enumerate(order):
            if self.runner.stopping.is_set() or self.runner.paused:
                return None
            parked = index == len(order) - 1
            asked = time.monotonic()
            try:
                if parked:
                    claim = self.parked.claim(
                        project.slug,
                        wait=self.runner.config.wait_seconds,
                        lease_seconds=project.lease_seconds,
                        environment_kind=project.environment_kind,
                    )
                else:
                    claim = self.client.claim_next(
                        project.slug, lease_seconds=project.lease_seconds, environment_kind=project.environment_kind
                    )
            except ClaimAbandoned as abandoned:
                self._log("abandon", abandoned.message, project=project.slug, sure=abandoned.sure)
                if abandoned.claim is not None:
                    self._give_back(abandoned.claim, "the runner is draining: its abandoned claim wait took this task")
                return None
            except LeaseholdError as error:
                self._claim_refused(project, error)
                return None
            if claim is not None:
                return project, claim
            if parked:  # a server that answers at once (paused, not parking) is not asked more than once a second
                self.runner.stopping.wait(max(0.0, MIN_CLAIM_INTERVAL_SECONDS - (time.monotonic() - asked)))
        return None

    def _claim_refused(self, project: ProjectConfig, error: LeaseholdError) -> None:
        if error.code == "TASK_TAKEN":
            return
        if error.code in FENCED_CODES:
            self.fenced = True
            self._log(
                "fenced",
                f"the server refused this slot's token ({error.code}): another runner process "
                "registered with this runner's token, or the runner was deactivated; the slot stops",
            )
            return
        if error.code == "AGENT_PAUSED":
            self.runner.stopping.wait(PAUSED_POLL_SECONDS)
            return
        self._log(
            "claim_failed",
            f"claim on {project.slug} failed ({error.code}: {error}); again in {ERROR_PAUSE_SECONDS:g} s",
            code=error.code,
        )
        self.runner.stopping.wait(ERROR_PAUSE_SECONDS)

    # --- one attempt ------------------------------------------------------------------

    def _attempt(self, project: ProjectConfig, claim: Claim) -> None:
        lease = claim.lease
        held = HeldAttempt.from_claim(claim, server=self.client.url, owner="runner", pid=os.getpid())
        state.save(self.config_dir, held)
        task_class = claim.task.get("task_class") or ""
        command = project.command_for(task_class)
        self._set("claiming", attempt_id=lease.attempt_id, task=lease.task)
        self._log(
            "claim",
            f"claimed {lease.task} (attempt {lease.attempt_id}, epoch {lease.epoch}"
            + (f", class {task_class}" if task_class else "")
            + f") in {project.slug}",
            task=lease.task,
            attempt=lease.attempt_id,
            project=project.slug,
        )
        try:
            sandbox = self.runner.providers.prepare(self, project, claim)
        except Exception as error:
            self._log("provider_failed", f"no environment for {lease.task}: {error}", task=lease.task)
            tail = getattr(error, "stderr_tail", "")  # the provider's own words (`ProvisionFailed`)
            summary = f"leasehold runner: no environment: {error}" + (f"\n{tail}" if tail else "")
            self._hand_back(held, "environment_unavailable", summary)
            self._set("idle")
            return
        try:
            code, child = self._run_child(project, held, command, sandbox)
        except OSError as error:
            self._log("error", f"cannot start run for {lease.task}: {error}", task=lease.task)
            self._hand_back(held, "client_shutdown", f"leasehold runner: cannot start run: {error}")
            self._set("idle")
            return
        finally:
            with contextlib.suppress(Exception):
                self.runner.providers.release(self, project, claim, sandbox)
        self._after_run(held, code, child)
        self._set("idle")

    def _run_child(
        self, project: ProjectConfig, held: HeldAttempt, command: list[str], sandbox: dict[str, str]
    ) -> tuple[int, Child]:
        env = child_environment(
            url=self.client.url,
            token=self._token,
            config_home=self.config_home,
            extra={**sandbox, "LEASEHOLD_RUN": "1", "LEASEHOLD_TASK": held.task},
        )
        log_path = self.directory / "logs" / f"{held.task}-{held.attempt_id}.log"
        child = Child(
            run_argv(repository=project.repository, command=command), env=env, cwd=self.directory, log_path=log_path
        )
        self.child = child
        self._set("working", attempt_id=held.attempt_id, task=held.task)
        self._log(
            "start",
            f"started run (pid {child.pid}) for {held.task}: {' '.join(command)}; log {log_path}",
            task=held.task,
            attempt=held.attempt_id,
            pid=child.pid,
            log=str(log_path),
        )
        code = self._supervise(child, held)
        self.child = None
        return code, child

    def _supervise(self, child: Child, held: HeldAttempt | None) -> int:
        termed_at: float | None = None
        while (code := child.wait(POLL_SECONDS)) is None:
            why = self._stop_reason(child, held)
            if why is not None:
                self._log("stop", f"SIGTERM to the child (pid {child.pid}): {why}", reason=why)
                if held is not None:
                    self._set("stopping", attempt_id=held.attempt_id, task=held.task)
                child.terminate()
                termed_at = time.monotonic()
            if termed_at is not None and time.monotonic() - termed_at > KILL_AFTER_SECONDS:
                self._log("stop", f"the child (pid {child.pid}) outlived SIGTERM by {KILL_AFTER_SECONDS:g} s: SIGKILL")
                child.kill()
                termed_at = None
        return code

    def _stop_reason(self, child: Child, held: HeldAttempt | None) -> str | None:
        """Why the child should get a SIGTERM now, if it should: `run` gets one, a lander two (stop, abandon)."""
        runner = self.runner
        grace_over = runner.drain_deadline is not None and time.monotonic() >= runner.drain_deadline
        if held is not None:
            if child.terms_sent:
                return None
            if held.attempt_id in self._cancels:
                return "cancelled from the console"
            if runner.abandon.is_set():
                return "second signal: hand off at once"
            return "the drain grace is over" if grace_over else None
        if child.terms_sent == 0 and (runner.stopping.is_set() or runner.paused):
            return "the runner drains or is cordoned: the lander finishes the landing in hand"
        if child.terms_sent == 1 and (runner.abandon.is_set() or grace_over):
            return "abandon the landing in hand"
        return None

    def _after_run(self, held: HeldAttempt, code: int, child: Child) -> None:
        for error_code, message in child.refusals():
            refused = error_code in LEASE_LOSS_CODES  # a late report refused: the work is on the branch
            self._log(
                "refused" if refused else "run_error",
                f"{held.task}: "
                + ("the server refused a report" if refused else "run said")
                + f": {error_code}: {message}",
                task=held.task,
                attempt=held.attempt_id,
                code=error_code,
            )
        attempt = self._attempt_view(held.attempt_id)
        status = attempt.get("status") if attempt else None
        if attempt is not None and status == "active" and not is_past(attempt.get("lease_expires_at")):
            self._hand_back(held, "client_shutdown", f"leasehold runner: run exited {code} and left the attempt live")
            attempt = self._attempt_view(held.attempt_id)
            status = attempt.get("status") if attempt else status
        if attempt is not None and status != "active":
            state.remove(self.config_dir, held.agent, held.task, attempt_id=held.attempt_id)
        outcome = (attempt or {}).get("outcome") or (attempt or {}).get("interruption_reason_code") or ""
        self._log(
            "end",
            f"{held.task} (attempt {held.attempt_id}) ended: run exit {code}, status {status}"
            + (f" ({outcome})" if outcome else ""),
            task=held.task,
            attempt=held.attempt_id,
            exit=code,
            status=status,
            outcome=outcome or None,
        )

    def _attempt_view(self, attempt_id: int) -> dict[str, Any] | None:
        try:
            return self.client.attempt(attempt_id)
        except LeaseholdError:
            return None

    def _hand_back(self, held: HeldAttempt, reason: str, summary: str) -> None:
        hand_back(self.client, held, reason=reason, summary=summary, log=self._log, config_dir=self.config_dir)

    def _give_back(self, claim: Claim, why: str) -> None:
        give_back(self.client, claim, why=why, log=self._log)

    # --- a landing slot ---------------------------------------------------------------

    def _land_loop(self, project: ProjectConfig) -> None:
        runner = self.runner
        while not runner.stopping.is_set() and not self.fenced:
            if runner.paused:
                self._set("idle")
                runner.stopping.wait(PAUSED_POLL_SECONDS)
                continue
            env = child_environment(url=self.client.url, token=self._token, config_home=self.config_home)
            argv = land_argv(repository=project.repository, project=project.slug, lease_seconds=project.lease_seconds)
            child = Child(argv, env=env, cwd=self.directory, log_path=self.directory / "logs" / "lander.log")
            self.child = child
            self._set("landing")
            self._log("start", f"started the lander of {project.slug} (pid {child.pid})", pid=child.pid)
            code = self._supervise(child, None)
            self.child = None
            self._set("idle")
            self._log("end", f"the lander of {project.slug} exited {code}", exit=code)
            if code == EXIT_AUTH:
                self.fenced = True
            elif not runner.stopping.is_set() and not runner.paused:
                runner.stopping.wait(ERROR_PAUSE_SECONDS)

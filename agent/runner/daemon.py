"""`leasehold runner [--config runner.toml]`: the runner daemon (SPEC §23.1).

1. Read the config (`agent.runner.config`) and the runner token from `token_file` (refused when anyone but its
   owner may read it; the token stays in this process's memory: no child, argument or file gets it). One runner
   per token file on a machine: the file is locked while the runner lives.
2. Register (`POST /runners/register/`, the runner token): the server names the runner, its projects, labels and
   slots, mints a fresh token per slot agent (the old ones stop working: a zombie from before is fenced out) and
   hands off what the slot agents held (`runner_restart`); those are logged. A server that cannot be reached is
   asked again (with a pause) until it answers or the runner is stopped.
3. Clean up (`agent.runner.cleanup`): the slots' state files and this runner's worktree pointers, logged.
4. Start the heartbeat thread (`POST /runners/heartbeat/` every `heartbeat_seconds`, the slots whose state
   changed since the last answered beat): its answer cordons or drains the runner (no new claims while either
   holds) and names the attempts the console cancelled (their `run` child gets SIGTERM).
5. Start one thread per slot (`agent.runner.slots`): the first `landing_slots` of each project (in the config's
   order) land it, the others work on every project in turn; of the idle work slots, one per project parks the
   server-side claim wait and the others wait in the runner (`agent.runner.turns`).
6. SIGTERM or SIGINT: drain. No new claims, and the slots' parked claim waits are abandoned at once
   (`agent.runner.parked`: a task one took all the same is given back); running children get
   `drain_grace_seconds`, then SIGTERM (`run` hands off with the git facts); the runner exits 0 once every
   slot has stopped. A second signal: SIGTERM to every
   child at once. `kill -9`: every child gets SIGTERM from the kernel (the parent-death signal).

Exit codes: 0 stopped by a signal, 2 bad config, 6 the token was refused (at registration, or every slot fenced).
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import stat
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from agent import __version__
from agent.client.connection import ApiConnection
from agent.client.errors import LeaseholdError
from agent.runner.cleanup import remove_pointers, remove_state_files
from agent.runner.config import ConfigError, ProjectConfig, RunnerConfig
from agent.runner.log import EventLog
from agent.runner.sandboxes import ConfiguredProviders, NoProviders, Providers
from agent.runner.slots import Slot
from agent.runner.turns import ParkingTurns
from agent.workspace.githooks import enable_worktree_config

EXIT_OK = 0
EXIT_CONFIG = 2
EXIT_AUTH = 6
DEFAULT_HEARTBEAT_SECONDS = 15.0
REGISTER_PAUSE_SECONDS = 5.0


class RunnerStopped(Exception):
    """Stopped by a signal before there was anything to drain."""


def read_token(path: Path) -> str:
    """The runner token; `ConfigError` when the file is missing, empty, or readable by others than its owner."""
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise ConfigError(f"token_file {path}: cannot be read: {exc}") from None
    with os.fdopen(descriptor, encoding="utf-8") as handle:
        mode = os.fstat(handle.fileno()).st_mode
        if mode & (stat.S_IRGRP | stat.S_IROTH | stat.S_IWGRP | stat.S_IWOTH):
            raise ConfigError(
                f"token_file {path}: mode {stat.S_IMODE(mode):o} lets others read it: `chmod 600 {path}` first"
            )
        token = handle.read().strip()
    if not token:
        raise ConfigError(f"token_file {path} is empty (it holds the runner token `manage.py create_runner` printed)")
    return token


class Runner:
    def __init__(self, config: RunnerConfig, *, log: EventLog, providers: Providers | None = None) -> None:
        self.config = config
        self.log = log
        self.providers: Providers = providers or (
            ConfiguredProviders(config.providers, log=lambda message: log.event("provider", message))
            if config.providers
            else NoProviders()
        )
        self.stopping = threading.Event()  # drain: no new claims
        self.turns = ParkingTurns()  # one parked claim wait per project, not per slot
        self.abandon = threading.Event()  # a second signal: every child stops now
        self.drain_deadline: float | None = None
        self.cordoned = False
        self.draining = False
        self.heartbeat_seconds = DEFAULT_HEARTBEAT_SECONDS
        self.slots: list[Slot] = []
        self.state_dir = Path()
        self.name = ""
        self._signals = 0
        self._acknowledged: dict[int, dict[str, Any]] = {}  # each slot's report as the server last took it

    @property
    def paused(self) -> bool:
        """Cordoned or drained from the console: the slots claim nothing (what runs, runs on)."""
        return self.cordoned or self.draining

    # --- signals ----------------------------------------------------------------------

    def on_signal(self, signum: int, frame: FrameType | None = None) -> None:
        self._signals += 1
        name = signal.Signals(signum).name
        if self._signals == 1:
            self.drain_deadline = time.monotonic() + self.config.drain_grace_seconds
            self.stopping.set()
            self.log.event(
                "drain",
                f"{name}: draining: no new claims; running commands get {self.config.drain_grace_seconds:g} s, "
                "then SIGTERM (a second signal: at once)",
            )
        else:
            self.abandon.set()
            self.log.event("drain", f"{name} again: every child gets SIGTERM now (run hands off)")

    # --- the whole life ---------------------------------------------------------------

    def main(self) -> int:
        token = read_token(self.config.token_file)
        lock = self._lock_token_file()
        previous = {number: signal.signal(number, self.on_signal) for number in (signal.SIGTERM, signal.SIGINT)}
        api = ApiConnection(self.config.server, token)
        try:
            answer = self._register(api)
            if answer is None:
                return EXIT_OK
            self._set_up(answer)
            beat = threading.Thread(target=self._heartbeats, args=(api,), name="leasehold-runner-heartbeat")
            beat.daemon = True
            beat.start()
            for slot in self.slots:
                slot.thread.start()
            abandoned = False
            while any(slot.thread.is_alive() for slot in self.slots):
                if all(slot.fenced for slot in self.slots):
                    self.stopping.set()
                if self.stopping.is_set() and not abandoned:
                    abandoned = True  # the parked claim waits, at once: an idle runner exits in about a second
                    self.turns.wake_all()  # the slots waiting for a parking turn, too
                    for slot in self.slots:
                        slot.parked.abandon()
                time.sleep(0.2)
            self.stopping.set()
            beat.join(timeout=15)
            self._beat(api)  # the last word: every slot idle
            if self.slots and all(slot.fenced for slot in self.slots):
                self.log.event("exit", "every slot's token was refused: exiting")
                return EXIT_AUTH
            self.log.event("exit", "drained: every slot has stopped")
            return EXIT_OK
        finally:
            api.close()
            for number, handler in previous.items():
                signal.signal(number, handler)
            os.close(lock)

    def _lock_token_file(self) -> int:
        descriptor = os.open(self.config.token_file, os.O_RDONLY)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(descriptor)
            raise ConfigError(
                f"another runner on this machine uses {self.config.token_file}: one runner process per token"
            ) from None
        return descriptor

    def _register(self, api: ApiConnection) -> dict[str, Any] | None:
        body = {"host": socket.gethostname(), "version": __version__, "pid": os.getpid()}
        while True:
            try:
                return dict(api.request("POST", "/runners/register/", body=body))
            except LeaseholdError as error:
                if error.code in ("AUTHENTICATION_FAILED", "PERMISSION_DENIED", "VALIDATION_ERROR", "NOT_FOUND"):
                    raise
                self.log.event(
                    "register", f"registration failed ({error.code}: {error}); again in {REGISTER_PAUSE_SECONDS:g} s"
                )
            if self.stopping.wait(REGISTER_PAUSE_SECONDS):
                return None

    def _set_up(self, answer: dict[str, Any]) -> None:
        runner = answer["runner"]
        self.name = str(runner["name"])
        self.cordoned, self.draining = bool(runner.get("cordoned")), bool(runner.get("draining"))
        self.heartbeat_seconds = float(runner.get("heartbeat_seconds") or DEFAULT_HEARTBEAT_SECONDS)
        served = set(runner.get("projects") or [])
        unknown = [slug for slug in self.config.projects if slug not in served]
        if unknown:
            raise ConfigError(
                f"{self.config.path}: the runner {self.name} does not serve {', '.join(unknown)} "
                f"(it serves {', '.join(sorted(served)) or 'nothing'}): `manage.py create_runner --project …`"
            )
        self.state_dir = self.config.state_dir_for(self.name)
        self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        slots = sorted(answer["slots"], key=lambda slot: int(slot["number"]))
        roles = self._landing_roles(len(slots))
        self.slots = [
            Slot(self, number=int(s["number"]), agent=str(s["agent"]), token=str(s["token"]), landing=role)
            for s, role in zip(slots, roles, strict=True)
        ]
        self.log.event(
            "registered",
            f"registered as {self.name}: {len(self.slots)} slot(s) ({sum(r is not None for r in roles)} landing), "
            f"labels {runner.get('labels') or []}, projects {sorted(served)}; state in {self.state_dir}"
            + ("; cordoned" if self.cordoned else "")
            + ("; draining" if self.draining else ""),
            runner=self.name,
        )
        for item in answer.get("handed_off") or []:
            self.log.event(
                "handoff",
                f"handed off at registration (runner_restart): {item.get('task')} (attempt {item.get('attempt_id')})",
                task=item.get("task"),
                attempt=item.get("attempt_id"),
            )
        for slot in self.slots:
            remove_state_files(slot.config_dir, self.log, slot=slot.number)
        repositories = {project.repository for project in self.config.projects.values()}
        remove_pointers(sorted(repositories), {slot.agent for slot in self.slots}, self.log)
        for repository in sorted(repositories):  # once here, not raced for by the slots' first `run`s
            try:
                enable_worktree_config(repository)
            except OSError as error:
                self.log.event("error", f"{repository}: {error}")
        self.providers.startup(self.state_dir, self.slots)

    def _landing_roles(self, count: int) -> list[ProjectConfig | None]:
        """The first `landing_slots` of each project, in the config's order, land it; the rest work."""
        roles: list[ProjectConfig | None] = [
            project for project in self.config.projects.values() for _ in range(project.landing_slots)
        ]
        if len(roles) > count:
            raise ConfigError(
                f"{self.config.path}: landing_slots add up to {len(roles)}, but the runner has {count} slot(s)"
            )
        return roles + [None] * (count - len(roles))

    # --- the heartbeat ----------------------------------------------------------------

    def _heartbeats(self, api: ApiConnection) -> None:
        while not self._all_stopped():
            started = time.monotonic()
            self._beat(api)
            while time.monotonic() - started < self.heartbeat_seconds and not self._all_stopped():
                time.sleep(0.2)

    def _all_stopped(self) -> bool:
        return self.stopping.is_set() and not any(slot.thread.is_alive() for slot in self.slots)

    def _beat(self, api: ApiConnection) -> None:
        """One heartbeat carrying the slots whose report changed since the last answered beat (every slot after
        registration or a failed beat): the server keeps the others' as they were, so an idle runner's beat is
        small and writes nothing but its own row."""
        reports = [slot.report() for slot in self.slots]
        body = {"slots": [report for report in reports if self._acknowledged.get(report["number"]) != report]}
        try:
            answer = api.request("POST", "/runners/heartbeat/", body=body, retries=0, timeout=10.0)
        except LeaseholdError as error:
            self._acknowledged = {}
            self.log.event("heartbeat", f"heartbeat failed ({error.code}: {error}); the slots work on")
            return
        self._acknowledged = {report["number"]: report for report in reports}
        self._apply(answer or {})

    def _apply(self, answer: dict[str, Any]) -> None:
        cordoned, draining = bool(answer.get("cordoned")), bool(answer.get("draining"))
        if (cordoned, draining) != (self.cordoned, self.draining):
            said = "cordoned" if cordoned else "draining" if draining else "resumed"
            self.log.event(
                "console",
                f"the console says {said}: " + ("no new claims" if cordoned or draining else "claiming again"),
            )
            self.cordoned, self.draining = cordoned, draining
            self.turns.wake_all()  # slots waiting for a parking turn see the pause (or claim again)
        self.heartbeat_seconds = float(answer.get("heartbeat_seconds") or self.heartbeat_seconds)
        for attempt_id in answer.get("cancel") or []:
            for slot in self.slots:
                if slot.request_cancel(int(attempt_id)):
                    self.log.event("cancel", f"attempt {attempt_id} cancelled from the console", slot=slot.number)

"""`leasehold land [--next] [--watch] [--repo PATH]`: a lander next to a clone (SPEC §21.2).

One landing: claim (`POST /landings/next/`; 204 → nothing to land), hold the
landing's lease with `agent.client.keeper.LeaseKeeper` (renewed in a thread
while fetching, merging and checking), land it with `agent.land.engine`, and
finish with the result and every task's outcome. Exit codes: 0 landed (some
tasks of a batch may have gone back: the result says which), 3 nothing to
land, 7 the landing failed (conflict, red check, moved target), 5 the lease
was lost (the engine is stopped before its push: the target is untouched, and
nothing is sent with the token again), 1 git or the server failed.

`--watch` claims with the server-side wait (`"wait": 30`), so an empty queue
costs one parked request per 30 s, never a busy poll, and it never exits
because the queue is empty (an empty answer that comes back at once, from a
server that does not park the claim or while another lander's landing is
live, is followed by a pause: at most one claim a second). SIGTERM or SIGINT: the landing under way is
finished (the check included), then the lander exits 0; a second signal
abandons it at once without pushing (the scratch worktree is removed, and the
landing is given back: `POST /landings/{id}/release/`, so the next lander can
take the target at once instead of after the landing's lease). Nothing is left
running either way.

A grant that comes as the lander is told to stop is given back too, never left
to lapse. The first signal breaks a claim parked on the server at once, and the
server may have handed a landing over just then (its answer lost with the
broken call, or a claim still parked that grants one later). So the claim is
sent under an Idempotency-Key, and `settle_claim` makes sure of what it took, as
the runner's slots do (`agent.runner.parked`): a heartbeat under the same key
takes the key when the claim took nothing (every later try of that claim is
refused); refused as IDEMPOTENCY_CONFLICT, the claim stored its grant first, and
the same claim sent again is that grant, which the lander releases. A grant
answered after the signal came (the call was not broken) is released as well.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from agent.client.errors import LEASE_LOSS_CODES, LeaseholdError
from agent.client.keeper import LeaseKeeper
from agent.client.models import Lease
from agent.land.api import LandingClient, landing_lease
from agent.land.engine import Abandoned, Engine, LandingPlan, LandingResult
from agent.land.git import Git, LandGitError, LandTask, git_environment, resolve_source

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_NOTHING = 3
EXIT_LEASE_LOST = 5
EXIT_LANDING_FAILED = 7
WATCH_WAIT_SECONDS = 30
ERROR_PAUSE_SECONDS = 5.0
# An empty answer sooner than this after asking (a server that does not park the claim, or another
# lander's live landing of the target) is followed by a pause to this length: never a busy poll.
MIN_CLAIM_INTERVAL_SECONDS = 1.0


@dataclass
class Report:
    """What one pass of the lander did: its exit code and what to show."""

    exit_code: int
    data: dict[str, Any] = field(default_factory=dict)
    text: str = ""


class StopClaiming(BaseException):
    """Raised by the signal handler into a claim parked on the server: stop waiting for work at once."""


class Stopping:
    """SIGTERM/SIGINT: the first ends the loop after the current landing, the second abandons that landing.

    While the lander only waits for work (a claim parked on the server for up to `wait` seconds), the
    first signal also breaks that wait at once: there is no landing to finish.
    """

    def __init__(self) -> None:
        self.after_current = threading.Event()
        self.abandon = threading.Event()
        self.claiming = False

    def signal(self) -> None:
        if self.after_current.is_set():
            self.abandon.set()
        self.after_current.set()
        if self.claiming:
            raise StopClaiming

    @contextlib.contextmanager
    def installed(self) -> Iterator[Stopping]:
        def handler(signum: int, frame: FrameType | None) -> None:
            self.signal()

        previous = {number: signal.signal(number, handler) for number in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield self
        finally:
            for number, old in previous.items():
                signal.signal(number, old)


def plan_of(answer: dict[str, Any], clone: Path) -> LandingPlan:
    landing = answer["landing"]
    source = resolve_source(
        Git(clone, git_environment(clone)),
        remote=landing.get("remote") or "",
        repository=landing.get("repository") or "",
    )
    tasks = [
        LandTask(
            key=str(task["key"]),
            branch=str(task["branch"]),
            head_commit=str(task["head_commit"]),
            title=str(task.get("title") or ""),
            label=str(task.get("label") or ""),
        )
        for task in answer["tasks"]
    ]
    return LandingPlan(
        source=source,
        target=str(landing["target_branch"]),
        method=str(landing["method"]),
        tasks=tasks,
        check_command=str(landing.get("check_command") or ""),
        check_timeout_seconds=float(landing.get("check_timeout_seconds") or 1800),
    )


def land_once(
    client: LandingClient,
    project: str,
    clone: Path,
    *,
    wait: int | None = None,
    lease_seconds: int | None = None,
    stopping: Stopping | None = None,
    log: Callable[[str], None] = lambda text: None,
    before_push: Callable[[int], None] | None = None,
    parallel_checks: int = 1,
) -> Report:
    """Claim one landing and see it through; see the module docstring for the exit codes.

    `lease_seconds`: the landing's lease (default: the project's), renewed every third of it.
    `parallel_checks`: the engine's (`agent.land.speculate`; 1 = one check at a time).
    """
    stopping = stopping or Stopping()
    if stopping.after_current.is_set():
        return Report(EXIT_NOTHING, {"landing": None}, "Stopped.")
    key = f"lh-{uuid.uuid4().hex}"
    broken = False
    stopping.claiming = True
    try:
        answer = client.landing_next(project, wait=wait, lease_seconds=lease_seconds, idempotency_key=key)
        stopping.claiming = False
    except StopClaiming:
        broken = True
    finally:
        stopping.claiming = False
    if broken:
        settled = settle_claim(client, project, key, wait=wait, lease_seconds=lease_seconds)
        if isinstance(settled, str):
            return Report(EXIT_NOTHING, {"landing": None}, f"Stopped while waiting for work: {settled}.")
        answer = settled
    if answer is None:
        return Report(EXIT_NOTHING, {"landing": None}, "Nothing to land.")
    landing = answer["landing"]
    lease = landing_lease(landing)
    if stopping.after_current.is_set():
        return _given_back(client, lease, "the lander was told to stop as the landing was granted", log)
    keys = [task["key"] for task in answer["tasks"]]
    log(f"landing {lease.attempt_id}: {', '.join(keys)} onto {landing['target_branch']} by {landing['method']}")
    cancel = threading.Event()
    keeper = LeaseKeeper(client.clone(), lease, on_lost=lambda reason: cancel.set())
    relay = threading.Thread(target=_relay, args=(stopping.abandon, cancel, keeper), daemon=True)
    keeper.start()
    relay.start()
    abandoned: Abandoned | None = None
    try:
        plan = plan_of(answer, clone)
        engine = Engine(clone, plan, cancel=cancel, before_push=before_push, log=log, parallel_checks=parallel_checks)
        result = engine.run()
    except Abandoned as stopped:
        abandoned = stopped
    finally:
        keeper.stop()
        cancel.set()  # ends the relay
    if keeper.lost.is_set():
        return _lost(lease.attempt_id, keeper.lost_reason)
    if abandoned is not None:  # the second signal: nothing was pushed; the landing is given back
        return _given_back(client, lease, f"abandoned: {abandoned}", log)
    try:
        finished = client.landing_finish(lease, result.finish_body())
    except LeaseholdError as error:
        if error.code in LEASE_LOSS_CODES or error.code == "LEASE_LOST":
            return _lost(lease.attempt_id, str(error))
        raise
    return _report(lease.attempt_id, plan.target, result, finished)


def _relay(abandon: threading.Event, cancel: threading.Event, keeper: LeaseKeeper) -> None:
    """A second signal stops the engine (the keeper's loss does so through `on_lost`)."""
    while not cancel.is_set():
        if abandon.wait(0.2):
            cancel.set()


def settle_claim(
    client: LandingClient, project: str, key: str, *, wait: int | None, lease_seconds: int | None
) -> dict[str, Any] | str | None:
    """What the claim broken by a signal took, made sure of by its Idempotency-Key (the module docstring).

    The grant it took (to be given back), None when it was answered first with nothing to land, or
    why it took nothing (or what cannot be told: a landing it took then lapses on the server)."""
    try:
        client.request("POST", "/agents/me/heartbeat/", idempotency_key=key)
    except LeaseholdError as error:
        if error.code != "IDEMPOTENCY_CONFLICT":
            return f"cannot tell whether it took a landing ({error.code}: {error}); one it took lapses"
    else:
        return "it took nothing"
    try:  # answered first: the same claim under the same key is its answer, replayed
        return client.landing_next(project, wait=wait, lease_seconds=lease_seconds, idempotency_key=key)
    except LeaseholdError as error:
        return f"it was answered {error.code} first"


def _given_back(client: LandingClient, lease: Lease, why: str, log: Callable[[str], None]) -> Report:
    """Release the landing (nothing was pushed under it): the target is free for the next lander at once."""
    landing_id = lease.attempt_id
    data: dict[str, Any] = {"landing": landing_id, "result": "abandoned", "message": why}
    try:
        client.landing_release(lease, reason=why)
    except LeaseholdError as error:
        # Lost already (it lapsed, or the server cannot be reached): it lapses, as a dead lander's does.
        log(f"landing {landing_id}: could not give it back ({error.code}: {error}); its lease lapses")
        data["released"] = False
        return Report(EXIT_OK, data, f"landing {landing_id} abandoned ({why}); it lapses on the server")
    data["released"] = True
    log(f"landing {landing_id}: given back ({why})")
    return Report(EXIT_OK, data, f"landing {landing_id} abandoned and given back: {why}")


def _lost(landing_id: int, reason: str | None) -> Report:
    data = {"landing": landing_id, "result": "lease_lost", "message": reason or "lost"}
    return Report(EXIT_LEASE_LOST, data, f"landing {landing_id}: the lease was lost ({reason}); nothing was pushed")


def _report(landing_id: int, target: str, result: LandingResult, finished: dict[str, Any]) -> Report:
    data = {"landing": landing_id, **result.finish_body(), "tries": result.tries, "server": finished}
    landed = [outcome.key for outcome in result.tasks if outcome.outcome == "landed"]
    others = [f"{outcome.key} {outcome.outcome}" for outcome in result.tasks if outcome.outcome != "landed"]
    if result.result == "landed":
        text = f"landing {landing_id}: landed {', '.join(landed)} on {target} at {str(result.landed_commit)[:12]}"
    else:
        text = f"landing {landing_id}: {result.result}"
    text += f" ({result.check_runs} check run(s))" + (f"; {', '.join(others)}" if others else "")
    return Report(EXIT_OK if result.result == "landed" else EXIT_LANDING_FAILED, data, text)


def watch(
    client: LandingClient,
    project: str,
    clone: Path,
    *,
    stopping: Stopping,
    emit: Callable[[Report], None],
    log: Callable[[str], None] = lambda text: None,
    wait: int = WATCH_WAIT_SECONDS,
    lease_seconds: int | None = None,
    min_claim_interval: float = MIN_CLAIM_INTERVAL_SECONDS,
    parallel_checks: int = 1,
) -> int:
    """Land whatever the queue holds, one landing at a time, until told to stop; 0, or 6-ish on bad credentials."""
    while not stopping.after_current.is_set():
        asked = time.monotonic()
        try:
            report = land_once(
                client,
                project,
                clone,
                wait=wait,
                lease_seconds=lease_seconds,
                stopping=stopping,
                log=log,
                parallel_checks=parallel_checks,
            )
        except LeaseholdError as error:
            if error.code in ("AUTHENTICATION_FAILED", "PERMISSION_DENIED", "NOT_FOUND", "VALIDATION_ERROR"):
                raise
            log(f"the server failed ({error}); trying again in {ERROR_PAUSE_SECONDS:g} s")
            stopping.after_current.wait(ERROR_PAUSE_SECONDS)
            continue
        except LandGitError as error:
            log(f"git failed ({error}); the landing lease lapses; trying again in {ERROR_PAUSE_SECONDS:g} s")
            stopping.after_current.wait(ERROR_PAUSE_SECONDS)
            continue
        if report.exit_code != EXIT_NOTHING:
            emit(report)
        else:
            stopping.after_current.wait(max(0.0, min_claim_interval - (time.monotonic() - asked)))
    return EXIT_OK

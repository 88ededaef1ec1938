"""What the CLI's commands (`run` among them) and the MCP server share.

The client made from the settings, the agent a token is (`agent_handle`),
the claim made from a command's arguments and its text, and the state files'
rule (`refuse_to_replace`): outside worktrees an agent has one current
attempt at a time, and `--replace` hands the old one back rather than
forgetting a lease nobody would renew. Kept below `agent.cli` and `agent.mcp`
so that the CLI can launch the MCP server and the MCP server needs nothing of
the CLI.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.client.api import LeaseholdClient
from agent.client.errors import ATTEMPT_ENDED_CODES, LeaseholdError, NotFound
from agent.client.models import Claim, is_past
from agent.workspace import state
from agent.workspace.config import Settings, config_dir
from agent.workspace.labels import git_trailer
from agent.workspace.state import HeldAttempt

# The longest one server-side wait may be (SPEC §25); `--wait` longer than that asks again.
SERVER_WAIT_MAX_SECONDS = 60
# `--next` after a lost race (TASK_TAKEN: every candidate was taken meanwhile) asks again, this many times.
TAKEN_RETRIES = 50
# `--wait` with no number: no limit.
WAIT_FOREVER = -1
# The `HeldAttempt.owner` of the attempt an attempt token is for: the `run` that started the command keeps it.
COMMAND_OWNER = "command"


class UsageError(Exception):
    """The command cannot run as asked (exit 2)."""


def make_client(settings: Settings) -> LeaseholdClient:
    """The client for the configured server; `LEASEHOLD_TRACE=<file>` logs each request (no tokens)."""
    return LeaseholdClient(settings.url, settings.token, trace_path=os.environ.get("LEASEHOLD_TRACE") or None)


def project_from(args: argparse.Namespace, settings: Settings) -> str:
    """The project the command names, else the default set at login."""
    project = getattr(args, "project", None) or settings.project
    if not project:
        raise UsageError("Name the project: --project SLUG (or `leasehold login --project SLUG` to set a default).")
    return str(project)


def agent_handle(settings: Settings, client: LeaseholdClient) -> str:
    """The handle of the agent the token is: remembered from an earlier claim, else asked once (the heartbeat).

    With an attempt token, the owner its attempt's label names (the token may not ask the server who it is).
    """
    if settings.attempt is not None:
        with contextlib.suppress(ValueError):
            return state.label_owner(settings.attempt.label)
        return ""
    directory = config_dir()
    known = state.known_agent(directory, client.url, settings.token)
    if known:
        return known
    handle = str(client.heartbeat()["agent"])
    state.remember_agent(directory, client.url, settings.token, handle)
    return handle


def hold_claim(
    claim: Claim, client: LeaseholdClient, settings: Settings, *, owner: str = "cli", worktree: Path | None = None
) -> HeldAttempt:
    """Write the state file of a fresh claim (the token stays in it, 0600)."""
    held = HeldAttempt.from_claim(claim, server=client.url, owner=owner, pid=os.getpid() if owner != "cli" else None)
    held.worktree = str(worktree) if worktree is not None else None
    directory = config_dir()
    state.remember_agent(directory, client.url, settings.token, held.agent)
    state.save(directory, held)
    return held


def attempt_ended(client: LeaseholdClient, held: HeldAttempt) -> bool | None:
    """Whether the server says `held` is over (not active, or its lease past); None when it cannot be asked."""
    if held.server != client.url:
        return None
    try:
        attempt = client.attempt(held.attempt_id)
    except NotFound:
        return True  # gone, or not this agent's to see: nothing is held
    except LeaseholdError as error:
        # An attempt token is refused once its attempt has ended (SPEC §23.2).
        return True if held.owner == COMMAND_OWNER and error.code == "AUTHENTICATION_FAILED" else None
    return attempt.get("status") != "active" or is_past(attempt.get("lease_expires_at"))


def forget_ended(client: LeaseholdClient, agent: str, *, only: HeldAttempt | None = None) -> None:
    """Remove the state files of `agent`'s attempts that the server reports ended.

    Only doubtful ones are asked about (`HeldAttempt.doubtful`: lost, past
    their expiry, or kept by a process that died, as after `kill -9` of a
    `run`), so a plain holder command costs no extra request; `only` asks
    about that one attempt whatever it looks like (the SessionStart hook).
    """
    directory = config_dir()
    for held in [only] if only is not None else state.held_by(directory, agent):
        if held.owner == COMMAND_OWNER:
            continue  # no state file of its own: the `run` that keeps it removes it
        if (only is not None or held.doubtful) and attempt_ended(client, held):
            state.remove(directory, held.agent, held.task, attempt_id=held.attempt_id)


def command_attempt(settings: Settings, client: LeaseholdClient) -> HeldAttempt | None:
    """The attempt an attempt token is for (SPEC §23.2): a command's CLI acts on it and on no other.

    Kept by the `run` that started the command (`owner="command"`): no state
    file is read or written for it here.
    """
    attempt = settings.attempt
    if attempt is None:
        return None
    return HeldAttempt(
        server=client.url,
        agent=agent_handle(settings, client),
        task=attempt.task,
        attempt_id=attempt.attempt_id,
        epoch=attempt.epoch,
        lease_token=settings.token,  # the bearer token is the proof: holder calls send no lease headers
        lease_expires_at="",
        renew_every_seconds=0,
        label=attempt.label,
        owner=COMMAND_OWNER,
    )


def forget_refused(held: HeldAttempt, error: LeaseholdError) -> None:
    """After a refusal: forget an attempt the server ended (ATTEMPT_ENDED_CODES), mark it lost otherwise."""
    if held.owner == COMMAND_OWNER:
        return  # the `run` that keeps it learns of the end itself
    if error.code in ATTEMPT_ENDED_CODES:
        state.remove(config_dir(), held.agent, held.task, attempt_id=held.attempt_id)
    else:
        state.mark_lost(config_dir(), held, str(error))


def current_attempt(settings: Settings, client: LeaseholdClient, *, task: str | None = None) -> HeldAttempt | None:
    """The attempt a holder command acts on (`agent.workspace.state.current`), or the agent's attempt on `task`.

    State files of attempts the server reports ended are forgotten first (`forget_ended`).
    With an attempt token, that token's attempt (`command_attempt`) and no other.
    """
    if settings.attempt is not None:
        held = command_attempt(settings, client)
        return held if held is not None and task in (None, held.task) else None
    agent = agent_handle(settings, client)
    forget_ended(client, agent)
    if task:
        return state.load(config_dir(), agent, task)
    try:
        return state.current(config_dir(), agent, Path.cwd())
    except state.AmbiguousAttempt as exc:
        raise UsageError(str(exc)) from None


def refuse_to_replace(args: argparse.Namespace, client: LeaseholdClient, settings: Settings) -> None:
    """Outside worktrees, one current attempt per agent: a live one is kept unless `--replace` hands it back.

    Attempts in worktrees (`run --worktree`) are not counted: their pointer
    says which one a command means. State files of lost or expired attempts
    outside worktrees are dropped (the new claim becomes the current attempt).
    An attempt token holds nothing to replace: the server refuses its claim (SPEC §23.2).
    """
    if settings.attempt is not None:
        return
    agent = agent_handle(settings, client)
    forget_ended(client, agent)
    directory = config_dir()
    plain = [held for held in state.held_by(directory, agent) if held.worktree is None]
    live = [held for held in plain if held.live]
    if live and not getattr(args, "replace", False):
        held = live[0]
        raise UsageError(
            f"You hold {held.task} (attempt {held.attempt_id}): finish or release it first, "
            "or pass --replace to hand it back and claim anew."
        )
    for held in plain:
        if held.live:
            # Already lost or ended when refused: nothing is held any more.
            with contextlib.suppress(LeaseholdError):
                client.release(held.lease, reason="replaced by a new claim (leasehold claim --replace)")
        state.remove(directory, agent, held.task, attempt_id=held.attempt_id)


def claim_from_args(client: LeaseholdClient, args: argparse.Namespace, settings: Settings) -> Claim | None:
    """Claim the task KEY, or the project's next one with `--next`; None when nothing is claimable."""
    options: dict[str, Any] = {
        "lease_seconds": args.lease_seconds,
        "branch": args.branch,
        "base_commit": args.base_commit,
        "environment": args.environment,
        "environment_kind": args.environment_kind,
        "paths": getattr(args, "paths", None),
        "paths_mode": getattr(args, "paths_mode", None),
    }
    wait = getattr(args, "wait", None)
    until_empty = bool(getattr(args, "until_empty", False))
    if until_empty:
        if not args.next or getattr(args, "review", False):
            raise UsageError("--until-empty goes with --next (work, not reviews): it waits for the project's work.")
        if wait is not None and wait != WAIT_FOREVER:
            raise UsageError("--until-empty waits until the project's work is finished: give --wait no number.")
        wait = WAIT_FOREVER
    if wait is not None and not args.next:
        raise UsageError("--wait goes with --next: a named task is claimed at once or refused.")
    if wait is not None and wait < 0 and wait != WAIT_FOREVER:
        raise UsageError("--wait takes a number of seconds (0 or more), or none for no limit.")
    if getattr(args, "review", False):
        # SPEC §16.1: a review attempt, on the project's oldest open review that is not your own work.
        if args.key or not args.next:
            raise UsageError("A review is claimed with --review --next (reviews are not claimed by task key).")
        project = project_from(args, settings)
        return claim_next_waiting(
            lambda seconds: client.review_next(project, lease_seconds=args.lease_seconds, wait=seconds), wait
        )
    if args.next:
        if args.key:
            raise UsageError("Give a task KEY or --next, not both.")
        project = project_from(args, settings)
        finished = (
            (lambda: bool(client.project(project, task_class=args.task_class)["progress"]["finished"]))
            if until_empty
            else None
        )
        return claim_next_waiting(
            lambda seconds: client.claim_next(
                project, task_class=args.task_class, wait=seconds, until_empty=until_empty, **options
            ),
            wait,
            finished=finished,
        )
    if not args.key:
        raise UsageError("Give a task KEY, or --next (with --project).")
    return client.claim(args.key, **options)


def claim_next_waiting(
    claim_once: Callable[[int], Claim | None],
    wait: int | None,
    *,
    finished: Callable[[], bool] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Claim | None:
    """`--next`: a lost race (TASK_TAKEN) asks again; with `wait` (seconds, `WAIT_FOREVER`: no limit) the
    server holds each call up to 60 s until a task comes (SPEC §25), and the CLI asks again until `wait`
    has passed. None: nothing claimable (and nothing came in time).

    `--until-empty` (`finished`, with `WAIT_FOREVER`): after each empty answer the project's progress is
    read (`GET /projects/{slug}/`), and None comes only when its work is finished: no task open, ready
    (claimable, held by anyone, or waiting on a blocker), in review or delivered."""
    deadline = None if wait is None or wait < 0 else time.monotonic() + wait
    taken = 0
    while True:
        if wait is None:
            seconds = 0
        elif deadline is None:
            seconds = SERVER_WAIT_MAX_SECONDS
        else:
            seconds = min(SERVER_WAIT_MAX_SECONDS, max(0, math.ceil(deadline - time.monotonic())))
        try:
            claim = claim_once(seconds)
        except LeaseholdError as refusal:
            if refusal.code != "TASK_TAKEN" or taken >= TAKEN_RETRIES:
                raise
            taken += 1
            sleep(min(2.0, 0.05 * taken))  # others are claiming the same tasks: let them
            continue
        if claim is not None:
            return claim
        if finished is not None:
            if finished():
                return None
            continue
        if wait is None or (deadline is not None and time.monotonic() >= deadline):
            return claim


def claim_text(claim: Claim) -> str:
    """The claim for a human: task, attempt, epoch, lease, branch and the git trailer line."""
    title = claim.task.get("title", "")
    lines = [
        f"Claimed {claim.lease.task} {title!r}: attempt {claim.lease.attempt_id}, epoch {claim.lease.epoch}.",
        f"Lease until {claim.lease.lease_expires_at}; renew every {claim.lease.renew_every_seconds} s.",
    ]
    if claim.attempt.get("branch"):
        lines.append(f"Branch: {claim.attempt['branch']}")
    if claim.label:
        lines.append(git_trailer(claim.label))
    return "\n".join(lines)


def block_on(client: LeaseholdClient, waiting: str, created: str) -> dict[str, Any]:
    """Make `waiting` wait for the task just `created`; a refusal still names the created task."""
    try:
        return client.add_dependency(waiting, blocked_by=created)
    except LeaseholdError as error:
        raise LeaseholdError(
            f"Created {created}, but {waiting} could not be made to wait for it: {error.message}",
            code=error.code,
            details=error.details,
        ) from None


def nothing_claimable(args: argparse.Namespace) -> str:
    """What exit 3 means for `claim`/`run --next`."""
    if getattr(args, "until_empty", False):
        return "The project's work is finished: no task open, ready, held, in review or delivered."
    return "Nothing claimable."

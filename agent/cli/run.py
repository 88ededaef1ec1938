"""`leasehold run [KEY | --next] [--worktree [DIR]] [--repo PATH] -- COMMAND…`: a command under a lease (§13, §15).

1. Get a lease: claim KEY or `--next`, or take the current attempt (one made
   by `leasehold claim` or `workspace open`); its state file says `run` keeps
   it now.
2. Start the lease keeper (renewals every `renew_every_seconds`) and the run
   heartbeat. With `--worktree`, open the attempt's worktree
   (`agent.cli.workspace_commands.prepare_worktree`: branch, worktree or takeover,
   pointer, trailer hook, git facts); COMMAND runs there.
3. Start COMMAND (`agent.workspace.supervise`: its own process group, the death signal,
   the watchdog) with the environment of §15.2 (`agent.workspace.briefing`): the
   context as Markdown in `$LEASEHOLD_CONTEXT_FILE`, `LEASEHOLD_TASK`,
   `…_ATTEMPT_ID`, `…_EPOCH`, `…_LABEL`, `…_BRANCH`, `…_BASE_COMMIT`,
   `…_WORKTREE`, the `LEASEHOLD_ENV_*` of the allocated environment,
   `$LEASEHOLD_OUTCOME_FILE`, `$LEASEHOLD_SUMMARY_FILE` and
   `$LEASEHOLD_USAGE_FILE` (JSON lines of usage increments, `agent.client.usage`,
   reported as they arrive with the renewals and the finish), and its own
   credential (SPEC §23.2): `LEASEHOLD_ATTEMPT_TOKEN`, minted for this command
   and good only for this attempt's calls, with `LEASEHOLD_URL` — never the
   agent's token (`LEASEHOLD_TOKEN` is taken out of the environment it
   inherits) nor the lease token. `leasehold note` inside COMMAND uses it.
   `{context_file}`, `{task}`, `{branch}`, `{worktree}` in COMMAND's
   arguments are replaced.
4. COMMAND exits: the outcome file decides when it holds a valid outcome
   (`agent.workspace.outcome`; an invalid one is reported on one line and ignored),
   else the exit status: 0 → `done` (or `--on-success review`), non-zero →
   `failed` with `--failure-reason`. The finish carries the git facts of the
   end (head, commits ahead, dirty, pushed) with `--worktree`. Exit 0 for
   done/review/handoff, 7 for failed.
   With `--review` (SPEC §16.1) `run --review --next` claims the oldest open
   review instead; exit 0 → `approved` unless the outcome file says
   otherwise (changes_requested / blocked with findings, failed, handoff),
   non-zero → `failed` (no decision: the review stays open for another
   reviewer).
5. The lease is lost: SIGTERM to COMMAND's group at once, SIGKILL after
   `--grace-seconds`; nothing more is sent with the token, the state file
   marks it lost, exit 5.
   A partition (SPEC §23.4) is not a loss until it must be: while the server
   cannot be reached COMMAND goes on until the lease would run out on this
   machine's clock, less a margin (`run_margin`: max(5 s, 10 % of the lease,
   grace + 1 s); `agent.client.partition`); a renewal that gets through before
   then simply goes on. At the margin COMMAND is stopped as above, the
   worktree is kept, and its git facts and outcome are sent when the server
   answers: the late report lands (the lease was still held) or is refused,
   said on one line and noted on the task (`agent.cli.run_partition`); exit 5.
   A COMMAND that ends during a partition has its finish sent until the
   server answers, late if need be, with the same verdicts.
   BUDGET_EXHAUSTED (SPEC §19) stops COMMAND the same way, then finishes
   `failed` (reason `other`) with a summary naming the spent budget; exit 7.
6. `run` gets SIGINT/SIGTERM/SIGHUP: the signal goes on to COMMAND; once it
   exits the attempt is handed off (`user_request` for SIGINT, else
   `client_shutdown`), exit 128+signal. `run` killed outright: COMMAND dies
   with it (§15.3), the lease lapses on its own.

Steps 4 and 5 (and BUDGET_EXHAUSTED) are `agent.cli.run_end`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shlex
import signal
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

from agent.cli.output import EXIT_NOTHING_CLAIMABLE, Output
from agent.cli.run_end import RunEnding, budget_spent, finish_run, lease_lost, report_usage
from agent.cli.workspace_commands import prepare_worktree
from agent.client.api import LeaseholdClient
from agent.client.errors import LeaseholdError
from agent.client.heartbeat import Heartbeat
from agent.client.keeper import LeaseKeeper
from agent.client.partition import partition_margin
from agent.client.usage import UsageFile
from agent.workspace import state
from agent.workspace.briefing import command_environment, context_markdown, expand_placeholders
from agent.workspace.config import config_dir, load_settings
from agent.workspace.git import Opened, Repository, WorkspaceError, find_repository
from agent.workspace.session import (
    UsageError,
    agent_handle,
    claim_from_args,
    claim_text,
    current_attempt,
    forget_ended,
    hold_claim,
    make_client,
    nothing_claimable,
    refuse_to_replace,
)
from agent.workspace.state import HeldAttempt
from agent.workspace.supervise import Supervised

POLL_SECONDS = 0.05
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_TASK_KEY = re.compile(r"[A-Z][A-Z0-9]{0,9}-[1-9][0-9]*")


def _lease_for_run(
    client: LeaseholdClient, args: argparse.Namespace, out: Output
) -> tuple[HeldAttempt, dict[str, Any], bool] | None:
    """(the attempt, its context, whether this run claimed it), or None when nothing is claimable."""
    settings = load_settings()
    if args.key or args.next:
        if args.worktree is None:
            refuse_to_replace(args, client, settings)  # in a worktree the pointer says which attempt is meant
        else:
            forget_ended(client, agent_handle(settings, client))
        claim = claim_from_args(client, args, settings)
        if claim is None:
            return None
        held = hold_claim(claim, client, settings, owner="run")
        out.info(claim_text(claim).replace("\n", "\nleasehold: "))
        return held, claim.context, True
    current = current_attempt(settings, client)
    if current is None:
        raise UsageError("No current attempt: give a task KEY or --next (or `leasehold claim` first).")
    if current.lost:
        raise LeaseholdError(f"The lease on {current.task} was lost ({current.lost_reason}).", code="LEASE_LOST")
    out.info(f"reusing attempt {current.attempt_id} on {current.task}")
    current.owner, current.pid = "run", os.getpid()
    state.save(config_dir(), current)
    return current, client.context(current.task), False


def _worktree_arguments(args: argparse.Namespace) -> None:
    """`run --worktree WEB-4 -- …` means the task WEB-4 in the default worktree, not a directory named WEB-4."""
    value = args.worktree
    if value and not args.key and not args.next and _TASK_KEY.fullmatch(value) and not Path(value).exists():
        args.key, args.worktree = value, ""


def run(args: argparse.Namespace, out: Output) -> int:
    command: list[str] = args.run_command
    if not command:
        raise UsageError("Give the command after `--`: leasehold run [KEY | --next] -- COMMAND [ARG ...]")
    _worktree_arguments(args)
    # The repository is checked before anything is claimed: a wrong --repo costs no attempt.
    repo = find_repository(Path(args.repo) if args.repo else None) if args.worktree is not None else None
    settings = load_settings()
    client = make_client(settings)
    try:
        got = _lease_for_run(client, args, out)
        if got is None:
            out.result({"claimed": None}, nothing_claimable(args))
            return EXIT_NOTHING_CLAIMABLE
        held, context, claimed = got
        return _supervise(client, held, context, claimed, repo, command, args, out)
    finally:
        client.close()


def _supervise(
    client: LeaseholdClient,
    held: HeldAttempt,
    context: dict[str, Any],
    claimed: bool,
    repo: Repository | None,
    command: list[str],
    args: argparse.Namespace,
    out: Output,
) -> int:
    keeper = LeaseKeeper(
        client.clone(),
        held.lease,
        watch_changes=True,
        ride_out_partitions=True,
        partition_margin_seconds=run_margin(held.renew_every_seconds, args.grace_seconds),
    )
    heartbeat = Heartbeat(client.clone(), every_seconds=args.heartbeat_seconds)
    received: list[int] = []
    child: Supervised | None = None

    def forward(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        if child is not None:
            child.signal_group(signum)

    previous = {signum: signal.signal(signum, forward) for signum in FORWARDED_SIGNALS}
    keeper.start()
    heartbeat.start()
    try:
        with tempfile.TemporaryDirectory(prefix="leasehold-run-") as scratch:
            opened = _open(client, keeper, held, context, claimed, repo, args, out) if repo is not None else None
            files = Path(scratch)
            env, argv = _command_setup(held, context, opened, command, files)
            env.update(_command_credential(client, held))
            if received:  # interrupted while the worktree was being made: nothing was started
                return finish_run(keeper, held, opened, command, None, received, files, args, out)
            out.info(f"running {shlex.join(argv)} (renewing every {held.renew_every_seconds} s)")
            try:
                child = Supervised(argv, env=env, cwd=opened.path if opened else None, grace_seconds=args.grace_seconds)
            except OSError as exc:
                # Nothing was done: give the task back rather than sit on it until the lease lapses.
                with contextlib.suppress(LeaseholdError):
                    keeper.release(reason=f"leasehold run: cannot start {argv[0]!r}")
                    state.remove(config_dir(), held.agent, held.task, attempt_id=held.attempt_id)
                raise UsageError(f"Cannot start {argv[0]!r}: {exc}") from None
            usage = UsageFile(files / "usage.jsonl")
            try:
                while child.poll() is None:
                    if keeper.lost.wait(POLL_SECONDS):
                        break
                    report_usage(usage, keeper, out)
                if keeper.budget_exhausted:
                    return budget_spent(child, keeper, held, opened, usage, args, out)
                if keeper.lost.is_set():
                    ending = RunEnding(opened, command, received, files, usage)
                    return lease_lost(child, keeper, held, args, out, ending=ending)
                report_usage(usage, keeper, out, rest=True)
                return finish_run(keeper, held, opened, command, child.poll(), received, files, args, out)
            finally:
                child.release_watchdog()
    finally:
        keeper.stop()
        heartbeat.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def run_margin(renew_every_seconds: int, grace_seconds: float) -> float:
    """How long before the lease would run out in a partition COMMAND is stopped: `partition_margin`, and
    at least the grace plus a second, so even a COMMAND that needs SIGKILL is gone before the lease ends."""
    return max(partition_margin(3 * renew_every_seconds), grace_seconds + 1.0)


def _open(
    client: LeaseholdClient,
    keeper: LeaseKeeper,
    held: HeldAttempt,
    context: dict[str, Any],
    claimed: bool,
    repo: Repository,
    args: argparse.Namespace,
    out: Output,
) -> Opened:
    try:
        return prepare_worktree(
            client,
            held,
            repo=repo,
            directory=Path(args.worktree).expanduser() if args.worktree else None,
            context=context,
            record_git=keeper.set_git,
            out=out,
        )
    except WorkspaceError:
        if claimed:  # nothing was done under this claim: hand the task back at once
            with contextlib.suppress(LeaseholdError):
                keeper.release(reason="leasehold run: no worktree could be made")
            state.remove(config_dir(), held.agent, held.task, attempt_id=held.attempt_id)
        raise


# What the command never inherits from `run`'s environment: the agent's credential (SPEC §23.2).
WITHHELD_VARIABLES = ("LEASEHOLD_TOKEN", "LEASEHOLD_ATTEMPT_TOKEN")


def _command_credential(client: LeaseholdClient, held: HeldAttempt) -> dict[str, str]:
    """The command's own credential (SPEC §23.2), minted for it: this attempt's calls only."""
    return {"LEASEHOLD_ATTEMPT_TOKEN": client.mint_attempt_token(held.lease), "LEASEHOLD_URL": client.url}


def _command_setup(
    held: HeldAttempt, context: dict[str, Any], opened: Opened | None, command: list[str], files: Path
) -> tuple[dict[str, str], list[str]]:
    """The command's environment and arguments (§15.2); writes the context file."""
    worktree = str(opened.path) if opened else None
    context_file = files / "context.md"
    where = {"label": held.label, "branch": held.branch, "worktree": worktree, "base_commit": held.base_commit}
    context_file.write_text(context_markdown(context, where=where), encoding="utf-8")
    env = {
        **{name: value for name, value in os.environ.items() if name not in WITHHELD_VARIABLES},
        "LEASEHOLD_RUN": "1",
        "LEASEHOLD_CONTEXT_FILE": str(context_file),
        "LEASEHOLD_OUTCOME_FILE": str(files / "outcome.json"),
        "LEASEHOLD_SUMMARY_FILE": str(files / "summary.txt"),
        "LEASEHOLD_USAGE_FILE": str(files / "usage.jsonl"),
        **command_environment(
            task=held.task,
            attempt_id=held.attempt_id,
            epoch=held.epoch,
            label=held.label,
            branch=held.branch,
            base_commit=held.base_commit,
            worktree=worktree,
            environment=context.get("environment"),
        ),
    }
    values = {"context_file": str(context_file), "task": held.task, "branch": held.branch, "worktree": worktree}
    return env, expand_placeholders(command, values)

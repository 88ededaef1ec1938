"""How `leasehold run` ends (SPEC §15.2, §15.3): the finish the command chose, a lost lease, a spent budget.

`agent.cli.run` supervises the command and calls one of these when it is
over: `finish_run` (the outcome file, else the exit status; a signal hands
off), `lease_lost` (the command is stopped, the state file marks the loss) or
`budget_spent` (stopped, then finished `failed`). `report_usage` hands the
usage lines the command wrote to the keeper, while it runs and at the end.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.cli.output import EXIT_COMMAND_FAILED, EXIT_LEASE_LOST, EXIT_OK, Output
from agent.cli.run_partition import late_report_landed, late_report_refused, say
from agent.client.errors import ATTEMPT_ENDED_CODES, LEASE_LOSS_CODES, LeaseholdError
from agent.client.keeper import LeaseKeeper
from agent.client.models import Outcome
from agent.client.usage import UsageFile
from agent.workspace import state
from agent.workspace.config import config_dir
from agent.workspace.git import Opened, WorkspaceError, head_facts
from agent.workspace.outcome import SUMMARY_MAX_CHARS, ChosenOutcome, InvalidOutcome, read_outcome
from agent.workspace.state import HeldAttempt
from agent.workspace.supervise import Supervised

# ACKNOWLEDGEMENT_REQUIRED again after a re-read (the task changed once more meanwhile): read it again this often.
ACKNOWLEDGE_TRIES = 3


def forget_or_mark(held: HeldAttempt, error: LeaseholdError | None, reason: str | None) -> None:
    """The attempt ended on the server (its answer said so): forget it; lost without a verdict: mark it lost.

    A loss without the server's word (renewals got no answer) keeps its file,
    marked lost, until a later command asks the server
    (`agent.workspace.session.forget_ended`).
    """
    if error is not None and error.code in (*ATTEMPT_ENDED_CODES, "NOT_FOUND"):
        state.remove(config_dir(), held.agent, held.task, attempt_id=held.attempt_id)
    else:
        state.mark_lost(config_dir(), held, reason or (str(error) if error is not None else "lost"))


def report_usage(usage: UsageFile, keeper: LeaseKeeper, out: Output, *, rest: bool = False) -> None:
    """Hand the usage lines COMMAND appended since the last look to the keeper; a bad line is reported, not sent."""
    reports, problems = usage.read_rest() if rest else usage.read_new()
    for problem in problems:
        out.warn(f"$LEASEHOLD_USAGE_FILE {problem}; that line is not reported.")
    for report in reports:
        keeper.report_usage(report)


def budget_spent(
    child: Supervised,
    keeper: LeaseKeeper,
    held: HeldAttempt,
    opened: Opened | None,
    usage: UsageFile,
    args: argparse.Namespace,
    out: Output,
) -> int:
    """BUDGET_EXHAUSTED: stop COMMAND as on a lost lease, then finish `failed` (`other`) naming the budget."""
    still_running = child.poll() is None
    if still_running:
        child.signal_group(signal.SIGTERM)
    status = child.stop(grace_seconds=args.grace_seconds, term_sent=True) if still_running else child.poll()
    report_usage(usage, keeper, out, rest=True)
    spent = keeper.lost_error.message if keeper.lost_error is not None else "the budget is spent"
    out.info(f"budget exhausted; command stopped (status {status})")
    fields: dict[str, Any] = {
        "failure_reason_code": "other",
        "result_summary": f"Stopped by leasehold run: budget exhausted. {spent}"[:SUMMARY_MAX_CHARS],
    }
    if opened is not None:
        try:
            fields["git"] = head_facts(opened.path, branch=held.branch, base_commit=held.base_commit)
        except WorkspaceError as problem:
            out.warn(f"the git facts of the end could not be read: {problem}")
    try:
        finished = finish_acknowledging(keeper, held, "failed", fields, out)
    except LeaseholdError as error:
        forget_or_mark(held, error, keeper.lost_reason)
        return out.failure(error)
    state.remove(config_dir(), held.agent, held.task, attempt_id=held.attempt_id)
    attempt, task = finished["attempt"], finished["task"]
    out.result(
        {
            "task": attempt["task"],
            "attempt": attempt["id"],
            "outcome": "failed",
            "attempt_status": attempt["status"],
            "task_status": task["status"],
            "command_status": status,
            "lease_lost": False,
            "budget_exhausted": True,
            "reason": keeper.lost_reason,
        },
        "",
    )
    return EXIT_COMMAND_FAILED


def lease_lost(
    child: Supervised,
    keeper: LeaseKeeper,
    held: HeldAttempt,
    args: argparse.Namespace,
    out: Output,
    *,
    ending: RunEnding | None = None,
) -> int:
    """The lease is lost: stop COMMAND at once; after a partition (`keeper.partitioned`), report late."""
    if keeper.partitioned and ending is not None:
        return partition_stop(child, keeper, held, ending, args, out)
    lost_at = time.monotonic()
    still_running = child.poll() is None
    if still_running:
        child.signal_group(signal.SIGTERM)  # first: the command must stop working on the task at once
    forget_or_mark(held, keeper.lost_error, keeper.lost_reason)
    status = child.stop(grace_seconds=args.grace_seconds, term_sent=True) if still_running else child.poll()
    out.info(f"lease lost ({keeper.lost_reason}); command stopped (status {status})")
    out.result(
        {
            "task": held.task,
            "attempt": held.attempt_id,
            "outcome": None,
            "lease_lost": True,
            "reason": keeper.lost_reason,
            "command_status": status,
            "stopped_in_seconds": round(time.monotonic() - lost_at, 3),
        },
        "",
    )
    return EXIT_LEASE_LOST


@dataclass(frozen=True)
class RunEnding:
    """What a late report needs of the run: the worktree, the command, its files, the signals run got."""

    opened: Opened | None
    command: list[str]
    received: list[int]
    files: Path
    usage: UsageFile


def partition_stop(
    child: Supervised, keeper: LeaseKeeper, held: HeldAttempt, ending: RunEnding, args: argparse.Namespace, out: Output
) -> int:
    """SPEC §23.4: the lease would run out here in a partition. Stop COMMAND, keep the worktree, and send the
    git facts and the outcome once the server answers: the report lands (the lease was still held) or is
    refused, visibly (`agent.cli.run_partition`)."""
    still_running = child.poll() is None
    if still_running:
        child.signal_group(signal.SIGTERM)
    state.mark_lost(config_dir(), held, keeper.lost_reason or "lost in a partition")  # until the report is answered
    status = child.stop(grace_seconds=args.grace_seconds, term_sent=True) if still_running else child.poll()
    report_usage(ending.usage, keeper, out, rest=True)
    where = f"; the worktree {ending.opened.path} is kept" if ending.opened is not None else ""
    say(f"{keeper.lost_reason}: command stopped (status {status}){where}; the report follows when the server answers")
    if still_running:
        outcome: Outcome = "handoff"
        summary = f"Stopped by leasehold run: {keeper.lost_reason}."
        fields: dict[str, Any] = {"interruption_reason_code": "other", "result_summary": summary[:SUMMARY_MAX_CHARS]}
        exit_code = EXIT_LEASE_LOST
    else:  # the command had ended by itself: its own outcome is the report
        outcome, fields, exit_code = decide_outcome(ending.command, status, ending.received, ending.files, args, out)
    if ending.opened is not None:
        try:
            fields["git"] = head_facts(ending.opened.path, branch=held.branch, base_commit=held.base_commit)
        except WorkspaceError as problem:
            out.warn(f"the git facts of the end could not be read: {problem}")
    try:
        finished = finish_acknowledging(keeper, held, outcome, fields, out, late=True)
    except LeaseholdError as error:
        return late_report_refused(keeper, held, ending.opened, error, fields, command_status=status, out=out)
    state.remove(config_dir(), held.agent, held.task, attempt_id=held.attempt_id)
    late_report_landed(held, ending.opened, finished, outcome, fields, command_status=status, out=out)
    return exit_code


def _summary(command: list[str], returncode: int | None, summary_file: Path) -> str:
    try:
        written = summary_file.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        written = ""
    if written:
        return written[:SUMMARY_MAX_CHARS]
    if returncode is None:
        return f"`{shlex.join(command)}` was not started: leasehold run was interrupted first."
    how = f"exited {returncode}" if returncode >= 0 else f"was killed by signal {-returncode}"
    return f"`{shlex.join(command)}` {how}."


def _chosen(files: Path, out: Output, *, review: bool = False) -> ChosenOutcome | None:
    try:
        return read_outcome(files / "outcome.json", review=review)
    except InvalidOutcome as problem:
        out.warn(f"the outcome file $LEASEHOLD_OUTCOME_FILE {problem}; the exit status decides instead.")
        return None


def finish_acknowledging(
    keeper: LeaseKeeper, held: HeldAttempt, outcome: Outcome, fields: dict[str, Any], out: Output, *, late: bool = False
) -> Any:
    """The finish (`late`: the late report after a partition); on ACKNOWLEDGEMENT_REQUIRED (a person changed
    the task during the run) the task is read again and the finish says which version it read (SPEC §3).
    The change is said on stderr."""
    send = keeper.late_report if late else keeper.finish
    for _ in range(ACKNOWLEDGE_TRIES):
        try:
            return send(outcome, **fields)
        except LeaseholdError as error:
            if error.code != "ACKNOWLEDGEMENT_REQUIRED":
                raise
            task = keeper.client.task(held.task)
            changed = ", ".join(str(name) for name in error.details.get("changed") or []) or "the task"
            out.warn(
                f"{held.task} was changed during the run ({changed}); re-read at version {task['version']} "
                "and finished acknowledging it."
            )
            fields["acknowledged_version"] = task["version"]
    return send(outcome, **fields)


def finish_run(
    keeper: LeaseKeeper,
    held: HeldAttempt,
    opened: Opened | None,
    command: list[str],
    returncode: int | None,
    received: list[int],
    files: Path,
    args: argparse.Namespace,
    out: Output,
) -> int:
    outcome, fields, exit_code = decide_outcome(command, returncode, received, files, args, out)
    if opened is not None:
        # git runs here, before the finish: the keeper is still renewing and holds nothing git could delay.
        try:
            fields["git"] = head_facts(opened.path, branch=held.branch, base_commit=held.base_commit)
        except WorkspaceError as problem:
            out.warn(f"the git facts of the end could not be read: {problem}")
    try:
        finished = finish_acknowledging(keeper, held, outcome, fields, out)
    except LeaseholdError as error:
        if keeper.clock.streaks and error.code in LEASE_LOSS_CODES:
            # The finish waited out a partition and came too late: said on one line, noted on the task.
            return late_report_refused(keeper, held, opened, error, fields, command_status=returncode, out=out)
        if keeper.lost.is_set() or error.code in (*ATTEMPT_ENDED_CODES, "LEASE_LOST"):
            forget_or_mark(held, error if error.code != "LEASE_LOST" else keeper.lost_error, keeper.lost_reason)
        return out.failure(error)
    state.remove(config_dir(), held.agent, held.task, attempt_id=held.attempt_id)
    attempt, task = finished["attempt"], finished["task"]
    out.info(f"{attempt['task']}: attempt {attempt['id']} {attempt['status']} ({outcome}); task {task['status']}")
    out.result(
        {
            "task": attempt["task"],
            "attempt": attempt["id"],
            "outcome": outcome,
            "attempt_status": attempt["status"],
            "task_status": task["status"],
            "command_status": returncode,
            "lease_lost": False,
            "worktree": str(opened.path) if opened else None,
            "branch": held.branch,
            "git": fields.get("git"),
        },
        "",
    )
    return exit_code


def decide_outcome(
    command: list[str], returncode: int | None, received: list[int], files: Path, args: argparse.Namespace, out: Output
) -> tuple[Outcome, dict[str, Any], int]:
    """The finish COMMAND chose (a signal: hand off; else the outcome file, else the exit status), and the exit code."""
    review = bool(getattr(args, "review", False))
    chosen = _chosen(files, out, review=review)
    fields: dict[str, Any] = {"result_summary": _summary(command, returncode, files / "summary.txt")}
    outcome: Outcome
    if received:
        outcome = "handoff"
        fields["interruption_reason_code"] = "user_request" if received[0] == signal.SIGINT else "client_shutdown"
        exit_code = 128 + received[0]
    elif chosen is not None:
        outcome = chosen.outcome
        if chosen.result_summary:
            fields["result_summary"] = chosen.result_summary
        fields["next_steps"] = chosen.next_steps or None
        fields["failure_reason_code"] = chosen.failure_reason_code
        fields["interruption_reason_code"] = chosen.interruption_reason_code
        if chosen.findings is not None:
            fields["findings"] = chosen.findings
        exit_code = EXIT_COMMAND_FAILED if outcome == "failed" else EXIT_OK
    elif returncode == 0:
        outcome = "approved" if review else args.on_success
        exit_code = EXIT_OK
    else:
        outcome = "failed"
        fields["failure_reason_code"] = args.failure_reason
        exit_code = EXIT_COMMAND_FAILED
    return outcome, fields, exit_code

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
from pathlib import Path
from typing import Any

from agent.cli.output import EXIT_COMMAND_FAILED, EXIT_LEASE_LOST, EXIT_OK, Output
from agent.client.errors import ATTEMPT_ENDED_CODES, LeaseholdError
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


def _forget_or_mark(held: HeldAttempt, error: LeaseholdError | None, reason: str | None) -> None:
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
        finished = _finish_acknowledging(keeper, held, "failed", fields, out)
    except LeaseholdError as error:
        _forget_or_mark(held, error, keeper.lost_reason)
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


def lease_lost(child: Supervised, keeper: LeaseKeeper, held: HeldAttempt, args: argparse.Namespace, out: Output) -> int:
    lost_at = time.monotonic()
    still_running = child.poll() is None
    if still_running:
        child.signal_group(signal.SIGTERM)  # first: the command must stop working on the task at once
    _forget_or_mark(held, keeper.lost_error, keeper.lost_reason)
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


def _finish_acknowledging(
    keeper: LeaseKeeper, held: HeldAttempt, outcome: Outcome, fields: dict[str, Any], out: Output
) -> Any:
    """The finish; on ACKNOWLEDGEMENT_REQUIRED (a person changed the task during the run) the task is read
    again and the finish says which version it read (SPEC §3). The change is said on stderr."""
    for _ in range(ACKNOWLEDGE_TRIES):
        try:
            return keeper.finish(outcome, **fields)
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
    return keeper.finish(outcome, **fields)


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
    if opened is not None:
        # git runs here, before the finish: the keeper is still renewing and holds nothing git could delay.
        try:
            fields["git"] = head_facts(opened.path, branch=held.branch, base_commit=held.base_commit)
        except WorkspaceError as problem:
            out.warn(f"the git facts of the end could not be read: {problem}")
    try:
        finished = _finish_acknowledging(keeper, held, outcome, fields, out)
    except LeaseholdError as error:
        if keeper.lost.is_set() or error.code in (*ATTEMPT_ENDED_CODES, "LEASE_LOST"):
            _forget_or_mark(held, error if error.code != "LEASE_LOST" else keeper.lost_error, keeper.lost_reason)
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

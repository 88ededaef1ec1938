"""How `leasehold run` shows the report it sent after a partition (SPEC §23.4).

When the server could not be reached until the lease would run out on this
machine's clock (`agent.client.partition`), `run` stopped COMMAND, kept the
worktree, and sent the git facts and the outcome once the server answered
(`agent.cli.run_end.partition_stop`); a COMMAND that ended by itself during
the partition had its finish sent on, late, the same way. The server then
either took the report — the lease was still held: said on one line, the
attempt ended as reported — or refused it (LEASE_EXPIRED, or STALE_EPOCH when
another attempt has claimed the task since). A refusal is said on one line
(`leasehold: late report refused (CODE): …`, also with `--json`), named in
the JSON result (`late_report: "refused"`, `late_report_code`), and written
as a comment on the task with the agent's own token — the admin's task page
and the next attempt's work context show it — naming where the work is: the
branch, its head, the worktree and the host. The commits stay on the
attempt's branch, which the task's next attempt inherits (SPEC §15.4). A
report the server never answered within the late window is said the same
way, and the state file keeps the attempt, marked lost.
"""

from __future__ import annotations

import socket
import sys
from typing import Any

from agent.cli.output import EXIT_LEASE_LOST, Output
from agent.client.errors import ATTEMPT_ENDED_CODES, LeaseholdError
from agent.client.keeper import ENDING_CODES, LeaseKeeper
from agent.client.retries import unanswered
from agent.workspace import state
from agent.workspace.config import config_dir
from agent.workspace.git import Opened
from agent.workspace.state import HeldAttempt


def say(text: str) -> None:
    """One line on stderr, with or without `--json`: what happened to the lease is never silent."""
    print(f"leasehold: {text}", file=sys.stderr, flush=True)


def where_the_work_is(held: HeldAttempt, opened: Opened | None, git: dict[str, Any] | None) -> str:
    facts = git or {}
    parts = [f"branch {held.branch}" if held.branch else "no branch"]
    if facts.get("head_commit"):
        parts.append(f"at {str(facts['head_commit'])[:12]}")
    details = []
    if facts.get("commits_ahead") is not None:
        details.append(f"{facts['commits_ahead']} commits ahead of its base")
    if "dirty" in facts:
        details.append("uncommitted changes" if facts["dirty"] else "clean")
    if "pushed" in facts:
        details.append("pushed" if facts["pushed"] else "not pushed")
    text = " ".join(parts) + (f" ({', '.join(details)})" if details else "")
    if opened is not None:
        text += f", worktree {opened.path} on {socket.gethostname()}"
    return text


def late_report_landed(
    held: HeldAttempt,
    opened: Opened | None,
    finished: Any,
    outcome: str,
    fields: dict[str, Any],
    *,
    command_status: int | None,
    out: Output,
) -> None:
    attempt, task = finished["attempt"], finished["task"]
    say(
        f"late report landed: the lease on {held.task} was still held; attempt {attempt['id']} "
        f"{attempt['status']} ({outcome}); task {task['status']}"
    )
    out.result(
        {
            "task": attempt["task"],
            "attempt": attempt["id"],
            "outcome": outcome,
            "attempt_status": attempt["status"],
            "task_status": task["status"],
            "command_status": command_status,
            "lease_lost": False,
            "partition": True,
            "late_report": "landed",
            "worktree": str(opened.path) if opened else None,
            "branch": held.branch,
            "git": fields.get("git"),
        },
        "",
    )


def late_report_refused(
    keeper: LeaseKeeper,
    held: HeldAttempt,
    opened: Opened | None,
    error: LeaseholdError,
    fields: dict[str, Any],
    *,
    command_status: int | None,
    out: Output,
) -> int:
    """The report after a partition was refused (or never answered): one line, a comment on the task, exit 5."""
    work = where_the_work_is(held, opened, fields.get("git"))
    if unanswered(error):
        verdict = "not delivered"
        say(f"late report not delivered: the server did not answer ({error.code}); the work stays on {work}")
    elif error.code in ENDING_CODES:
        verdict = "refused"
        say(
            f"late report refused ({error.code}): {error.message} The work stays on {work}, "
            "for the task's next attempt."
        )
    else:
        state.mark_lost(config_dir(), held, keeper.lost_reason or str(error))
        return out.failure(error)
    if error.code in (*ATTEMPT_ENDED_CODES, "NOT_FOUND"):
        state.remove(config_dir(), held.agent, held.task, attempt_id=held.attempt_id)
    else:
        state.mark_lost(config_dir(), held, keeper.lost_reason or str(error))
    if verdict == "refused":
        _comment(keeper, held, error, work)
    out.result(
        {
            "task": held.task,
            "attempt": held.attempt_id,
            "outcome": None,
            "lease_lost": True,
            "partition": True,
            "late_report": verdict,
            "late_report_code": error.code,
            "reason": keeper.lost_reason,
            "command_status": command_status,
            "worktree": str(opened.path) if opened else None,
            "branch": held.branch,
            "git": fields.get("git"),
        },
        "",
    )
    return EXIT_LEASE_LOST


def _comment(keeper: LeaseKeeper, held: HeldAttempt, error: LeaseholdError, work: str) -> None:
    """The refusal, on the task (the agent's token, not the lease): the admin and the next attempt see it."""
    body = (
        f"Late report of attempt {held.attempt_id} refused ({error.code}) after a network partition: "
        f"{error.message} The work stays on {work}."
    )
    try:
        keeper.client.comment(held.task, body)
    except LeaseholdError as problem:
        say(f"the refusal could not be noted on {held.task} ({problem.code})")

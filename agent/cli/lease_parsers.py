"""The parsers of the lease's own commands (login, claim, note, …, run, workspace, mcp), one function each.

`agent.cli.leasehold.build_parser` calls the one a call runs (or every one,
for `--help`): each imports its handler when it is called, so a call imports
only what its own command needs (issue 34, SPEC §24: a CLI call <= 150 ms of
CPU).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from agent.workspace.session import WAIT_FOREVER

Command = Callable[..., argparse.ArgumentParser]


def _add_claim_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("key", nargs="?", help="the task to claim, e.g. WEB-412")
    parser.add_argument("--next", action="store_true", help="claim the project's next claimable task instead")
    parser.add_argument("--project", help="project slug for --next (default: the one set at login)")
    parser.add_argument("--task-class", help="with --next: only tasks of this class")
    parser.add_argument(
        "--wait",
        nargs="?",
        const=WAIT_FOREVER,
        type=int,
        metavar="SECONDS",
        help="with --next: wait up to SECONDS (no number: no limit) for a task to become claimable; "
        "the server hands it to one waiter",
    )
    parser.add_argument(
        "--until-empty",
        action="store_true",
        help="with --next: wait (as --wait with no limit) until a task comes or the project's work is finished; "
        "exit 3 only then: no task open, ready (claimable, held, or waiting on a blocker), in review or delivered",
    )
    parser.add_argument("--lease-seconds", type=int, help="requested lease length (the server clamps it)")
    parser.add_argument("--branch", help="Conventional Branch name for the attempt")
    parser.add_argument("--base-commit", help="40-hex commit the work starts from")
    parser.add_argument("--environment", help="allocate this environment (by name) with the lease")
    parser.add_argument("--environment-kind", help="allocate any free environment of this kind")
    parser.add_argument(
        "--path",
        action="append",
        dest="paths",
        help="reserve this repository path while the lease lives (repeatable; default: the task's paths)",
    )
    parser.add_argument("--paths-mode", choices=["exclusive", "shared"], help="how the paths are held")
    parser.add_argument("--replace", action="store_true", help="forget a current attempt instead of refusing")


def _add_workspace_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--worktree",
        nargs="?",
        const="",
        metavar="DIR",
        help="run in the attempt's git worktree (default DIR: <repo parent>/<repo name>.worktrees/<task key>)",
    )
    parser.add_argument("--repo", help="the git repository (default: the one containing the current directory)")


def add_workspace(command: Command) -> None:
    """`leasehold workspace open|list|prune` (SPEC §15.1)."""
    from agent.cli.workspace_commands import cmd_workspace  # git and its worktrees: only `workspace` imports them

    workspace = command("workspace", "Open, list or prune the git worktrees of attempts.", cmd_workspace)
    actions = workspace.add_subparsers(dest="workspace_command", metavar="ACTION", required=True)
    opening = actions.add_parser(
        "open",
        help="claim (KEY or --next) or take the current attempt, and open its worktree",
        description="Claim (KEY or --next) or take the current attempt, open its branch in a worktree, install the "
        "trailer hook and record the git facts; prints the worktree's path.",
    )
    _add_claim_options(opening)
    opening.add_argument("--dir", help="the worktree (default: <repo parent>/<repo name>.worktrees/<task key>)")
    opening.add_argument("--repo", help="the git repository (default: the one containing the current directory)")
    listing = actions.add_parser("list", help="the repository's worktrees and the attempts in them")
    listing.add_argument("--repo", help="the git repository (default: the one containing the current directory)")
    prune = actions.add_parser(
        "prune",
        help="remove worktrees whose attempt completed, whose branch is merged, and which are clean",
        description="Remove the worktrees whose attempt completed, whose branch is merged into the default branch "
        "and which have no uncommitted changes; nothing else (never the main checkout).",
    )
    prune.add_argument("--repo", help="the git repository (default: the one containing the current directory)")
    prune.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")
    for sub in (opening, listing, prune):
        sub.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="machine output")


def add_login(command: Command) -> None:
    from agent.cli.commands import cmd_login

    login = command("login", "Store the server URL and agent token (config file, mode 0600).", cmd_login)
    login.add_argument("url", help="the server, e.g. http://127.0.0.1:8000")
    login.add_argument("--token", help="the agent token (default: LEASEHOLD_TOKEN, else read from stdin)")
    login.add_argument("--project", help="default project slug for ready, claim --next and run --next")


def add_ready(command: Command) -> None:
    from agent.cli.commands import cmd_ready

    ready = command("ready", "List the claimable tasks of a project.", cmd_ready)
    ready.add_argument("--project", help="project slug (default: the one set at login)")
    ready.add_argument("--task-class", help="only tasks of this class")
    ready.add_argument("--limit", type=int, default=50, help="at most this many (1-200)")


def add_claim(command: Command) -> None:
    from agent.cli.commands import cmd_claim

    claim = command("claim", "Claim a task (KEY, or --next) and make it the current attempt.", cmd_claim)
    _add_claim_options(claim)


def add_context(command: Command) -> None:
    from agent.cli.commands import cmd_context

    context = command("context", "Show the bounded work context of a task.", cmd_context)
    context.add_argument("key", nargs="?", help="task key (default: the current attempt's task)")


def add_note(command: Command) -> None:
    from agent.cli.commands import cmd_note

    note = command("note", "Add a note to the current attempt (renews the lease).", cmd_note)
    note.add_argument("content", help="the note, at most 8,000 characters")
    note.add_argument("--kind", choices=("progress", "finding", "warning"), default="progress", help="note kind")
    note.add_argument("--important", action="store_true", help="flag the note as important")
    note.add_argument("--next-step", action="append", default=[], help="a next step; repeatable")


def add_checkpoint(command: Command) -> None:
    from agent.cli.commands import cmd_note

    checkpoint = command("checkpoint", "Leave a checkpoint: what the next holder reads first.", cmd_note)
    checkpoint.add_argument("content", help="where the work stands, at most 8,000 characters")
    checkpoint.add_argument("--next-step", action="append", default=[], help="a next step; repeatable")


def add_renew(command: Command) -> None:
    from agent.cli.commands import cmd_renew

    renew = command("renew", "Renew the current attempt's lease once.", cmd_renew)
    renew.add_argument("--lease-seconds", type=int, help="requested lease length")


def add_finish(command: Command) -> None:
    from agent.cli.commands import cmd_finish
    from agent.client.models import FAILURE_REASONS, INTERRUPTION_REASONS

    finish = command("finish", "Finish the current attempt (done, review, failed or handoff).", cmd_finish)
    finish.add_argument(
        "--outcome",
        choices=("done", "review", "failed", "handoff", "approved", "changes_requested", "blocked"),
        default="done",
        help="outcome (a review attempt: approved, changes_requested or blocked)",
    )
    finish.add_argument("--finding", action="append", default=None, help="a review finding; repeatable")
    finish.add_argument("--summary", help="result summary")
    finish.add_argument("--next-step", action="append", default=[], help="a next step; repeatable")
    finish.add_argument("--failure-reason", choices=FAILURE_REASONS, help="for failed (default implementation_error)")
    finish.add_argument("--interruption-reason", choices=INTERRUPTION_REASONS, help="for handoff (default handoff)")
    finish.add_argument("--acknowledged-version", type=int, help="the task version read after ACKNOWLEDGEMENT_REQUIRED")


def add_release(command: Command) -> None:
    from agent.cli.commands import cmd_release

    release = command("release", "Give the current attempt's task back untouched.", cmd_release)
    release.add_argument("--reason", default="", help="why, for the audit log")


def add_changes(command: Command) -> None:
    from agent.cli.commands import cmd_changes

    changes = command("changes", "Show the events after an event id (the delta feed).", cmd_changes)
    changes.add_argument("--since", type=int, help="last event id already seen (default 0; with --follow: now)")
    changes.add_argument("--project", help="only this project")
    changes.add_argument("--limit", type=int, help="at most this many events (1-200)")
    changes.add_argument(
        "--follow", action="store_true", help="keep printing events as they commit (long-poll), until interrupted"
    )


def add_search(command: Command) -> None:
    from agent.cli.commands import cmd_search

    search = command("search", "Search tasks and notes (snippets).", cmd_search)
    search.add_argument("query", help="words to find")
    search.add_argument("--project", help="only this project")
    search.add_argument("--limit", type=int, help="at most this many hits (1-50)")


def add_run(command: Command) -> None:
    from agent.cli.commands import cmd_run
    from agent.client.models import FAILURE_REASONS

    run = command(
        "run",
        "Run COMMAND under a lease: claim (KEY or --next) or reuse the current attempt, renew while it "
        "runs, finish done on exit 0 and failed otherwise (or as $LEASEHOLD_OUTCOME_FILE says); with --worktree "
        "in the attempt's git worktree. SIGTERM (then SIGKILL) it if the lease is lost; it dies with run.",
        cmd_run,
    )
    run.usage = "leasehold run [KEY | --next] [--worktree [DIR]] [--repo PATH] [options] -- COMMAND [ARG ...]"
    _add_claim_options(run)
    _add_workspace_options(run)
    run.add_argument(
        "--failure-reason",
        choices=FAILURE_REASONS,
        default="implementation_error",
        help="failure_reason_code when COMMAND exits non-zero (default implementation_error)",
    )
    run.add_argument("--on-success", choices=("done", "review"), default="done", help="outcome on exit 0")
    run.add_argument(
        "--review",
        action="store_true",
        help="with --next: claim the oldest open review and run COMMAND as its reviewer (exit 0: approved)",
    )
    run.add_argument(
        "--grace-seconds", type=float, default=10.0, help="SIGTERM to SIGKILL delay when COMMAND must stop"
    )
    run.add_argument("--heartbeat-seconds", type=float, default=60.0, help="run heartbeat interval")


def add_mcp(command: Command) -> None:
    from agent.cli.commands import cmd_mcp
    from agent.cli.connect import CLIENTS

    mcp = command("mcp", "Serve the agent operations as MCP tools over stdio.", cmd_mcp)
    mcp.add_argument("--project", help="default project for ready, claim_next, changes and search")
    mcp.add_argument("--print-config", choices=CLIENTS, help="print the client configuration and exit")
    mcp.add_argument("--no-keep-alive", action="store_true", help="do not renew claimed leases in the background")
    mcp.add_argument(
        "--keep-on-exit", action="store_true", help="keep the attempts held when the session ends (no hand-off)"
    )


# The lease's own commands, in the order `leasehold --help` lists them (then `agent.cli.leasehold.REACH_COMMANDS`).
LEASE_COMMANDS: dict[str, Callable[[Command], None]] = {
    "login": add_login,
    "ready": add_ready,
    "claim": add_claim,
    "context": add_context,
    "note": add_note,
    "checkpoint": add_checkpoint,
    "renew": add_renew,
    "finish": add_finish,
    "release": add_release,
    "changes": add_changes,
    "search": add_search,
    "run": add_run,
    "workspace": add_workspace,
    "mcp": add_mcp,
}

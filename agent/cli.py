"""`leasehold`: the agent's command line (SPEC §13).

`login` stores the server URL and the agent token (mode 0600, see
`agent.config`). `claim` stores the attempt it gets in the state file, so
`note`, `checkpoint`, `renew`, `finish` and `release` in the same shell act on
it. `run -- COMMAND…` holds a lease while COMMAND runs (`agent.runner`).
`mcp` serves the same operations to MCP clients (`agent.mcp_server`).

Results go to stdout (one JSON document with `--json`), diagnostics to
stderr. Exit codes: `agent.output.EXIT_CODES_HELP`.
"""

from __future__ import annotations

import argparse
import dataclasses
import getpass
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from agent import __version__
from agent.client import Claim, LeaseholdClient, NoteKind
from agent.config import (
    NotLoggedIn,
    Settings,
    clear_state,
    config_path,
    load_settings,
    load_state,
    save_settings,
    save_state,
)
from agent.errors import LEASE_LOSS_CODES, LeaseholdError
from agent.models import is_past
from agent.output import (
    EXIT_AUTH,
    EXIT_CODES_HELP,
    EXIT_NOTHING_CLAIMABLE,
    EXIT_OK,
    EXIT_USAGE,
    Output,
)

FAILURE_REASONS = (
    "implementation_error",
    "environment_error",
    "missing_dependency",
    "invalid_requirements",
    "tests_failed",
    "context_lost",
    "timeout",
    "other",
)
INTERRUPTION_REASONS = ("handoff", "context_limit", "user_request", "client_shutdown", "environment_change", "other")


CONFIGURATION_HELP = """
environment:
  LEASEHOLD_CONFIG   config file (default ~/.config/leasehold/config.json)
  LEASEHOLD_STATE    current attempt (default attempt.json beside the config)
  LEASEHOLD_URL, LEASEHOLD_TOKEN, LEASEHOLD_PROJECT
                     override the config file
  LEASEHOLD_TRACE    append one JSON line per request to this file (no tokens)
"""


class UsageError(Exception):
    """The command cannot run as asked (exit 2)."""


def make_client(settings: Settings) -> LeaseholdClient:
    """The client for the configured server; `LEASEHOLD_TRACE=<file>` logs each request (no tokens)."""
    return LeaseholdClient(settings.url, settings.token, trace_path=os.environ.get("LEASEHOLD_TRACE") or None)


def _project(args: argparse.Namespace, settings: Settings) -> str:
    project = getattr(args, "project", None) or settings.project
    if not project:
        raise UsageError("Name the project: --project SLUG (or `leasehold login --project SLUG` to set a default).")
    return str(project)


# --- commands ---------------------------------------------------------------------------


def cmd_login(args: argparse.Namespace, out: Output) -> int:
    token = args.token or os.environ.get("LEASEHOLD_TOKEN")
    if not token:
        token = getpass.getpass("Agent token: ") if sys.stdin.isatty() else sys.stdin.readline()
    token = token.strip()
    if not token:
        raise UsageError("An agent token is needed: --token, LEASEHOLD_TOKEN, or on standard input.")
    with LeaseholdClient(args.url, token) as client:
        projects = [project["slug"] for project in client.projects(limit=200)["results"]]
        url = client.url
    project = args.project or (projects[0] if len(projects) == 1 else None)
    path = save_settings(Settings(url=url, token=token, project=project))
    out.result(
        {"url": url, "config": str(path), "projects": projects, "project": project},
        f"Logged in to {url}; projects: {', '.join(projects) or 'none'}"
        + (f"; default project {project}" if project else "")
        + f". Saved to {path}.",
    )
    return EXIT_OK


def cmd_ready(args: argparse.Namespace, out: Output) -> int:
    settings = load_settings()
    with make_client(settings) as client:
        page = client.tasks(
            project=_project(args, settings), claimable=True, task_class=args.task_class, limit=args.limit
        )
    tasks = page["results"]
    lines = [
        f"{task['key']:<12} p{task['priority']:<4} {task['task_class'] or '-':<12} {task['title']}" for task in tasks
    ]
    out.result(page, "\n".join(lines) if lines else "Nothing claimable.")
    return EXIT_OK


def refuse_to_replace(args: argparse.Namespace) -> None:
    current = load_state()
    if current is None or current.lost or getattr(args, "replace", False) or is_past(current.lease.lease_expires_at):
        return
    raise UsageError(
        f"You hold {current.lease.task} (attempt {current.lease.attempt_id}): finish or release it first, "
        "or pass --replace to forget it."
    )


def claim_from_args(client: LeaseholdClient, args: argparse.Namespace, settings: Settings) -> Claim | None:
    options: dict[str, Any] = {
        "lease_seconds": args.lease_seconds,
        "branch": args.branch,
        "base_commit": args.base_commit,
        "environment": args.environment,
        "environment_kind": args.environment_kind,
    }
    if args.next:
        if args.key:
            raise UsageError("Give a task KEY or --next, not both.")
        return client.claim_next(_project(args, settings), task_class=args.task_class, **options)
    if not args.key:
        raise UsageError("Give a task KEY, or --next (with --project).")
    return client.claim(args.key, **options)


def claim_text(claim: Claim) -> str:
    title = claim.task.get("title", "")
    lines = [
        f"Claimed {claim.lease.task} {title!r}: attempt {claim.lease.attempt_id}, epoch {claim.lease.epoch}.",
        f"Lease until {claim.lease.lease_expires_at}; renew every {claim.lease.renew_every_seconds} s.",
    ]
    if claim.attempt.get("branch"):
        lines.append(f"Branch: {claim.attempt['branch']}")
    if claim.label:
        lines.append(f"Leasehold-Label: {claim.label}")
    return "\n".join(lines)


def cmd_claim(args: argparse.Namespace, out: Output) -> int:
    settings = load_settings()
    refuse_to_replace(args)
    with make_client(settings) as client:
        claim = claim_from_args(client, args, settings)
    if claim is None:
        out.result({"claimed": None}, "Nothing claimable.")
        return EXIT_NOTHING_CLAIMABLE
    save_state(claim.lease)
    out.result({**claim.summary(), "context": claim.context}, claim_text(claim))
    return EXIT_OK


def cmd_context(args: argparse.Namespace, out: Output) -> int:
    settings = load_settings()
    key = args.key
    if not key:
        current = load_state()
        if current is None:
            raise UsageError("Give a task KEY (no current attempt).")
        key = current.lease.task
    with make_client(settings) as client:
        context = client.context(key)
    out.result(context, _context_text(context))
    return EXIT_OK


def _context_text(context: dict[str, Any]) -> str:
    task = context.get("task") or {}
    lines = [f"{task.get('key')}: {task.get('title')} [{task.get('status')}]"]
    for name in ("description", "acceptance_criteria"):
        if task.get(name):
            lines += ["", f"{name.replace('_', ' ').capitalize()}:", str(task[name])]
    checkpoint = context.get("latest_checkpoint")
    if checkpoint:
        lines += ["", "Latest checkpoint:", str(checkpoint.get("content", ""))]
        lines += [f"  - {step}" for step in checkpoint.get("next_steps") or []]
    previous = context.get("previous_attempt")
    if previous:
        lines += ["", f"Previous attempt ({previous.get('status')}): {previous.get('result_summary') or ''}"]
        lines += [f"  - {step}" for step in previous.get("next_steps") or []]
    blockers = context.get("blockers") or []
    if blockers:
        lines += ["", "Unresolved blockers: " + ", ".join(str(blocker.get("key")) for blocker in blockers)]
    lines += [f"Warning: {warning}" for warning in context.get("warnings") or []]
    if context.get("truncated"):
        lines.append(f"(truncated: {', '.join(map(str, context['truncated']))})")
    return "\n".join(lines)


def _holder(action: Callable[[LeaseholdClient, Any], Any], *, ends: bool = False) -> Any:
    """Run a holder call on the current attempt; marks the state lost on a lease-ending answer."""
    settings = load_settings()
    current = load_state()
    if current is None:
        raise UsageError("No current attempt: claim one first (`leasehold claim KEY` or `--next`).")
    if current.lost:
        raise LeaseholdError(
            f"The lease on {current.lease.task} was lost ({current.lost_reason}); its token is not used again.",
            code="LEASE_LOST",
        )
    with make_client(settings) as client:
        try:
            result = action(client, current.lease)
        except LeaseholdError as error:
            if error.code in LEASE_LOSS_CODES:
                save_state(current.lease, lost=True, lost_reason=str(error))
            raise
    if ends:
        clear_state(current.lease)
    elif isinstance(result, dict) and result.get("lease_expires_at") and not os.environ.get("LEASEHOLD_RUN"):
        # Remember the new expiry (inside `run`, the run owns the state file and may be marking it lost).
        save_state(dataclasses.replace(current.lease, lease_expires_at=result["lease_expires_at"]))
    return result


def cmd_note(args: argparse.Namespace, out: Output) -> int:
    kind: NoteKind = "checkpoint" if args.command == "checkpoint" else args.kind
    written = _holder(
        lambda client, lease: client.note(
            lease, args.content, kind=kind, next_steps=args.next_step, important=getattr(args, "important", False)
        ),
    )
    note_id, until = written["note"]["id"], written["lease_expires_at"]
    out.result(written, f"{kind.capitalize()} {note_id} added; lease until {until}.")
    return EXIT_OK


def cmd_renew(args: argparse.Namespace, out: Output) -> int:
    renewed = _holder(lambda client, lease: client.renew(lease, lease_seconds=args.lease_seconds))
    out.result(renewed, f"Lease until {renewed['lease_expires_at']} (renewal {renewed['renew_count']}).")
    return EXIT_OK


def _inside_run(verb: str) -> None:
    """Inside `leasehold run`, the run owns the attempt's end: finishing it under the keeper would look like a loss."""
    if os.environ.get("LEASEHOLD_RUN"):
        raise UsageError(f"`leasehold run` {verb} this attempt when its command exits; exit instead.")


def cmd_finish(args: argparse.Namespace, out: Output) -> int:
    _inside_run("finishes")
    fields = {
        "result_summary": args.summary,
        "next_steps": args.next_step or None,
        "failure_reason_code": args.failure_reason,
        "interruption_reason_code": args.interruption_reason,
        "acknowledged_version": args.acknowledged_version,
    }
    if args.outcome == "failed" and not args.failure_reason:
        fields["failure_reason_code"] = "implementation_error"
    if args.outcome == "handoff" and not args.interruption_reason:
        fields["interruption_reason_code"] = "handoff"
    finished = _holder(lambda client, lease: client.finish(lease, args.outcome, **fields), ends=True)
    attempt, task = finished["attempt"], finished["task"]
    out.result(finished, f"{attempt['task']}: attempt {attempt['id']} {attempt['status']}; task {task['status']}.")
    return EXIT_OK


def cmd_release(args: argparse.Namespace, out: Output) -> int:
    _inside_run("releases")
    finished = _holder(lambda client, lease: client.release(lease, reason=args.reason), ends=True)
    attempt, task = finished["attempt"], finished["task"]
    out.result(finished, f"{attempt['task']}: attempt {attempt['id']} released; task {task['status']}.")
    return EXIT_OK


def cmd_changes(args: argparse.Namespace, out: Output) -> int:
    settings = load_settings()
    with make_client(settings) as client:
        changes = client.changes(since=args.since, project=args.project or settings.project, limit=args.limit)
    lines = [
        f"{event['id']:>8} {event['type']:<26} {event.get('task') or '-':<12} {event['actor']:<16} "
        f"{event['created_at']}"
        for event in changes["events"]
    ]
    lines.append(f"latest_event_id={changes['latest_event_id']}" + (" (more)" if changes["has_more"] else ""))
    out.result(changes, "\n".join(lines))
    return EXIT_OK


def cmd_search(args: argparse.Namespace, out: Output) -> int:
    settings = load_settings()
    with make_client(settings) as client:
        page = client.search(args.query, project=args.project or settings.project, limit=args.limit)
    lines = [f"{hit['task']:<12} {hit['kind']:<5} {hit['snippet']}" for hit in page["results"]]
    out.result(page, "\n".join(lines) if lines else "No match.")
    return EXIT_OK


def cmd_run(args: argparse.Namespace, out: Output) -> int:
    from agent.runner import run

    return run(args, out)


def cmd_mcp(args: argparse.Namespace, out: Output) -> int:
    from agent.mcp_server import print_config, serve

    if args.print_config:
        print(print_config(args.print_config, project=args.project))
        return EXIT_OK
    return serve(project=args.project, keep_alive=not args.no_keep_alive)


# --- the parser -------------------------------------------------------------------------


def _add_claim_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("key", nargs="?", help="the task to claim, e.g. WEB-412")
    parser.add_argument("--next", action="store_true", help="claim the project's next claimable task instead")
    parser.add_argument("--project", help="project slug for --next (default: the one set at login)")
    parser.add_argument("--task-class", help="with --next: only tasks of this class")
    parser.add_argument("--lease-seconds", type=int, help="requested lease length (the server clamps it)")
    parser.add_argument("--branch", help="Conventional Branch name for the attempt")
    parser.add_argument("--base-commit", help="40-hex commit the work starts from")
    parser.add_argument("--environment", help="allocate this environment (by name) with the lease")
    parser.add_argument("--environment-kind", help="allocate any free environment of this kind")
    parser.add_argument("--replace", action="store_true", help="forget a current attempt instead of refusing")


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="machine output: one JSON document on stdout"
    )
    parser = argparse.ArgumentParser(
        prog="leasehold",
        description="Claim Leasehold tasks under a lease, keep it alive, leave checkpoints, finish.",
        epilog=EXIT_CODES_HELP + "\nconfiguration: LEASEHOLD_CONFIG (config file), LEASEHOLD_STATE (current attempt), "
        "LEASEHOLD_URL / LEASEHOLD_TOKEN / LEASEHOLD_PROJECT (override the config file).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", default=False, help="machine output: one JSON document")
    parser.add_argument("--version", action="version", version=f"leasehold {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, text: str, handler: Callable[[argparse.Namespace, Output], int]) -> argparse.ArgumentParser:
        sub = commands.add_parser(
            name,
            help=text,
            description=text,
            parents=[common],
            epilog=EXIT_CODES_HELP,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        sub.set_defaults(handler=handler)
        return sub

    login = command("login", "Store the server URL and agent token (config file, mode 0600).", cmd_login)
    login.add_argument("url", help="the server, e.g. http://127.0.0.1:8000")
    login.add_argument("--token", help="the agent token (default: LEASEHOLD_TOKEN, else read from stdin)")
    login.add_argument("--project", help="default project slug for ready, claim --next and run --next")

    ready = command("ready", "List the claimable tasks of a project.", cmd_ready)
    ready.add_argument("--project", help="project slug (default: the one set at login)")
    ready.add_argument("--task-class", help="only tasks of this class")
    ready.add_argument("--limit", type=int, default=50, help="at most this many (1-200)")

    claim = command("claim", "Claim a task (KEY, or --next) and make it the current attempt.", cmd_claim)
    _add_claim_options(claim)

    context = command("context", "Show the bounded work context of a task.", cmd_context)
    context.add_argument("key", nargs="?", help="task key (default: the current attempt's task)")

    note = command("note", "Add a note to the current attempt (renews the lease).", cmd_note)
    note.add_argument("content", help="the note, at most 8,000 characters")
    note.add_argument("--kind", choices=("progress", "finding", "warning"), default="progress", help="note kind")
    note.add_argument("--important", action="store_true", help="flag the note as important")
    note.add_argument("--next-step", action="append", default=[], help="a next step; repeatable")

    checkpoint = command("checkpoint", "Leave a checkpoint: what the next holder reads first.", cmd_note)
    checkpoint.add_argument("content", help="where the work stands, at most 8,000 characters")
    checkpoint.add_argument("--next-step", action="append", default=[], help="a next step; repeatable")

    renew = command("renew", "Renew the current attempt's lease once.", cmd_renew)
    renew.add_argument("--lease-seconds", type=int, help="requested lease length")

    finish = command("finish", "Finish the current attempt (done, review, failed or handoff).", cmd_finish)
    finish.add_argument("--outcome", choices=("done", "review", "failed", "handoff"), default="done", help="outcome")
    finish.add_argument("--summary", help="result summary")
    finish.add_argument("--next-step", action="append", default=[], help="a next step; repeatable")
    finish.add_argument("--failure-reason", choices=FAILURE_REASONS, help="for failed (default implementation_error)")
    finish.add_argument("--interruption-reason", choices=INTERRUPTION_REASONS, help="for handoff (default handoff)")
    finish.add_argument("--acknowledged-version", type=int, help="the task version read after ACKNOWLEDGEMENT_REQUIRED")

    release = command("release", "Give the current attempt's task back untouched.", cmd_release)
    release.add_argument("--reason", default="", help="why, for the audit log")

    changes = command("changes", "Show the events after an event id (the delta feed).", cmd_changes)
    changes.add_argument("--since", type=int, default=0, help="last event id already seen")
    changes.add_argument("--project", help="only this project")
    changes.add_argument("--limit", type=int, help="at most this many events (1-200)")

    search = command("search", "Search tasks and notes (snippets).", cmd_search)
    search.add_argument("query", help="words to find")
    search.add_argument("--project", help="only this project")
    search.add_argument("--limit", type=int, help="at most this many hits (1-50)")

    run = command(
        "run",
        "Run COMMAND under a lease: claim (KEY or --next) or reuse the current attempt, renew while it "
        "runs, finish done on exit 0 and failed otherwise; SIGTERM (then SIGKILL) it if the lease is lost.",
        cmd_run,
    )
    run.usage = "leasehold run [KEY | --next] [options] -- COMMAND [ARG ...]"
    _add_claim_options(run)
    run.add_argument(
        "--failure-reason",
        choices=FAILURE_REASONS,
        default="implementation_error",
        help="failure_reason_code when COMMAND exits non-zero (default implementation_error)",
    )
    run.add_argument("--on-success", choices=("done", "review"), default="done", help="outcome on exit 0")
    run.add_argument("--grace-seconds", type=float, default=10.0, help="SIGTERM to SIGKILL delay on a lost lease")
    run.add_argument("--heartbeat-seconds", type=float, default=60.0, help="run heartbeat interval")

    mcp = command("mcp", "Serve the agent operations as MCP tools over stdio.", cmd_mcp)
    mcp.add_argument("--project", help="default project for ready, claim_next, changes and search")
    mcp.add_argument(
        "--print-config", choices=("claude", "codex", "vscode"), help="print the client configuration and exit"
    )
    mcp.add_argument("--no-keep-alive", action="store_true", help="do not renew claimed leases in the background")
    return parser


def _split_run_command(argv: list[str]) -> tuple[list[str], list[str]]:
    """`leasehold … run … -- COMMAND…`: everything after the first `--` of a `run` is the command."""
    positional = [arg for arg in argv if not arg.startswith("-")]
    if positional[:1] == ["run"] and "--" in argv:
        split = argv.index("--")
        return argv[:split], argv[split + 1 :]
    return argv, []


def main(argv: Sequence[str] | None = None) -> int:
    own, command = _split_run_command(list(sys.argv[1:] if argv is None else argv))
    parser = build_parser()
    args = parser.parse_args(own)
    args.run_command = command
    out = Output(as_json=bool(args.json))
    handler: Callable[[argparse.Namespace, Output], int] = args.handler
    try:
        return handler(args, out)
    except UsageError as exc:
        out.error("USAGE", str(exc))
        return EXIT_USAGE
    except NotLoggedIn as exc:
        out.error("NOT_LOGGED_IN", f"{exc} (config file: {config_path()})")
        return EXIT_AUTH
    except LeaseholdError as error:
        return out.failure(error)
    except KeyboardInterrupt:
        return 130


__all__ = ["EXIT_NOTHING_CLAIMABLE", "build_parser", "main"]

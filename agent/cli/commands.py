"""What each `leasehold` command does (SPEC §13); `agent.cli.leasehold` reads the command line and calls one.

A handler takes the parsed arguments and the `Output`, prints its result and
returns the exit code (`agent.cli.output.EXIT_CODES_HELP`). Holder commands act
on the current attempt of the state file and mark it lost on a lease-ending
answer, so no later command sends that token again; inside `leasehold run`
the run owns the attempt's end (`_inside_run`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

import agent.cli.context_text as context_text
from agent.cli.output import EXIT_NOTHING_CLAIMABLE, EXIT_OK, Output
from agent.client.api import LeaseholdClient
from agent.client.errors import ATTEMPT_ENDED_CODES, LeaseholdError
from agent.client.models import Event, NoteKind
from agent.workspace import state
from agent.workspace.config import Settings, config_dir, load_settings, save_settings
from agent.workspace.session import (
    COMMAND_OWNER,
    UsageError,
    claim_from_args,
    claim_text,
    current_attempt,
    forget_refused,
    hold_claim,
    make_client,
    nothing_claimable,
    project_from,
    refuse_to_replace,
)


def cmd_login(args: argparse.Namespace, out: Output) -> int:
    token = args.token or os.environ.get("LEASEHOLD_TOKEN")
    if not token:
        if sys.stdin.isatty():
            import getpass  # (and termios): only a login typed at a terminal

            token = getpass.getpass("Agent token: ")
        else:
            token = sys.stdin.readline()
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
        # The ready view: claimable tasks in claim-next order (SPEC §4, §16.3).
        page = client.tasks(
            project=project_from(args, settings), ready=True, task_class=args.task_class, limit=args.limit
        )
    tasks = page["results"]
    lines = [
        f"{task['key']:<12} p{task['priority']:<4} {task['task_class'] or '-':<12} {task['title']}" for task in tasks
    ]
    out.result(page, "\n".join(lines) if lines else "Nothing claimable.")
    return EXIT_OK


def cmd_claim(args: argparse.Namespace, out: Output) -> int:
    settings = load_settings()
    with make_client(settings) as client:
        refuse_to_replace(args, client, settings)
        claim = claim_from_args(client, args, settings)
        if claim is None:
            out.result({"claimed": None}, nothing_claimable(args))
            return EXIT_NOTHING_CLAIMABLE
        hold_claim(claim, client, settings)
    out.result({**claim.summary(), "context": claim.context}, claim_text(claim))
    return EXIT_OK


def cmd_context(args: argparse.Namespace, out: Output) -> int:
    settings = load_settings()
    with make_client(settings) as client:
        held = current_attempt(settings, client, task=args.key)
        key = args.key or (held.task if held is not None else None)
        if not key:
            raise UsageError("Give a task KEY (no current attempt).")
        context = client.context(key)
    out.result(context, context_text.human(context, held))
    return EXIT_OK


def _holder(action: Callable[[LeaseholdClient, Any], Any], *, ends: bool = False) -> Any:
    """Run a holder call on the current attempt; forgets its state when the answer says the attempt ended."""
    settings = load_settings()
    with make_client(settings) as client:
        current = current_attempt(settings, client)
        if current is None:
            raise UsageError("No current attempt: claim one first (`leasehold claim KEY` or `--next`).")
        if current.lost:
            raise LeaseholdError(
                f"The lease on {current.task} was lost ({current.lost_reason}); its token is not used again.",
                code="LEASE_LOST",
            )
        try:
            result = action(client, current.lease)
        except LeaseholdError as error:
            if error.code in ATTEMPT_ENDED_CODES:
                forget_refused(current, error)
            raise
    if ends and current.owner != COMMAND_OWNER:
        state.remove(config_dir(), current.agent, current.task, attempt_id=current.attempt_id)
    elif isinstance(result, dict) and result.get("lease_expires_at") and current.owner == "cli":
        # Remember the new expiry (an attempt kept by `run` or `mcp` is theirs to write: they may be marking it lost).
        state.save(config_dir(), current.replace(lease_expires_at=result["lease_expires_at"]))
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
    if renewed.get("task_status") == "cancelled":
        out.result(
            renewed,
            f"The task was cancelled while you held it: stop, and run `leasehold release` "
            f"(the lease runs until {renewed['lease_expires_at']}).",
        )
        return EXIT_OK
    out.result(renewed, f"Lease until {renewed['lease_expires_at']} (renewal {renewed['renew_count']}).")
    return EXIT_OK


def _inside_run(verb: str) -> None:
    """Inside `leasehold run`, the run owns the attempt's end: finishing it under the keeper would look like a loss."""
    if os.environ.get("LEASEHOLD_RUN"):
        raise UsageError(
            f"`leasehold run` {verb} this attempt when its command exits: write the outcome to "
            "$LEASEHOLD_OUTCOME_FILE and exit instead."
        )


def cmd_finish(args: argparse.Namespace, out: Output) -> int:
    _inside_run("finishes")
    fields = {
        "result_summary": args.summary,
        "next_steps": args.next_step or None,
        "failure_reason_code": args.failure_reason,
        "interruption_reason_code": args.interruption_reason,
        "acknowledged_version": args.acknowledged_version,
        "findings": getattr(args, "finding", None),
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


def _event_line(event: Event) -> str:
    return (
        f"{event['id']:>8} {event['type']:<26} {event.get('task') or '-':<12} {event['actor']:<16} "
        f"{event['created_at']}"
    )


def cmd_changes(args: argparse.Namespace, out: Output) -> int:
    settings = load_settings()
    project = args.project or settings.project
    with make_client(settings) as client:
        if args.follow:
            # One line (or one JSON object) per event as it commits, until interrupted; long-polls, never busy-polls.
            since = args.since  # None: from now on
            try:
                for event in client.iter_changes(since=since, project=project):
                    out.result(event, _event_line(event))
            except KeyboardInterrupt:
                pass
            return EXIT_OK
        changes = client.changes(since=args.since or 0, project=project, limit=args.limit)
    lines = [_event_line(event) for event in changes["events"]]
    lines.append(f"latest_event_id={changes['latest_event_id']}" + (" (more)" if changes["has_more"] else ""))
    out.result(changes, "\n".join(lines))
    return EXIT_OK


def cmd_search(args: argparse.Namespace, out: Output) -> int:
    settings = load_settings()
    with make_client(settings) as client:
        page = client.search(args.query, project=args.project or settings.project, limit=args.limit)
    lines = [f"{hit['task']:<12} {hit['kind']:<5} {hit['snippet']}" for hit in page["results"]]
    if page.get("windowed"):  # the server ranked each kind's newest matches only
        lines.append("(ranked among the newest matches only: add words or --project to rank them all)")
    out.result(page, "\n".join(lines) if lines else "No match.")
    return EXIT_OK


def cmd_run(args: argparse.Namespace, out: Output) -> int:
    from agent.cli.run import run  # the supervisor, the keeper and git: only `run` pays for them

    return run(args, out)


def cmd_mcp(args: argparse.Namespace, out: Output) -> int:
    if args.print_config:
        from agent.cli.connect import print_config

        text, warnings = print_config(args.print_config, project=args.project)
        print(text)
        for warning in warnings:
            print(f"leasehold: warning: {warning}", file=sys.stderr)
        return EXIT_OK
    load_settings()  # not logged in: refused before anything is answered
    from agent.mcp.handshake import answer_initialize_early

    # `initialize` is answered before the SDK's ~400 ms import (SPEC §24); the SDK sees the whole conversation.
    relay = answer_initialize_early()
    from agent.mcp.server import serve  # the MCP SDK (pydantic, anyio, …): only `leasehold mcp` imports it

    try:
        return serve(
            project=args.project, keep_alive=not args.no_keep_alive, keep_on_exit=args.keep_on_exit, relay=relay
        )
    finally:
        relay.finish()

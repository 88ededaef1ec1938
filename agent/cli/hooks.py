"""`leasehold hook session-start|pre-compact|session-end`: Claude Code's hooks (SPEC §15.3).

Each reads the JSON Claude Code sends on stdin (`session_id`,
`transcript_path`, `cwd`, `hook_event_name`, and `source`, `trigger` or
`reason`) and acts on the attempt held for that `cwd` (its worktree
pointer, else the agent's only attempt: `agent.workspace.state.current`):

- `session-start` asks the server whether the attempt still runs (a state
  file outlives a killed `run`: one whose attempt ended is forgotten), then
  prints its work context as Markdown (at most 16 KB): Claude Code adds a
  SessionStart hook's output to the model's context.
- `pre-compact` writes a checkpoint note "context compacted" carrying the
  latest progress note's text and next steps, and prints a reminder to
  write a real checkpoint.
- `session-end` hands the attempt off (`client_shutdown`) with the git facts
  of the session's directory when it is a git checkout (head, commits ahead,
  dirty, pushed: the successor's "where the work is"), unless a live
  `leasehold run` owns it.

A hook never fails the session: whatever goes wrong (a payload that is not
JSON, no login, an unreachable server, a lost lease) is one warning line on
stderr, and the exit code is 0.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from agent.cli.output import EXIT_OK, Output
from agent.client.api import LeaseholdClient
from agent.client.errors import ATTEMPT_ENDED_CODES, LeaseholdError
from agent.workspace import state
from agent.workspace.briefing import context_markdown
from agent.workspace.config import config_dir, load_settings
from agent.workspace.session import (
    COMMAND_OWNER,
    agent_handle,
    attempt_ended,
    command_attempt,
    forget_ended,
    forget_refused,
)
from agent.workspace.state import HeldAttempt, process_alive

CONTEXT_MAX_BYTES = 16_000
CUT_NOTE = "\n\n[…cut to fit; the rest: `leasehold task show {key} --field description --offset {offset}`]"
HOOK_TIMEOUT_SECONDS = 5.0
COMPACTED = "context compacted"
EVENTS = ("session-start", "pre-compact", "session-end")


class HookProblem(Exception):
    """Why a hook did nothing (said in one line)."""


def read_payload(stream: TextIO) -> dict[str, Any]:
    """Claude Code's JSON from stdin; nothing at all (a terminal, an empty stdin) is an empty payload."""
    if stream.isatty():
        return {}
    text = stream.read()
    if not text.strip():
        return {}
    try:
        payload = json.loads(text)
    except ValueError:
        raise HookProblem("the hook input on stdin is not JSON; nothing done.") from None
    if not isinstance(payload, dict):
        raise HookProblem("the hook input on stdin is not a JSON object; nothing done.")
    return payload


class HookRun:
    """One hook's client, and the attempt held for the payload's directory (None when nothing is held)."""

    def __init__(self, *, client: LeaseholdClient, held: HeldAttempt | None, payload: dict[str, Any]) -> None:
        self.client = client
        self.held = held
        self.payload = payload

    def lease_lost(self, error: LeaseholdError) -> None:
        if self.held is not None and error.code in ATTEMPT_ENDED_CODES:
            forget_refused(self.held, error)


def _open(payload: dict[str, Any]) -> HookRun:
    settings = load_settings()
    client = LeaseholdClient(
        settings.url,
        settings.token,
        timeout=HOOK_TIMEOUT_SECONDS,
        max_retries=1,
        trace_path=os.environ.get("LEASEHOLD_TRACE") or None,
    )
    try:
        if settings.attempt is not None:  # inside `leasehold run`: the attempt token's attempt (SPEC §23.2)
            return HookRun(client=client, held=command_attempt(settings, client), payload=payload)
        agent = agent_handle(settings, client)
        forget_ended(client, agent)
        cwd = Path(str(payload.get("cwd") or Path.cwd()))
        held = state.current(config_dir(), agent, cwd)
    except Exception:
        client.close()
        raise
    return HookRun(client=client, held=held, payload=payload)


def session_start(run: HookRun) -> str:
    held = run.held
    if held is None:
        return "Leasehold: no task is held here; claim one (MCP `claim_next`, or `leasehold claim --next`) first."
    if held.lost:
        return f"Leasehold: the lease on {held.task} was lost ({held.lost_reason}); do not work on it, claim another."
    # Asked, not assumed: a state file outlives a killed `run`, and the task may be someone else's by now.
    if held.owner == COMMAND_OWNER:
        ended = attempt_ended(run.client, held) is True
    else:
        forget_ended(run.client, held.agent, only=held)
        ended = state.load(config_dir(), held.agent, held.task) is None
    if ended:
        return (
            f"Leasehold: no task is held here (attempt {held.attempt_id} on {held.task} has ended); claim one "
            "(MCP `claim_next`, or `leasehold claim --next`) first."
        )
    header = (
        f"Leasehold: you hold {held.task} (attempt {held.attempt_id}, epoch {held.epoch}). Checkpoint as you go; "
        "finish when done.\n\n"
    )
    context = run.client.context(held.task)
    return header + bounded_markdown(context, held, max_bytes=CONTEXT_MAX_BYTES - len(header.encode()))


def bounded_markdown(context: dict[str, Any], held: HeldAttempt, *, max_bytes: int) -> str:
    """The context as `leasehold run` gives it (`briefing.context_markdown`), at most `max_bytes`: the
    description (which `leasehold task show` can read in full) is cut first, then the end."""
    facts = context.get("git") or {}
    where = {
        "label": held.label,
        "branch": facts.get("branch") or held.branch,
        "base_commit": facts.get("base_commit") or held.base_commit,
        "worktree": facts.get("worktree_path") or held.worktree,
    }
    text = context_markdown(context, where=where)
    excess = len(text.encode()) - max_bytes
    task = context.get("task") or {}
    description = str(task.get("description") or "")
    if excess > 0 and description:
        keep = max(0, len(description.encode()) - excess - len(CUT_NOTE) - 64)
        cut = description.encode()[:keep].decode(errors="ignore")
        note = CUT_NOTE.format(key=task.get("key"), offset=len(cut))
        text = context_markdown({**context, "task": {**task, "description": cut + note}}, where=where)
    if len(text.encode()) > max_bytes:
        text = text.encode()[: max_bytes - 16].decode(errors="ignore") + "\n\n[…cut]\n"
    return text


def _latest(notes: list[dict[str, Any]], kind: str) -> dict[str, Any] | None:
    return next((note for note in reversed(notes) if note.get("kind") == kind), None)


def pre_compact(run: HookRun) -> str:
    held = run.held
    if held is None or held.lost:
        return ""
    notes = run.client.attempt(held.attempt_id).get("notes") or []
    latest = _latest(notes, "progress") or _latest(notes, "checkpoint")
    content = COMPACTED
    if latest is not None and latest.get("excerpt"):
        content += f"; latest progress: {latest['excerpt']}"
    steps = list(latest.get("next_steps") or []) if latest is not None else []
    try:
        written = run.client.note(held.lease, content, kind="checkpoint", next_steps=steps)
    except LeaseholdError as error:
        run.lease_lost(error)
        raise
    if held.owner == "cli":
        state.save(config_dir(), held.replace(lease_expires_at=written["lease_expires_at"]))
    return (
        f"Leasehold: the context is being compacted; checkpoint {written['note']['id']} ({COMPACTED!r}) saved on "
        f"{held.task}. Write a real checkpoint now: where the work stands and the next steps."
    )


def _where_the_work_is(run: HookRun, held: HeldAttempt) -> dict[str, Any] | None:
    """The git facts of the session's directory (head, commits ahead, dirty, pushed, path, host), for the
    successor's "where the work is"; None outside a git checkout or when git cannot say."""
    from agent.workspace import gitfacts

    cwd = Path(str(run.payload.get("cwd") or Path.cwd()))
    try:
        facts = gitfacts.detect(cwd, base_commit=held.base_commit)
    except gitfacts.WorkspaceError:
        return None
    facts.pop("branch", None)  # the attempt's branch was recorded when it started; a checkout's may be another
    return facts


def session_end(run: HookRun) -> str:
    held = run.held
    if held is None or held.lost:
        return ""
    if held.owner == COMMAND_OWNER or (held.owner == "run" and process_alive(held.pid)):
        return f"Leasehold: {held.task} belongs to a running `leasehold run`; it ends the attempt."
    reason = str(run.payload.get("reason") or "other")
    try:
        run.client.finish(
            held.lease,
            "handoff",
            result_summary=f"The Claude Code session ended ({reason}); handed off by its SessionEnd hook.",
            interruption_reason_code="client_shutdown",
            git=_where_the_work_is(run, held),
        )
    except LeaseholdError as error:
        run.lease_lost(error)
        raise
    state.remove(config_dir(), held.agent, held.task, attempt_id=held.attempt_id)
    return f"Leasehold: {held.task} (attempt {held.attempt_id}) handed off."


HANDLERS: dict[str, Callable[[HookRun], str]] = {
    "session-start": session_start,
    "pre-compact": pre_compact,
    "session-end": session_end,
}


def _one_line(error: BaseException) -> str:
    text = str(error) or error.__class__.__name__
    return " ".join(text.split())


def run_hook(event: str, stdin: TextIO) -> tuple[str, str | None]:
    """What the hook prints on stdout, and its warning (or None); it never raises."""
    try:
        payload = read_payload(stdin)
        run = _open(payload)
        try:
            return HANDLERS[event](run), None
        finally:
            run.client.close()
    except Exception as error:  # a hook must never fail the session
        return "", f"leasehold hook {event}: warning: {_one_line(error)}"


def cmd_hook(args: argparse.Namespace, out: Output) -> int:
    text, warning = run_hook(args.event, sys.stdin)
    if text:
        print(text, flush=True)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    return EXIT_OK


def add_parser(command: Any) -> None:
    hook = command("hook", "Claude Code hooks: read its JSON on stdin, act on the held attempt, never fail.", cmd_hook)
    hook.add_argument("event", choices=EVENTS, help="which hook (as `leasehold connect claude` writes them)")

"""`leasehold mcp`: the agent operations as MCP tools over stdio (SPEC §13), on the official `mcp` SDK.

Tools have one-line descriptions and answer compact JSON (the projections of
SPEC §8, nulls dropped where they say nothing). Lease tokens never leave this
process: `claim`/`claim_next` keep the lease here and, unless started with
`--no-keep-alive`, renew it in the background (a `LeaseKeeper` per attempt)
for as long as the server runs, so the model needs no timer. Holder tools
(`note`, `checkpoint`, `renew`, `finish`, `release`) act on the latest
claimed attempt unless given `attempt`. A lost lease answers `LEASE_LOST`:
the model should stop working on that task. The run heartbeat is sent while
the server runs.

`leasehold mcp --print-config claude|codex|vscode` prints the client's
configuration snippet for the `leasehold mcp` command.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent import __version__
from agent.client import Claim, LeaseholdClient, NoteKind, Outcome
from agent.config import load_settings
from agent.errors import LeaseholdError
from agent.keeper import Heartbeat, LeaseKeeper
from agent.output import EXIT_OK, compact_json
from agent.session import make_client

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

INSTRUCTIONS = (
    "Leasehold work ledger. claim or claim_next a task, read its context, leave checkpoints while you work, "
    "then finish. The lease is renewed for you while this server runs. If a tool answers LEASE_LOST, stop "
    "working on that task."
)
HEARTBEAT_SECONDS = 60.0


def _compact(value: Any) -> Any:
    """Drop null fields (recursively): they cost tokens and say nothing."""
    if isinstance(value, dict):
        return {key: _compact(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_compact(item) for item in value]
    return value


class Holdings:
    """The leases this server holds, by attempt id; the latest claim is the default for holder tools."""

    def __init__(self, client: LeaseholdClient, *, project: str | None, keep_alive: bool) -> None:
        self.client = client
        self.project = project
        self.keep_alive = keep_alive
        self.keepers: dict[int, LeaseKeeper] = {}
        self.current: int | None = None
        self._lock = threading.Lock()

    def project_or(self, project: str | None) -> str:
        chosen = project or self.project
        if not chosen:
            raise LeaseholdError("Name the project (no default project is set).", code="VALIDATION_ERROR")
        return chosen

    def hold(self, claim: Claim) -> dict[str, Any]:
        keeper = LeaseKeeper(self.client.clone(), claim.lease)
        if self.keep_alive:
            keeper.start()
        with self._lock:
            self.keepers[claim.lease.attempt_id] = keeper
            self.current = claim.lease.attempt_id
        return _compact({**claim.summary(), "kept_alive": self.keep_alive, "context": claim.context})

    def keeper(self, attempt: int | None) -> LeaseKeeper:
        with self._lock:
            chosen = attempt if attempt is not None else self.current
            keeper = self.keepers.get(chosen) if chosen is not None else None
        if keeper is None:
            raise LeaseholdError(
                "No lease held here" + (f" for attempt {attempt}" if attempt is not None else "") + ": claim first.",
                code="NO_ATTEMPT",
            )
        return keeper

    def ended(self, keeper: LeaseKeeper) -> None:
        with self._lock:
            self.keepers.pop(keeper.lease.attempt_id, None)
            if self.current == keeper.lease.attempt_id:
                self.current = None

    def stop(self) -> None:
        with self._lock:
            keepers = list(self.keepers.values())
        for keeper in keepers:
            keeper.stop()


def build_server(holdings: Holdings) -> MCPServer:
    """The MCP server whose tools act through `holdings` (its client and the leases it holds)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    client = holdings.client
    server: MCPServer = MCPServer("leasehold", instructions=INSTRUCTIONS, version=__version__, log_level="WARNING")

    def answer(produce: Any) -> str:
        try:
            return compact_json(produce())
        except LeaseholdError as error:
            raise ToolError(f"{error.code}: {error.message}") from None

    def tool(description: str) -> Any:
        return server.tool(description=description, structured_output=False)

    @tool("List claimable tasks of a project (compact).")
    def ready(project: str | None = None, task_class: str | None = None, limit: int = 20) -> str:
        def run() -> Any:
            page = client.tasks(
                project=holdings.project_or(project), claimable=True, task_class=task_class, limit=limit
            )
            fields = ("key", "title", "priority", "task_class")
            tasks = [{name: task.get(name) for name in fields} for task in page["results"]]
            return _compact({"tasks": tasks, "next_cursor": page["next_cursor"]})

        return answer(run)

    @tool("Claim a task by key; returns the attempt and the work context.")
    def claim(key: str, lease_seconds: int | None = None, branch: str | None = None) -> str:
        return answer(lambda: holdings.hold(client.claim(key, lease_seconds=lease_seconds, branch=branch)))

    @tool("Claim the next claimable task of a project; {} when there is none.")
    def claim_next(project: str | None = None, task_class: str | None = None, lease_seconds: int | None = None) -> str:
        def run() -> Any:
            got = client.claim_next(holdings.project_or(project), task_class=task_class, lease_seconds=lease_seconds)
            return {} if got is None else holdings.hold(got)

        return answer(run)

    @tool("Read a task's bounded work context (default: the claimed task).")
    def context(key: str | None = None) -> str:
        return answer(lambda: _compact(client.context(key or holdings.keeper(None).lease.task)))

    def _note(kind: NoteKind, content: str, next_steps: list[str] | None, important: bool, attempt: int | None) -> str:
        def run() -> Any:
            written = holdings.keeper(attempt).note(content, kind=kind, next_steps=next_steps, important=important)
            return {"note": written["note"]["id"], "lease_expires_at": written["lease_expires_at"]}

        return answer(run)

    @tool("Add a progress, finding or warning note to the held attempt.")
    def note(
        content: str,
        kind: NoteKind = "progress",
        next_steps: list[str] | None = None,
        important: bool = False,
        attempt: int | None = None,
    ) -> str:
        return _note(kind, content, next_steps, important, attempt)

    @tool("Save a checkpoint: where the work stands and the next steps.")
    def checkpoint(content: str, next_steps: list[str] | None = None, attempt: int | None = None) -> str:
        return _note("checkpoint", content, next_steps, False, attempt)

    @tool("Renew the held lease now (it is also renewed in the background).")
    def renew(attempt: int | None = None) -> str:
        return answer(lambda: holdings.keeper(attempt).renew())

    def _ended(keeper: LeaseKeeper, finished: Any) -> Any:
        holdings.ended(keeper)
        attempt, task = finished["attempt"], finished["task"]
        return {
            "attempt": attempt["id"],
            "status": attempt["status"],
            "task": task["key"],
            "task_status": task["status"],
        }

    @tool("Finish the held attempt: done, review, failed (with failure_reason) or handoff.")
    def finish(
        outcome: Outcome = "done",
        summary: str | None = None,
        next_steps: list[str] | None = None,
        failure_reason: str | None = None,
        interruption_reason: str | None = None,
        acknowledged_version: int | None = None,
        attempt: int | None = None,
    ) -> str:
        chosen = outcome

        def run() -> Any:
            keeper = holdings.keeper(attempt)
            finished = keeper.finish(
                chosen,
                result_summary=summary,
                next_steps=next_steps,
                failure_reason_code=failure_reason or ("implementation_error" if chosen == "failed" else None),
                interruption_reason_code=interruption_reason or ("handoff" if chosen == "handoff" else None),
                acknowledged_version=acknowledged_version,
            )
            return _ended(keeper, finished)

        return answer(run)

    @tool("Give the held task back untouched.")
    def release(reason: str = "", attempt: int | None = None) -> str:
        def run() -> Any:
            keeper = holdings.keeper(attempt)
            return _ended(keeper, keeper.release(reason=reason))

        return answer(run)

    @tool("Events after an event id (pass latest_event_id back as since).")
    def changes(since: int = 0, project: str | None = None, limit: int = 50) -> str:
        def run() -> Any:
            feed = client.changes(since=since, project=project or holdings.project, limit=limit)
            return _compact(feed)

        return answer(run)

    @tool("Search tasks and notes; returns short snippets.")
    def search(q: str, project: str | None = None, limit: int = 10) -> str:
        return answer(lambda: _compact(client.search(q, project=project or holdings.project, limit=limit)))

    return server


def serve(*, project: str | None = None, keep_alive: bool = True) -> int:
    """Run the MCP server on stdio until the client closes it."""
    settings = load_settings()
    client = make_client(settings)
    holdings = Holdings(client, project=project or settings.project, keep_alive=keep_alive)
    server = build_server(holdings)
    heartbeat = Heartbeat(client.clone(), every_seconds=HEARTBEAT_SECONDS).start()
    try:
        server.run("stdio")
    finally:
        heartbeat.stop()
        holdings.stop()
        client.close()
    return EXIT_OK


def leasehold_command() -> str:
    """The absolute path of this `leasehold` script when it can be found; else the bare name."""
    invoked = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if invoked is not None and invoked.name == "leasehold" and invoked.exists():
        return str(invoked.resolve())
    return shutil.which("leasehold") or "leasehold"


def print_config(client_name: str, *, project: str | None = None) -> str:
    """The configuration snippet that makes `client_name` start `leasehold mcp`."""
    command = leasehold_command()
    args = ["mcp", *(["--project", project] if project else [])]
    env = {name: os.environ[name] for name in ("LEASEHOLD_CONFIG",) if os.environ.get(name)}
    entry: dict[str, Any] = {"command": command, "args": args, **({"env": env} if env else {})}
    if client_name == "claude":
        # Claude Code: .mcp.json in the project (or `claude mcp add leasehold -- leasehold mcp`).
        return json.dumps({"mcpServers": {"leasehold": {"type": "stdio", **entry}}}, indent=2)
    if client_name == "vscode":
        # VS Code (Copilot): .vscode/mcp.json.
        return json.dumps({"servers": {"leasehold": {"type": "stdio", **entry}}}, indent=2)
    if client_name == "codex":
        # Codex: ~/.codex/config.toml.
        lines = [
            "[mcp_servers.leasehold]",
            f"command = {json.dumps(command)}",
            f"args = [{', '.join(json.dumps(arg) for arg in args)}]",
        ]
        if env:
            lines.append("env = { " + ", ".join(f"{name} = {json.dumps(value)}" for name, value in env.items()) + " }")
        return "\n".join(lines)
    raise ValueError(f"unknown MCP client {client_name!r}")

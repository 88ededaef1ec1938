"""The tools of `leasehold mcp` (SPEC §13, §15.4): what a model can do, each with a one-line description,
a description for every parameter and an enum for every choice.

Answers are compact JSON with nulls dropped; errors are `CODE: message`
(`LEASE_LOST`: stop working on that task). The input schemas are listed
without pydantic's titles and with optional parameters as their plain type
(the arguments are still validated by the full model): the whole `tools/list`
answer stays under 8 KB (`tests/agent/test_mcp.py` pins its size).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field

from agent import __version__
from agent.client.errors import LeaseholdError
from agent.client.keeper import LeaseKeeper
from agent.client.models import FailureReason, InterruptionReason, Outcome, TaskTextField
from agent.client.text import compact_json, error_text
from agent.client.usage import InvalidUsage, usage_body
from agent.mcp.handshake import INSTRUCTIONS, SERVER_NAME
from agent.mcp.holdings import Holdings, compact
from agent.mcp.schema import slim_schema
from agent.workspace import gitfacts
from agent.workspace.session import block_on

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer


Key = Annotated[str, Field(description="task key, e.g. WEB-412")]
OptKey = Annotated[str | None, Field(description="default: held task")]
Project = Annotated[str | None, Field(description="slug (default: server's)")]
TaskClass = Annotated[str | None, Field(description="only this class")]
Limit = Annotated[int, Field(description="max results")]
LeaseSeconds = Annotated[int | None, Field(description="seconds")]
Branch = Annotated[str | None, Field(description="branch")]
BaseCommit = Annotated[str | None, Field(description="40-hex start commit")]
Environment = Annotated[str | None, Field(description="environment name")]
EnvironmentKind = Annotated[str | None, Field(description="environment kind")]
AttemptId = Annotated[int | None, Field(description="default: held")]
Content = Annotated[str, Field(description="max 8000 chars")]
Steps = Annotated[list[str] | None, Field(description="in order")]
NoteKindChoice = Annotated[Literal["progress", "finding", "warning"], Field(description="note kind")]
Important = Annotated[bool, Field(description="flag as important")]
OutcomeChoice = Annotated[Outcome, Field(description="how the attempt ends")]
Summary = Annotated[str | None, Field(description="result summary")]
Failure = Annotated[FailureReason | None, Field(description="for failed")]
Interruption = Annotated[InterruptionReason | None, Field(description="for handoff")]
AckVersion = Annotated[int | None, Field(description="version, after ACKNOWLEDGEMENT_REQUIRED")]
TextField = Annotated[TaskTextField, Field(description="which text")]
Offset = Annotated[int, Field(description="first character")]
TextLimit = Annotated[int, Field(description="characters, at most 16000")]
Since = Annotated[int, Field(description="last latest_event_id seen")]
Spent = Annotated[dict[str, Any] | None, Field(description="new {input,output}_tokens, cost_usd")]


def build_server(holdings: Holdings) -> MCPServer:
    """The MCP server whose tools act through `holdings` (its client and the leases it holds)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.server.mcpserver.tools import Tool

    client = holdings.client
    tools: list[Tool] = []

    def answer(produce: Callable[[], Any]) -> str:
        try:
            holdings.take_back()
            return compact_json(produce())
        except LeaseholdError as error:
            raise ToolError(f"{error.code}: {_message(error)}") from None

    def _message(error: LeaseholdError) -> str:
        if error.code == "TASK_TAKEN" and error.details.get("holder") == holdings.known_agent:
            return error_text(error) + " That is this agent, from elsewhere (another config or machine)."
        if error.code == "ACKNOWLEDGEMENT_REQUIRED":
            version = error.details.get("current_version")
            return error_text(error) + (
                " Read what changed with the `context` tool (or `task` for the full text), then call `finish` "
                f"again with the same arguments and acknowledged_version={version}."
            )
        return error_text(error)

    def tool(description: str) -> Callable[[Callable[..., str]], Callable[..., str]]:
        def register(fn: Callable[..., str]) -> Callable[..., str]:
            made = Tool.from_function(fn, description=description, structured_output=False)
            made.parameters = slim_schema(made.parameters)
            tools.append(made)
            return fn

        return register

    @tool("Claimable tasks of a project (compact).")
    def ready(project: Project = None, task_class: TaskClass = None, limit: Limit = 20) -> str:
        def run() -> Any:
            page = client.tasks(project=holdings.project_or(project), ready=True, task_class=task_class, limit=limit)
            fields = ("key", "title", "priority", "task_class")
            tasks = [{name: task.get(name) for name in fields} for task in page["results"]]
            return compact({"tasks": tasks, "next_cursor": page["next_cursor"]})

        return answer(run)

    @tool("Claim a task by key; answers its work context.")
    def claim(
        key: Key,
        lease_seconds: LeaseSeconds = None,
        branch: Branch = None,
        base_commit: BaseCommit = None,
        environment: Environment = None,
        environment_kind: EnvironmentKind = None,
    ) -> str:
        def run() -> Any:
            held = holdings.held_on(key)
            if held is not None:
                return holdings.answer_held(held)
            got = client.claim(
                key,
                lease_seconds=lease_seconds,
                branch=branch,
                base_commit=base_commit,
                environment=environment,
                environment_kind=environment_kind,
            )
            return holdings.hold(got)

        return answer(run)

    @tool("Claim the next claimable task; {} if none.")
    def claim_next(
        project: Project = None,
        review: Annotated[bool, Field(description="claim a review instead")] = False,
        task_class: TaskClass = None,
        lease_seconds: LeaseSeconds = None,
        branch: Branch = None,
        base_commit: BaseCommit = None,
        environment: Environment = None,
        environment_kind: EnvironmentKind = None,
    ) -> str:
        def run() -> Any:
            if review:  # SPEC §16.1: a review attempt, finished with approved / changes_requested / blocked
                reviewing = client.review_next(holdings.project_or(project), lease_seconds=lease_seconds)
                return {} if reviewing is None else holdings.hold(reviewing)
            got = client.claim_next(
                holdings.project_or(project),
                task_class=task_class,
                lease_seconds=lease_seconds,
                branch=branch,
                base_commit=base_commit,
                environment=environment,
                environment_kind=environment_kind,
            )
            return {} if got is None else holdings.hold(got)

        return answer(run)

    @tool("A task's work context (default: held task).")
    def context(key: OptKey = None) -> str:
        return answer(lambda: compact(client.context(key or holdings.keeper(None).lease.task)))

    @tool("Part of a task's long text.")
    def task(key: OptKey = None, field: TextField = "description", offset: Offset = 0, limit: TextLimit = 8000) -> str:
        def run() -> Any:
            return client.task_text(key or holdings.keeper(None).lease.task, field=field, offset=offset, limit=limit)

        return answer(run)

    def holder(attempt: int | None, call: Callable[[LeaseKeeper], Any]) -> str:
        def run() -> Any:
            keeper = holdings.keeper(attempt)
            try:
                return call(keeper)
            finally:
                holdings.touched(keeper)

        return answer(run)

    def noted(written: Any) -> dict[str, Any]:
        return {"note": written["note"]["id"], "lease_expires_at": written["lease_expires_at"]}

    @tool("Add a note to the held attempt.")
    def note(
        content: Content,
        kind: NoteKindChoice = "progress",
        next_steps: Steps = None,
        important: Important = False,
        attempt: AttemptId = None,
        usage: Spent = None,
    ) -> str:
        return holder(
            attempt,
            lambda keeper: noted(
                keeper.note(content, kind=kind, next_steps=next_steps, important=important, usage=_usage(usage))
            ),
        )

    @tool("Checkpoint: where work stands, next steps.")
    def checkpoint(content: Content, next_steps: Steps = None, attempt: AttemptId = None) -> str:
        return holder(attempt, lambda keeper: noted(keeper.checkpoint(content, next_steps=next_steps)))

    @tool("Renew the held lease now (also automatic).")
    def renew(attempt: AttemptId = None, usage: Spent = None) -> str:
        return holder(attempt, lambda keeper: keeper.renew(usage=_usage(usage)))

    @tool("Record git facts of the held attempt.")
    def git(
        detect: Annotated[bool, Field(description="read from git")] = False,
        branch: Annotated[str | None, Field(description="branch")] = None,
        base_commit: Annotated[str | None, Field(description="40-hex start commit")] = None,
        head_commit: Annotated[str | None, Field(description="40-hex head commit")] = None,
        commits_ahead: Annotated[int | None, Field(description="ahead of base")] = None,
        dirty: Annotated[bool | None, Field(description="uncommitted changes")] = None,
        pushed: Annotated[bool | None, Field(description="head is pushed")] = None,
        worktree_path: Annotated[str | None, Field(description="worktree path")] = None,
        attempt: AttemptId = None,
    ) -> str:
        given = {
            "branch": branch,
            "base_commit": base_commit,
            "head_commit": head_commit,
            "commits_ahead": commits_ahead,
            "dirty": dirty,
            "pushed": pushed,
            "worktree_path": worktree_path,
        }

        def record(keeper: LeaseKeeper) -> Any:
            facts = {name: value for name, value in given.items() if value is not None}
            if detect:
                held = holdings.records.get(keeper.lease.attempt_id)
                where = Path(worktree_path or (held.worktree if held and held.worktree else ".")).absolute()
                base = base_commit or client.attempt(keeper.lease.attempt_id).get("base_commit")
                try:
                    facts = {**gitfacts.detect(where, base_commit=base), **facts}
                except gitfacts.WorkspaceError as exc:
                    raise LeaseholdError(str(exc), code="VALIDATION_ERROR") from None
            facts.setdefault("host", socket.gethostname()[:200])
            recorded = keeper.set_git(**facts)
            return {"recorded": facts, "attempt": compact(recorded.get("attempt"))}

        return holder(attempt, record)

    @tool("Finish the held attempt.")
    def finish(
        outcome: OutcomeChoice = "done",
        summary: Summary = None,
        next_steps: Steps = None,
        findings: Annotated[list[str] | None, Field(description="review findings")] = None,
        failure_reason: Failure = None,
        interruption_reason: Interruption = None,
        acknowledged_version: AckVersion = None,
        attempt: AttemptId = None,
        usage: Spent = None,
    ) -> str:
        def end(keeper: LeaseKeeper) -> Any:
            finished = keeper.finish(
                outcome,
                usage=_usage(usage),
                result_summary=summary,
                next_steps=next_steps,
                failure_reason_code=failure_reason or ("implementation_error" if outcome == "failed" else None),
                interruption_reason_code=interruption_reason or ("handoff" if outcome == "handoff" else None),
                acknowledged_version=acknowledged_version,
                findings=findings,
            )
            return _ended(keeper, finished)

        return holder(attempt, end)

    @tool("Give the held task back untouched.")
    def release(
        reason: Annotated[str, Field(description="why, for the audit log")] = "", attempt: AttemptId = None
    ) -> str:
        return holder(attempt, lambda keeper: _ended(keeper, keeper.release(reason=reason)))

    def _usage(given: dict[str, Any] | None) -> dict[str, Any] | None:
        try:
            return usage_body(given)
        except InvalidUsage as problem:
            raise LeaseholdError(f"usage: {problem}", code="VALIDATION_ERROR") from None

    def _ended(keeper: LeaseKeeper, finished: Any) -> Any:
        holdings.ended(keeper)
        attempt, task = finished["attempt"], finished["task"]
        return {
            "attempt": attempt["id"],
            "status": attempt["status"],
            "task": task["key"],
            "task_status": task["status"],
        }

    @tool("Create a follow-up task.")
    def create_task(
        title: Annotated[str, Field(description="short title")],
        description: Annotated[str | None, Field(description="what it is about")] = None,
        acceptance_criteria: Annotated[str | None, Field(description="when it is done")] = None,
        status: Annotated[Literal["open", "ready"], Field(description="ready: claimable at once")] = "open",
        priority: Annotated[int | None, Field(description="higher is claimed first")] = None,
        blocks_current: Annotated[bool, Field(description="the held task waits for it")] = False,
        requires: Annotated[list[str] | None, Field(description="labels its claimer needs")] = None,
        project: Project = None,
    ) -> str:
        def run() -> Any:
            blocked = holdings.keeper(None).lease.task if blocks_current else None
            created = client.create_task(
                holdings.project_or(project),
                title,
                description=description,
                acceptance_criteria=acceptance_criteria,
                status=status,
                priority=priority,
                requires=requires,
            )
            made = {"key": created["key"], "status": created["status"]}
            if blocked:
                block_on(client, blocked, created["key"])
                made["blocks"] = blocked
            return made

        return answer(run)

    @tool("Make a task wait for another.")
    def block(
        blocked_by: Annotated[str, Field(description="the task to wait for")],
        key: OptKey = None,
        remove: Annotated[bool, Field(description="remove it instead")] = False,
    ) -> str:
        def run() -> Any:
            waiting = key or holdings.keeper(None).lease.task
            change = client.remove_dependency if remove else client.add_dependency
            change(waiting, blocked_by=blocked_by)
            return {"task": waiting, "blocked_by": blocked_by, "removed": remove}

        return answer(run)

    @tool("Comment on a task (default: the held one).")
    def comment(body: Content, key: OptKey = None) -> str:
        def run() -> Any:
            made = client.comment(key or holdings.keeper(None).lease.task, body)
            return {"comment": made["id"], "task": made["task"]}

        return answer(run)

    @tool("Record a project decision.")
    def decide(
        title: Annotated[str, Field(description="the decision")],
        body: Annotated[str, Field(description="why")] = "",
        key: Annotated[str | None, Field(description="task key")] = None,
        project: Project = None,
    ) -> str:
        return answer(
            lambda: {"decision": client.decide(holdings.project_or(project), title, body=body, task=key)["id"]}
        )

    @tool("File a plan (tasks, blockers, decisions), all or nothing.")
    def plan(
        tasks: Annotated[list[dict[str, Any]], Field(description="[{ref,title,blocked_by:[ref|KEY],...}]")],
        decisions: Annotated[list[dict[str, Any]] | None, Field(description="[{title,body,task:ref|KEY}]")] = None,
        dry_run: Annotated[bool, Field(description="check, write nothing")] = False,
        project: Project = None,
    ) -> str:
        body = {"project": holdings.project_or(project), "tasks": tasks, "decisions": decisions}
        return answer(lambda: client.apply_plan(compact(body), dry_run=dry_run))

    @tool("Events after an event id.")
    def changes(since: Since = 0, project: Project = None, limit: Limit = 50) -> str:
        return answer(lambda: compact(client.changes(since=since, project=project or holdings.project, limit=limit)))

    @tool("Search tasks and notes (snippets).")
    def search(
        q: Annotated[str, Field(description="words to find")], project: Project = None, limit: Limit = 10
    ) -> str:
        return answer(lambda: compact(client.search(q, project=project or holdings.project, limit=limit)))

    return MCPServer(SERVER_NAME, instructions=INSTRUCTIONS, version=__version__, log_level="WARNING", tools=tools)

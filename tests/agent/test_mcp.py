"""`leasehold mcp` driven over stdio by the official `mcp` SDK's client, against a live server."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters
from mcp.types import TextContent

from agent.client import LeaseholdClient
from tests.agent.live import REPO, leasehold
from tests.agent.mcp_client import Session, with_session

EXPECTED_TOOLS = {
    "ready",
    "claim",
    "claim_next",
    "context",
    "task",
    "note",
    "checkpoint",
    "renew",
    "git",
    "finish",
    "release",
    "create_task",
    "block",
    "changes",
    "search",
    "comment",
    "decide",
    "plan",
}


def test_an_mcp_client_lists_tools_claims_checkpoints_reads_the_context_and_finishes(fleet, api, logged_in):
    key = fleet.ready_task()
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "agent", "mcp"],
        env={"LEASEHOLD_CONFIG": logged_in["LEASEHOLD_CONFIG"]},
        cwd=str(REPO),
    )

    async def session() -> dict:
        seen: dict = {}
        async with Client(params, read_timeout_seconds=30) as client:
            tools = (await client.list_tools()).tools
            seen["tools"] = {tool.name: tool.description for tool in tools}

            async def call(name: str, arguments: dict) -> tuple[bool, str]:
                result = await client.call_tool(name, arguments)
                block = result.content[0]
                assert isinstance(block, TextContent)
                return bool(result.is_error), block.text

            seen["claim"] = await call("claim", {"key": key, "lease_seconds": 3})
            seen["checkpoint"] = await call("checkpoint", {"content": "parser done", "next_steps": ["tests"]})
            await anyio.sleep(3.5)  # longer than the lease: the server keeps it alive meanwhile
            seen["context"] = await call("context", {})
            seen["finish"] = await call("finish", {"outcome": "done", "summary": "finished over MCP"})
            seen["late_note"] = await call("note", {"content": "after the end"})
        return seen

    seen = anyio.run(session)

    assert set(seen["tools"]) == EXPECTED_TOOLS
    assert all(description and len(description) <= 100 for description in seen["tools"].values())
    failed, text = seen["claim"]
    assert not failed, text
    claimed = json.loads(text)
    assert claimed["task"] == key
    assert "lease_token" not in text
    assert "token" not in claimed
    assert claimed["context"]["task"]["key"] == key
    failed, text = seen["checkpoint"]
    assert not failed, text
    failed, text = seen["context"]
    assert not failed, text
    context = json.loads(text)
    assert context["latest_checkpoint"]["content"] == "parser done"
    assert context["task"]["effective_status"] == "in_progress"
    assert json.dumps(context, separators=(",", ":")) == text  # compact
    failed, text = seen["finish"]
    assert not failed, text
    finished = {"attempt": claimed["attempt"], "status": "completed", "task": key, "task_status": "done"}
    assert json.loads(text) == finished
    failed, text = seen["late_note"]
    assert failed
    assert "NO_ATTEMPT" in text
    attempt = api.attempt(claimed["attempt"])
    assert attempt["renew_count"] >= 2
    assert attempt["result_summary"] == "finished over MCP"
    assert api.task(key)["status"] == "done"


def test_print_config_for_each_client(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "LEASEHOLD_CONFIG": str(tmp_path / "config.json")}
    claude = leasehold("mcp", "--print-config", "claude", "--project", "web", env=env)
    assert claude.returncode == 0, claude.stderr
    entry = json.loads(claude.stdout)["mcpServers"]["leasehold"]
    assert Path(entry["command"]).name == "leasehold"
    assert entry["args"] == ["mcp", "--project", "web"]
    assert entry["env"] == {"LEASEHOLD_CONFIG": str(tmp_path / "config.json")}
    vscode = leasehold("mcp", "--print-config", "vscode", env=env)
    assert json.loads(vscode.stdout)["servers"]["leasehold"]["args"] == ["mcp"]
    codex = leasehold("mcp", "--print-config", "codex", env=env)
    table = tomllib.loads(codex.stdout)["mcp_servers"]["leasehold"]
    assert table["args"] == ["mcp"]
    assert Path(table["command"]).name == "leasehold"


# The whole tools/list answer as the SDK client receives it, measured; a change to a tool changes it on purpose.
TOOLS_LIST_BYTES = 8191
CHOICES = {
    ("note", "kind"): {"progress", "finding", "warning"},
    ("finish", "outcome"): {"done", "review", "failed", "handoff", "approved", "changes_requested", "blocked"},
    ("finish", "failure_reason"): {"implementation_error", "tests_failed", "other"},
    ("finish", "interruption_reason"): {"handoff", "client_shutdown", "context_limit"},
    ("task", "field"): {"description", "acceptance_criteria"},
    ("create_task", "status"): {"open", "ready"},
}


def test_tools_list_stays_under_8_kb_with_every_parameter_described_and_every_choice_an_enum(logged_in):
    async def work(session: Session):
        return await session.client.list_tools()

    listed = anyio.run(lambda: with_session(logged_in, work))
    size = len(listed.model_dump_json(by_alias=True, exclude_none=True).encode())
    assert size <= 8 * 1024
    assert size == TOOLS_LIST_BYTES
    for tool in listed.tools:
        properties = tool.input_schema["properties"]
        for name, schema in properties.items():
            assert schema.get("description"), f"{tool.name}.{name} has no description"
            assert "title" not in schema
            assert "anyOf" not in schema, f"{tool.name}.{name}: optional parameters are listed as their plain type"
    by_tool = {tool.name: tool.input_schema["properties"] for tool in listed.tools}
    for (tool_name, parameter), expected in CHOICES.items():
        assert expected <= set(by_tool[tool_name][parameter]["enum"]), (tool_name, parameter)
    claim_parameters = set(by_tool["claim"]) & set(by_tool["claim_next"])
    assert {"branch", "base_commit", "environment", "environment_kind", "lease_seconds"} <= claim_parameters


def test_mcp_tools_read_text_ranges_record_git_facts_and_file_a_blocking_follow_up(fleet, api, logged_in, tmp_path):
    description = "".join(f"row {number:05d}\n" for number in range(3000))  # 30,000 characters: the context cuts it
    key = api.create_task(fleet.project, "Wide", description=description, status="ready")["key"]
    repo = tmp_path / "repo"
    repo.mkdir()
    identity = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
    for args in (["init", "-q", "-b", "feature/wide"], [*identity, "commit", "-q", "--allow-empty", "-m", "w"]):
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], check=True, capture_output=True, text=True)

    async def work(session: Session) -> dict:
        seen = {"claim": await session.json("claim", {"key": key})}
        seen["range"] = await session.json("task", {"offset": 20000, "limit": 30})
        seen["git"] = await session.json("git", {"detect": True, "worktree_path": str(repo), "pushed": False})
        seen["follow_up"] = await session.json(
            "create_task",
            {"title": "Follow-up of Wide", "status": "ready", "blocks_current": True, "requires": ["gpu"]},
        )
        seen["unblock"] = await session.json("block", {"blocked_by": seen["follow_up"]["key"], "remove": True})
        seen["bad_choice"] = await session.call("finish", {"outcome": "abandoned"})
        seen["finish"] = await session.json("finish", {"outcome": "failed", "failure_reason": "tests_failed"})
        return seen

    seen = anyio.run(lambda: with_session(logged_in, work))
    assert "task.description" in seen["claim"]["context"]["truncated"]
    assert seen["range"]["text"] == description[20000:20030]
    attempt = api.attempt(seen["claim"]["attempt"])
    assert attempt["head_commit"] == head.stdout.strip()
    assert attempt["branch"] == "feature/wide"
    assert attempt["pushed"] is False
    assert attempt["worktree_path"] == str(repo.resolve())
    assert attempt["host"]
    assert seen["follow_up"]["blocks"] == key
    assert api.task(seen["follow_up"]["key"])["requires"] == ["gpu"]
    assert api.task(key)["blocked_by"] == []  # blocked by the follow-up, then unblocked
    failed, text = seen["bad_choice"]
    assert failed
    assert "abandoned" in text or "outcome" in text
    assert seen["finish"]["status"] == "failed"
    assert attempt["id"] == seen["finish"]["attempt"]


def test_a_reviewer_over_mcp_claims_a_review_requests_changes_comments_and_decides(fleet, logged_in):
    worker_token = fleet.server.create_agent("mcp-worker", project=fleet.project)
    with LeaseholdClient(fleet.server.url, worker_token) as worker:
        key = str(worker.create_task(fleet.project, "Reviewed over MCP", status="ready")["key"])
        claim = worker.claim(key)
        worker.finish(claim.lease, "review", result_summary="please look")

    async def work(session: Session) -> dict:
        seen: dict = {"review": await session.json("claim_next", {"review": True})}
        seen["comment"] = await session.json("comment", {"body": "one more thing"})
        seen["decide"] = await session.json("decide", {"title": "Keep the old API", "key": key})
        seen["finish"] = await session.json(
            "finish", {"outcome": "changes_requested", "summary": "Nearly", "findings": ["add a test"]}
        )
        return seen

    seen = anyio.run(lambda: with_session(logged_in, work))
    assert seen["review"]["context"]["review"]["worker"] == "mcp-worker"
    assert seen["finish"]["task_status"] == "ready"
    with LeaseholdClient(fleet.server.url, worker_token) as worker:
        again = worker.claim(key)
        assert again.context["review_findings"]["findings"] == ["add a test"]
        assert [c["body"] for c in again.context["comments"]] == ["one more thing"]
        assert "Keep the old API" in [d["title"] for d in again.context["decisions"]]
        worker.release(again.lease)


def test_a_planner_over_mcp_files_a_whole_plan_in_one_call(fleet, api, logged_in):
    existing = fleet.ready_task()
    tasks = [
        {"ref": "schema", "title": "Design the schema", "status": "ready", "blocked_by": [existing]},
        {"ref": "api", "title": "Serve it", "blocked_by": ["schema"], "description": None},
        {"ref": "docs", "title": "Document it", "blocked_by": ["api", "schema"]},
    ]

    async def work(session: Session) -> dict:
        return {
            "dry": await session.json("plan", {"tasks": tasks, "dry_run": True}),
            "cycle": await session.call("plan", {"tasks": [{"ref": "a", "title": "A", "blocked_by": ["a"]}]}),
            "bad": await session.call(
                "plan", {"tasks": [{"ref": "a", "title": "A"}, {"ref": "a", "title": "B", "blocked_by": ["x"]}]}
            ),
            "made": await session.json("plan", {"tasks": tasks, "decisions": [{"title": "REST", "task": "api"}]}),
        }

    seen = anyio.run(lambda: with_session(logged_in, work))
    assert seen["dry"]["dry_run"] is True
    assert seen["dry"]["would_create"] == {"tasks": 3, "edges": 4, "decisions": 0}
    failed, text = seen["cycle"]
    assert failed
    assert "DEPENDENCY_CYCLE: " in text
    failed, text = seen["bad"]
    assert failed
    assert "VALIDATION_ERROR: " in text
    assert "tasks[1].ref (ref a)" in text
    assert "tasks[1].blocked_by[0] (ref a)" in text
    made = seen["made"]
    assert set(made["keys"]) == {"schema", "api", "docs"}
    assert made["created"] == 3
    docs = api.task(made["keys"]["docs"])
    assert {blocker["key"] for blocker in docs["blocked_by"]} == {made["keys"]["api"], made["keys"]["schema"]}
    assert api.task(made["keys"]["schema"])["blocked_by"] == [
        {"key": existing, "status": "ready", "effective_status": "ready"}
    ]
    assert len(made["decisions"]) == 1

"""Usage reporting on the agent's side (SPEC §19): the tally, the usage file, and the keeper's budget stop."""

from __future__ import annotations

import json
import threading

import anyio
import pytest

from agent.cli import output
from agent.client.errors import BudgetExhausted, LeaseLost
from agent.client.usage import InvalidUsage, UsageFile, UsageTally, parse_usage, usage_body
from tests.agent.live import leasehold
from tests.agent.mcp_client import Session, with_session
from tests.agent.test_keeper import RENEWED, Server, keeper_for


def test_reports_add_up_and_the_body_sends_cost_as_a_decimal_string():
    tally = UsageTally()
    tally.add({"input_tokens": 5, "cost_usd": 0.1})
    tally.add({"output_tokens": 7, "cost_usd": "0.000002"})
    assert tally.take() == {"input_tokens": 5, "output_tokens": 7, "cost_usd": "0.100002"}
    assert tally.take() is None
    assert usage_body({"input_tokens": 0}) is None


@pytest.mark.parametrize(
    "bad",
    [{"input_tokens": -1}, {"output_tokens": 1.5}, {"cost_usd": "0.0000001"}, {"cost_usd": "x"}, {"tokens": 1}, [1]],
)
def test_bad_reports_are_refused(bad):
    with pytest.raises(InvalidUsage):
        parse_usage(bad)


def test_the_usage_file_is_read_as_lines_arrive_and_bad_lines_are_reported(tmp_path):
    path = tmp_path / "usage.jsonl"
    reader = UsageFile(path)
    assert reader.read_new() == ([], [])
    with path.open("a") as handle:
        handle.write(json.dumps({"input_tokens": 3}) + "\nnot json\n" + '{"output_tokens": 4')
    reports, problems = reader.read_new()
    assert reports == [{"input_tokens": 3}]
    assert problems[0].startswith("line 2:")
    with path.open("a") as handle:
        handle.write("}\n" + '{"cost_usd": "0.5"}')
    reports, _ = reader.read_new()
    assert reports == [{"output_tokens": 4}]
    reports, _ = reader.read_rest()
    assert [str(report["cost_usd"]) for report in reports] == ["0.5"]


def _bodies(server: Server, suffix: str) -> list[dict]:
    return [json.loads(request.content) for request in server.requests if request.url.path.endswith(suffix)]


def test_reported_usage_rides_on_the_next_renewal_and_the_rest_on_the_finish():
    server = Server(RENEWED)
    keeper, _ = keeper_for(server, renew_every_seconds=30)
    with keeper:
        keeper.report_usage({"input_tokens": 10})  # brings a renewal forward
        for _ in range(100):
            if _bodies(server, "/renew/"):
                break
            threading.Event().wait(0.02)
        keeper.report_usage({"output_tokens": 2})
        keeper.finish("done")
    assert _bodies(server, "/renew/")[0]["usage"] == {"input_tokens": 10}
    assert _bodies(server, "/finish/")[0]["usage"] == {"output_tokens": 2}


def test_budget_exhausted_ends_the_work_but_finish_still_goes_through():
    server = Server(RENEWED, "BUDGET_EXHAUSTED")
    keeper, told = keeper_for(server)
    keeper.start()
    assert keeper.lost.wait(5)
    assert keeper.budget_exhausted
    assert "budget" in keeper.lost_reason
    assert told == [keeper.lost_reason]
    with pytest.raises(LeaseLost):
        keeper.note("more work")
    assert keeper.finish("failed", failure_reason_code="other")["attempt"]["id"] == 7
    with pytest.raises(LeaseLost):
        keeper.finish("done")


def test_a_holder_call_answered_budget_exhausted_stops_the_renewals():
    server = Server(RENEWED)
    keeper, _ = keeper_for(server, renew_every_seconds=30)
    server.renewals = ["BUDGET_EXHAUSTED"]
    with keeper, pytest.raises(BudgetExhausted):
        keeper.renew(usage={"input_tokens": 1})
    assert keeper.budget_exhausted
    assert keeper.lost.is_set()


def test_mcp_tools_report_usage_and_budget_exhausted_ends_the_work_but_not_the_finish(fleet, api, logged_in):
    key = api.create_task(fleet.project, "Budgeted through MCP", status="ready", budget_tokens=100)["key"]

    async def work(session: Session) -> dict:
        seen = {"claim": await session.json("claim", {"key": key})}
        seen["note"] = await session.json("note", {"content": "reading", "usage": {"input_tokens": 50}})
        seen["bad"] = await session.call("renew", {"usage": {"input_tokens": -1}})
        seen["spent"] = await session.call("renew", {"usage": {"output_tokens": 60, "cost_usd": "0.02"}})
        seen["after"] = await session.call("checkpoint", {"content": "more"})
        seen["finish"] = await session.json(
            "finish", {"outcome": "failed", "failure_reason": "other", "usage": {"cost_usd": 0.01}}
        )
        return seen

    seen = anyio.run(lambda: with_session(logged_in, work))
    assert seen["bad"][0]
    assert "VALIDATION_ERROR" in seen["bad"][1]
    assert seen["spent"][0]
    assert "BUDGET_EXHAUSTED" in seen["spent"][1]
    assert seen["after"][0]
    assert "budget" in seen["after"][1]
    assert seen["finish"]["status"] == "failed"
    spent = api.task(key)["spent"]
    assert (spent["input_tokens"], spent["output_tokens"], spent["cost_usd"]) == (50, 60, "0.030000")


def test_leasehold_claim_reserves_paths_and_an_overlap_is_exit_4(fleet, api, logged_in):
    held = api.create_task(fleet.project, "Holds lib", status="ready")["key"]
    other = api.create_task(fleet.project, "Wants lib/core", status="ready")["key"]
    api.claim(held, paths=["lib"])
    refused = leasehold("--json", "claim", other, "--path", "lib/core.py", env=logged_in)
    assert refused.returncode == output.EXIT_TASK_TAKEN
    error = json.loads(refused.stdout)["error"]
    assert (error["code"], error["details"]["task"]) == ("PATHS_RESERVED", held)
    shared = leasehold("--json", "claim", other, "--path", "web", "--paths-mode", "shared", env=logged_in)
    assert shared.returncode == output.EXIT_OK, shared.stderr
    assert json.loads(shared.stdout)["context"]["reservation"] == {"paths": ["web"], "mode": "shared"}

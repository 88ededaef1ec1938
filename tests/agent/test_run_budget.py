"""`leasehold run` and budgets (SPEC §19), end to end against a live server: usage from $LEASEHOLD_USAGE_FILE."""

from __future__ import annotations

import json
import sys
import textwrap
import time

from agent.cli.output import EXIT_COMMAND_FAILED, EXIT_OK
from tests.agent.live import leasehold, state_files


def last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def _budgeted_task(api, fleet, **fields) -> str:
    task = api.create_task(fleet.project, "Budgeted run", status="ready", **fields)
    return str(task["key"])


def test_a_command_reporting_usage_past_the_budget_is_stopped_and_the_attempt_finishes_failed(
    fleet, api, logged_in, tmp_path
):
    key = _budgeted_task(api, fleet, budget_tokens=1000)
    alive = tmp_path / "still-running"
    child = textwrap.dedent(
        f"""
        import json, os, time
        def spend(**usage):
            with open(os.environ["LEASEHOLD_USAGE_FILE"], "a") as handle:
                handle.write(json.dumps(usage) + "\\n")
        spend(input_tokens=600, cost_usd="0.01")
        time.sleep(1.5)
        spend(output_tokens=500)
        for _ in range(300):  # would run for a minute; the budget must stop it
            open({str(alive)!r}, "w").write(str(time.time()))
            time.sleep(0.2)
        """
    )
    started = time.monotonic()
    done = leasehold("--json", "run", key, "--lease-seconds", "60", "--", sys.executable, "-c", child, env=logged_in)
    assert done.returncode == EXIT_COMMAND_FAILED, done.stderr
    assert time.monotonic() - started < 30
    result = last_json(done.stdout)
    assert result["budget_exhausted"] is True
    assert result["outcome"] == "failed"
    attempt = api.attempt(result["attempt"])
    assert attempt["status"] == "failed"
    assert attempt["failure_reason_code"] == "other"
    assert "budget" in attempt["result_summary"]
    assert f"task {key}" in attempt["result_summary"]
    # The command is gone: it stopped writing.
    last_write = alive.read_text()
    time.sleep(0.6)
    assert alive.read_text() == last_write
    task = api.task(key)
    assert task["spent"]["input_tokens"] == 600
    assert task["spent"]["output_tokens"] == 500
    assert state_files(logged_in) == []


def test_usage_lines_are_reported_with_the_finish_when_no_budget_is_hit(fleet, api, logged_in):
    key = _budgeted_task(api, fleet)
    child = textwrap.dedent(
        """
        import json, os
        with open(os.environ["LEASEHOLD_USAGE_FILE"], "a") as handle:
            handle.write(json.dumps({"input_tokens": 7, "cost_usd": 0.5}) + "\\n")
            handle.write("not json\\n")
            handle.write(json.dumps({"output_tokens": 3}))  # no newline at the end: still read
        """
    )
    done = leasehold("--json", "run", key, "--", sys.executable, "-c", child, env=logged_in)
    assert done.returncode == EXIT_OK, done.stderr
    assert "line 2" in done.stderr
    spent = api.task(key)["spent"]
    assert (spent["input_tokens"], spent["output_tokens"], spent["cost_usd"]) == (7, 3, "0.500000")

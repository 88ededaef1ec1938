"""`leasehold claim --next --wait` and `run --next --wait` (SPEC §25), and `--next` asking again after a lost race.

The live tests run the CLI against a real `manage.py serve` (the parking worker: the waiting request holds
no thread) on SQLite, or on PostgreSQL when the suite does.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from agent.cli import output
from agent.client.errors import LeaseholdError
from agent.workspace.session import SERVER_WAIT_MAX_SECONDS, WAIT_FOREVER, claim_next_waiting
from tests.agent.live import REPO, leasehold


def taken() -> LeaseholdError:
    return LeaseholdError("Every claimable task was taken by another agent meanwhile; ask again.", code="TASK_TAKEN")


def test_a_lost_race_asks_again_instead_of_failing():
    answers: list = [taken(), taken(), "the claim"]
    asked: list[int] = []

    def claim_once(seconds: int):
        asked.append(seconds)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert claim_next_waiting(claim_once, None, sleep=lambda _: None) == "the claim"
    assert asked == [0, 0, 0]


def test_other_refusals_still_end_the_claim():
    def claim_once(seconds: int):
        raise LeaseholdError("budget", code="TASK_NOT_CLAIMABLE")

    with pytest.raises(LeaseholdError, match="budget"):
        claim_next_waiting(claim_once, None, sleep=lambda _: None)


def test_wait_without_a_limit_asks_the_server_for_its_longest_wait_again_and_again():
    asked: list[int] = []

    def claim_once(seconds: int):
        asked.append(seconds)
        return "the claim" if len(asked) == 3 else None

    assert claim_next_waiting(claim_once, WAIT_FOREVER) == "the claim"
    assert asked == [SERVER_WAIT_MAX_SECONDS] * 3


def test_a_short_wait_is_one_server_wait_and_then_nothing():
    asked: list[int] = []

    def claim_once(seconds: int):
        asked.append(seconds)
        time.sleep(seconds)  # what the server does when nothing comes
        return None

    assert claim_next_waiting(claim_once, 1) is None
    assert asked[0] == 1
    assert all(seconds == 0 for seconds in asked[1:])


def test_wait_needs_next(logged_in):
    refused = leasehold("claim", "AGT-1", "--wait", "5", env=logged_in)
    assert refused.returncode == output.EXIT_USAGE


def test_claim_next_wait_gets_the_task_another_agent_creates(fleet, logged_in):
    task_class = f"wait-{time.monotonic_ns()}"
    other = fleet.server.create_agent(f"creator-{time.monotonic_ns()}", project=fleet.project)
    started = time.monotonic()
    waiting = subprocess.Popen(
        [sys.executable, "-m", "agent", "--json", "claim", "--next", "--task-class", task_class, "--wait", "30"],
        env=logged_in,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(2.0)  # the CLI has started and its request is parked by now
        assert waiting.poll() is None
        from agent.client import LeaseholdClient

        with LeaseholdClient(fleet.server.url, other) as creator:
            created = creator.create_task(fleet.project, "made while one waits", status="ready", task_class=task_class)
        made_at = time.monotonic()
        stdout, stderr = waiting.communicate(timeout=30)
    finally:
        if waiting.poll() is None:
            waiting.kill()
    assert waiting.returncode == 0, stderr
    assert json.loads(stdout)["task"] == created["key"]
    assert time.monotonic() - made_at < 5.0
    assert time.monotonic() - started < 25.0


def test_claim_next_wait_with_nothing_coming_exits_3_after_its_wait(logged_in):
    started = time.monotonic()
    nothing = leasehold("claim", "--next", "--task-class", "never-made", "--wait", "2", env=logged_in)
    took = time.monotonic() - started
    assert nothing.returncode == output.EXIT_NOTHING_CLAIMABLE, nothing.stderr
    assert 2.0 <= took < 15.0

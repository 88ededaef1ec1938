"""`leasehold run|claim --next --until-empty` (SPEC §25): nothing claimable is not the end; the loop asks the
server again until the project's work is finished (`GET /projects/{slug}/`'s `progress.finished`), and
only then exits 3. The whole fleet against a live server is tests/agent/test_fleet_live.py.
"""

from __future__ import annotations

import subprocess
import sys
import time

from agent.cli import output
from agent.client import LeaseholdClient
from agent.workspace.session import SERVER_WAIT_MAX_SECONDS, WAIT_FOREVER, claim_next_waiting
from tests.agent.live import REPO, leasehold


def test_nothing_claimable_asks_again_until_the_project_is_finished():
    asked: list[int] = []
    progress = [False, False, True]

    def claim_once(seconds: int):
        asked.append(seconds)
        return None

    assert claim_next_waiting(claim_once, WAIT_FOREVER, finished=lambda: progress.pop(0)) is None
    assert asked == [SERVER_WAIT_MAX_SECONDS] * 3
    assert progress == []


def test_a_task_that_comes_is_claimed_without_reading_the_progress():
    def finished() -> bool:
        raise AssertionError("read only after an empty answer")

    assert claim_next_waiting(lambda seconds: "the claim", WAIT_FOREVER, finished=finished) == "the claim"


def test_until_empty_needs_next_and_no_limit(logged_in):
    for args in (
        ("claim", "AGT-1", "--until-empty"),
        ("claim", "--next", "--until-empty", "--wait", "5"),
        ("run", "--review", "--next", "--until-empty", "--", "true"),
    ):
        refused = leasehold(*args, env=logged_in)
        assert refused.returncode == output.EXIT_USAGE, (args, refused.stderr)


def test_claim_until_empty_on_a_finished_task_class_exits_3_at_once(logged_in):
    started = time.monotonic()
    finished = leasehold("claim", "--next", "--task-class", "never-made", "--until-empty", env=logged_in)
    assert finished.returncode == output.EXIT_NOTHING_CLAIMABLE, finished.stderr
    assert "finished" in finished.stdout + finished.stderr
    assert time.monotonic() - started < 10.0  # not a server wait's 60 s


def test_claim_until_empty_waits_while_a_task_of_its_class_is_held(fleet, logged_in, api):
    task_class = f"held-{time.monotonic_ns()}"
    task = api.create_task(fleet.project, "held by another", status="ready", task_class=task_class)
    other = fleet.server.create_agent(f"holder-{time.monotonic_ns()}", project=fleet.project)
    with LeaseholdClient(fleet.server.url, other) as holder:
        claim = holder.claim(task["key"])
        waiting = subprocess.Popen(
            [sys.executable, "-m", "agent", "claim", "--next", "--task-class", task_class, "--until-empty"],
            env=logged_in,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            time.sleep(2.0)
            assert waiting.poll() is None  # held by another: not finished, so it waits
            holder.finish(claim.lease, "done", result_summary="done")
            finished_at = time.monotonic()
            _stdout, stderr = waiting.communicate(timeout=30)
        finally:
            if waiting.poll() is None:
                waiting.kill()
    assert waiting.returncode == output.EXIT_NOTHING_CLAIMABLE, stderr
    assert time.monotonic() - finished_at < 5.0

"""The reviewer's side of the toolkit (SPEC §16): `review next|request-changes|approve`, `run --review`,
`comment`, `decide`, `ready` in claim-next order — against a live server, over HTTP only."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from agent.client import LeaseholdClient
from tests.agent.live import agent_env, leasehold, state_files

PROJECT = "rev"


@pytest.fixture(scope="module")
def review_fleet(fleet):
    fleet.server.manage("create_project", PROJECT, "--name", "Review tests")
    worker = fleet.server.create_agent("rev-worker", project=PROJECT)
    reviewer = fleet.server.create_agent("rev-reviewer", project=PROJECT)
    return fleet.server, worker, reviewer


def env_for(server, token: str, home: Path) -> dict[str, str]:
    env = agent_env(home)
    config = Path(env["LEASEHOLD_CONFIG"])
    config.parent.mkdir(mode=0o700, parents=True)
    config.write_text(json.dumps({"url": server.url, "token": token, "project": PROJECT}))
    config.chmod(0o600)
    return env


def work_for_review(api: LeaseholdClient, title: str) -> str:
    key = str(api.create_task(PROJECT, title, status="ready")["key"])
    claim = api.claim(key)
    api.finish(claim.lease, "review", result_summary="please look", git={"head_commit": "d" * 40})
    return key


def test_a_reviewer_requests_changes_then_run_review_approves(review_fleet, tmp_path):
    server, worker_token, reviewer_token = review_fleet
    reviewer = env_for(server, reviewer_token, tmp_path / "reviewer")
    with LeaseholdClient(server.url, worker_token) as worker:
        key = work_for_review(worker, "Reviewed by the CLI")
        claimed = leasehold("review", "next", "--json", env=reviewer)
        assert claimed.returncode == 0, claimed.stderr
        answer = json.loads(claimed.stdout)
        assert answer["task"] == key
        assert answer["context"]["review"]["head_commit"] == "d" * 40
        decided = leasehold(
            "review",
            "request-changes",
            "--summary",
            "Two things",
            "--finding",
            "add a test",
            "--finding",
            "rename it",
            "--json",
            env=reviewer,
        )
        assert decided.returncode == 0, decided.stderr
        assert json.loads(decided.stdout)["task"]["status"] == "ready"
        again = worker.claim(key)
        assert again.context["review_findings"]["findings"] == ["add a test", "rename it"]
        worker.finish(again.lease, "review", result_summary="both done", git={"head_commit": "e" * 40})
    ran = leasehold("run", "--review", "--next", "--json", "--", "sh", "-c", "exit 0", env=reviewer)
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout)
    assert (result["outcome"], result["task_status"]) == ("approved", "done")
    assert leasehold("review", "next", env=reviewer).returncode == 3  # nothing open


def test_run_review_takes_the_decision_from_the_outcome_file(review_fleet, tmp_path):
    server, worker_token, reviewer_token = review_fleet
    reviewer = env_for(server, reviewer_token, tmp_path / "reviewer")
    with LeaseholdClient(server.url, worker_token) as worker:
        key = work_for_review(worker, "Blocked by the reviewer")
    script = (
        'printf \'{"outcome": "blocked", "result_summary": "needs a decision", "findings": ["which API?"]}\' '
        '> "$LEASEHOLD_OUTCOME_FILE"'
    )
    ran = leasehold("run", "--review", "--next", "--json", "--", "sh", "-c", script, env=reviewer)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["task_status"] == "blocked"
    with LeaseholdClient(server.url, worker_token) as worker:
        assert worker.task(key)["blocked_reason"] == "needs a decision"


def test_self_review_is_refused_to_the_cli_too(review_fleet, tmp_path):
    server, worker_token, _ = review_fleet
    worker_env = env_for(server, worker_token, tmp_path / "worker")
    with LeaseholdClient(server.url, worker_token) as worker:
        work_for_review(worker, "My own work")
    assert leasehold("review", "next", env=worker_env).returncode == 3  # never offered your own work


def test_comment_decide_and_ready(review_fleet, tmp_path):
    server, worker_token, reviewer_token = review_fleet
    reviewer = env_for(server, reviewer_token, tmp_path / "reviewer")
    with LeaseholdClient(server.url, worker_token) as worker:
        low = worker.create_task(PROJECT, "Low", status="ready", priority=1)["key"]
        high = worker.create_task(PROJECT, "High", status="ready", priority=50)["key"]
        assert leasehold("comment", low, "mind the footer", env=reviewer).returncode == 0
        decided = leasehold("decide", "Use UTC everywhere", "--body", "Always.", "--json", env=reviewer)
        assert decided.returncode == 0, decided.stderr
        context = worker.context(low)
        assert [c["body"] for c in context["comments"]] == ["mind the footer"]
        assert "Use UTC everywhere" in [d["title"] for d in context["decisions"]]
    ready = leasehold("ready", "--json", env=reviewer)
    keys = [task["key"] for task in json.loads(ready.stdout)["results"]]
    assert keys.index(high) < keys.index(low)
    too_long = leasehold("comment", low, "x" * 8001, env=reviewer)
    assert too_long.returncode != 0
    assert "VALIDATION_ERROR" in too_long.stderr


def test_after_a_stale_review_the_cli_forgets_the_review_attempt(review_fleet, tmp_path):
    server, worker_token, reviewer_token = review_fleet
    reviewer = env_for(server, reviewer_token, tmp_path / "reviewer")
    with LeaseholdClient(server.url, worker_token) as worker:
        work_for_review(worker, "Edited under review")
    # The reviewer's command approves (exit 0), but the task is edited meanwhile: the approval is stale.
    edit = (
        "import os\nfrom agent.client import LeaseholdClient\n"
        f"with LeaseholdClient({server.url!r}, {worker_token!r}) as worker:\n"
        "    key = os.environ['LEASEHOLD_TASK']\n"
        "    task = worker.task(key)\n"
        "    worker.update_task(key, version=task['version'], changes={'description': 'moved'})\n"
    )
    ran = leasehold("run", "--review", "--next", "--json", "--", sys.executable, "-c", edit, env=reviewer)
    assert "STALE_REVIEW_TARGET" in ran.stdout + ran.stderr, ran.stdout + ran.stderr
    assert state_files(reviewer) == []  # the server released the review attempt: nothing is held
    with LeaseholdClient(server.url, worker_token) as worker:
        work_for_review(worker, "Reviewed after the stale one")
    again = leasehold("run", "--review", "--next", "--json", "--", "sh", "-c", "exit 0", env=reviewer)
    assert again.returncode == 0, again.stderr  # not 2 ("You hold …")

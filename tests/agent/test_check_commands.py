"""`leasehold check report|list` (SPEC §22) against a live server, over HTTP only: a CI agent (kind `ci`)
reports a check at a commit; the latest result per name wins; an agent of another project is refused."""

from __future__ import annotations

import json

from tests.agent.live import leasehold

COMMIT = "e" * 40


def test_a_ci_agent_reports_checks_and_the_latest_per_name_wins(fleet, logged_in):
    token = fleet.server.manage("create_agent", "ci-agt", "--kind", "ci", "--project", fleet.project)
    env = {**logged_in, "LEASEHOLD_TOKEN": token.strip().splitlines()[-1]}
    base = ("check", "report", "--commit", COMMIT, "--name", "lint")
    first = leasehold(*base, "--state", "pending", "--json", env=env)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["check"]["state"] == "pending"
    second = leasehold(*base, "--state", "failure", "--summary", "2 errors", "--url", "https://ci.example/1", env=env)
    assert second.returncode == 0, second.stderr
    assert "lint at eeeeeeeeeeee: failure" in second.stdout
    bad = leasehold("check", "report", "--commit", "abc", "--name", "lint", "--state", "success", "--json", env=env)
    assert bad.returncode != 0
    assert "VALIDATION_ERROR" in bad.stdout + bad.stderr


def test_an_agent_of_another_project_cannot_report(fleet, logged_in):
    fleet.server.manage("create_project", "other-ci", "--name", "Other")
    token = fleet.server.create_agent("ci-other", project="other-ci")
    env = {**logged_in, "LEASEHOLD_TOKEN": token}
    refused = leasehold(
        "check", "report", "--project", fleet.project, "--commit", COMMIT, "--name", "lint", "--state", "success",
        "--json", env=env,
    )  # fmt: skip
    assert refused.returncode != 0
    assert "NOT_FOUND" in refused.stdout + refused.stderr

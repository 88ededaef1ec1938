"""`leasehold plan apply FILE.json|FILE.yaml [--dry-run]` (SPEC §17) against a live server."""

from __future__ import annotations

import json

from agent.cli import output
from tests.agent.live import leasehold

PLAN_YAML = """\
# A small release, filed in one call.
tasks:
  - ref: parser
    title: Parse the new config format
    status: ready
    acceptance_criteria: |
      Old files still load.
  - ref: docs
    title: Document the format
    blocked_by: [parser]
  - ref: release
    title: Cut the release
    blocked_by: [parser, docs]
decisions:
  - title: TOML, not INI
    task: parser
"""


def test_plan_apply_files_a_yaml_plan_in_one_call_and_a_dry_run_writes_nothing(fleet, api, logged_in, tmp_path):
    plan = tmp_path / "release.yaml"
    plan.write_text(PLAN_YAML)
    before = api.tasks(project=fleet.project, limit=200)["results"]

    dry = leasehold("--json", "plan", "apply", str(plan), "--dry-run", env=logged_in)
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["would_create"] == {"tasks": 3, "edges": 3, "decisions": 1}
    assert api.tasks(project=fleet.project, limit=200)["results"] == before

    done = leasehold("plan", "apply", str(plan), "--idempotency-key", "release-plan-1", env=logged_in)
    assert done.returncode == 0, done.stderr
    assert "Created 3 tasks (3 dependencies)" in done.stdout
    again = leasehold("--json", "plan", "apply", str(plan), "--idempotency-key", "release-plan-1", env=logged_in)
    keys = json.loads(again.stdout)["keys"]
    assert set(keys) == {"parser", "docs", "release"}
    for ref, key in keys.items():
        assert f"{ref} → {key}" in done.stdout  # the replay answers the same keys
    release = api.task(keys["release"])
    assert {blocker["key"] for blocker in release["blocked_by"]} == {keys["parser"], keys["docs"]}
    assert api.task(keys["parser"])["acceptance_criteria"] == "Old files still load.\n"
    assert len(api.tasks(project=fleet.project, limit=200)["results"]) == len(before) + 3


def test_plan_apply_names_every_problem_and_refuses_files_it_cannot_read(fleet, logged_in, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps({"tasks": [{"ref": "a", "title": "A"}, {"ref": "a", "title": "B", "blocked_by": ["nowhere"]}]})
    )
    refused = leasehold("plan", "apply", str(bad), env=logged_in)
    assert refused.returncode != 0
    assert "VALIDATION_ERROR" in refused.stderr
    assert "tasks[1].ref (ref a)" in refused.stderr
    assert "tasks[1].blocked_by[0] (ref a)" in refused.stderr

    cyclic = tmp_path / "cyclic.yml"
    cyclic.write_text("tasks:\n  - {ref: a, title: A, blocked_by: [b]}\n  - {ref: b, title: B, blocked_by: [a]}\n")
    refused = leasehold("plan", "apply", str(cyclic), env=logged_in)
    assert refused.returncode != 0
    assert "DEPENDENCY_CYCLE" in refused.stderr

    for name, text in (("plan.txt", "tasks: []"), ("broken.yaml", "tasks: [unclosed"), ("list.json", "[1, 2]")):
        path = tmp_path / name
        path.write_text(text)
        assert leasehold("plan", "apply", str(path), env=logged_in).returncode == output.EXIT_USAGE, name

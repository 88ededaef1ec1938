"""`leasehold run --worktree` and `workspace open|list|prune` against a live server and real git (SPEC §15.1, §15.2)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from agent.cli.output import EXIT_COMMAND_FAILED, EXIT_OK, EXIT_WORKSPACE
from tests.agent import standins
from tests.agent.gitrepos import git, make_repos, trailers
from tests.agent.live import REPO, leasehold, state_files

LEASE = ("--lease-seconds", "30")


@pytest.fixture
def repos(tmp_path):
    return make_repos(tmp_path / "git")


@pytest.fixture
def bin_dir(tmp_path):
    return standins.install(tmp_path / "bin", "record")


def test_the_command_runs_in_the_worktree_with_its_context_environment_and_placeholders(
    fleet, api, logged_in, repos, bin_dir, tmp_path
):
    with fleet.client() as client:
        key = client.create_task(
            fleet.project,
            "Multiply numbers",
            status="ready",
            description="Add a multiply() beside add().",
            acceptance_criteria="multiply(2, 3) == 6",
        )["key"]
    log = tmp_path / "calls.jsonl"
    then = 'echo "def multiply(a, b): return a * b" > calc.py && git add calc.py && git commit -qm "multiply"'
    env = standins.run_env(logged_in, bin_dir, log, STANDIN_THEN=then)
    done = leasehold(
        "--json", "run", key, "--worktree", *LEASE,
        "--", "record", "task={task}", "branch={branch}", "in {worktree}", "{context_file}", "{unknown}",
        env=env, cwd=repos.clone,
    )  # fmt: skip
    assert done.returncode == EXIT_OK, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    worktree = repos.clone.parent / "project.worktrees" / key
    assert result["worktree"] == str(worktree)
    [call] = standins.calls(log)
    branch = result["branch"]
    context_file = call["env"]["LEASEHOLD_CONTEXT_FILE"]
    assert call["argv"] == [f"task={key}", f"branch={branch}", f"in {worktree}", context_file, "{unknown}"]
    assert call["cwd"] == str(worktree)
    env_seen = call["env"]
    assert env_seen["LEASEHOLD_TASK"] == key
    assert env_seen["LEASEHOLD_ATTEMPT_ID"] == str(result["attempt"])
    assert env_seen["LEASEHOLD_EPOCH"] == "1"
    assert env_seen["LEASEHOLD_BRANCH"] == branch
    assert env_seen["LEASEHOLD_WORKTREE"] == str(worktree)
    assert env_seen["LEASEHOLD_BASE_COMMIT"] == git(repos.clone, "rev-parse", "main")
    assert env_seen["LEASEHOLD_LABEL"].startswith("owner=toolkit-1;branch=")
    assert not any(name.startswith("LEASEHOLD_ENV_") for name in env_seen)  # no environment was allocated
    for heading in ("# " + key + ": Multiply numbers", "## Description", "Add a multiply() beside add().",
                    "## Acceptance criteria", "multiply(2, 3) == 6", f"Branch: `{branch}`", f"Worktree: `{worktree}`",
                    "Leasehold-Label: owner=toolkit-1"):  # fmt: skip
        assert heading in call["context"], heading
    # The commit made by the command carries the trailer; the run finished with the git facts of the end.
    assert trailers(worktree, "-1") == [env_seen["LEASEHOLD_LABEL"]]
    assert result["git"] == {
        "dirty": False,
        "head_commit": git(worktree, "rev-parse", "HEAD"),
        "commits_ahead": 1,
        "pushed": False,
    }
    # The ledger has the facts of the start and of the end (SPEC §15.4).
    attempt = api.attempt(result["attempt"])
    assert attempt["status"] == "completed"
    assert (attempt["branch"], attempt["base_commit"]) == (branch, env_seen["LEASEHOLD_BASE_COMMIT"])
    assert (attempt["worktree_path"], attempt["host"]) == (str(worktree), socket.gethostname())
    assert (attempt["head_commit"], attempt["commits_ahead"]) == (result["git"]["head_commit"], 1)
    assert (attempt["dirty"], attempt["pushed"]) == (False, False)
    assert state_files(logged_in) == []
    # The worktree stays (a run never removes one) and still names its attempt.
    assert (worktree / "calc.py").exists()


def test_no_lease_token_reaches_the_command(fleet, logged_in, repos, bin_dir, tmp_path):
    key = fleet.ready_task()
    log = tmp_path / "calls.jsonl"
    snapshot = tmp_path / "state-while-running.json"
    copy_state = f"cat {Path(logged_in['LEASEHOLD_CONFIG']).parent}/attempts/*/*.json > {snapshot}"
    env = standins.run_env(logged_in, bin_dir, log, STANDIN_THEN=copy_state)
    done = leasehold("run", key, "--worktree", *LEASE, "--", "record", "{context_file}", env=env, cwd=repos.clone)
    assert done.returncode == EXIT_OK, done.stderr
    token = json.loads(snapshot.read_text())["lease_token"]
    [call] = standins.calls(log)
    assert all(token not in value for value in call["env"].values())
    assert token not in json.dumps(call["argv"]) + call["context"]
    assert token not in done.stdout + done.stderr


@pytest.mark.parametrize(
    ("written", "exit_code", "attempt_status", "task_status", "reason"),
    [
        ({"outcome": "review", "result_summary": "Ready for a look."}, EXIT_OK, "completed", "review", None),
        ({"outcome": "handoff", "interruption_reason_code": "context_limit", "next_steps": ["tests"]},
         EXIT_OK, "interrupted", "ready", ("interruption_reason_code", "context_limit")),
        ({"outcome": "failed", "failure_reason_code": "tests_failed"},
         EXIT_COMMAND_FAILED, "failed", "ready", ("failure_reason_code", "tests_failed")),
    ],
)  # fmt: skip
def test_the_outcome_file_chooses_how_the_attempt_ends(
    fleet, api, logged_in, bin_dir, tmp_path, written, exit_code, attempt_status, task_status, reason
):
    key = fleet.ready_task()
    outcome = json.dumps(written).replace("'", "'\\''")
    env = standins.run_env(
        logged_in, bin_dir, tmp_path / "calls.jsonl", STANDIN_THEN=f"printf '%s' '{outcome}' > $LEASEHOLD_OUTCOME_FILE"
    )
    # Without --worktree too: the command gets the outcome file, the context and the placeholders.
    done = leasehold("--json", "run", key, *LEASE, "--", "record", "{task}", env=env, cwd=tmp_path)
    assert done.returncode == exit_code, done.stderr
    [call] = standins.calls(tmp_path / "calls.jsonl")
    assert call["argv"] == [key]
    assert call["cwd"] == str(tmp_path)
    assert "LEASEHOLD_WORKTREE" not in call["env"]
    attempt = api.attempt(json.loads(done.stdout.splitlines()[-1])["attempt"])
    assert attempt["status"] == attempt_status
    assert api.task(key)["status"] == task_status
    if reason:
        assert attempt[reason[0]] == reason[1]
    if written.get("result_summary"):
        assert attempt["result_summary"] == written["result_summary"]
    if written.get("next_steps"):
        assert attempt["next_steps"] == written["next_steps"]


@pytest.mark.parametrize(
    ("content", "complaint"),
    [
        ('{"outcome": "maybe"}', "outcome must be one of done, review, failed, handoff"),
        ("not json", "is not JSON"),
        ('{"outcome": "done", "summary": "typo"}', "unknown keys summary"),
        ('{"outcome": "done", "failure_reason_code": "tests_failed"}', "failure_reason_code goes with outcome failed"),
    ],
)
def test_an_invalid_outcome_file_is_one_line_and_the_exit_status_decides(
    fleet, api, logged_in, bin_dir, tmp_path, content, complaint
):
    key = fleet.ready_task()
    env = standins.run_env(
        logged_in, bin_dir, tmp_path / "calls.jsonl", STANDIN_THEN=f"printf '%s' '{content}' > $LEASEHOLD_OUTCOME_FILE"
    )
    done = leasehold("--json", "run", key, *LEASE, "--", "record", env=env, cwd=tmp_path)
    assert done.returncode == EXIT_OK, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "outcome file" in line]
    assert len(warnings) == 1
    assert complaint in warnings[0]
    assert "Traceback" not in done.stderr
    assert api.task(key)["status"] == "done"


def test_not_a_git_repository_is_refused_before_anything_is_claimed(fleet, api, logged_in, bin_dir, tmp_path):
    key = fleet.ready_task()
    env = standins.run_env(logged_in, bin_dir, tmp_path / "calls.jsonl")
    done = leasehold("run", key, "--worktree", "--", "record", env=env, cwd=tmp_path)
    assert done.returncode == EXIT_WORKSPACE
    assert done.stderr.strip().splitlines() == [
        f"leasehold: error: WORKSPACE: {tmp_path.resolve()} is not in a git repository (give one with --repo PATH)."
    ]
    assert api.task(key)["epoch"] == 0  # never claimed
    assert standins.calls(tmp_path / "calls.jsonl") == []


def test_a_branch_checked_out_by_a_live_attempt_is_refused_and_the_fresh_claim_handed_back(
    fleet, api, logged_in, repos, bin_dir, tmp_path
):
    first, second = fleet.ready_task(), fleet.ready_task()
    opened = leasehold(
        "--json", "workspace", "open", first, "--branch", "feature/shared", *LEASE, env=logged_in, cwd=repos.clone
    )
    assert opened.returncode == EXIT_OK, opened.stderr
    first_worktree = Path(json.loads(opened.stdout)["worktree"])
    (first_worktree / "wip.txt").write_text("uncommitted work of a live attempt\n")

    other_token = fleet.server.create_agent("toolkit-run-2", project=fleet.project)
    other = standins.run_env({**logged_in, "LEASEHOLD_TOKEN": other_token}, bin_dir, tmp_path / "calls.jsonl")
    refused = leasehold(
        "--json", "run", second, "--branch", "feature/shared", "--worktree", *LEASE, "--", "record",
        env=other, cwd=repos.clone,
    )  # fmt: skip
    assert refused.returncode == EXIT_WORKSPACE, refused.stderr
    error = json.loads(refused.stdout.splitlines()[-1])["error"]
    assert error["code"] == "WORKSPACE"
    assert "which is still live" in error["message"]
    assert "\n" not in error["message"]
    assert standins.calls(tmp_path / "calls.jsonl") == []
    assert api.task(second)["status"] == "ready"  # handed back at once
    assert (first_worktree / "wip.txt").read_text() == "uncommitted work of a live attempt\n"
    assert leasehold("release", env=logged_in, cwd=first_worktree).returncode == EXIT_OK


def test_workspace_open_then_notes_inside_the_worktree_act_on_its_attempt(fleet, api, logged_in, repos):
    first, second = fleet.ready_task(), fleet.ready_task()
    worktrees = []
    for key in (first, second):
        opened = leasehold("--json", "workspace", "open", key, *LEASE, env=logged_in, cwd=repos.clone)
        assert opened.returncode == EXIT_OK, opened.stderr
        worktrees.append(Path(json.loads(opened.stdout)["worktree"]))
    # Two attempts held: inside each worktree a note goes to that worktree's attempt.
    for key, worktree in zip((first, second), worktrees, strict=True):
        assert leasehold("checkpoint", f"note in {key}", env=logged_in, cwd=worktree).returncode == EXIT_OK
        assert api.context(key)["latest_checkpoint"]["content"] == f"note in {key}"
    ambiguous = leasehold("checkpoint", "where?", env=logged_in, cwd=repos.clone)
    assert ambiguous.returncode == 2
    assert "--task KEY" in ambiguous.stderr

    listed = leasehold("--json", "workspace", "list", env=logged_in, cwd=worktrees[0])
    rows = json.loads(listed.stdout)["worktrees"]
    assert [row["task"] for row in rows] == [None, first, second]
    assert rows[1]["attempt_status"] == "active"

    # Finish the first, merge its branch; prune removes it and nothing else.
    Path(worktrees[0], "done.txt").write_text("done\n")
    git(worktrees[0], "add", "done.txt")
    git(worktrees[0], "commit", "-qm", "done")
    assert leasehold("finish", "--summary", "ok", env=logged_in, cwd=worktrees[0]).returncode == EXIT_OK
    branch = rows[1]["branch"]
    git(repos.clone, "merge", "-q", "--ff-only", branch)
    Path(worktrees[1], "wip.txt").write_text("not committed\n")
    pruned = leasehold("--json", "workspace", "prune", env=logged_in, cwd=repos.clone)
    assert pruned.returncode == EXIT_OK, pruned.stderr
    report = json.loads(pruned.stdout)
    assert [row["path"] for row in report["removed"]] == [str(worktrees[0])]
    assert not worktrees[0].exists()
    assert "not completed" in report["kept"][0]["kept_because"]
    assert (worktrees[1] / "wip.txt").exists()
    assert repos.clone.exists()
    assert leasehold("release", env=logged_in, cwd=worktrees[1]).returncode == EXIT_OK


def test_run_help_names_the_worktree_options():
    done = leasehold("run", "--help", env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"})
    assert done.returncode == 0
    assert "--worktree [DIR]" in done.stdout
    assert "--repo" in done.stdout


def test_a_worktree_run_makes_gets_the_main_checkouts_mcp_config_and_hooks_and_stays_clean(
    fleet, logged_in, repos, bin_dir, tmp_path
):
    logged_in = {**logged_in, "PYTHONPATH": str(REPO)}  # this checkout's toolkit, run from another directory
    connected = leasehold("connect", "claude", "--write", env=logged_in, cwd=repos.clone)
    assert connected.returncode == EXIT_OK, connected.stderr
    mcp = (repos.clone / ".mcp.json").read_text()
    hooks = (repos.clone / ".claude" / "settings.json").read_text()
    key = fleet.ready_task()
    log = tmp_path / "calls.jsonl"
    env = standins.run_env(logged_in, bin_dir, log, STANDIN_THEN="git status --porcelain > status.txt")
    done = leasehold("--json", "run", key, "--worktree", *LEASE, "--", "record", env=env, cwd=repos.clone)
    assert done.returncode == EXIT_OK, done.stderr
    assert "uncommitted changes" not in done.stderr  # connect's files do not make the main checkout dirty
    worktree = Path(json.loads(done.stdout.splitlines()[-1])["worktree"])
    assert (worktree / ".mcp.json").exists(), (done.stderr, sorted(p.name for p in worktree.iterdir()))
    assert (worktree / ".mcp.json").read_text() == mcp
    assert (worktree / ".claude" / "settings.json").read_text() == hooks
    assert (worktree / "status.txt").read_text() == "?? status.txt\n"  # `git add -A` would take none of them

"""The seed story end to end (issue 13, "Done when"): agent A works in a worktree and stops — killed, released or
failed — and agent B, running the same loop, resumes A's work on A's branch, in A's worktree, with A's checkpoint.

Real processes (`leasehold run`, `kill -9`), real git (a bare remote, a clone, worktrees), a live server on the
suite's database (SQLite, or PostgreSQL when DATABASE_URL names it) with a 3-second lease.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.cli.output import EXIT_COMMAND_FAILED, EXIT_OK, EXIT_USAGE
from agent.client import LeaseholdClient
from agent.client.errors import LeaseholdError
from agent.client.models import Lease
from tests.agent import standins
from tests.agent.gitrepos import git, make_repos
from tests.agent.live import agent_env, leasehold, state_files
from tests.agent.test_supervision import alive, gone_within, wait_for

LABELS_FORMAT = "--format=%(trailers:key=Leasehold-Label,valueonly)"
CHECKPOINT = "Parser and its tests are committed"
NEXT_STEP = "wire multiply() into the CLI"


@dataclass
class Agent:
    handle: str
    token: str
    env: dict[str, str]
    log: Path

    def calls(self) -> list[dict]:
        return standins.calls(self.log)


def make_agent(fleet, tmp_path: Path, handle: str, bin_dir: Path) -> Agent:
    token = fleet.server.create_agent(handle, project=fleet.project)
    home = tmp_path / handle
    env = agent_env(home)
    config = Path(env["LEASEHOLD_CONFIG"])
    config.parent.mkdir(mode=0o700, parents=True)
    config.write_text(json.dumps({"url": fleet.server.url, "token": token, "project": fleet.project}))
    config.chmod(0o600)
    log = home / "calls.jsonl"
    return Agent(handle, token, standins.run_env(env, bin_dir, log), log)


@pytest.fixture
def world(fleet, tmp_path):
    bin_dir = standins.install(tmp_path / "bin", "record")
    suffix = tmp_path.name[-12:].replace("_", "-").strip("-").lower()
    first = make_agent(fleet, tmp_path, f"handover-a-{suffix}", bin_dir)
    second = make_agent(fleet, tmp_path, f"handover-b-{suffix}", bin_dir)
    return make_repos(tmp_path / "git"), first, second


def two_commits_and_a_checkpoint(then: str) -> str:
    return (
        "echo 'def multiply(a, b): return a * b' > calc.py && git add calc.py && git commit -qm 'multiply()' && "
        "echo 'assert multiply(2, 3) == 6' > test_calc.py && git add test_calc.py && git commit -qm 'tests' && "
        "echo 'scratch notes' > notes.txt && "
        f"leasehold checkpoint '{CHECKPOINT}' --next-step '{NEXT_STEP}' && {then}"
    )


def run_b(fleet, second: Agent, repos, task_class: str) -> dict:
    """Agent B's loop: the next claimable task of the class, in a worktree; its command commits once more."""
    second.env["STANDIN_THEN"] = "echo 'done' >> calc.py && git add calc.py && git commit -qm 'finish multiply'"
    done = leasehold(
        "--json", "run", "--next", "--task-class", task_class, "--worktree", "--lease-seconds", "30",
        "--", "record", "Work on {task}; read {context_file}",
        env=second.env, cwd=repos.clone,
    )  # fmt: skip
    assert done.returncode == EXIT_OK, done.stderr
    [call] = second.calls()
    return {"result": json.loads(done.stdout.splitlines()[-1]), "call": call}


def assert_b_resumed_a(repos, a_call: dict, b: dict, *, key: str) -> None:
    a_env, b_call = a_call["env"], b["call"]
    b_env = b_call["env"]
    assert b_env["LEASEHOLD_TASK"] == key
    assert b_env["LEASEHOLD_BRANCH"] == a_env["LEASEHOLD_BRANCH"]
    assert b_env["LEASEHOLD_BASE_COMMIT"] == a_env["LEASEHOLD_BASE_COMMIT"]
    assert int(b_env["LEASEHOLD_EPOCH"]) == int(a_env["LEASEHOLD_EPOCH"]) + 1
    # A's worktree, taken over as A left it (its uncommitted scratch file included).
    assert b_call["cwd"] == a_call["cwd"]
    assert (Path(b_call["cwd"]) / "notes.txt").read_text() == "scratch notes\n"
    assert b_call["argv"] == [f"Work on {key}; read {b_env['LEASEHOLD_CONTEXT_FILE']}"]
    assert CHECKPOINT in b_call["context"]
    assert NEXT_STEP in b_call["context"]
    # A's two commits and B's carry their attempts' labels, read back from git.
    log = git(Path(b_call["cwd"]), "log", LABELS_FORMAT, f"{a_env['LEASEHOLD_BASE_COMMIT']}..HEAD")
    labels = [line for line in log.splitlines() if line.strip()]
    assert labels == [b_env["LEASEHOLD_LABEL"], a_env["LEASEHOLD_LABEL"], a_env["LEASEHOLD_LABEL"]]


def test_b_resumes_a_killed_agents_task_on_its_branch_in_its_worktree(fleet, api, world):
    repos, first, second = world
    task_class = f"handover-killed-{fleet.server.database}"
    key = fleet.ready_task(task_class=task_class)
    first.env["STANDIN_THEN"] = two_commits_and_a_checkpoint(
        f"echo $$ > {first.log.parent}/pid && sleep 300 & echo $! > {first.log.parent}/sleeper; wait"
    )
    run_a = subprocess.Popen(
        [sys.executable, "-m", "agent", "run", "--next", "--task-class", task_class, "--worktree",
         "--lease-seconds", "3", "--", "record"],
        env=first.env, cwd=repos.clone, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        sleeper = int(wait_for(first.log.parent / "sleeper", timeout=60))
        [a_call] = first.calls()
        command_pids = [sleeper, int(wait_for(first.log.parent / "pid"))]
        assert api.context(key)["latest_checkpoint"]["content"] == CHECKPOINT
        a_token = json.loads(state_files(first.env)[0].read_text())["lease_token"]
        run_a.send_signal(signal.SIGKILL)
        run_a.wait(timeout=10)
        gone_within(command_pids, 2.0)  # A's command dies with A
    finally:
        if run_a.poll() is None:
            run_a.kill()
    assert not any(alive(pid) for pid in command_pids)

    # The lease lapses (3 s, nobody renews it); B's loop gets the same task.
    deadline = time.monotonic() + 15
    while api.task(key)["holder"] is not None:  # the lease still runs
        assert time.monotonic() < deadline, "the lease never lapsed"
        time.sleep(0.2)
    b = run_b(fleet, second, repos, task_class)
    assert_b_resumed_a(repos, a_call, b, key=key)
    assert b["result"]["attempt_status"] == "completed"
    assert api.attempt(int(a_call["env"]["LEASEHOLD_ATTEMPT_ID"]))["status"] == "expired"

    # A's late write is refused. The CLI first: A's state file belongs to a dead process, the server
    # says its attempt ended, so the file is gone (issue 29: state that cannot lie) and nothing is sent.
    late = leasehold("note", "A is back", env=first.env, cwd=Path(a_call["cwd"]))
    assert late.returncode == EXIT_USAGE, late.stderr
    assert "No current attempt" in late.stderr
    # And the server, for a client that still sends the token: it belongs to an attempt that is over.
    lease = Lease(
        attempt_id=int(a_call["env"]["LEASEHOLD_ATTEMPT_ID"]),
        token=a_token,
        epoch=int(a_call["env"]["LEASEHOLD_EPOCH"]),
        task=key,
    )
    with LeaseholdClient(fleet.server.url, first.token) as client, pytest.raises(LeaseholdError) as refused:
        client.note(lease, "A's late write")
    assert refused.value.code in {"STALE_EPOCH", "LEASE_EXPIRED", "LEASE_NOT_HELD"}


def test_b_resumes_after_a_failed_attempt_with_commits(fleet, api, world):
    repos, first, second = world
    task_class = f"handover-failed-{fleet.server.database}"
    key = fleet.ready_task(task_class=task_class)
    first.env["STANDIN_THEN"] = two_commits_and_a_checkpoint("exit 1")
    failed = leasehold(
        "--json", "run", "--next", "--task-class", task_class, "--branch", f"feature/{key.lower()}-by-a",
        "--worktree", "--lease-seconds", "30", "--", "record",
        env=first.env, cwd=repos.clone,
    )  # fmt: skip
    assert failed.returncode == EXIT_COMMAND_FAILED, failed.stderr
    [a_call] = first.calls()
    a_result = json.loads(failed.stdout.splitlines()[-1])
    assert a_result["git"]["commits_ahead"] == 2
    assert a_result["git"]["dirty"] is True
    b = run_b(fleet, second, repos, task_class)
    assert a_call["env"]["LEASEHOLD_BRANCH"] == f"feature/{key.lower()}-by-a"  # not the suggested name: B must inherit
    assert_b_resumed_a(repos, a_call, b, key=key)
    assert_predecessor_work(b["call"]["context"], a_call, a_result["git"]["head_commit"])


def test_b_resumes_after_a_released_attempt_with_commits(fleet, api, world):
    repos, first, second = world
    task_class = f"handover-released-{fleet.server.database}"
    key = fleet.ready_task(task_class=task_class)
    # A works step by step: open the worktree, commit, checkpoint, record its git facts, give the task back.
    opened = leasehold(
        "--json", "workspace", "open", "--next", "--task-class", task_class, "--branch", f"feature/{key.lower()}-by-a",
        "--lease-seconds", "30",
        env=first.env, cwd=repos.clone,
    )  # fmt: skip
    assert opened.returncode == EXIT_OK, opened.stderr
    worktree = Path(json.loads(opened.stdout)["worktree"])
    first.env["STANDIN_THEN"] = two_commits_and_a_checkpoint("true")
    subprocess.run(["record"], env=first.env, cwd=worktree, check=True)
    [a_call] = first.calls()
    held = json.loads(state_files(first.env)[0].read_text())
    lease = Lease(attempt_id=held["attempt_id"], token=held["lease_token"], epoch=held["epoch"], task=key)
    head = git(worktree, "rev-parse", "HEAD")
    with LeaseholdClient(fleet.server.url, first.token) as client:
        client.set_git(lease, branch=held["branch"], head_commit=head, commits_ahead=2, dirty=True, pushed=False)
    a_call["env"].update(
        LEASEHOLD_BRANCH=held["branch"],
        LEASEHOLD_BASE_COMMIT=held["base_commit"],
        LEASEHOLD_EPOCH=str(held["epoch"]),
        LEASEHOLD_LABEL=held["label"],
        LEASEHOLD_ATTEMPT_ID=str(held["attempt_id"]),
    )
    assert held["branch"] == f"feature/{key.lower()}-by-a"  # not the suggested name: B must inherit
    released = leasehold("release", "--reason", "switching tasks", env=first.env, cwd=worktree)
    assert released.returncode == EXIT_OK, released.stderr
    b = run_b(fleet, second, repos, task_class)
    assert_b_resumed_a(repos, a_call, b, key=key)
    assert_predecessor_work(b["call"]["context"], a_call, head)


def assert_predecessor_work(context: str, a_call: dict, head: str) -> None:
    """The context says where A's work is (SPEC §15.4 `predecessor_work`): branch, head, pushed, host, worktree."""
    section = context.split("## Where the predecessor's work is", 1)
    assert len(section) == 2, "the context names no predecessor's work"
    assert f"`{a_call['env']['LEASEHOLD_BRANCH']}`" in section[1]
    assert f"`{head}`" in section[1]
    assert "Pushed: no" in section[1]
    assert f"Worktree: {a_call['cwd']}" in section[1]


def test_these_runs_go_through_a_server_on_the_suites_database(fleet):
    suite = os.environ.get("DATABASE_URL", "")
    assert fleet.server.database == ("postgresql" if suite.startswith(("postgres://", "postgresql://")) else "sqlite")
    if fleet.server.database == "postgresql":
        import psycopg

        url = f"{suite.rsplit('/', 1)[0]}/{fleet.server.database_name}"
        with psycopg.connect(url) as connection:
            slugs = [row[0] for row in connection.execute("SELECT slug FROM ledger_project")]
        assert fleet.project in slugs
    else:
        assert (fleet.server.data_dir / "leasehold.sqlite3").exists()

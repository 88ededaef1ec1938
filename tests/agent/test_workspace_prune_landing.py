"""`leasehold workspace prune` and landing (SPEC §21.2) against a live server and real git.

A delivered task's worktree waits for its lander and is kept; once the task landed (`done` with a
`landed_commit`, read from `GET /tasks/{key}/`) its worktree is merged and a clean one is removed,
even when the target's history does not contain the branch (a squash landing); commits made after
the delivery are not landed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.cli.output import EXIT_OK
from agent.client import LeaseholdClient
from tests.agent.gitrepos import git, make_repos
from tests.agent.live import leasehold

LEASE = ("--lease-seconds", "30")
PROJECT = "agtland"


@pytest.fixture(scope="module")
def landing_project(fleet, tmp_path_factory) -> tuple[str, Path]:
    """A project with landing on (target main, squashed by a lander), its repository, and an agent's token."""
    repos = make_repos(tmp_path_factory.mktemp("landing-git") / "git", with_remote=False)
    server = fleet.server
    server.manage("create_project", PROJECT, "--name", "Landing", "--repository", str(repos.clone))
    server.manage("set_landing", PROJECT, "--target", "main", "--method", "squash")
    return server.create_agent("toolkit-lander", project=PROJECT), repos.clone


@pytest.fixture
def env(fleet, landing_project, logged_in) -> dict[str, str]:
    token, _ = landing_project
    config = Path(logged_in["LEASEHOLD_CONFIG"])
    config.write_text(json.dumps({"url": fleet.server.url, "token": token, "project": PROJECT}))
    return logged_in


def deliver_in_worktree(client: LeaseholdClient, env: dict[str, str], clone: Path, title: str) -> tuple[str, Path]:
    key = str(client.create_task(PROJECT, title, status="ready")["key"])
    opened = leasehold("--json", "workspace", "open", key, *LEASE, env=env, cwd=clone)
    assert opened.returncode == EXIT_OK, opened.stderr
    worktree = Path(json.loads(opened.stdout)["worktree"])
    (worktree / f"{key}.txt").write_text(f"{title}\n")
    git(worktree, "add", f"{key}.txt")
    git(worktree, "commit", "-qm", title)
    detected = leasehold("git", "--detect", env=env, cwd=worktree)  # the head a delivery names
    assert detected.returncode == EXIT_OK, detected.stderr
    finished = leasehold("finish", "--summary", "delivered", env=env, cwd=worktree)
    assert finished.returncode == EXIT_OK, finished.stderr
    assert client.task(key)["status"] == "delivered"
    return key, worktree


def land_squashed(client: LeaseholdClient, clone: Path, key: str) -> str:
    """What a lander with `squash` does: one new commit on main (the branch is not its ancestor), then `landed`."""
    grant: dict[str, Any] = client.request("POST", "/landings/next/", body={"project": PROJECT})
    [task] = grant["tasks"]
    assert task["key"] == key
    git(clone, "merge", "-q", "--squash", task["branch"])
    git(clone, "commit", "-qm", f"{key} (squashed)")
    landed_commit = git(clone, "rev-parse", "HEAD")
    landing = grant["landing"]
    headers = {"X-Lease-Token": landing["lease_token"], "X-Lease-Epoch": str(landing["epoch"])}
    body = {"result": "landed", "landed_commit": landed_commit, "tasks": [{"key": key, "outcome": "landed"}]}
    client.request("POST", f"/landings/{landing['id']}/finish/", body=body, headers=headers)
    return landed_commit


def prune(env: dict[str, str], clone: Path) -> dict[str, Any]:
    pruned = leasehold("--json", "workspace", "prune", env=env, cwd=clone)
    assert pruned.returncode == EXIT_OK, pruned.stderr
    return dict(json.loads(pruned.stdout))


def test_prune_keeps_a_delivered_worktree_and_removes_it_once_landed(fleet, landing_project, env):
    token, clone = landing_project
    with LeaseholdClient(fleet.server.url, token) as client:
        key, worktree = deliver_in_worktree(client, env, clone, "Landed by squash")

        report = prune(env, clone)
        [kept] = [row for row in report["kept"] if row["path"] == str(worktree)]
        assert kept["kept_because"] == "its task is delivered and waits for a lander"
        assert worktree.exists()

        landed_commit = land_squashed(client, clone, key)
        task = client.task(key)
        assert (task["status"], task["landing"]["landed_commit"]) == ("done", landed_commit)
        assert task["landing"]["delivered_commit"] == git(worktree, "rev-parse", "HEAD")
        branch = task["landing"]["delivered_branch"]

    report = prune(env, clone)
    assert [row["path"] for row in report["removed"]] == [str(worktree)]
    assert not worktree.exists()
    assert git(clone, "rev-parse", f"refs/heads/{branch}") == task["landing"]["delivered_commit"]  # the branch stays


def test_prune_keeps_a_landed_worktree_with_commits_made_after_the_delivery(fleet, landing_project, env):
    token, clone = landing_project
    with LeaseholdClient(fleet.server.url, token) as client:
        key, worktree = deliver_in_worktree(client, env, clone, "More work after landing")
        land_squashed(client, clone, key)
    (worktree / "late.txt").write_text("late\n")
    git(worktree, "add", "late.txt")
    git(worktree, "commit", "-qm", "after the landing")

    report = prune(env, clone)

    [kept] = [row for row in report["kept"] if row["path"] == str(worktree)]
    assert kept["kept_because"] == "its branch is not merged into main nor landed"
    assert worktree.exists()

"""The whole landing story against a live server, real git and the real lander (issue 28, SPEC §21).

Three agents deliver three tasks on one base through the API; the lander (`leasehold land --next`, a real
process next to its own clone) lands two, and the third conflicts: it goes back to `ready` with the
conflicting path first in its next context, on its inherited branch; its next agent rebases and delivers,
and it lands. A red check sends its task back with the output's tail. A target pushed to from outside
while a landing runs is never overwritten. The target's log holds every landed task's commits with their
`Leasehold-Label` trailers. On SQLite, and on PostgreSQL when the suite runs there.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.agent.gitrepos import git, make_repos, trailers
from tests.agent.live import REPO, LiveServer, agent_env

pytestmark = pytest.mark.django_db(transaction=True)

PROJECT = "story"
# Red when the tree has a BROKEN file; slow (4 s) when it has a SLOW file, so an outside push can race it.
CHECK = 'if [ -e SLOW ]; then sleep 4; fi; if [ -e BROKEN ]; then echo "BROKEN: the build is red"; exit 1; fi'


class Agent:
    def __init__(self, server: LiveServer, handle: str, clone: Path) -> None:
        self.handle = handle
        self.clone = clone
        self.http = httpx.Client(
            base_url=f"{server.url}/api/v1",
            headers={"Authorization": f"Bearer {server.create_agent(handle, project=PROJECT)}"},
            timeout=30,
        )

    def claim(self, key: str) -> dict[str, Any]:
        response = self.http.post(f"/tasks/{key}/claim/", json={"lease_seconds": 600})
        assert response.status_code == 201, response.text
        return response.json()

    def deliver(self, claim: dict[str, Any], files: dict[str, str], *, base: str = "origin/main") -> str:
        """Commit `files` on the claim's branch from `base` (with the label trailer), push, finish done."""
        branch, label = claim["attempt"]["branch"], claim["label"]
        git(self.clone, "fetch", "-q", "origin")
        git(self.clone, "checkout", "-q", "-B", branch, base)
        for name, text in files.items():
            (self.clone / name).write_text(text)
            git(self.clone, "add", name)
        git(self.clone, "commit", "-q", "-m", f"{claim['task']['key']}: work\n\nLeasehold-Label: {label}")
        git(self.clone, "push", "-q", "-f", "origin", branch)
        head = git(self.clone, "rev-parse", "HEAD")
        git(self.clone, "checkout", "-q", "--detach")
        headers = {"X-Lease-Token": claim["lease_token"], "X-Lease-Epoch": str(claim["epoch"])}
        finished = self.http.post(
            f"/attempts/{claim['attempt']['id']}/finish/",
            json={"outcome": "done", "git": {"head_commit": head, "pushed": True}},
            headers=headers,
        )
        assert finished.status_code == 200, finished.text
        assert finished.json()["task"]["status"] == "delivered"
        return head

    def create(self, title: str) -> str:
        response = self.http.post("/tasks/", json={"project": PROJECT, "title": title, "status": "ready"})
        assert response.status_code == 201, response.text
        return str(response.json()["key"])

    def task(self, key: str) -> dict[str, Any]:
        return dict(self.http.get(f"/tasks/{key}/").json())


@pytest.fixture
def story(tmp_path):
    repos = make_repos(tmp_path / "git")
    lander_clone = tmp_path / "lander"
    git(tmp_path, "clone", "-q", str(repos.remote), str(lander_clone))
    server = LiveServer(tmp_path / "server", on_suite_database=True).start()
    try:
        server.manage(
            "create_project",
            PROJECT,
            "--name",
            "Story",
            "--repository",
            str(repos.clone),
            "--remote",
            f"file://{repos.remote}",
        )
        server.manage("set_landing", PROJECT, "--target", "main", "--check", CHECK, "--check-timeout", "60")
        agents = [Agent(server, f"agent-{n}", repos.clone) for n in (1, 2, 3)]
        env = agent_env(tmp_path / "lander-home")
        config = Path(env["LEASEHOLD_CONFIG"])
        config.parent.mkdir(parents=True, mode=0o700)
        token = server.create_agent("lander-1", project=PROJECT)
        config.write_text(json.dumps({"url": server.url, "token": token, "project": PROJECT}))
        yield server, repos, agents, env, lander_clone
    finally:
        server.stop()


def is_ancestor(repo: Path, older: str, newer: str) -> bool:
    done = subprocess.run(["git", "merge-base", "--is-ancestor", older, newer], cwd=repo, capture_output=True)
    return done.returncode == 0


def land(env: dict[str, str], clone: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent", "--json", "land", "--next", "--repo", str(clone)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_three_agents_deliver_two_land_the_third_conflicts_is_rebased_and_lands(story):
    _server, repos, agents, env, lander_clone = story
    one, two, three = agents
    keys = [one.create("greeting"), two.create("farewell"), three.create("greeting, louder")]
    claims = [agent.claim(key) for agent, key in zip(agents, keys, strict=True)]
    heads = [
        one.deliver(claims[0], {"greeting.txt": "hello\n"}),
        two.deliver(claims[1], {"farewell.txt": "bye\n"}),
        three.deliver(claims[2], {"greeting.txt": "HELLO!\n"}),
    ]
    queue = one.http.get(f"/projects/{PROJECT}/landing/").json()["queue"]
    assert [item["key"] for item in queue] == keys

    first, second, third = land(env, lander_clone), land(env, lander_clone), land(env, lander_clone)
    assert (first.returncode, second.returncode, third.returncode) == (0, 0, 7), (first, second, third)
    for key in keys[:2]:
        task = one.task(key)
        assert task["status"] == "done"
        assert (
            git(
                repos.clone, "merge-base", "--is-ancestor", task["landing"]["landed_commit"], "origin/main", check=False
            )
            == ""
        )
    main = git(repos.remote, "rev-parse", "refs/heads/main")
    assert git(repos.remote, "merge-base", "--is-ancestor", heads[0], main, check=False) == ""
    conflicted = three.task(keys[2])
    assert conflicted["status"] == "ready"
    assert conflicted["landing"]["failed_landings"] == 1

    # The next agent claims it again: the branch is inherited, the conflicting path comes first in its context.
    again = three.claim(keys[2])
    assert again["attempt"]["branch"] == claims[2]["attempt"]["branch"]
    assert next(iter(again["context"])) == "landing"
    assert "greeting.txt" in again["context"]["landing"]["notes"][0]["content"]
    # It rebases onto the target (resolving the conflict) and delivers; the lander lands it.
    three.deliver(again, {"greeting.txt": "hello\nHELLO!\n"}, base="origin/main")
    assert land(env, lander_clone).returncode == 0
    assert three.task(keys[2])["status"] == "done"

    # A red check sends its task back with the output's tail.
    red = one.create("breaks the build")
    one.deliver(one.claim(red), {"BROKEN": "x\n"})
    assert land(env, lander_clone).returncode == 7
    sent_back = one.task(red)
    assert sent_back["status"] == "ready"
    context = one.claim(red)["context"]
    assert "BROKEN: the build is red" in context["landing"]["notes"][0]["content"]

    # A target pushed to from outside during a landing is never overwritten: the lander lands on the new tip.
    slow = two.create("slow check")
    two.deliver(two.claim(slow), {"SLOW": "x\n"})
    lander = subprocess.Popen(
        [sys.executable, "-m", "agent", "--json", "land", "--next", "--repo", str(lander_clone)],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while two.http.get(f"/projects/{PROJECT}/landing/").json()["live"] is None:
        assert time.monotonic() < deadline, "the landing never started"
        time.sleep(0.2)
    time.sleep(1)  # the check (4 s) is running
    git(repos.clone, "fetch", "-q", "origin")
    git(repos.clone, "checkout", "-q", "-B", "outside", "origin/main")
    outside = repos.commit(repos.clone, "OUTSIDE.txt", "pushed by a person\n", "outside change")
    git(repos.clone, "push", "-q", "origin", "outside:main")
    out, err = lander.communicate(timeout=120)
    assert lander.returncode == 0, (out, err)
    assert is_ancestor(repos.remote, outside, "refs/heads/main")
    assert two.task(slow)["status"] == "done"

    # Every landed task's commits are in the target with their labels.
    labels = set(trailers(repos.remote, "refs/heads/main"))
    assert {claims[0]["label"], claims[1]["label"], again["label"]} <= labels

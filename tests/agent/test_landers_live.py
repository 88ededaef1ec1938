"""Two `leasehold land --watch` processes on one queue, against a live server with real git (SPEC §21.2).

Tasks are delivered through the real API (claim, a commit with its `Leasehold-Label` trailer on the
task's branch, push to the bare remote, finish `done` with `head_commit` and `pushed`); the landers
are real processes in clones of their own. What is pinned (issue 28, "Done when" 3):

- never two live landings of the target: the landings' epochs follow one another and no landing
  was claimed before the one before it ended; the landing page, polled, never went back;
- every delivered task landed once: one `landed` entry each, and the target's `git log` holds
  each task's commit with its trailer;
- SIGTERM: both exit 0 promptly, and nothing they started is left (no process carrying their
  marker variable, no scratch worktree in their clones);
- `kill -9` of a lander mid-check: the target is untouched; its landing (3-second lease) expires
  and the other lander lands the task.

The server runs on the suite's database (PostgreSQL when DATABASE_URL names one).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agent.client import LeaseholdClient
from tests.agent.gitrepos import Repos, git, git_env, make_repos, trailers
from tests.agent.live import REPO, agent_env

_projects = itertools.count(1)
MARKER = "LEASEHOLD_LANDER_TEST_RUN"
STOP_SECONDS = 15


@dataclass
class Lander:
    name: str
    clone: Path
    process: subprocess.Popen[str]
    stdout: Path
    stderr: Path

    def reports(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.stdout.read_text().splitlines() if line.startswith("{")]

    def worktrees(self) -> list[str]:
        listed = git(self.clone, "worktree", "list", "--porcelain").splitlines()
        return [line for line in listed if line.startswith("worktree ")]


@dataclass
class Queue:
    """One project with landing on, its bare remote, the agents' clone, and its landers."""

    server: Any
    slug: str
    repos: Repos
    root: Path
    token: str
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    landers: list[Lander] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)  # task key → the label its commit carries

    def api(self) -> LeaseholdClient:
        return LeaseholdClient(self.server.url, self.token)

    def deliver(self, number: int) -> str:
        """A task claimed, committed on its branch with its label, pushed, finished done: delivered."""
        clone = self.repos.clone
        with self.api() as api:
            key = str(api.create_task(self.slug, f"Landed by a watcher {number}", status="ready")["key"])
            branch = f"feature/{key.lower()}"
            claim = api.claim(key, branch=branch)
            git(clone, "fetch", "-q", "origin")
            git(clone, "checkout", "-q", "-B", branch, "origin/main")
            (clone / f"{key.lower()}.txt").write_text(f"{key}\n")
            git(clone, "add", f"{key.lower()}.txt")
            git(clone, "commit", "-q", "-m", f"{key}: work\n\nLeasehold-Label: {claim.label}")
            git(clone, "push", "-q", "origin", branch)
            head = git(clone, "rev-parse", "HEAD")
            git(clone, "checkout", "-q", "main")
            api.finish(claim.lease, "done", git={"head_commit": head, "pushed": True})
            self.labels[key] = claim.label
            assert api.task(key)["status"] == "delivered"
        return key

    def start_lander(self, name: str, *, lease_seconds: int = 3) -> Lander:
        home = self.root / name
        clone = home / "clone"
        home.mkdir()
        git(self.root, "clone", "-q", str(self.repos.remote), str(clone))
        token = self.server.create_agent(f"{self.slug}-{name}", project=self.slug)
        env = {**agent_env(home), **git_env(), MARKER: self.run_id}
        config = Path(env["LEASEHOLD_CONFIG"])
        config.parent.mkdir(mode=0o700)
        config.write_text(json.dumps({"url": self.server.url, "token": token, "project": self.slug}))
        config.chmod(0o600)
        stdout, stderr = home / "stdout", home / "stderr"
        command = ["land", "--watch", "--json", "--repo", str(clone), "--lease-seconds", str(lease_seconds)]
        with open(stdout, "w") as out, open(stderr, "w") as err:
            process = subprocess.Popen(
                [sys.executable, "-m", "agent", *command],
                env=env,
                cwd=REPO,
                stdout=out,
                stderr=err,
                text=True,
            )
        lander = Lander(name=name, clone=clone, process=process, stdout=stdout, stderr=stderr)
        self.landers.append(lander)
        return lander

    def page(self) -> dict[str, Any]:
        with self.api() as api:
            return api.request("GET", f"/projects/{self.slug}/landing/")

    def task(self, key: str) -> dict[str, Any]:
        with self.api() as api:
            return api.task(key)

    def tip(self) -> str:
        return git(self.repos.remote, "rev-parse", "refs/heads/main")

    def leftovers(self) -> list[str]:
        """Processes (other than this one) carrying this run's marker: whatever a lander started."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            with contextlib.suppress(OSError):
                if f"{MARKER}={self.run_id}".encode() in (entry / "environ").read_bytes():
                    command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    found.append(f"{entry.name}: {command}")
        return found

    def stop(self) -> None:
        for lander in self.landers:
            if lander.process.poll() is None:
                lander.process.kill()
                lander.process.wait()
        for pid_line in self.leftovers():  # a killed lander's check runs on in a session of its own
            with contextlib.suppress(OSError):
                os.kill(int(pid_line.split(":")[0]), signal.SIGKILL)
        for lander in self.landers:  # and a killed lander's scratch worktree stays behind
            for line in lander.worktrees()[1:]:
                scratch = Path(line.removeprefix("worktree "))
                git(lander.clone, "worktree", "remove", "--force", str(scratch), check=False)
                if scratch.parent.name.startswith("leasehold-land-"):
                    shutil.rmtree(scratch.parent, ignore_errors=True)


def wait_for(condition: Any, *, seconds: float, what: str, every: float = 0.1) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {seconds} s waiting for {what}")


@pytest.fixture
def queue(fleet, tmp_path) -> Iterator[Queue]:
    """A project landing onto `main` of a bare remote by merge, with a check that takes a moment."""
    slug = f"lw{next(_projects)}"
    repos = make_repos(tmp_path / "git")
    fleet.server.manage("create_project", slug, "--name", f"Landers {slug}", "--remote", repos.remote.as_uri())
    token = fleet.server.create_agent(f"{slug}-dev", project=slug)
    made = Queue(server=fleet.server, slug=slug, repos=repos, root=tmp_path, token=token)
    try:
        yield made
    finally:
        made.stop()


def set_landing(queue: Queue, check: str) -> None:
    queue.server.manage("set_landing", queue.slug, "--target", "main", "--check", check, "--check-timeout", "60")


def finished_landings(page: dict[str, Any]) -> list[dict[str, Any]]:
    return sorted(page["recent"], key=lambda landing: landing["epoch"])


class PagePoller:
    """Reads the landing page in a thread: the live landing's (id, epoch) seen at each read."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self.seen: list[tuple[int, int] | None] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        with self.queue.api() as api:
            while not self.done.wait(0.05):
                live = api.request("GET", f"/projects/{self.queue.slug}/landing/")["live"]
                self.seen.append(None if live is None else (live["id"], live["epoch"]))

    def __enter__(self) -> PagePoller:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(timeout=10)


def test_two_watching_landers_land_every_task_once_one_landing_at_a_time_and_stop_clean(queue):
    set_landing(queue, "sleep 0.3")
    before = queue.tip()
    keys = [queue.deliver(number) for number in range(1, 4)]

    with PagePoller(queue) as poller:
        landers = [queue.start_lander("lander-a"), queue.start_lander("lander-b")]
        keys += [queue.deliver(number) for number in range(4, 7)]  # more work arrives while they watch
        wait_for(
            lambda: all(queue.task(key)["status"] == "done" for key in keys),
            seconds=120,
            what="every delivered task to land",
            every=0.5,
        )

    page = queue.page()
    landings = finished_landings(page)
    assert page["live"] is None
    assert page["queue"] == []
    # Never two live landings: each landing's epoch follows the one before, and it was claimed only after
    # the one before had ended (the server's clock, microseconds).
    assert [landing["epoch"] for landing in landings] == list(range(1, len(landings) + 1))
    for earlier, later in itertools.pairwise(landings):
        assert later["claimed_at"] >= earlier["finished_at"], (earlier, later)
    live_seen = [seen for seen in poller.seen if seen is not None]
    assert live_seen, "the poller never saw a live landing"
    assert [epoch for _, epoch in live_seen] == sorted(epoch for _, epoch in live_seen)
    # Every delivered task landed once.
    landed = [task["key"] for landing in landings for task in landing["tasks"] if task["outcome"] == "landed"]
    assert sorted(landed) == sorted(keys)
    assert {landing["result"] for landing in landings} == {"landed"}
    assert {landing["agent"] for landing in landings} <= {f"{queue.slug}-lander-a", f"{queue.slug}-lander-b"}
    reported = [report["landing"] for lander in landers for report in lander.reports()]
    assert sorted(reported) == sorted(landing["id"] for landing in landings)
    labels = trailers(queue.repos.remote, f"{before}..main")
    for key in keys:
        task = queue.task(key)
        git(queue.repos.remote, "merge-base", "--is-ancestor", task["landing"]["landed_commit"], "main")
        assert labels.count(queue.labels[key]) == 1, (key, labels)
        assert git(queue.repos.remote, "show", f"main:{key.lower()}.txt") == key

    # SIGTERM: both exit 0 promptly; nothing of theirs is left running, and no scratch worktree.
    stopped = time.monotonic()
    for lander in landers:
        lander.process.send_signal(signal.SIGTERM)
    codes = [lander.process.wait(timeout=STOP_SECONDS) for lander in landers]
    assert codes == [0, 0], [lander.stderr.read_text()[-2000:] for lander in landers]
    assert time.monotonic() - stopped < STOP_SECONDS
    assert queue.leftovers() == []
    for lander in landers:
        assert lander.worktrees() == [f"worktree {lander.clone}"]


def test_a_lander_killed_mid_check_leaves_the_target_alone_and_the_other_lands_after_the_lease_lapses(queue):
    slow = queue.root / "slow"  # the check sleeps while this file exists
    started = queue.root / "check-started"
    slow.touch()
    set_landing(queue, f"touch {started}; if [ -e {slow} ]; then sleep 30; fi")
    before = queue.tip()
    key = queue.deliver(1)

    first = queue.start_lander("lander-a", lease_seconds=3)
    wait_for(started.exists, seconds=60, what="the first lander's check to start")
    live = queue.page()["live"]
    assert live is not None
    assert live["agent"] == f"{queue.slug}-lander-a"
    first.process.kill()  # kill -9 mid-check
    first.process.wait()
    slow.unlink()
    killed = time.monotonic()
    second = queue.start_lander("lander-b", lease_seconds=3)

    task = wait_for(
        lambda: (found := queue.task(key))["status"] == "done" and found,
        seconds=90,
        what="the other lander to land the task",
        every=0.3,
    )
    landings = finished_landings(queue.page())
    assert [(landing["status"], landing["agent"]) for landing in landings] == [
        ("expired", f"{queue.slug}-lander-a"),
        ("finished", f"{queue.slug}-lander-b"),
    ]
    expired, landed = landings
    assert (expired["id"], expired["epoch"]) == (live["id"], live["epoch"])
    assert [entry["outcome"] for entry in expired["tasks"]] == ["expired"]
    assert landed["epoch"] == expired["epoch"] + 1
    assert landed["claimed_at"] >= expired["finished_at"]
    assert [(entry["key"], entry["outcome"]) for entry in landed["tasks"]] == [(key, "landed")]
    # The killed lander pushed nothing: the landed commit's first parent is the tip from before.
    assert git(queue.repos.remote, "rev-parse", "main^1") == before
    assert task["landing"]["landed_commit"] == queue.tip()
    assert f"{queue.slug}-lander-b" in task["landing"]["landed_by"]
    assert time.monotonic() - killed < 60

    second.process.send_signal(signal.SIGTERM)
    assert second.process.wait(timeout=STOP_SECONDS) == 0
    assert second.worktrees() == [f"worktree {second.clone}"]

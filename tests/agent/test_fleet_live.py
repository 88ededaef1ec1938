"""The fleet story of issue 29, against a live server (SQLite, or PostgreSQL when the suite runs on it), with
real git: six agents, each on its own machine (its own config directory and clone), run the fleet loop of
docs/agents.md exactly as written — `leasehold run --next --worktree --wait --until-empty` with a stand-in
`claude` that commits and exits 0 — over 15 tasks, six of them a dependency chain and three more waiting on
its end, so most agents spend the end of the story with nothing claimable while work remains.

Pinned: every task is done exactly once (one completed work attempt each, no other attempt); every loop
ends with exit 3 and only after the last task was finished (its `run`s exit 0 before that); no state file
is left for an ended attempt; the SessionStart hook of no agent says "you hold" afterwards.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

from agent.client import LeaseholdClient
from tests.agent import standins
from tests.agent.gitrepos import git, make_repos
from tests.agent.live import REPO, agent_env, state_files
from tests.agent.test_hooks import SESSION_START, hook
from tests.agent.test_recipes import recipes

AGENTS = 6
CHAIN = 6  # F-1 ← F-2 ← … ← F-6: each waits on the one before
FREE = 6  # claimable at once
AFTER_CHAIN = 3  # wait on the chain's last task
LOOP_SECONDS = 80

# The agent's work: a commit in its worktree, a moment's thought, exit 0 (`run` finishes the attempt done).
WORK = (
    'echo "$LEASEHOLD_TASK" > "work-$LEASEHOLD_TASK.txt" && git add "work-$LEASEHOLD_TASK.txt" && '
    'git commit -qm "work on $LEASEHOLD_TASK" && sleep 0.3'
)

# `leasehold` as the loop calls it: this checkout's CLI; each `run`'s exit status and end time recorded.
SHIM = """#!/bin/sh
PYTHONPATH={repo} {python} -m agent "$@"
status=$?
if [ "$1" = run ]; then echo "$status $(date +%s.%N)" >> "$FLEET_EXITS"; fi
exit $status
"""

MAKE_FLEET = """
from ledger.actors import SYSTEM
from ledger.models import AgentKind
from ledger.services import agent_create, project_create
project = project_create(actor=SYSTEM, slug={slug!r}, name="The fleet story")
for index in range({agents}):
    agent, token = agent_create(actor=SYSTEM, handle=f"{slug}-{{index}}", kind=AgentKind.SCRIPT, projects=[project])
    print("token", token)
"""


def _timestamp(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _make_tasks(api: LeaseholdClient, slug: str) -> list[str]:
    def task(title: str) -> str:
        return str(api.create_task(slug, title, status="ready")["key"])

    chain = [task(f"chain step {index}") for index in range(CHAIN)]
    for before, after in itertools.pairwise(chain):
        api.add_dependency(after, blocked_by=before)
    free = [task(f"free task {index}") for index in range(FREE)]
    after_chain = [task(f"after the chain {index}") for index in range(AFTER_CHAIN)]
    for key in after_chain:
        api.add_dependency(key, blocked_by=chain[-1])
    return chain + free + after_chain


def test_six_agents_run_the_fleet_loop_until_the_project_is_finished(fleet, tmp_path):
    slug = "fleet" + tmp_path.name[-6:].replace("_", "").lower()
    made = fleet.server.manage("shell", "-c", MAKE_FLEET.format(slug=slug, agents=AGENTS))
    tokens = [line.split()[1] for line in made.splitlines() if line.startswith("token ")]
    assert len(tokens) == AGENTS
    api = LeaseholdClient(fleet.server.url, tokens[0])
    keys = _make_tasks(api, slug)
    repos = make_repos(tmp_path / "git")
    loop = recipes()["fleet"]
    agents = []
    for index, token in enumerate(tokens):
        home = tmp_path / f"agent-{index}"
        env = agent_env(home, trace=False)
        config = Path(env["LEASEHOLD_CONFIG"])
        config.parent.mkdir(parents=True, mode=0o700)
        config.write_text(json.dumps({"url": fleet.server.url, "token": token, "project": slug}))
        config.chmod(0o600)
        bin_dir = standins.install(home / "bin", "claude")
        shim = bin_dir / "leasehold"
        shim.write_text(SHIM.format(repo=REPO, python=sys.executable))
        shim.chmod(0o755)
        clone = home / "clone"
        git(tmp_path, "clone", "-q", str(repos.remote), str(clone))
        run_env = standins.run_env(
            env, bin_dir, home / "calls.jsonl", STANDIN_THEN=WORK, FLEET_EXITS=str(home / "exits.txt")
        )
        agents.append((home, env, run_env, clone))

    started = time.time()
    loops = [
        subprocess.Popen(
            ["bash", "-c", loop],
            env=run_env,
            cwd=clone,
            stdout=subprocess.DEVNULL,
            stderr=open(home / "stderr.txt", "w"),  # noqa: SIM115  # closed with the process
        )
        for home, _env, run_env, clone in agents
    ]
    try:
        for process in loops:
            process.wait(timeout=max(1.0, started + LOOP_SECONDS - time.time()))
    finally:
        for process in loops:
            if process.poll() is None:
                process.kill()
                process.wait()
    took = time.time() - started
    print(f"fleet loops: {took:.1f} s", file=sys.stderr)

    # Every task done, exactly once: one completed work attempt each, and no other attempt was made.
    events = []
    since = 0
    while True:
        page = api.changes(since=since, project=slug, limit=200)
        events += page["events"]
        if page["latest_event_id"] == since or not page["events"]:
            break
        since = page["latest_event_id"]
    finished = [event for event in events if event["type"] == "attempt.finished"]
    claimed = [event for event in events if event["type"] == "attempt.claimed"]
    assert Counter(event["task"] for event in finished) == Counter(keys), [e["payload"] for e in finished]
    assert {event["payload"]["outcome"] for event in finished} == {"done"}
    assert len(claimed) == len(keys)
    assert all(api.task(key)["status"] == "done" for key in keys)
    last_finished = max(_timestamp(event["created_at"]) for event in finished)

    # Every loop ended with exit 3, after the last task was finished; its runs before that exited 0.
    for home, env, _run_env, _clone in agents:
        exits = [line.split() for line in (home / "exits.txt").read_text().splitlines()]
        statuses = [int(status) for status, _ in exits]
        assert statuses[-1] == 3, ((home / "stderr.txt").read_text()[-3000:], statuses)
        assert set(statuses[:-1]) <= {0}, statuses
        assert float(exits[-1][1]) >= last_finished - 0.05, (float(exits[-1][1]) - last_finished, home.name)
        # No state file for an ended attempt, and no "you hold" for a task this agent or another finished.
        assert state_files(env) == []
        session = hook("session-start", SESSION_START, env=env, cwd=home)
        assert session.returncode == 0, session.stderr
        assert "you hold" not in session.stdout
    assert all(process.returncode == 0 for process in loops)  # `while …; do :; done` ends with status 0
    assert sum(len((home / "exits.txt").read_text().splitlines()) for home, *_ in agents) == len(keys) + AGENTS
    assert took < LOOP_SECONDS
    api.close()
    print(f"fleet: {len(keys)} tasks, {AGENTS} agents, {took:.1f} s", file=sys.stderr)

"""The runner daemon's life and death (SPEC §23.1), against a live server with real processes (checked by pid).

- `kill -9` of the runner: every `run` child and its command are gone within 2 s (the parent-death signal), and
  `run` hands the attempts off.
- A crash that takes the runner and its children at once: the restarted runner's registration hands the dead
  slots' attempts off at once (`runner_restart`, long before their leases would lapse), it removes their state
  files and worktree pointers, logging each, and the tasks are then done by the new attempts.
- SIGTERM drains: no new claim; a command that ends within the grace finishes its attempt; one that does not gets
  SIGTERM at the end of the grace (handed off); the runner exits 0. A second SIGINT hands off at once.
- Cancel from the console: the slot's command is stopped, the attempt handed off, the runner works on.
"""

from __future__ import annotations

import os
import signal
import time

from tests.agent.runners_live import (
    alive,
    attempts,
    clone_for,
    make_project,
    planner,
    runner_setup,
    state_files,
    wait_until,
)
from tests.agent.test_runner_live import _done, _slug, _tasks

LONG = 300.0  # seconds a command works unless stopped


def _started(runner, count: int, *, run: int | None = None) -> list[dict]:
    """Wait until `count` commands are running; their work records."""
    wait_until(lambda: len(runner.work()) >= count, timeout=60, what=f"{count} commands started\n{runner.stderr()}")
    return runner.work()


def _run_pids(runner) -> list[int]:
    return [event["pid"] for event in runner.events("start")]


def _one_runner(fleet, tmp_path, prefix: str, *, slots: int, tasks: int, top: str = "", lease: int = 600):
    slug = _slug(tmp_path, prefix)
    make_project(fleet.server, slug)
    clones = {slug: clone_for(tmp_path / "git", slug)}
    runner = runner_setup(
        fleet.server,
        tmp_path,
        f"{slug}-r",
        projects=clones,
        slots=slots,
        top=top,
        project_options=f"lease_seconds = {lease}",
        work_seconds=LONG,
    )
    api = planner(fleet.server, slug)
    keys = _tasks(api, slug, tasks)
    return slug, keys, runner, api


def test_kill_9_of_the_runner_takes_its_run_children_and_commands_within_2_s(fleet, tmp_path):
    slug, _keys, runner, _api = _one_runner(fleet, tmp_path, "rk", slots=2, tasks=2)
    runner.start()
    try:
        commands = [record["pid"] for record in _started(runner, 2)]
        runs = _run_pids(runner)
        assert len(runs) == 2
        assert all(alive(pid) for pid in runs + commands)

        os.kill(runner.process.pid, signal.SIGKILL)
        killed = time.monotonic()
        wait_until(lambda: not any(alive(pid) for pid in runs + commands), timeout=2, what="children gone")
        assert time.monotonic() - killed <= 2.0
    finally:
        runner.kill()

    rows = wait_until(
        lambda: (rows := attempts(fleet.server, slug)) and all(row["status"] != "active" for row in rows) and rows,
        timeout=20,
        what="run handed its attempts off",
    )
    assert {row["status"] for row in rows} == {"interrupted"}


def test_after_a_crash_the_restarted_runner_hands_off_at_once_and_removes_the_state_files(fleet, tmp_path):
    slug, keys, runner, api = _one_runner(fleet, tmp_path, "rc", slots=2, tasks=2)
    runner.start()
    try:
        commands = [record["pid"] for record in _started(runner, 2)]
        runs = _run_pids(runner)
        # The machine dies: the runner is frozen so that it sees nothing, its children die unreported, then it.
        os.kill(runner.process.pid, signal.SIGSTOP)
        for pid in runs:
            os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not any(alive(pid) for pid in runs + commands), timeout=5, what="children dead")
        runner.kill()
        held = state_files(runner)
        assert len(held) == 2
        assert {row["status"] for row in attempts(fleet.server, slug)} == {"active"}
        pointers = list((runner.home.parent / "git" / slug).glob("project/.git/worktrees/*/leasehold-attempt.json"))
        assert len(pointers) == 2

        restarted = time.monotonic()
        runner.start(WORK_SECONDS="0.2")
        wait_until(lambda: len(runner.events("handoff", run=2)) == 2, timeout=20, what="hand-off at registration")
        assert time.monotonic() - restarted < 20  # not after the 600 s leases
        rows = attempts(fleet.server, slug)
        first = [row for row in rows if row["id"] in {record["attempt"] for record in runner.work()[:2]}]
        assert {(row["status"], row["reason"]) for row in first} == {("interrupted", "runner_restart")}
        cleaned = [event["path"] for event in runner.events("cleanup", run=2)]
        assert sorted(cleaned) == sorted(str(path) for path in held + pointers)
        kinds = [event["event"] for event in runner.events(run=2)]
        assert max(i for i, kind in enumerate(kinds) if kind == "cleanup") < kinds.index("claim")  # before any claim
        wait_until(lambda: _done(api, keys), timeout=60, what="the tasks done after the restart")
    finally:
        runner.stop()

    rows = attempts(fleet.server, slug)
    assert sorted(row["task"] for row in rows if row["status"] == "completed") == sorted(keys)
    assert len(rows) == 4


def test_sigterm_drains_a_command_that_ends_within_the_grace_finishes_and_nothing_new_is_claimed(fleet, tmp_path):
    slug, _keys, runner, _api = _one_runner(fleet, tmp_path, "rd", slots=1, tasks=2, top="drain_grace_seconds = 60")
    runner.start(WORK_SECONDS="3")
    _started(runner, 1)
    runner.signal(signal.SIGTERM)
    assert runner.process.wait(timeout=60) == 0

    rows = attempts(fleet.server, slug)
    assert [(row["status"]) for row in rows] == ["completed"]  # finished in the grace; the second never claimed
    assert runner.events("drain")
    assert not state_files(runner)


def test_the_drain_grace_ends_with_sigterm_and_a_hand_off_and_a_second_sigint_is_at_once(fleet, tmp_path):
    slug, _keys, runner, _api = _one_runner(fleet, tmp_path, "rg", slots=2, tasks=3, top="drain_grace_seconds = 2")
    runner.start()
    commands = [record["pid"] for record in _started(runner, 2)]
    runner.signal(signal.SIGTERM)
    assert all(alive(pid) for pid in commands)  # the grace first
    assert runner.process.wait(timeout=40) == 0
    assert not any(alive(pid) for pid in commands)
    rows = attempts(fleet.server, slug)
    assert len(rows) == 2  # the third task was never claimed
    assert {row["status"] for row in rows} == {"interrupted"}

    runner.start(WORK_SECONDS=str(LONG))  # the drain grace is 2 s; a second SIGINT must not wait for it
    wait_until(lambda: len(runner.work()) >= 4, timeout=60, what="two commands again")
    commands = [record["pid"] for record in runner.work()[2:]]
    runner.signal(signal.SIGINT)
    time.sleep(0.3)
    runner.signal(signal.SIGINT)
    asked = time.monotonic()
    assert runner.process.wait(timeout=30) == 0
    assert time.monotonic() - asked < 15
    assert not any(alive(pid) for pid in commands)


def test_a_cancel_from_the_console_stops_the_command_and_the_runner_works_on(fleet, tmp_path):
    slug, _keys, runner, _api = _one_runner(fleet, tmp_path, "rx", slots=1, tasks=2, top="drain_grace_seconds = 1")
    runner.start()
    try:
        record = _started(runner, 1)[0]
        fleet.server.manage(
            "shell",
            "-c",
            "from ledger.actors import SYSTEM; from runners.models import RunnerSlot; "
            "from runners.services import slot_cancel_attempt; "
            f"slot_cancel_attempt(slot=RunnerSlot.objects.get(agent__handle='{runner.name}.1'), actor=SYSTEM)",
        )
        wait_until(lambda: not alive(record["pid"]), timeout=20, what="the cancelled command stopped")
        wait_until(lambda: len(runner.work()) >= 2, timeout=30, what="the next task started")
        assert runner.process.poll() is None
    finally:
        runner.stop()

    rows = attempts(fleet.server, slug)
    cancelled = next(row for row in rows if row["id"] == record["attempt"])
    assert (cancelled["status"], cancelled["reason"]) == ("interrupted", "user_request")

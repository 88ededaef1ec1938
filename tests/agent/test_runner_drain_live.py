"""A drain abandons the slots' parked claim waits at once (SPEC §23.1, §25), against a live server.

- `ParkedClaim`: an abandoned claim wait returns at once; what it did on the server is made sure of by its
  Idempotency-Key: taken by a harmless heartbeat first (the abandoned claim can never claim after that), or,
  when the claim answered first, its answer replayed with a working lease token (to give the task back).
- An idle runner parked on a 60 s wait (one claim for its 3 idle slots) exits 0 within a few seconds of SIGTERM.
- A task created just before the SIGTERM is either run or left claimable: no live attempt of the slot agents
  remains after the runner exits.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid

import pytest

from agent.client import LeaseholdClient
from agent.client.errors import CallAbandoned, LeaseholdError
from agent.client.wire import Abandon
from agent.runner.parked import ClaimAbandoned, ParkedClaim
from tests.agent.runners_live import attempts, clone_for, make_project, planner, runner_setup, wait_until
from tests.agent.test_runner_live import _slug


def _worker(fleet, tmp_path, prefix: str) -> tuple[str, LeaseholdClient, LeaseholdClient]:
    slug = _slug(tmp_path, prefix)
    make_project(fleet.server, slug)
    api = planner(fleet.server, slug)
    worker = LeaseholdClient(fleet.server.url, fleet.server.create_agent(f"worker-{slug}", project=slug))
    return slug, api, worker


def _claimable(api: LeaseholdClient, slug: str) -> list[str]:
    return [task["key"] for task in api.tasks(project=slug, claimable=True)["results"]]


def _options() -> dict:
    return {"wait": 5, "lease_seconds": None, "idempotency_key": f"lh-test-{uuid.uuid4().hex}"}


def test_an_abandoned_claim_wait_returns_at_once_and_takes_nothing_after(fleet, tmp_path):
    slug, api, worker = _worker(fleet, tmp_path, "pa")
    parked = ParkedClaim(worker, threading.Event())
    outcome: list[object] = []

    def park() -> None:
        try:
            outcome.append(parked.claim(slug, wait=60, lease_seconds=None))
        except ClaimAbandoned as abandoned:
            outcome.append(abandoned)

    thread = threading.Thread(target=park)
    thread.start()
    wait_until(lambda: parked._current is not None, timeout=10, what="the claim sent")
    time.sleep(0.5)  # on the server, parked
    asked = time.monotonic()
    parked.abandon()
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert time.monotonic() - asked < 3  # not the 60 s wait
    (abandoned,) = outcome
    assert isinstance(abandoned, ClaimAbandoned)
    assert (abandoned.claim, abandoned.sure) == (None, True)
    assert "it took nothing" in abandoned.message

    key = api.create_task(slug, "after the abandon", status="ready")["key"]
    time.sleep(1.0)  # what a claim still parked on the server would take by now
    assert key in _claimable(api, slug)


def test_a_call_abandoned_before_it_is_sent_is_not_sent(fleet, tmp_path):
    slug, api, worker = _worker(fleet, tmp_path, "pn")
    key = api.create_task(slug, "not to be claimed", status="ready")["key"]
    abandon = Abandon()
    abandon.abandon()
    with pytest.raises(CallAbandoned):
        worker.claim_next(slug, wait=5, abandon=abandon, idempotency_key=f"lh-test-{uuid.uuid4().hex}")
    assert key in _claimable(api, slug)


def test_a_claim_abandoned_after_it_took_a_task_is_replayed_with_a_lease_that_gives_it_back(fleet, tmp_path):
    slug, api, worker = _worker(fleet, tmp_path, "pb")
    key = api.create_task(slug, "taken as it was abandoned", status="ready")["key"]
    options = _options()
    taken = worker.claim_next(slug, **options)  # its answer never reached the slot
    assert taken is not None
    assert taken.lease.task == key

    abandoned = ParkedClaim(worker, threading.Event()).settle(slug, options)
    assert abandoned.claim is not None
    replayed = abandoned.claim.lease
    assert (replayed.attempt_id, replayed.token) == (taken.lease.attempt_id, taken.lease.token)
    worker.release(abandoned.claim.lease, reason="test: given back")
    assert key in _claimable(api, slug)


def test_a_claim_abandoned_before_it_took_anything_can_take_nothing_later(fleet, tmp_path):
    slug, api, worker = _worker(fleet, tmp_path, "pc")
    options = _options()
    abandoned = ParkedClaim(worker, threading.Event()).settle(slug, options)
    assert (abandoned.claim, abandoned.sure) == (None, True)

    key = api.create_task(slug, "created after the abandon", status="ready")["key"]
    with pytest.raises(LeaseholdError) as caught:  # the abandoned request's next try on the server
        worker.claim_next(slug, **options)
    assert caught.value.code == "IDEMPOTENCY_CONFLICT"
    assert key in _claimable(api, slug)


def _idle_runner(fleet, tmp_path, prefix: str, *, slots: int):
    slug = _slug(tmp_path, prefix)
    make_project(fleet.server, slug)
    clones = {slug: clone_for(tmp_path / "git", slug)}
    runner = runner_setup(fleet.server, tmp_path, f"{slug}-r", projects=clones, slots=slots, wait_seconds=60)
    return slug, runner, planner(fleet.server, slug)


def _parked(runner, *, run: int) -> None:
    wait_until(lambda: runner.events("registered", run=run), timeout=60, what=f"registered\n{runner.stderr()}")
    time.sleep(1.5)  # every slot's claim sent and parked on the server (60 s)


def test_an_idle_runner_with_parked_slots_exits_within_seconds_of_sigterm(fleet, tmp_path):
    slug, runner, _api = _idle_runner(fleet, tmp_path, "ri", slots=3)
    runner.start()
    try:
        _parked(runner, run=1)
        asked = time.monotonic()
        runner.signal(signal.SIGTERM)
        assert runner.process.wait(timeout=30) == 0
        assert time.monotonic() - asked < 5
    finally:
        runner.kill()
    abandons = runner.events("abandon")
    assert len(abandons) == 1  # one parked claim wait for the runner's 3 idle slots (the others wait in the runner)
    assert all("it took nothing" in event["message"] and event["sure"] for event in abandons)
    assert runner.events("exit")
    assert attempts(fleet.server, slug) == []


def test_a_task_created_just_before_sigterm_is_run_or_left_claimable_never_held_by_nobody(fleet, tmp_path):
    slug, runner, api = _idle_runner(fleet, tmp_path, "rt", slots=2)
    for run in (1, 2, 3):
        runner.start()
        try:
            _parked(runner, run=run)
            key = api.create_task(slug, f"just before SIGTERM {run}", status="ready")["key"]
            asked = time.monotonic()
            runner.signal(signal.SIGTERM)
            assert runner.process.wait(timeout=30) == 0
            assert time.monotonic() - asked < 10
        finally:
            runner.kill()
        rows = attempts(fleet.server, slug)
        assert [row for row in rows if row["status"] == "active"] == [], rows
        ran = [row for row in rows if row["task"] == key and row["status"] == "completed"]
        assert ran or key in _claimable(api, slug), (rows, runner.events())

"""Following the feed from the agent side (SPEC §18): `iter_changes()`, `leasehold changes --follow`, and the
lease keeper learning of a revocation from the feed instead of at its next renewal. Against a live server."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

from agent.client.keeper import LeaseKeeper
from tests.agent.live import REPO


def test_iter_changes_yields_each_new_event_once_as_it_commits(fleet, api):
    stop = threading.Event()
    seen: list[dict] = []

    def follow():
        for event in api.iter_changes(wait=5, stop=stop):
            seen.append(event)
            if sum(e["type"] == "task.created" for e in seen) >= 2:
                stop.set()

    follower = threading.Thread(target=follow)
    follower.start()
    time.sleep(1.0)  # following from now on
    first = fleet.ready_task()
    second = fleet.ready_task()
    follower.join(timeout=20)
    assert not follower.is_alive()
    created = [e["task"] for e in seen if e["type"] == "task.created"]
    assert created == [first, second]
    ids = [e["id"] for e in seen]
    assert ids == sorted(set(ids))


def test_leasehold_changes_follow_prints_events_as_json_lines(fleet, logged_in):
    process = subprocess.Popen(
        [sys.executable, "-m", "agent", "changes", "--follow", "--json"],
        cwd=REPO,
        env=logged_in,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(2.0)
        key = fleet.ready_task()
        deadline = time.monotonic() + 20
        line = ""
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if line and json.loads(line)["type"] == "task.created":
                break
        assert json.loads(line)["task"] == key
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_the_keeper_learns_of_a_revocation_from_the_feed_at_once(fleet, api):
    key = fleet.ready_task()
    claim = api.claim(key, lease_seconds=600)  # renewals every 200 s: the feed must be what tells
    keeper = LeaseKeeper(api, claim.lease, watch_changes=True).start()
    try:
        time.sleep(1.5)  # the watcher follows from now on
        revoked_at = time.monotonic()
        fleet.server.force_release(key)
        assert keeper.lost.wait(15), "the keeper did not learn of the revocation"
        took = time.monotonic() - revoked_at
    finally:
        keeper.stop()
    assert took < 15
    assert "LEASE_NOT_HELD" in (keeper.lost_reason or "")

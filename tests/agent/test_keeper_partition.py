"""The lease keeper riding out a partition (SPEC §23.4) against a scripted transport: what counts, when it stops."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from agent.client.errors import LeaseLost
from agent.client.partition import partition_margin
from tests.agent.test_keeper import LEASE, RENEWED, Server, keeper_for

REFUSED = httpx.ConnectError("refused")


def test_the_margin_is_five_seconds_or_a_tenth_of_the_lease():
    assert partition_margin(10) == 5
    assert partition_margin(600) == 60


def test_unanswered_renewals_keep_the_lease_until_it_would_run_out_here_less_the_margin():
    # One renewal gets through, then none: the lease (3 s: three 1 s intervals) holds until 3 s after that
    # renewal was sent; with a 1 s margin the keeper gives up about 2 s after it, dozens of failures later.
    server = Server(RENEWED, REFUSED)
    keeper, told = keeper_for(server, ride_out_partitions=True, partition_margin_seconds=1.0)
    started = time.monotonic()
    keeper.start()
    assert not keeper.lost.wait(1.5)
    assert keeper.lost.wait(5)
    lost_after = time.monotonic() - started
    assert 1.8 <= lost_after <= 2.6
    assert keeper.partitioned
    assert keeper.failures == 0  # unanswered tries are not counted towards renew_attempts
    assert len(server.with_token()) > LEASE.renew_attempts + 3
    assert "could not be reached" in (keeper.lost_reason or "")
    assert told == [keeper.lost_reason]
    with pytest.raises(LeaseLost):
        keeper.note("during the partition")
    sent = len(server.with_token())
    finished = keeper.late_report("handoff", interruption_reason_code="other")  # the one write it still makes
    assert finished["attempt"]["status"] == "completed"
    assert len(server.with_token()) == sent + 1
    assert server.with_token()[-1].url.path.endswith("/finish/")
    with pytest.raises(LeaseLost):
        keeper.late_report("handoff")
    with pytest.raises(LeaseLost):
        keeper.finish("done")


def test_a_renewal_answered_within_the_margin_simply_goes_on():
    server = Server(RENEWED, REFUSED, REFUSED, REFUSED, REFUSED, REFUSED, RENEWED)
    keeper, _ = keeper_for(server, ride_out_partitions=True, partition_margin_seconds=1.0)
    with keeper:
        threading.Event().wait(1.2)
    assert not keeper.lost.is_set()
    assert keeper.renewals >= 2
    assert keeper.clock.streaks == 1
    assert keeper.clock.unreachable_since is None


def test_answered_refusals_still_count_and_a_stated_loss_is_still_immediate():
    server = Server(RENEWED, "SOMETHING_ELSE")
    keeper, _ = keeper_for(server, ride_out_partitions=True, partition_margin_seconds=1.0)
    keeper.start()
    assert keeper.lost.wait(2)
    assert keeper.failures == 3
    assert not keeper.partitioned

    server = Server(RENEWED, REFUSED, "STALE_EPOCH")
    keeper, _ = keeper_for(server, ride_out_partitions=True, partition_margin_seconds=1.0)
    keeper.start()
    assert keeper.lost.wait(2)
    assert "STALE_EPOCH" in (keeper.lost_reason or "")
    assert not keeper.partitioned
    with pytest.raises(LeaseLost):
        keeper.late_report("handoff")  # the server said so: the token is never sent again

"""The lease keeper against a live server that goes away: three failed renewals, then the lease is lost."""

from __future__ import annotations

import httpx
import pytest

from agent.client import LeaseholdClient, lease_fingerprint
from agent.client.errors import LeaseLost
from agent.client.keeper import LeaseKeeper
from tests.agent.live import LiveServer


@pytest.fixture
def second_server(fleet):
    """Another server process on the same database, to be stopped by the test."""
    server = LiveServer(fleet.server.data_dir, same_database_as=fleet.server).start()
    yield server
    server.stop()


def test_with_the_server_stopped_the_keeper_gives_up_after_three_failed_renewals(fleet, second_server):
    key = fleet.ready_task()
    sent: list[httpx.Request] = []
    client = LeaseholdClient(second_server.url, fleet.token, on_request=sent.append)
    # 6 s lease: renewals every 2 s, retries 1 s apart after a failure, so the third failure
    # comes about 4 s after the last renewal, while the lease still has 2 s to run.
    claim = client.claim(key, lease_seconds=6)
    assert claim.lease.renew_attempts == 3
    told: list[str] = []
    keeper = LeaseKeeper(client, claim.lease, on_lost=told.append).start()
    try:
        assert not keeper.lost.wait(2.5)
        assert keeper.renewals >= 1
        second_server.stop()
        assert keeper.lost.wait(15), "the keeper did not give up"
    finally:
        keeper.stop()
    assert keeper.failures == 3
    assert keeper.lost_reason is not None
    assert keeper.lost_reason.startswith("3 renewals failed in a row")
    assert "CONNECTION_FAILED" in keeper.lost_reason
    assert told == [keeper.lost_reason]
    with pytest.raises(LeaseLost):
        keeper.note("after the loss")
    with_token = [request for request in sent if request.headers.get("X-Lease-Token")]
    assert {lease_fingerprint(request.headers["X-Lease-Token"]) for request in with_token} == {
        lease_fingerprint(claim.lease.token)
    }
    assert len(with_token) == keeper.renewals + 3

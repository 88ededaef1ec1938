"""The lease keeper against a scripted transport: when it renews, when it gives up, what it refuses."""

from __future__ import annotations

import threading

import httpx
import pytest

from agent.client import Lease, LeaseholdClient
from agent.client.errors import LeaseLost
from agent.client.keeper import LeaseKeeper

LEASE = Lease(attempt_id=7, token="secret-token", epoch=3, task="WEB-1", renew_every_seconds=1, renew_attempts=3)
RENEWED = {"lease_expires_at": "2999-01-01T00:00:00Z", "renew_count": 1}


class Server:
    """Answers renewals from a list (the last answer repeats); records every request."""

    def __init__(self, *renewals) -> None:
        self.renewals = list(renewals)
        self.requests: list[httpx.Request] = []
        self.lock = threading.Lock()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        with self.lock:
            self.requests.append(request)
            if request.url.path.endswith("/finish/"):
                return httpx.Response(
                    200, json={"attempt": {"id": 7, "task": "WEB-1", "status": "completed"}, "task": {"key": "WEB-1"}}
                )
            answer = self.renewals.pop(0) if len(self.renewals) > 1 else self.renewals[0]
        if isinstance(answer, Exception):
            raise answer
        if isinstance(answer, str):
            body = {"error": {"code": answer, "message": answer, "retryable": False, "details": {}}}
            return httpx.Response(409, json=body)
        return httpx.Response(200, json=answer)

    def with_token(self) -> list[httpx.Request]:
        return [request for request in self.requests if request.headers.get("X-Lease-Token") == LEASE.token]


def keeper_for(server: Server, **options) -> tuple[LeaseKeeper, list[str]]:
    told: list[str] = []
    client = LeaseholdClient("http://ledger.test", "agent-token", transport=httpx.MockTransport(server))
    options.setdefault("renew_every_seconds", 0.1)
    options.setdefault("failure_retry_seconds", 0.05)
    return LeaseKeeper(client, LEASE, on_lost=told.append, **options), told


def test_the_keeper_renews_every_interval_while_the_work_runs():
    server = Server(RENEWED)
    keeper, told = keeper_for(server)
    with keeper:
        threading.Event().wait(0.55)
    assert 2 <= keeper.renewals <= 6
    assert not keeper.lost.is_set()
    assert told == []
    assert all(request.url.path == "/api/v1/attempts/7/renew/" for request in server.requests)


@pytest.mark.parametrize("code", ["LEASE_EXPIRED", "LEASE_NOT_HELD", "STALE_EPOCH", "INVALID_LEASE_TOKEN"])
def test_a_lease_ending_answer_loses_the_lease_at_once_and_the_token_is_never_sent_again(code):
    server = Server(RENEWED, code)
    keeper, told = keeper_for(server)
    keeper.start()
    assert keeper.lost.wait(5)
    sent = len(server.with_token())
    assert sent == 2
    assert keeper.failures == 0
    assert code in keeper.lost_reason
    assert told == [keeper.lost_reason]
    for write in (lambda: keeper.note("late"), lambda: keeper.finish("done"), lambda: keeper.release()):
        with pytest.raises(LeaseLost):
            write()
    with pytest.raises(LeaseLost):
        keeper.client.renew(LEASE)  # the client itself refuses too
    threading.Event().wait(0.3)
    keeper.stop()
    assert len(server.with_token()) == sent


def test_the_keeper_gives_up_after_renew_attempts_consecutive_failures():
    server = Server(httpx.ConnectError("refused"))
    keeper, told = keeper_for(server)
    keeper.start()
    assert keeper.lost.wait(5)
    assert keeper.failures == 3
    assert len(server.with_token()) == 3
    assert "3 renewals failed in a row" in keeper.lost_reason
    assert len(told) == 1
    threading.Event().wait(0.3)
    assert len(server.with_token()) == 3


def test_a_successful_renewal_resets_the_failure_count():
    refused = httpx.ConnectError("refused")
    server = Server(refused, refused, RENEWED, refused, refused, RENEWED, RENEWED)
    keeper, _ = keeper_for(server)
    with keeper:
        threading.Event().wait(0.8)
    assert not keeper.lost.is_set()
    assert keeper.renewals >= 2


def test_finish_stops_the_renewals_first_and_ends_the_lease():
    server = Server(RENEWED)
    keeper, told = keeper_for(server)
    keeper.start()
    threading.Event().wait(0.25)
    keeper.finish("done", result_summary="ok")
    count = len(server.requests)
    threading.Event().wait(0.3)
    assert len(server.requests) == count
    assert server.requests[-1].url.path == "/api/v1/attempts/7/finish/"
    with pytest.raises(LeaseLost):
        keeper.note("after the end")
    assert told == []


def test_a_renewal_that_says_the_task_was_cancelled_releases_the_attempt_and_stops():
    # Issue 15, bug 6: the holder of a cancelled task renewed on and on; now it gives the attempt back.
    server = Server({**RENEWED, "task_status": "ready"}, {**RENEWED, "task_status": "cancelled"})
    keeper, told = keeper_for(server)
    with keeper:
        assert keeper.wait_lost(5.0)
        threading.Event().wait(0.3)
    assert keeper.cancelled
    paths = [request.url.path for request in server.with_token()]
    assert paths[-1] == "/api/v1/attempts/7/release/"
    assert paths.count("/api/v1/attempts/7/renew/") == 2
    assert told
    assert "cancelled" in told[0]
    with pytest.raises(LeaseLost):
        keeper.note("more work")

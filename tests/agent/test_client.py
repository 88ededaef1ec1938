"""The client's retry rule and error mapping, against a scripted transport (httpx.MockTransport)."""

from __future__ import annotations

import json

import httpx
import pytest

from agent.client import Lease, LeaseholdClient, api_root, errors
from agent.land.api import landing_lease
from core.errors import ERRORS_BY_CODE as SERVER_ERRORS

LEASE = Lease(attempt_id=7, token="secret-token", epoch=3, task="WEB-1", renew_every_seconds=1, renew_attempts=3)


def envelope(code: str, *, status: int, retryable: bool = False, details: dict | None = None) -> httpx.Response:
    body = {"error": {"code": code, "message": f"{code} happened", "retryable": retryable, "details": details or {}}}
    return httpx.Response(status, json=body)


class Script:
    """Answers requests in order, recording each one."""

    def __init__(self, *answers) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def client_for(script: Script, **options) -> tuple[LeaseholdClient, list[float]]:
    sleeps: list[float] = []
    client = LeaseholdClient(
        "http://ledger.test", "agent-token", transport=httpx.MockTransport(script), sleep=sleeps.append, **options
    )
    return client, sleeps


CLAIMED = {
    "attempt": {"id": 9, "task": "WEB-1", "epoch": 4, "status": "active", "lease_expires_at": "2026-01-05T09:15:00Z"},
    "lease_token": "tok",
    "lease_expires_at": "2026-01-05T09:15:00Z",
    "renew_every_seconds": 300,
    "renew_attempts": 3,
    "epoch": 4,
    "label": "owner=a;branch=-;env=-;task=WEB-1;epoch=4",
    "task": {"key": "WEB-1"},
    "context": {},
}


def test_a_retryable_error_is_retried_with_the_same_idempotency_key():
    script = Script(
        envelope("STORAGE_BUSY", status=503, retryable=True),
        envelope("STORAGE_BUSY", status=503, retryable=True),
        httpx.Response(201, json=CLAIMED),
    )
    client, sleeps = client_for(script)
    claim = client.claim("WEB-1")
    assert claim.lease.attempt_id == 9
    assert claim.lease.token == "tok"
    keys = {request.headers["Idempotency-Key"] for request in script.requests}
    assert len(script.requests) == 3
    assert len(keys) == 1
    assert len(sleeps) == 2
    assert 0.125 <= sleeps[0] <= 0.25  # base 0.25 s, jittered down to half at most
    assert 0.25 <= sleeps[1] <= 0.5  # then doubled


def test_the_callers_idempotency_key_is_sent_on_every_try():
    script = Script(envelope("RATE_LIMITED", status=429, retryable=True), httpx.Response(201, json=CLAIMED))
    client, _ = client_for(script)
    client.claim("WEB-1", idempotency_key="claim-web-1")
    assert [request.headers["Idempotency-Key"] for request in script.requests] == ["claim-web-1", "claim-web-1"]


def test_each_new_call_gets_a_new_idempotency_key():
    script = Script(httpx.Response(201, json=CLAIMED))
    client, _ = client_for(script)
    client.claim("WEB-1")
    client.claim("WEB-1")
    assert script.requests[0].headers["Idempotency-Key"] != script.requests[1].headers["Idempotency-Key"]


def test_a_renewal_without_usage_sends_no_key_and_one_with_usage_keeps_it_on_every_try():
    """Issue 34: a key is sent where a retry could double a write; a retried plain renewal only extends."""
    renewed = {"attempt": 7, "lease_expires_at": "2026-01-05T09:15:00Z", "task_status": "ready", "new_comments": 0}
    script = Script(envelope("STORAGE_BUSY", status=503, retryable=True), httpx.Response(200, json=renewed))
    client, _ = client_for(script)
    client.renew(LEASE)
    assert [request.headers.get("Idempotency-Key") for request in script.requests] == [None, None]
    client.renew(LEASE, usage={"input_tokens": 10})
    keys = [request.headers.get("Idempotency-Key") for request in script.requests[2:]]
    assert len(keys) == 1  # answered at once this time (the script's last answer repeats)
    assert keys[0]
    client.renew(LEASE, idempotency_key="mine")
    assert script.requests[-1].headers["Idempotency-Key"] == "mine"


def test_a_non_retryable_error_is_raised_at_once_as_its_own_type():
    script = Script(envelope("TASK_TAKEN", status=409, details={"holder": "agent-3"}))
    client, sleeps = client_for(script)
    with pytest.raises(errors.TaskTaken) as caught:
        client.claim("WEB-1")
    assert len(script.requests) == 1
    assert sleeps == []
    error = caught.value
    assert (error.code, error.http_status, error.retryable) == ("TASK_TAKEN", 409, False)
    assert error.message == "TASK_TAKEN happened"
    assert error.details == {"holder": "agent-3"}
    assert isinstance(error, errors.LeaseholdError)


def test_the_envelopes_retryable_flag_decides_not_the_status():
    script = Script(envelope("STORAGE_BUSY", status=503, retryable=False))
    client, _ = client_for(script)
    with pytest.raises(errors.StorageBusy):
        client.projects()
    assert len(script.requests) == 1


def test_retries_are_bounded():
    script = Script(envelope("STORAGE_BUSY", status=503, retryable=True))
    client, sleeps = client_for(script, max_retries=3, backoff_base=0.5, backoff_max=1.0)
    with pytest.raises(errors.StorageBusy):
        client.renew(LEASE)
    assert len(script.requests) == 4
    assert len(sleeps) == 3
    assert all(0.25 <= delay <= 1.0 for delay in sleeps)


def test_rate_limited_waits_at_least_retry_after():
    script = Script(
        envelope("RATE_LIMITED", status=429, retryable=True, details={"retry_after_seconds": 3}),
        httpx.Response(200, json={"results": [], "next_cursor": None}),
    )
    client, sleeps = client_for(script)
    client.projects()
    assert sleeps[0] >= 3


def test_connection_errors_are_retried_with_the_same_key():
    script = Script(
        httpx.ConnectError("refused"),
        httpx.ReadTimeout("lost answer"),
        httpx.Response(201, json={"note": {"id": 1}, "lease_expires_at": "2026-01-05T09:15:00Z"}),
    )
    client, _ = client_for(script)
    client.note(LEASE, "checkpoint", kind="checkpoint")
    assert len(script.requests) == 3
    assert len({request.headers["Idempotency-Key"] for request in script.requests}) == 1


def test_connection_failure_after_the_retries_is_connection_failed():
    script = Script(httpx.ConnectError("refused"))
    client, _ = client_for(script, max_retries=2)
    with pytest.raises(errors.ConnectionFailed):
        client.projects()
    assert len(script.requests) == 3


def test_retries_zero_means_one_try():
    script = Script(httpx.ConnectError("refused"))
    client, sleeps = client_for(script)
    with pytest.raises(errors.ConnectionFailed):
        client.renew(LEASE, retries=0)
    assert len(script.requests) == 1
    assert sleeps == []


def test_reads_carry_no_idempotency_key_and_holder_calls_carry_the_lease():
    script = Script(httpx.Response(200, json={"lease_expires_at": "2026-01-05T09:15:00Z", "renew_count": 1}))
    client, _ = client_for(script)
    client.renew(LEASE)
    client.context("WEB-1")
    renew, read = script.requests
    assert renew.url.path == "/api/v1/attempts/7/renew/"
    assert renew.headers["X-Lease-Token"] == "secret-token"
    assert renew.headers["X-Lease-Epoch"] == "3"
    assert renew.headers["Authorization"] == "Bearer agent-token"
    assert "Idempotency-Key" not in read.headers
    assert "X-Lease-Token" not in read.headers


def test_one_renew_serves_attempts_and_landings_and_refuses_usage_on_a_landing():
    """A landing's lease holds `landings`: the client's one `renew` posts there, and usage has no place on it."""
    script = Script(httpx.Response(200, json={"lease_expires_at": "2026-01-05T09:15:00Z", "renew_count": 1}))
    client, _ = client_for(script)
    landing = landing_lease({"id": 12, "lease_token": "land-token", "epoch": 5})
    assert landing == Lease.from_dict(landing.as_dict())
    client.renew(landing, lease_seconds=120)
    client.renew(LEASE, usage={"input_tokens": 10})
    (held, worked) = script.requests
    assert held.url.path == "/api/v1/landings/12/renew/"
    assert (held.headers["X-Lease-Token"], held.headers["X-Lease-Epoch"]) == ("land-token", "5")
    assert json.loads(held.content) == {"lease_seconds": 120}
    assert worked.url.path == "/api/v1/attempts/7/renew/"
    assert json.loads(worked.content) == {"usage": {"input_tokens": 10}}
    with pytest.raises(ValueError, match="landings 12"):
        client.renew(landing, usage={"input_tokens": 10})
    assert len(script.requests) == 2


def test_claim_next_with_nothing_claimable_is_none():
    script = Script(httpx.Response(204))
    client, _ = client_for(script)
    assert client.claim_next("web", task_class="migration") is None
    assert json.loads(script.requests[0].content) == {"project": "web", "task_class": "migration"}


def test_after_a_lease_ending_answer_the_token_is_never_sent_again():
    script = Script(envelope("LEASE_NOT_HELD", status=409))
    client, _ = client_for(script)
    with pytest.raises(errors.LeaseNotHeld):
        client.renew(LEASE)
    with pytest.raises(errors.LeaseLost):
        client.note(LEASE, "late write")
    with pytest.raises(errors.LeaseLost):
        client.clone().finish(LEASE, "done")
    assert len(script.requests) == 1


def test_a_gateway_error_without_envelope_is_retryable_and_a_500_page_is_not():
    script = Script(httpx.Response(502, text="bad gateway"), httpx.Response(500, text="<html>"))
    client, _ = client_for(script)
    with pytest.raises(errors.LeaseholdError) as caught:
        client.projects()
    assert caught.value.code == "HTTP_500"
    assert len(script.requests) == 2


def test_every_server_error_code_has_its_own_client_exception():
    for code in SERVER_ERRORS:
        error = errors.error_from_envelope(
            {"error": {"code": code, "message": "m", "retryable": False, "details": {}}}, http_status=409
        )
        assert type(error) is errors.ERRORS_BY_CODE[code]
        assert error.code == code


def test_the_error_registry_holds_every_subclass_by_its_code():
    classes = [
        value
        for value in vars(errors).values()
        if isinstance(value, type) and issubclass(value, errors.LeaseholdError) and value is not errors.LeaseholdError
    ]
    assert {cls.code: cls for cls in classes} == errors.ERRORS_BY_CODE
    assert errors.ERRORS_BY_CODE["INTERNAL_ERROR"] is errors.InternalError


def test_two_error_classes_with_one_code_are_refused():
    class SecondTaskTaken(errors.TaskTaken):
        pass

    with pytest.raises(RuntimeError, match="TASK_TAKEN"):
        errors._registry()


def test_an_unknown_code_keeps_its_name():
    error = errors.error_from_envelope(
        {"error": {"code": "NEW_THING", "message": "m", "retryable": True, "details": {}}}, http_status=409
    )
    assert type(error) is errors.LeaseholdError
    assert (error.code, error.retryable) == ("NEW_THING", True)


def test_the_api_root_accepts_the_server_or_the_api_url():
    assert api_root("http://h:8000/") == "http://h:8000"
    assert api_root("http://h:8000/api/v1/") == "http://h:8000"


def test_the_lease_token_is_not_in_the_repr():
    assert "secret-token" not in repr(LEASE)


def test_the_logins_token_is_not_in_the_repr():
    from agent.workspace.config import CommandAttempt, Settings

    login = Settings("http://ledger.test", "lh_agent_secret", project="WEB")
    assert "lh_agent_secret" not in repr(login)
    assert repr(login) == "Settings(url='http://ledger.test', project='WEB', attempt=None)"
    attempt = CommandAttempt(attempt_id=7, task="WEB-1", epoch=3, label="owner=a")
    assert "lh_attempt_secret" not in repr(Settings("http://ledger.test", "lh_attempt_secret", attempt=attempt))
    # Kept out of the repr only: the token is still the login's.
    assert login.token == "lh_agent_secret"
    assert login == Settings("http://ledger.test", "lh_agent_secret", project="WEB")


def test_a_dependency_cycle_in_text_names_its_path():
    from agent.client.errors import error_from_envelope
    from agent.client.text import error_text

    envelope = {
        "error": {
            "code": "DEPENDENCY_CYCLE",
            "message": "AGT-1 blocked by AGT-3 would close a cycle.",
            "retryable": False,
            "details": {"path": ["AGT-1", "AGT-3", "AGT-2", "AGT-1"]},
        }
    }
    error = error_from_envelope(envelope, http_status=409)
    assert error_text(error) == "AGT-1 blocked by AGT-3 would close a cycle: AGT-1 → AGT-3 → AGT-2 → AGT-1."
    plan = {"error": {**envelope["error"], "message": "The plan's dependencies form a cycle: a → b → a."}}
    plan["error"]["details"] = {"path": ["a", "b", "a"]}
    assert error_text(error_from_envelope(plan, http_status=409)) == "The plan's dependencies form a cycle: a → b → a."

"""The runner endpoints (SPEC §23.1): register and heartbeat, a runner token's scope, bad input."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from leases.models import Attempt, AttemptStatus, InterruptionReason
from leases.services import lease_claim
from ledger.models import Agent
from runners.models import RunnerSlot, SlotState
from tests.api.conftest import assert_error
from tests.factories import AgentFactory, TaskFactory

pytestmark = pytest.mark.django_db

REGISTER = "/api/v1/runners/register/"
HEARTBEAT = "/api/v1/runners/heartbeat/"


def bearer(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def register(runner) -> dict:
    response = bearer(runner.api_token).post(REGISTER, {"host": "box-1", "version": "0.9", "pid": 77}, format="json")
    assert response.status_code == 201, response.content[:500]
    return response.json()


def test_register_answers_the_runner_and_one_token_per_slot(runner):
    body = register(runner)
    assert body["runner"] == {
        "name": "gpu-box",
        "labels": ["gpu"],
        "projects": ["web"],
        "slots": 2,
        "cordoned": False,
        "draining": False,
        "heartbeat_seconds": 15,
    }
    assert [(slot["number"], slot["agent"]) for slot in body["slots"]] == [(1, "gpu-box.1"), (2, "gpu-box.2")]
    assert all(slot["token"].startswith("lh_") for slot in body["slots"])
    assert body["handed_off"] == []
    # The slot token is an agent token: it works on the agent API.
    assert bearer(body["slots"][0]["token"]).get("/api/v1/tasks/?project=web").status_code == 200


def test_an_old_slot_token_is_refused_after_the_runner_registers_again(runner):
    old = register(runner)["slots"][0]["token"]
    new = register(runner)["slots"][0]["token"]
    assert_error(bearer(old).get("/api/v1/tasks/?project=web"), 401, "AUTHENTICATION_FAILED")
    assert bearer(new).get("/api/v1/tasks/?project=web").status_code == 200


def test_register_hands_off_the_live_attempts_of_the_slots(runner, project):
    task = TaskFactory(project=project)
    grant = lease_claim(task=task, agent=Agent.objects.get(handle="gpu-box.2"), lease_seconds=3600)
    body = register(runner)
    assert body["handed_off"] == [{"attempt_id": grant.attempt.pk, "task": task.key}]
    attempt = Attempt.objects.get(pk=grant.attempt.pk)
    assert (attempt.status, attempt.interruption_reason_code) == (
        AttemptStatus.INTERRUPTED,
        InterruptionReason.RUNNER_RESTART,
    )


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("get", "/api/v1/tasks/?project=web"),
        ("get", "/api/v1/projects/"),
        ("post", "/api/v1/claims/next/"),
        ("get", "/api/v1/changes/"),
    ],
)
def test_a_runner_token_opens_nothing_but_the_runner_endpoints(runner, method, url):
    response = getattr(bearer(runner.api_token), method)(url, {"project": "web"} if method == "post" else None)
    error = assert_error(response, 403, "PERMISSION_DENIED")
    assert "runner" in error["message"]


def test_the_runner_endpoints_refuse_an_agent_a_user_and_no_token(runner, project, admin_user):
    agent = AgentFactory(projects=[project])
    assert_error(bearer(agent.api_token).post(REGISTER, {}, format="json"), 403, "PERMISSION_DENIED")
    staff = APIClient()
    staff.force_login(admin_user)
    assert_error(staff.post(HEARTBEAT, {"slots": []}, format="json"), 403, "PERMISSION_DENIED")
    assert_error(APIClient().post(HEARTBEAT, {"slots": []}, format="json"), 401, "AUTHENTICATION_FAILED")
    assert_error(bearer("lhr_not-a-token").post(HEARTBEAT, {"slots": []}, format="json"), 401, "AUTHENTICATION_FAILED")


def test_bad_runner_tokens_count_as_failed_authentications(runner, settings):
    settings.LEASEHOLD_AUTH_FAILURES_PER_MINUTE = 3
    bad = bearer("lhr_wrong")
    for _ in range(3):
        assert_error(bad.post(HEARTBEAT, {"slots": []}, format="json"), 401, "AUTHENTICATION_FAILED")
    assert_error(bad.post(HEARTBEAT, {"slots": []}, format="json"), 429, "RATE_LIMITED")
    # A valid token is served whatever its neighbours sent.
    assert bearer(runner.api_token).post(HEARTBEAT, {"slots": []}, format="json").status_code == 200


def test_heartbeat_stores_the_slots_and_answers_the_runners_orders(runner):
    register(runner)
    response = bearer(runner.api_token).post(
        HEARTBEAT,
        {
            "slots": [
                {"number": 1, "state": "working", "attempt_id": 12, "task": "WEB-3"},
                {"number": 2, "state": "idle"},
            ]
        },
        format="json",
    )
    assert response.status_code == 200
    assert response.json() == {"cordoned": False, "draining": False, "cancel": [], "heartbeat_seconds": 15}
    slot = RunnerSlot.objects.get(runner=runner, number=1)
    assert (slot.state, slot.attempt_id, slot.task_key) == (SlotState.WORKING, 12, "WEB-3")


@pytest.mark.parametrize(
    ("url", "body", "field"),
    [
        (REGISTER, {"host": "h", "version": "v", "pid": 1, "labels": ["x"]}, "labels"),
        (REGISTER, {"host": "h", "version": "v"}, "pid"),
        (REGISTER, {"host": "h", "version": "v", "pid": -1}, "pid"),
        (HEARTBEAT, {"slots": [], "extra": 1}, "extra"),
        (HEARTBEAT, {"slots": [{"number": 1, "state": "idle", "colour": "red"}]}, "colour"),
        (HEARTBEAT, {"slots": [{"number": 1, "state": "asleep"}]}, "slots"),
        (HEARTBEAT, {"slots": [{"number": 9, "state": "idle"}]}, "slots"),
        (HEARTBEAT, {"slots": "all"}, "slots"),
    ],
)
def test_bad_bodies_are_validation_errors_naming_the_field(runner, url, body, field):
    register(runner)
    error = assert_error(bearer(runner.api_token).post(url, body, format="json"), 400, "VALIDATION_ERROR")
    assert field in json.dumps(error["details"])


scalars = st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.text(max_size=30)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=10,
)
slot_items = st.fixed_dictionaries(
    {"number": values | st.integers(0, 3), "state": values | st.sampled_from(SlotState.values)},
    optional={"attempt_id": values, "task": values},
)
bodies = (
    st.dictionaries(st.sampled_from(["host", "version", "pid", "slots"]), values, max_size=4)
    | st.fixed_dictionaries({"slots": st.lists(slot_items, max_size=3)})
    | values
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(body=bodies)
def test_no_body_makes_a_runner_endpoint_answer_5xx(runner, body):
    client = bearer(runner.api_token)
    for url in (HEARTBEAT, REGISTER):
        response = client.post(url, json.dumps(body), content_type="application/json")
        assert response.status_code < 500, (url, body, response.content[:300])
        if response.status_code >= 400:
            assert set(response.json()) == {"error"}


def test_a_runners_requests_are_logged_in_json_lines_under_its_name(runner, caplog, settings):
    """With LEASEHOLD_LOG_FORMAT=json the request log names the caller: a runner has no agent and no user name
    (it answered 500 on every register and heartbeat before)."""
    settings.LEASEHOLD_LOG_FORMAT = "json"
    caplog.set_level("INFO", logger="leasehold.request")
    client = bearer(runner.api_token)
    assert client.post(REGISTER, {"host": "box-1", "version": "0.9", "pid": 77}, format="json").status_code == 201
    assert client.post(HEARTBEAT, {"slots": []}, format="json").status_code == 200
    lines = [record for record in caplog.records if record.name == "leasehold.request"]
    assert [(line.path, line.status, line.agent) for line in lines] == [
        (REGISTER, 201, "runner:gpu-box"),
        (HEARTBEAT, 200, "runner:gpu-box"),
    ]

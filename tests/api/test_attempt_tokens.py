"""The command's credential (SPEC §23.2): good for its own attempt's calls only, dead when the attempt ends."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from leases.models import Attempt, AttemptStatus
from leases.services import sweep_expired
from ledger.actors import SYSTEM
from ledger.services import agent_deactivate
from ledger.tokens import hash_token
from tests.api.conftest import assert_error, attempt_url, holder
from tests.factories import ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db


def _claim(client: APIClient, key: str, **body) -> dict:
    response = client.post(f"/api/v1/tasks/{key}/claim/", body, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def _mint(client: APIClient, claim: dict) -> str:
    response = client.post(attempt_url(claim, "token"), {}, format="json", **holder(claim))
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["attempt"] == claim["attempt"]["id"]
    assert response["Cache-Control"] == "no-store"
    return body["attempt_token"]


def _bearer(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


@pytest.fixture
def claim(client, task) -> dict:
    return _claim(client, task.key)


@pytest.fixture
def command(client, claim) -> APIClient:
    return _bearer(_mint(client, claim))


def test_the_attempt_token_is_stored_only_as_its_hash(client, claim):
    token = _mint(client, claim)
    assert token.startswith(f"lha_{claim['attempt']['id']}_")
    stored = Attempt.objects.get(pk=claim["attempt"]["id"]).command_token_hash
    assert stored == hash_token(token)
    assert token not in stored


def test_it_does_the_attempts_own_calls_without_lease_headers(command, claim, task):
    note = command.post(attempt_url(claim, "notes"), {"kind": "progress", "content": "halfway"}, format="json")
    assert note.status_code == 201, note.content
    assert command.post(attempt_url(claim, "renew"), {}, format="json").status_code == 200
    git = command.post(attempt_url(claim, "git"), {"dirty": True}, format="json")
    assert git.status_code == 200, git.content
    assert command.get(attempt_url(claim)).status_code == 200
    assert command.get(f"/api/v1/tasks/{task.key}/").json()["key"] == task.key
    assert command.get(f"/api/v1/tasks/{task.key}/context/").status_code == 200
    assert command.get(f"/api/v1/tasks/{task.key}/text/").json()["text"] == task.description
    assert command.get(f"/api/v1/tasks/{task.key}/comments/").status_code == 200
    finished = command.post(attempt_url(claim, "finish"), {"outcome": "done", "result_summary": "ok"}, format="json")
    assert finished.status_code == 200, finished.content
    assert Attempt.objects.get(pk=claim["attempt"]["id"]).status == AttemptStatus.COMPLETED


def test_it_releases_its_own_attempt(command, claim):
    released = command.post(attempt_url(claim, "release"), {"reason": "not mine"}, format="json")
    assert released.status_code == 200, released.content
    assert Attempt.objects.get(pk=claim["attempt"]["id"]).status == AttemptStatus.RELEASED


def test_it_is_refused_for_claims_and_everything_else(command, claim, task, project):
    other = TaskFactory(project=project, title="Another")
    refused = [
        command.post("/api/v1/claims/next/", {"project": project.slug}, format="json"),
        command.post(f"/api/v1/tasks/{other.key}/claim/", {}, format="json"),
        command.post("/api/v1/reviews/next/", {"project": project.slug}, format="json"),
        command.get(f"/api/v1/tasks/{other.key}/"),
        command.get(f"/api/v1/tasks/{other.key}/text/"),
        command.get(f"/api/v1/tasks/{other.key}/context/"),
        command.get(f"/api/v1/tasks/{other.key}/comments/"),
        command.get("/api/v1/tasks/"),
        command.get("/api/v1/projects/"),
        command.get("/api/v1/changes/"),
        command.post("/api/v1/agents/me/heartbeat/", {}, format="json"),
        # Its own task, but a write: only the holder's attempt calls write.
        command.patch(f"/api/v1/tasks/{task.key}/", {"title": "Renamed"}, format="json"),
        command.post(f"/api/v1/tasks/{task.key}/comments/", {"body": "hello"}, format="json"),
        # A command cannot mint itself another credential.
        command.post(attempt_url(claim, "token"), {}, format="json"),
    ]
    for response in refused:
        error = assert_error(response, 403, "PERMISSION_DENIED")
        assert "attempt token" in error["message"]


def test_it_is_refused_for_another_attempt(client, other_client, command, claim, task, project):
    mine_again = _claim(client, TaskFactory(project=project).key)
    theirs = _claim(other_client, TaskFactory(project=project).key)
    for other in (mine_again, theirs):
        for action in ("", "renew", "notes", "finish", "release", "git"):
            response = (
                command.get(attempt_url(other))
                if not action
                else command.post(attempt_url(other, action), {}, format="json", **holder(other))
            )
            assert_error(response, 403, "PERMISSION_DENIED")
    assert Attempt.objects.get(pk=theirs["attempt"]["id"]).status == AttemptStatus.ACTIVE


@pytest.mark.parametrize("ending", ["finish", "release"])
def test_it_is_dead_once_its_attempt_ends(client, command, claim, task, ending):
    body = {"outcome": "done"} if ending == "finish" else {}
    assert client.post(attempt_url(claim, ending), body, format="json", **holder(claim)).status_code == 200
    for response in (
        command.get(f"/api/v1/tasks/{task.key}/text/"),
        command.post(attempt_url(claim, "notes"), {"kind": "progress", "content": "late"}, format="json"),
        command.post(attempt_url(claim, "renew"), {}, format="json"),
    ):
        assert_error(response, 401, "AUTHENTICATION_FAILED")


def test_it_is_dead_once_the_lease_passes_swept_or_not(command, claim, task, clock):
    assert command.get(f"/api/v1/tasks/{task.key}/text/").status_code == 200
    clock.advance(claim["renew_every_seconds"] * 10 + 3600 * 24)
    assert_error(command.get(f"/api/v1/tasks/{task.key}/text/"), 401, "AUTHENTICATION_FAILED")
    sweep_expired()
    assert Attempt.objects.get(pk=claim["attempt"]["id"]).status == AttemptStatus.EXPIRED
    assert_error(command.post(attempt_url(claim, "renew"), {}, format="json"), 401, "AUTHENTICATION_FAILED")


def test_it_is_dead_when_revoked(command, claim, task, admin_user):
    from leases.services import task_force_release
    from ledger.actors import Actor

    task_force_release(task=task, reason="stop", actor=Actor(user=admin_user))
    assert_error(command.get(f"/api/v1/tasks/{task.key}/"), 401, "AUTHENTICATION_FAILED")


def test_a_new_token_replaces_the_last(client, claim, task):
    first = _bearer(_mint(client, claim))
    second = _bearer(_mint(client, claim))
    assert_error(first.get(f"/api/v1/tasks/{task.key}/"), 401, "AUTHENTICATION_FAILED")
    assert second.get(f"/api/v1/tasks/{task.key}/").status_code == 200


def test_it_dies_with_its_agent(agent, command, task):
    agent_deactivate(agent=agent, actor=SYSTEM)
    assert_error(command.get(f"/api/v1/tasks/{task.key}/"), 401, "AUTHENTICATION_FAILED")


@pytest.mark.parametrize(
    "token", ["lha_", "lha_1", "lha_1_", "lha_01_x", "lha_x_y", "lha_99999999999999999999_x", "lha_1_" + "x" * 300]
)
def test_a_malformed_or_unknown_attempt_token_is_authentication_failed(token, claim):
    assert_error(_bearer(token).get("/api/v1/projects/"), 401, "AUTHENTICATION_FAILED")


def test_a_forged_secret_for_a_real_attempt_is_refused(command, claim):
    forged = f"lha_{claim['attempt']['id']}_forged-secret"
    assert_error(_bearer(forged).get(attempt_url(claim)), 401, "AUTHENTICATION_FAILED")


def test_only_the_holder_mints_one(client, other_client, claim, project):
    stale = {**holder(claim), "HTTP_X_LEASE_TOKEN": "wrong-" + claim["lease_token"][6:]}
    assert_error(client.post(attempt_url(claim, "token"), {}, format="json", **stale), 409, "INVALID_LEASE_TOKEN")
    assert_error(other_client.post(attempt_url(claim, "token"), {}, format="json", **holder(claim)), 404, "NOT_FOUND")
    assert_error(
        client.post(attempt_url(claim, "token"), {"x": 1}, format="json", **holder(claim)), 400, "VALIDATION_ERROR"
    )


def test_another_projects_task_stays_unseen(command):
    elsewhere = TaskFactory(project=ProjectFactory(slug="else"))
    assert_error(command.get(f"/api/v1/tasks/{elsewhere.key}/"), 403, "PERMISSION_DENIED")

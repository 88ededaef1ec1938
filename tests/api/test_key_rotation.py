"""Replays that must not hand out what they once did: after a key rotation (issue 14, 8), a lost project (9).

The token is re-derived and checked against the stored hash under the current
key and each fallback; when none reproduces it the replay refuses clearly
(LEASE_NOT_HELD) instead of answering "replayed" with a token the server then
refuses.
"""

from __future__ import annotations

import pytest

from tests.api.conftest import assert_error, attempt_url, holder

OLD_KEY = "old-secret-key-for-the-rotation-test-0123456789"
NEW_KEY = "new-secret-key-for-the-rotation-test-9876543210"


def _claim(client, task):
    return client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json", HTTP_IDEMPOTENCY_KEY="claim-rotated")


@pytest.mark.django_db
def test_a_replay_after_rotation_with_the_old_key_as_fallback_answers_the_working_token(client, task, settings):
    settings.SECRET_KEY = OLD_KEY
    first = _claim(client, task)
    assert first.status_code == 201
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = NEW_KEY, [OLD_KEY]

    replay = _claim(client, task)

    assert replay.status_code == 201
    assert replay["Idempotent-Replayed"] == "true"
    assert replay.json()["lease_token"] == first.json()["lease_token"]
    renewed = client.post(attempt_url(replay.json(), "renew"), {}, format="json", **holder(replay.json()))
    assert renewed.status_code == 200


@pytest.mark.django_db
def test_a_replay_after_rotation_without_the_old_key_refuses_instead_of_a_dead_token(client, task, settings):
    settings.SECRET_KEY = OLD_KEY
    first = _claim(client, task)
    assert first.status_code == 201
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = NEW_KEY, []

    error = assert_error(_claim(client, task), 409, "LEASE_NOT_HELD")

    assert error["details"] == {"attempt": first.json()["attempt"]["id"], "reason": "secret_key_rotated"}
    assert "LEASEHOLD_SECRET_KEY_FALLBACKS" in error["message"]
    # The lease itself is untouched: the first answer's token still renews it.
    renewed = client.post(attempt_url(first.json(), "renew"), {}, format="json", **holder(first.json()))
    assert renewed.status_code == 200


@pytest.mark.django_db
def test_a_replay_after_the_agent_lost_the_project_is_refused_without_the_task(client, agent, task):
    from leases.services import agent_set_projects
    from ledger.actors import SYSTEM

    first = _claim(client, task)
    assert first.status_code == 201
    agent_set_projects(agent=agent, projects=[], actor=SYSTEM)

    replay = _claim(client, task)

    error = assert_error(replay, 409, "IDEMPOTENCY_CONFLICT")
    assert error["details"] == {"key": "claim-rotated", "reason": "access_changed"}
    assert task.description not in replay.content.decode()

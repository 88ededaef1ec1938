"""`POST /landings/{id}/release/` (SPEC §21.2): a lander gives its landing back instead of letting it lapse.

Fenced like every holder call of a landing (its token and epoch), idempotent, and the target is free for
the next lander at once; the tasks stay delivered, in their place, with no failed landing counted.
"""

from __future__ import annotations

import pytest

from landing.models import Landing, LandingOutcome, LandingStatus, LandingTask
from leases.models import Attempt, AttemptStatus, Note, NoteKind
from ledger.models import Event, EventType, Task, TaskStatus
from tests.api.conftest import assert_error, client_for
from tests.factories import AgentFactory, TaskFactory
from tests.landing.helpers import deliver, landing_headers, next_landing

pytestmark = pytest.mark.django_db


def _release(client, grant, *, headers=None, **body):
    return client.post(
        f"/api/v1/landings/{grant['landing']['id']}/release/",
        body,
        format="json",
        **(headers if headers is not None else landing_headers(grant)),
    )


def _queued(project, agent, count=1):
    tasks = [TaskFactory(project=project) for _ in range(count)]
    for task in tasks:
        assert deliver(agent, task.key)["status"] == 200
    return tasks


def test_a_released_landing_frees_the_target_at_once_and_leaves_its_tasks_delivered(project, agent, lander, clock):
    (task,) = _queued(project, agent)
    client = client_for(lander)
    grant = next_landing(client)
    assert grant is not None
    assert next_landing(client_for(AgentFactory(projects=[project]))) is None  # held: the target is busy

    response = _release(client, grant, reason="told to stop")

    assert response.status_code == 200, response.content
    body = response.json()
    assert body == {
        "landing": {"id": grant["landing"]["id"], "status": "released"},
        "tasks": [{"key": task.key, "status": "delivered"}],
    }
    landing = Landing.objects.get(pk=grant["landing"]["id"])
    assert (landing.status, landing.finished_at, landing.result) == (LandingStatus.RELEASED, clock.now(), "")
    entry = LandingTask.objects.get(landing=landing)
    assert entry.outcome == LandingOutcome.RELEASED
    assert Attempt.objects.get(pk=entry.attempt_id).status == AttemptStatus.RELEASED
    task.refresh_from_db()
    assert (task.status, task.failed_landings) == (TaskStatus.DELIVERED, 0)
    assert not Note.objects.filter(attempt__task=task, kind=NoteKind.LANDING).exists()
    (event,) = Event.objects.filter(task=task, type=EventType.ATTEMPT_RELEASED)
    assert event.attempt_id == entry.attempt_id
    assert event.payload == {"landing": landing.pk, "target_branch": "main", "reason": "told to stop"}
    assert not Event.objects.filter(task=task, type=EventType.LANDING_EXPIRED).exists()

    # No clock moved: the next lander takes the same task now, under the next epoch.
    other = next_landing(client_for(AgentFactory(projects=[project])))
    assert other is not None
    assert [entry["key"] for entry in other["tasks"]] == [task.key]
    assert other["landing"]["epoch"] == grant["landing"]["epoch"] + 1


def test_releasing_again_answers_the_same_and_writes_nothing_more(project, agent, lander, clock):
    _queued(project, agent)
    client = client_for(lander)
    grant = next_landing(client)
    first = _release(client, grant)
    events = Event.objects.count()

    again = _release(client, grant)

    assert again.status_code == 200
    assert again.json() == first.json()
    assert Event.objects.count() == events


def test_a_replay_under_the_same_idempotency_key_answers_the_first_release(project, agent, lander, clock):
    _queued(project, agent)
    client = client_for(lander)
    grant = next_landing(client)
    headers = {**landing_headers(grant), "HTTP_IDEMPOTENCY_KEY": "rel-1"}
    first = _release(client, grant, headers=headers)
    replay = _release(client, grant, headers=headers)
    assert (first.status_code, replay.status_code) == (200, 200)
    assert replay.json() == first.json()


def test_a_stale_epoch_a_wrong_token_and_another_agent_are_refused_as_other_holder_calls_are(
    project, agent, lander, clock
):
    _queued(project, agent)
    client = client_for(lander)
    grant = next_landing(client)
    stale = {**landing_headers(grant), "HTTP_X_LEASE_EPOCH": str(grant["landing"]["epoch"] + 1)}
    wrong = {**landing_headers(grant), "HTTP_X_LEASE_TOKEN": "x" * 43}

    assert_error(_release(client, grant, headers=stale), 409, "STALE_EPOCH")
    assert_error(_release(client, grant, headers=wrong), 409, "INVALID_LEASE_TOKEN")
    assert_error(_release(client_for(agent), grant), 404, "NOT_FOUND")
    assert _release(client, grant, headers={}).status_code == 400  # no proof at all
    assert Landing.objects.get(pk=grant["landing"]["id"]).status == LandingStatus.ACTIVE


def test_a_release_after_the_lease_lapsed_is_refused_and_the_landing_expires_as_it_would(project, agent, lander, clock):
    (task,) = _queued(project, agent)
    client = client_for(lander)
    grant = next_landing(client)
    clock.advance(grant["landing"]["lease_seconds"] + 1)

    assert_error(_release(client, grant), 409, "LEASE_EXPIRED")
    assert Landing.objects.get(pk=grant["landing"]["id"]).status == LandingStatus.EXPIRED
    task.refresh_from_db()
    assert task.failed_landings == 1  # the expiry counts, as without the release
    assert_error(_release(client, grant), 409, "LEASE_EXPIRED")


def test_a_finished_landing_is_not_released(project, agent, lander, clock):
    (task,) = _queued(project, agent)
    client = client_for(lander)
    grant = next_landing(client)
    finish = {"result": "conflict", "tasks": [{"key": task.key, "outcome": "deferred"}]}
    assert (
        client.post(
            f"/api/v1/landings/{grant['landing']['id']}/finish/", finish, format="json", **landing_headers(grant)
        ).status_code
        == 200
    )

    assert_error(_release(client, grant), 409, "LEASE_NOT_HELD")
    assert Landing.objects.get(pk=grant["landing"]["id"]).status == LandingStatus.FINISHED


def test_a_released_landing_cannot_be_finished_nor_renewed(project, agent, lander, clock):
    (task,) = _queued(project, agent)
    client = client_for(lander)
    grant = next_landing(client)
    assert _release(client, grant).status_code == 200
    finish = {"result": "landed", "landed_commit": "b" * 40, "tasks": [{"key": task.key, "outcome": "landed"}]}
    url = f"/api/v1/landings/{grant['landing']['id']}"

    assert_error(client.post(f"{url}/finish/", finish, format="json", **landing_headers(grant)), 409, "LEASE_NOT_HELD")
    assert_error(client.post(f"{url}/renew/", {}, format="json", **landing_headers(grant)), 409, "LEASE_NOT_HELD")
    task.refresh_from_db()
    assert task.status == TaskStatus.DELIVERED
    assert not Task.objects.filter(pk=task.pk, landed_commit__gt="").exists()


def test_a_batch_is_released_whole_and_keeps_its_queue_order(project, agent, lander, clock):
    project.batch_max = 3
    project.save(update_fields=["batch_max"])
    tasks = _queued(project, agent, count=3)
    client = client_for(lander)
    grant = next_landing(client)
    assert [entry["key"] for entry in grant["tasks"]] == [task.key for task in tasks]

    assert _release(client, grant).status_code == 200

    assert Event.objects.filter(type=EventType.ATTEMPT_RELEASED, task__in=tasks).count() == 3
    again = next_landing(client)
    assert [entry["key"] for entry in again["tasks"]] == [task.key for task in tasks]

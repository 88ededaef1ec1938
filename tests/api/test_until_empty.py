"""`--until-empty` on the server (SPEC §25): `GET /projects/{slug}/` says whether the project's work is
finished, and a waiting claim-next with `"until_empty": true` answers 204 at once when it is — also the
waiters already parked when the last task is finished (the wake is passed on to every one of them).

The CLI's loop is tests/agent/test_until_empty_cli.py; the fleet against a live server
tests/agent/test_fleet_live.py.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from leases.services import HolderProof, attempt_finish
from ledger.models import Task, TaskStatus
from push.waiting import event_watcher
from tests.api.conftest import assert_error, client_for
from tests.api.test_claim_wait import claim_next, parked
from tests.factories import AgentFactory, AttemptFactory, ProjectFactory, TaskFactory


@pytest.fixture(autouse=True, scope="module")
def _watcher_stopped_at_the_end():
    yield
    event_watcher().stop()


def _set_status(task: Task, status: str) -> None:
    reason = "waits on ops" if status == TaskStatus.BLOCKED else ""
    Task.objects.filter(pk=task.pk).update(status=status, blocked_reason=reason)


def _finish_done(attempt) -> None:
    proof = HolderProof(attempt_id=attempt.pk, token=attempt.lease_token, epoch=attempt.epoch, agent=attempt.agent)
    finished = attempt_finish(proof=proof, outcome="done", result_summary="done")
    assert not isinstance(finished, Exception)


@pytest.mark.django_db
def test_the_project_reads_with_its_progress():
    project = ProjectFactory()
    client = client_for(AgentFactory(projects=[project]))
    statuses = ["ready", "ready", "open", "review", "delivered", "blocked", "done", "cancelled"]
    tasks = [TaskFactory(project=project, task_class="gpu" if index == 0 else "") for index in range(len(statuses))]
    for task, status in zip(tasks, statuses, strict=True):
        _set_status(task, status)
    body = client.get(f"/api/v1/projects/{project.slug}/").json()
    assert body["slug"] == project.slug
    assert body["progress"] == {
        "tasks": {"open": 1, "ready": 2, "review": 1, "delivered": 1, "blocked": 1},
        "finished": False,
    }
    gpu = client.get(f"/api/v1/projects/{project.slug}/", {"task_class": "gpu"}).json()["progress"]
    assert gpu == {"tasks": {"open": 0, "ready": 1, "review": 0, "delivered": 0, "blocked": 0}, "finished": False}
    for task in tasks[:5]:
        _set_status(task, TaskStatus.DONE)
    body = client.get(f"/api/v1/projects/{project.slug}/").json()
    # A task blocked by hand waits on a person, not on work: it does not keep a fleet waiting.
    assert body["progress"] == {
        "tasks": {"open": 0, "ready": 0, "review": 0, "delivered": 0, "blocked": 1},
        "finished": True,
    }


@pytest.mark.django_db
@pytest.mark.parametrize("status", ["open", "ready", "review", "delivered"])
def test_each_unfinished_status_keeps_the_project_unfinished(status):
    project = ProjectFactory()
    _set_status(TaskFactory(project=project), status)
    client = client_for(AgentFactory(projects=[project]))
    assert client.get(f"/api/v1/projects/{project.slug}/").json()["progress"]["finished"] is False


@pytest.mark.django_db
def test_a_held_task_and_a_task_waiting_on_a_blocker_keep_the_project_unfinished():
    project = ProjectFactory()
    blocker = TaskFactory(project=project)
    TaskFactory(project=project, blocked_by=[blocker])
    attempt = AttemptFactory(task=blocker)
    client = client_for(AgentFactory(projects=[project]))
    assert client.get(f"/api/v1/projects/{project.slug}/").json()["progress"]["finished"] is False
    _finish_done(attempt)
    assert client.get(f"/api/v1/projects/{project.slug}/").json()["progress"]["finished"] is False  # now ready


@pytest.mark.django_db
def test_another_project_reads_as_not_found_and_unknown_parameters_are_refused():
    project, other = ProjectFactory(), ProjectFactory()
    client = client_for(AgentFactory(projects=[project]))
    assert_error(client.get(f"/api/v1/projects/{other.slug}/"), 404, "NOT_FOUND")
    assert_error(client.get(f"/api/v1/projects/{project.slug}/", {"task_clas": "x"}), 400, "VALIDATION_ERROR")


@pytest.mark.django_db(transaction=True)
def test_until_empty_answers_204_at_once_when_the_work_is_finished_and_waits_while_it_is_not():
    project = ProjectFactory()
    client = client_for(AgentFactory(projects=[project]))
    response, took = claim_next(client, project, 30, until_empty=True)()
    assert response.status_code == 204
    assert took < 2.0
    held = AttemptFactory(task=TaskFactory(project=project))  # held by someone else: not finished
    response, took = claim_next(client, project, 1, until_empty=True)()
    assert response.status_code == 204
    assert took > 0.9  # at the deadline
    _finish_done(held)
    connection.close()


@pytest.mark.django_db(transaction=True)
def test_the_last_task_finished_answers_every_parked_waiter_at_once():
    project = ProjectFactory()
    attempt = AttemptFactory(task=TaskFactory(project=project))
    waiters = [
        claim_next(client_for(AgentFactory(projects=[project])), project, 30, until_empty=True) for _ in range(3)
    ]
    with ThreadPoolExecutor(len(waiters)) as pool:
        futures = []
        for count, waiter in enumerate(waiters, start=1):
            futures.append(pool.submit(waiter))
            parked(count)
        started = time.monotonic()
        _finish_done(attempt)
        answers = [future.result(timeout=20) for future in futures]
        took = time.monotonic() - started
    assert [response.status_code for response, _ in answers] == [204, 204, 204]
    assert took < 5.0  # not the 30 s deadline
    connection.close()


@pytest.mark.django_db(transaction=True)
def test_without_until_empty_a_finished_project_still_waits_to_the_deadline():
    project = ProjectFactory()
    response, took = claim_next(client_for(AgentFactory(projects=[project])), project, 1)()
    assert response.status_code == 204
    assert took > 0.9

"""The landing gates (SPEC §22): required checks and approvals at the delivered head decide what lands."""

from __future__ import annotations

import pytest

from landing.services import LandingSettings, project_set_landing
from leases.models import Attempt, AttemptKind, CheckResult, ReviewRequest, ReviewStatus
from ledger import clock
from ledger.actors import SYSTEM
from ledger.models import AgentKind, Task, TaskStatus
from tests.api.conftest import client_for
from tests.factories import AgentFactory, TaskFactory
from tests.landing.helpers import HEAD, deliver, finish_landing, head, next_landing

pytestmark = pytest.mark.django_db


@pytest.fixture
def ci(project):
    return AgentFactory(handle="ci-web", kind=AgentKind.CI, projects=[project])


def _require(project, *, checks=(), approvals=0):
    project_set_landing(
        project=project,
        settings=LandingSettings(target_branch="main", required_checks=list(checks), required_approvals=approvals),
        actor=SYSTEM,
    )


def report(agent, *, commit=HEAD, name="lint", state="success", **fields):
    body = {"project": "web", "commit": commit, "name": name, "state": state, **fields}
    response = client_for(agent).post("/api/v1/checks/", body, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def queue_of(agent):
    return client_for(agent).get("/api/v1/projects/web/landing/").json()["queue"]


def test_a_head_without_its_required_check_waits_and_says_why_then_lands_when_green(project, agent, ci, lander):
    _require(project, checks=["lint", "tests"])
    task = TaskFactory(project=project)
    deliver(agent, task.key)
    report(ci, name="tests", state="pending")
    assert next_landing(client_for(lander)) is None
    [row] = queue_of(agent)
    assert row["landable"] is False
    assert row["waiting_for"] == [
        f"waiting for check `lint` at {HEAD[:7]}… (not reported)",
        f"waiting for check `tests` at {HEAD[:7]}… (pending)",
    ]
    report(ci, name="lint")
    report(ci, name="tests")
    assert queue_of(agent)[0] | {"checks": None} == row | {"landable": True, "waiting_for": [], "checks": None}
    grant = next_landing(client_for(lander))
    assert grant is not None
    assert [entry["key"] for entry in grant["tasks"]] == [task.key]
    done = finish_landing(
        client_for(lander),
        grant,
        {"result": "landed", "landed_commit": head(77), "tasks": [{"key": task.key, "outcome": "landed"}]},
    )
    assert done.status_code == 200
    task.refresh_from_db()
    assert task.status == TaskStatus.DONE


def test_a_failing_required_check_sends_the_delivered_task_back_with_its_summary_and_url(project, agent, ci, lander):
    _require(project, checks=["tests"])
    task = TaskFactory(project=project)
    deliver(agent, task.key)
    body = report(ci, name="tests", state="failure", summary="test_login failed", url="https://ci.example/r/9")
    assert body["sent_back"] == [task.key]
    task.refresh_from_db()
    assert task.status == TaskStatus.READY
    assert next_landing(client_for(lander)) is None
    # The next work attempt reads why first.
    claim = client_for(agent).post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json").json()
    [note] = claim["context"]["landing"]["notes"]
    assert "`tests` failed" in note["content"]
    assert "test_login failed" in note["content"]
    assert "https://ci.example/r/9" in note["content"]


def test_a_task_under_a_live_landing_is_left_to_its_landing(project, agent, ci, lander):
    _require(project, checks=["tests"])
    task = TaskFactory(project=project)
    deliver(agent, task.key)
    report(ci, name="tests")
    assert next_landing(client_for(lander)) is not None
    assert report(ci, name="tests", state="failure")["sent_back"] == []
    task.refresh_from_db()
    assert task.status == TaskStatus.DELIVERED


def test_a_moved_head_needs_its_checks_again(project, agent, ci, lander):
    _require(project, checks=["tests"])
    task = TaskFactory(project=project)
    deliver(agent, task.key)
    report(ci, name="tests", state="failure")  # back to ready
    assert deliver(agent, task.key, commit=head(2))["status"] == 200
    report(ci, commit=HEAD, name="tests", state="success")  # a rerun at the old head does not count
    assert next_landing(client_for(lander)) is None
    assert queue_of(agent)[0]["waiting_for"] == [f"waiting for check `tests` at {head(2)[:7]}… (not reported)"]
    report(ci, commit=head(2), name="tests")
    assert next_landing(client_for(lander)) is not None


def _approve(task: Task, commit: str | None) -> None:
    now = clock.now()
    work = Attempt.objects.filter(task=task, kind=AttemptKind.WORK).latest("id")
    ReviewRequest.objects.create(
        task=task,
        work_attempt=work,
        task_version=task.version,
        head_commit=commit,
        status=ReviewStatus.APPROVED,
        created_at=now,
        decided_at=now,
    )


def test_approvals_count_only_when_pinned_to_the_delivered_head(project, agent, lander):
    _require(project, approvals=1)
    task = TaskFactory(project=project)
    deliver(agent, task.key)
    assert queue_of(agent)[0]["waiting_for"] == [f"waiting for 1 approval at {HEAD[:7]}…"]
    _approve(task, head(3))
    assert next_landing(client_for(lander)) is None
    _approve(task, HEAD)
    assert queue_of(agent)[0]["waiting_for"] == []
    grant = next_landing(client_for(lander))
    assert grant is not None
    assert grant["tasks"][0]["key"] == task.key


def test_the_gates_keep_queue_order_among_the_landable(project, agent, ci, lander):
    _require(project, checks=["tests"])
    first, second = TaskFactory(project=project, priority=5), TaskFactory(project=project, priority=1)
    deliver(agent, first.key, commit=head(1))
    deliver(agent, second.key, commit=head(2))
    report(ci, commit=head(2), name="tests")
    grant = next_landing(client_for(lander))
    assert grant is not None
    assert [entry["key"] for entry in grant["tasks"]] == [second.key]
    assert CheckResult.objects.count() == 1

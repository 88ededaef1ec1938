"""Check results from any CI (SPEC §22): reported at a commit, the latest wins, shown at a task's head."""

from __future__ import annotations

import pytest

from leases.models import CheckResult, Note, NoteKind
from ledger.models import AgentKind, Event, EventType, Task, TaskStatus
from tests.api.conftest import assert_error, client_for, holder
from tests.factories import AgentFactory, ProjectFactory, TaskFactory
from tests.landing.helpers import HEAD, deliver, head

pytestmark = pytest.mark.django_db


@pytest.fixture
def ci(project):
    return AgentFactory(handle="ci-web", kind=AgentKind.CI, projects=[project])


def report(agent, **fields):
    body = {"project": "web", "commit": HEAD, "name": "lint", "state": "success", **fields}
    return client_for(agent).post("/api/v1/checks/", body, format="json")


def test_a_report_is_stored_evented_and_the_latest_per_commit_and_name_wins(project, ci):
    first = report(ci, state="pending")
    assert first.status_code == 200, first.content
    assert first.json()["check"]["state"] == "pending"
    second = report(ci, state="failure", summary="3 errors", url="https://ci.example/runs/7")
    assert second.status_code == 200
    rows = list(CheckResult.objects.filter(project=project, commit=HEAD, name="lint"))
    assert [(row.state, row.summary, row.url) for row in rows] == [("failure", "3 errors", "https://ci.example/runs/7")]
    assert report(ci, name="tests").status_code == 200
    assert CheckResult.objects.filter(project=project, commit=HEAD).count() == 2
    events = Event.objects.filter(type=EventType.CHECK_REPORTED).order_by("id")
    assert [event.payload["state"] for event in events] == ["pending", "failure", "success"]
    assert events[0].project_id == project.pk
    assert events[0].actor_agent_id == ci.pk


def test_an_agent_of_another_project_cannot_report_a_check(project):
    outsider = AgentFactory(projects=[ProjectFactory(slug="api")])
    assert_error(report(outsider), 404, "NOT_FOUND")
    assert not CheckResult.objects.exists()


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"commit": "abc123"}, "commit"),
        ({"commit": "A" * 40}, "commit"),
        ({"name": "Lint Job"}, "name"),
        ({"state": "green"}, "state"),
        ({"summary": "x" * 2001}, "summary"),
        ({"url": "javascript:alert(1)"}, "url"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_a_bad_report_is_refused_with_a_validation_error(project, ci, fields, field):
    error = assert_error(report(ci, **fields), 400, "VALIDATION_ERROR")
    assert field in str(error["details"])
    assert not CheckResult.objects.exists()


def test_a_task_lists_the_checks_at_its_delivered_head(project, agent, ci):
    task = TaskFactory(project=project)
    assert deliver(agent, task.key)["status"] == 200
    report(ci, name="tests", state="failure", summary="boom")
    report(ci, commit=head(9), name="lint")  # another commit: not this task's head
    body = client_for(agent).get(f"/api/v1/tasks/{task.key}/checks/").json()
    assert body["head"] == HEAD
    assert [(row["name"], row["state"], row["summary"]) for row in body["results"]] == [("tests", "failure", "boom")]


def test_an_undelivered_task_reads_its_checks_at_the_head_its_attempt_reported(project, agent, ci):
    task = TaskFactory(project=project)
    client = client_for(agent)
    claim = client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json").json()
    assert client.get(f"/api/v1/tasks/{task.key}/checks/").json() == {
        "task": task.key,
        "head": None,
        "required_checks": [],
        "results": [],
    }
    moved = client.post(
        f"/api/v1/attempts/{claim['attempt']['id']}/git/", {"head_commit": head(5)}, format="json", **holder(claim)
    )
    assert moved.status_code == 200, moved.content
    report(ci, commit=head(5), state="success")
    body = client.get(f"/api/v1/tasks/{task.key}/checks/").json()
    assert body["head"] == head(5)
    assert [row["name"] for row in body["results"]] == ["lint"]
    context = client.get(f"/api/v1/tasks/{task.key}/context/").json()
    assert context["checks"]["head"] == head(5)
    assert [(row["name"], row["state"]) for row in context["checks"]["results"]] == [("lint", "success")]


def test_a_task_of_a_project_the_agent_cannot_see_has_no_checks_to_list(project, ci):
    task = TaskFactory(project=ProjectFactory(slug="api"))
    assert_error(client_for(ci).get(f"/api/v1/tasks/{task.key}/checks/"), 404, "NOT_FOUND")


def test_a_failing_check_that_is_not_required_leaves_a_delivered_task_delivered(project, agent, ci):
    task = TaskFactory(project=project)
    deliver(agent, task.key)
    assert report(ci, name="lint", state="failure").json()["sent_back"] == []
    task.refresh_from_db()
    assert task.status == TaskStatus.DELIVERED
    assert not Note.objects.filter(kind=NoteKind.LANDING).exists()


def test_a_deactivated_ci_agent_cannot_report(project, ci):
    ci.is_active = False
    ci.save(update_fields=["is_active"])
    response = report(ci)
    assert response.status_code in (401, 403)
    assert not CheckResult.objects.exists()
    assert Task.objects.count() == 0

"""The landing queue through the API (SPEC §21): delivered, claimed by one lander, landed or sent back."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from landing.models import Landing, LandingStatus
from landing.services import expire_lapsed_landings
from leases.models import Attempt, AttemptKind, Note, NoteKind
from ledger.models import Event, EventType, Task, TaskStatus
from tests.api.conftest import assert_error, client_for, holder
from tests.factories import AgentFactory, ProjectFactory, TaskFactory
from tests.landing.helpers import HEAD, deliver, finish_landing, head, landing_headers, next_landing

pytestmark = pytest.mark.django_db


def test_a_done_finish_delivers_instead_of_done_with_its_branch_and_head(project, agent):
    task = TaskFactory(project=project)
    result = deliver(agent, task.key)
    assert result["status"] == 200, result["body"]
    task.refresh_from_db()
    assert task.status == TaskStatus.DELIVERED
    assert task.delivered_commit == HEAD
    assert task.delivered_branch == result["claim"]["attempt"]["branch"]
    assert task.delivered_at is not None
    assert not task.landed_commit
    event = Event.objects.get(task=task, type=EventType.TASK_DELIVERED)
    assert event.payload["head_commit"] == HEAD


def test_a_delivery_without_a_head_is_refused_naming_what_is_missing_and_keeps_the_lease(project, agent):
    task = TaskFactory(project=project)
    client = client_for(agent)
    claim = client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json").json()
    response = client.post(
        f"/api/v1/attempts/{claim['attempt']['id']}/finish/", {"outcome": "done"}, format="json", **holder(claim)
    )
    error = assert_error(response, 400, "VALIDATION_ERROR")
    assert error["details"]["missing"] == ["head_commit"]
    task.refresh_from_db()
    assert task.status == TaskStatus.READY
    assert Attempt.objects.get(pk=claim["attempt"]["id"]).status == "active"


def test_with_a_remote_a_delivery_needs_the_head_pushed(db, clock):
    project = ProjectFactory(slug="api", remote="file:///srv/api.git")
    call_command("set_landing", "api", "--target", "main", stdout=io.StringIO())
    agent = AgentFactory(projects=[project])
    task = TaskFactory(project=project)
    refused = deliver(agent, task.key, pushed=False)
    assert refused["status"] == 400
    assert refused["body"]["error"]["details"]["missing"] == ["pushed"]
    other = TaskFactory(project=project)
    assert deliver(agent, other.key, pushed=True)["status"] == 200


def test_a_project_without_landing_keeps_done_as_done(db, clock):
    project = ProjectFactory(slug="plain")
    agent = AgentFactory(projects=[project])
    task = TaskFactory(project=project)
    client = client_for(agent)
    claim = client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json").json()
    response = client.post(
        f"/api/v1/attempts/{claim['attempt']['id']}/finish/", {"outcome": "done"}, format="json", **holder(claim)
    )
    assert response.status_code == 200
    task.refresh_from_db()
    assert task.status == TaskStatus.DONE
    assert not Event.objects.filter(type=EventType.TASK_DELIVERED).exists()
    empty = client.post("/api/v1/landings/next/", {"project": "plain"}, format="json")
    assert_error(empty, 400, "VALIDATION_ERROR")


def test_one_lander_lands_a_delivered_task_and_a_second_lander_gets_nothing_meanwhile(project, agent, lander):
    blocked = TaskFactory(project=project, title="after")
    task = TaskFactory(project=project, title="before")
    Task.objects.filter(pk=blocked.pk)
    from ledger.actors import SYSTEM
    from ledger.services import dependency_add

    dependency_add(task=blocked, blocked_by=task, actor=SYSTEM)
    deliver(agent, task.key, commit=head(1))
    client = client_for(lander)
    grant = next_landing(client)
    assert grant is not None
    assert [item["key"] for item in grant["tasks"]] == [task.key]
    assert grant["tasks"][0]["head_commit"] == head(1)
    assert grant["landing"]["target_branch"] == "main"
    assert grant["landing"]["method"] == "merge"
    assert Attempt.objects.get(pk=grant["tasks"][0]["attempt_id"]).kind == AttemptKind.LAND
    assert next_landing(client_for(AgentFactory(projects=[project]))) is None
    listed = client.get(f"/api/v1/tasks/{task.key}/").json()
    assert listed["effective_status"] == "landing"

    renewed = client.post(
        f"/api/v1/landings/{grant['landing']['id']}/renew/", {}, format="json", **landing_headers(grant)
    )
    assert renewed.status_code == 200, renewed.content
    done = finish_landing(
        client,
        grant,
        {
            "result": "landed",
            "landed_commit": head(99),
            "check_runs": 1,
            "tasks": [{"key": task.key, "outcome": "landed"}],
        },
    )
    assert done.status_code == 200, done.content
    assert done.json()["tasks"] == [{"key": task.key, "status": "done"}]
    task.refresh_from_db()
    assert (task.status, task.landed_commit) == (TaskStatus.DONE, head(99))
    assert task.landed_by == f"landing {grant['landing']['id']} (lander-1)"
    assert Event.objects.filter(task=task, type=EventType.TASK_LANDED).count() == 1
    # Landed is done: the dependent task is claimable now.
    assert client_for(agent).post(f"/api/v1/tasks/{blocked.key}/claim/", {}, format="json").status_code == 201
    overview = client.get("/api/v1/projects/web/landing/").json()
    assert overview["queue"] == []
    assert overview["live"] is None
    assert overview["recent"][0]["result"] == "landed"


def test_a_conflict_sends_the_task_back_with_a_landing_note_its_next_context_shows_first(project, agent, lander):
    task = TaskFactory(project=project)
    delivered = deliver(agent, task.key)
    branch = delivered["claim"]["attempt"]["branch"]
    client = client_for(lander)
    grant = next_landing(client)
    response = finish_landing(
        client,
        grant,
        {"result": "conflict", "tasks": [{"key": task.key, "outcome": "conflict", "paths": ["src/search.py"]}]},
    )
    assert response.status_code == 200, response.content
    task.refresh_from_db()
    assert task.status == TaskStatus.READY
    assert task.failed_landings == 1
    note = Note.objects.get(attempt_id=grant["tasks"][0]["attempt_id"])
    assert note.kind == NoteKind.LANDING
    assert "src/search.py" in note.content
    assert Event.objects.filter(task=task, type=EventType.LANDING_CONFLICT).exists()
    again = client_for(agent).post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json").json()
    assert again["attempt"]["branch"] == branch  # inherited
    context = again["context"]
    assert "src/search.py" in str(context)


def test_max_failed_landings_in_a_row_quarantine_the_task(project, agent, lander):
    call_command("set_landing", "web", "--max-failed-landings", "2", stdout=io.StringIO())
    task = TaskFactory(project=project)
    client = client_for(lander)
    for _ in range(2):
        deliver(agent, task.key)
        grant = next_landing(client)
        finish_landing(
            client,
            grant,
            {
                "result": "check_failed",
                "tasks": [{"key": task.key, "outcome": "check_failed", "output_tail": "FAILED test_x"}],
            },
        )
    task.refresh_from_db()
    assert task.status == TaskStatus.BLOCKED
    assert task.blocked_reason.startswith("quarantined:")


def test_a_lapsed_landing_is_expired_its_tasks_stay_delivered_and_the_late_finish_is_refused(
    project, agent, lander, clock
):
    task = TaskFactory(project=project)
    deliver(agent, task.key)
    client = client_for(lander)
    grant = next_landing(client)
    clock.advance(grant["landing"]["lease_seconds"] + 1)
    retry = next_landing(client_for(AgentFactory(projects=[project])))
    assert retry is not None
    assert retry["landing"]["epoch"] == grant["landing"]["epoch"] + 1
    task.refresh_from_db()
    assert task.status == TaskStatus.DELIVERED
    assert task.failed_landings == 1
    assert Landing.objects.get(pk=grant["landing"]["id"]).status == LandingStatus.EXPIRED
    late = finish_landing(
        client, grant, {"result": "landed", "landed_commit": head(5), "tasks": [{"key": task.key, "outcome": "landed"}]}
    )
    assert_error(late, 409, "LEASE_EXPIRED")


def test_the_sweep_expires_a_lapsed_landing(project, agent, lander, clock):
    task = TaskFactory(project=project)
    deliver(agent, task.key)
    grant = next_landing(client_for(lander))
    clock.advance(grant["landing"]["lease_seconds"] + 1)
    assert expire_lapsed_landings() == 1
    assert Landing.objects.get(pk=grant["landing"]["id"]).status == LandingStatus.EXPIRED


def test_a_batch_takes_the_queue_in_order_and_each_task_gets_its_outcome(project, agent, lander):
    call_command("set_landing", "web", "--batch-max", "3", stdout=io.StringIO())
    low, high, middle = (TaskFactory(project=project, priority=p) for p in (0, 5, 1))
    extra = TaskFactory(project=project, priority=-1)
    for task in (low, high, middle, extra):
        deliver(agent, task.key)
    client = client_for(lander)
    grant = next_landing(client)
    assert [item["key"] for item in grant["tasks"]] == [high.key, middle.key, low.key]
    response = finish_landing(
        client,
        grant,
        {
            "result": "landed",
            "landed_commit": head(7),
            "check_runs": 3,
            "tasks": [
                {"key": high.key, "outcome": "landed"},
                {"key": middle.key, "outcome": "check_failed", "output_tail": "boom"},
                {"key": low.key, "outcome": "deferred"},
            ],
        },
    )
    assert response.status_code == 200, response.content
    statuses = dict(Task.objects.filter(pk__in=[high.pk, middle.pk, low.pk]).values_list("key", "status"))
    assert statuses == {high.key: "done", middle.key: "ready", low.key: "delivered"}
    following = next_landing(client)
    assert [item["key"] for item in following["tasks"]] == [low.key, extra.key]


@pytest.mark.parametrize(
    "body",
    [
        {"result": "landed", "tasks": []},
        {"result": "landed", "tasks": [{"key": "WEB-1", "outcome": "landed"}]},
        {"result": "conflict", "landed_commit": "b" * 40, "tasks": [{"key": "WEB-1", "outcome": "conflict"}]},
        {"result": "landed", "landed_commit": "b" * 40, "tasks": [{"key": "WEB-1", "outcome": "pending"}]},
        {"result": "conflict", "tasks": [{"key": "WEB-1", "outcome": "conflict"}], "extra": 1},
    ],
)
def test_an_inconsistent_finish_is_refused_and_changes_nothing(project, agent, lander, body):
    task = TaskFactory(project=project)
    assert task.key == "WEB-1"
    deliver(agent, task.key)
    client = client_for(lander)
    grant = next_landing(client)
    assert_error(finish_landing(client, grant, body), 400, "VALIDATION_ERROR")
    task.refresh_from_db()
    assert task.status == TaskStatus.DELIVERED
    assert Landing.objects.get(pk=grant["landing"]["id"]).status == LandingStatus.ACTIVE


def test_agents_cannot_write_landing_notes_or_set_delivered(project, agent):
    task = TaskFactory(project=project)
    client = client_for(agent)
    claim = client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json").json()
    note = client.post(
        f"/api/v1/attempts/{claim['attempt']['id']}/notes/",
        {"kind": "landing", "content": "x"},
        format="json",
        **holder(claim),
    )
    assert_error(note, 400, "VALIDATION_ERROR")
    patched = client_for(AgentFactory(projects=[project])).patch(
        f"/api/v1/tasks/{task.key}/", {"status": "delivered"}, format="json"
    )
    assert patched.status_code in (400, 409)
    task.refresh_from_db()
    assert task.status == TaskStatus.READY


def test_set_landing_turns_landing_on_and_off(db, clock, capsys):
    project = ProjectFactory(slug="cli", repository="/srv/cli")
    call_command("set_landing", "cli", "--method", "squash", "--check", "make test", "--batch-max", "4")
    project.refresh_from_db()
    assert (project.target_branch, project.land_method, project.check_command, project.batch_max) == (
        "main",
        "squash",
        "make test",
        4,
    )
    assert "Landing of cli is on: squash onto main" in capsys.readouterr().out
    call_command("set_landing", "cli", "--off")
    project.refresh_from_db()
    assert project.target_branch == ""
    assert project.land_method == "squash"
    with pytest.raises(Exception, match="VALIDATION_ERROR"):
        call_command("set_landing", "cli", "--batch-max", "0")

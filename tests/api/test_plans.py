"""`POST /plans/` (SPEC §17): a whole plan in one call, all or nothing, every problem named by path and ref."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.models import Decision, Event, EventType, Task, TaskDependency
from tests.api.conftest import assert_error, client_for
from tests.concurrency import run_in_threads
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db

PLANS = "/api/v1/plans/"


def layered_plan(tasks: int = 50, edges: int = 80, *, seed: int = 7) -> list[dict]:
    """`tasks` tasks t0…, with `edges` distinct edges, each from a later task to an earlier one (no cycle)."""
    chooser = random.Random(seed)
    pairs: set[tuple[int, int]] = set()
    while len(pairs) < edges:
        later = chooser.randrange(1, tasks)
        pairs.add((later, chooser.randrange(0, later)))
    planned: list[dict[str, Any]] = [{"ref": f"t{i}", "title": f"Step {i}", "blocked_by": []} for i in range(tasks)]
    for later, earlier in sorted(pairs):
        planned[later]["blocked_by"].append(f"t{earlier}")
    return planned


def apply(client, body, *, dry_run: bool = False, **headers):
    url = PLANS + ("?dry_run=true" if dry_run else "")
    return client.post(url, body, format="json", **headers)


def test_a_fifty_task_plan_with_eighty_edges_applies_in_one_call_with_keys_by_ref(client, project):
    existing = TaskFactory(project=project, title="Already there")
    planned = layered_plan()
    planned[0]["blocked_by"] = [existing.key]
    planned[1]["status"] = "ready"
    planned[2].update(status="blocked", blocked_reason="waiting for a vendor")

    with CaptureQueriesContext(connection) as queries:
        response = apply(client, {"project": project.slug, "tasks": planned})

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["created"] == 50
    assert body["edges"] == 81
    keys = body["keys"]
    assert list(keys) == [f"t{i}" for i in range(50)]
    numbers = [int(key.split("-")[1]) for key in keys.values()]
    assert numbers == list(range(existing.number + 1, existing.number + 51))  # gap-free, in plan order
    stored = {task.key: task for task in Task.objects.filter(key__in=keys.values())}
    assert stored[keys["t1"]].status == "ready"
    assert stored[keys["t1"]].ready_since is not None
    assert stored[keys["t2"]].blocked_reason == "waiting for a vendor"
    for item in planned:
        expected = {keys.get(entry, entry) for entry in item["blocked_by"]}
        actual = set(
            TaskDependency.objects.filter(task__key=keys[item["ref"]], removed_at__isnull=True).values_list(
                "blocked_by__key", flat=True
            )
        )
        assert actual == expected, item["ref"]
    created = Event.objects.filter(type=EventType.TASK_CREATED, task__key__in=keys.values()).order_by("id")
    assert [event.payload["key"] for event in created] == list(keys.values())
    assert created[0].payload["blocked_by"] == [existing.key]
    project.refresh_from_db()
    assert project.task_sequence == existing.number + 50
    # Bulk: a constant number of statements, not one (or more) per task or edge.
    print("plan statements:", len(queries))
    assert len(queries) <= 15, [q["sql"][:80] for q in queries.captured_queries]


def test_the_same_plan_with_one_cycle_writes_nothing_and_names_the_cycle(client, project):
    planned = layered_plan()
    planned[0]["blocked_by"] = ["t49"]
    planned[49]["blocked_by"] = ["t30"]
    planned[30]["blocked_by"] = ["t0"]
    before = (Task.objects.count(), Event.objects.count(), TaskDependency.objects.count())

    error = assert_error(apply(client, {"project": project.slug, "tasks": planned}), 409, "DEPENDENCY_CYCLE")

    path = error["details"]["path"]
    assert path[0] == path[-1]
    assert set(path) == {"t0", "t49", "t30"}
    assert len(path) == 4
    assert error["details"]["ref"] == path[0]
    assert (Task.objects.count(), Event.objects.count(), TaskDependency.objects.count()) == before
    project.refresh_from_db()
    assert project.task_sequence == 0


def test_a_task_blocked_by_itself_is_a_cycle_of_one(client, project):
    planned = [{"ref": "a", "title": "A", "blocked_by": ["a"]}]
    error = assert_error(apply(client, {"project": project.slug, "tasks": planned}), 409, "DEPENDENCY_CYCLE")
    assert error["details"]["path"] == ["a", "a"]


def test_a_replay_under_the_same_idempotency_key_answers_the_same_keys(client, project):
    body = {"project": project.slug, "tasks": layered_plan(10, 12)}
    first = apply(client, body, HTTP_IDEMPOTENCY_KEY="plan-1")
    again = apply(client, body, HTTP_IDEMPOTENCY_KEY="plan-1")
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    assert again["Idempotent-Replayed"] == "true"
    assert Task.objects.filter(project=project).count() == 10
    other = {"project": project.slug, "tasks": layered_plan(3, 1)}
    assert_error(apply(client, other, HTTP_IDEMPOTENCY_KEY="plan-1"), 409, "IDEMPOTENCY_CONFLICT")


def test_a_dry_run_checks_the_plan_and_writes_nothing(client, project):
    before = (Task.objects.count(), Event.objects.count(), TaskDependency.objects.count())
    response = apply(client, {"project": project.slug, "tasks": layered_plan(20, 30)}, dry_run=True)
    assert response.status_code == 200, response.content
    assert response.json() == {
        "dry_run": True,
        "created": 0,
        "would_create": {"tasks": 20, "edges": 30, "decisions": 0},
        "refs": [f"t{i}" for i in range(20)],
    }
    assert (Task.objects.count(), Event.objects.count(), TaskDependency.objects.count()) == before
    project.refresh_from_db()
    assert project.task_sequence == 0
    cyclic = [{"ref": "a", "title": "A", "blocked_by": ["b"]}, {"ref": "b", "title": "B", "blocked_by": ["a"]}]
    error = assert_error(
        apply(client, {"project": project.slug, "tasks": cyclic}, dry_run=True), 409, "DEPENDENCY_CYCLE"
    )
    assert error["details"]["path"] in (["a", "b", "a"], ["b", "a", "b"])


def test_a_plan_carries_decisions_about_its_own_tasks_and_the_project(client, project):
    planned = [
        {"ref": "schema", "title": "Design the schema"},
        {"ref": "api", "title": "API", "blocked_by": ["schema"]},
    ]
    decisions = [
        {"title": "PostgreSQL only features are fine", "body": "We run PG in prod."},
        {"title": "UUIDs", "task": "schema"},
    ]
    response = apply(client, {"project": project.slug, "tasks": planned, "decisions": decisions})
    assert response.status_code == 201, response.content
    body = response.json()
    made = list(Decision.objects.filter(pk__in=body["decisions"]).order_by("id"))
    assert [d.title for d in made] == ["PostgreSQL only features are fine", "UUIDs"]
    assert made[0].task is None
    assert made[1].task.key == body["keys"]["schema"]
    assert Event.objects.filter(type=EventType.DECISION_CREATED, project=project).count() == 2


def problems(response) -> list[dict]:
    error = assert_error(response, 400, "VALIDATION_ERROR")
    assert error["details"]["error_count"] >= len(error["details"]["errors"]) >= 1
    return error["details"]["errors"]


def test_every_problem_is_named_by_path_and_ref_and_nothing_is_written(client, project):
    planned = [
        {"ref": "a", "title": "A"},
        {"ref": "a", "title": "Duplicate"},
        {"ref": "c", "title": "C", "blocked_by": ["a", "nowhere"]},
        {"ref": "d", "title": "x" * 9 * 1024},
        {"ref": "e", "title": "E", "status": "done"},
        {"ref": "f", "title": "F", "colour": "red"},
        {"ref": "g", "title": "G", "status": "blocked"},
        {"ref": "WEB-9", "title": "Looks like a key"},
    ]
    events_before = Event.objects.count()
    # Shape problems (types, lengths, choices, unknown fields) are reported together first.
    found = {(p["path"], p["ref"]) for p in problems(apply(client, {"project": project.slug, "tasks": planned}))}
    assert found == {("tasks[3].title", "d"), ("tasks[4].status", "e"), ("tasks[5].colour", "f")}

    # Then the plan's own rules, again all at once.
    for index in (3, 4, 5):
        planned[index] = {"ref": planned[index]["ref"], "title": "fixed"}
    listed = problems(apply(client, {"project": project.slug, "tasks": planned}))
    by_path = {p["path"]: p for p in listed}
    assert set(by_path) == {"tasks[1].ref", "tasks[2].blocked_by[1]", "tasks[6].blocked_reason", "tasks[7].ref"}
    assert by_path["tasks[1].ref"]["ref"] == "a"
    assert "duplicate" in by_path["tasks[1].ref"]["message"]
    assert by_path["tasks[2].blocked_by[1]"]["ref"] == "c"
    assert "nowhere" in by_path["tasks[2].blocked_by[1]"]["message"]
    assert by_path["tasks[6].blocked_reason"]["ref"] == "g"
    assert Task.objects.count() == 0
    assert Event.objects.count() == events_before


def test_limits_are_clear_errors(client, project):
    too_many = [{"ref": f"t{i}", "title": "T"} for i in range(201)]
    listed = problems(apply(client, {"project": project.slug, "tasks": too_many}))
    assert listed[0]["path"] == "tasks"
    assert "200" in listed[0]["message"]

    edges = [{"ref": f"t{i}", "title": "T", "blocked_by": [f"t{j}" for j in range(i)]} for i in range(33)]
    listed = problems(apply(client, {"project": project.slug, "tasks": edges}))  # 528 edges
    assert listed[0]["path"] == "tasks[].blocked_by"
    assert "500" in listed[0]["message"]

    assert problems(apply(client, {"project": project.slug, "tasks": []}))[0]["path"] == "tasks"
    assert_error(apply(client, {"project": project.slug, "tasks": [], "extra": 1}), 400, "VALIDATION_ERROR")
    assert problems(apply(client, {"project": project.slug, "tasks": ["not an object"]}))[0]["path"].startswith(
        "tasks[0]"
    )
    assert_error(client.post(PLANS + "?dry_run=maybe", {}, format="json"), 400, "VALIDATION_ERROR")
    assert Task.objects.count() == 0


def test_a_plans_task_may_wait_for_a_task_of_another_project_the_agent_sees(client, project, agent):
    """SPEC §22: a `blocked_by` key may name another project's task the caller is an agent of."""
    other = ProjectFactory(slug="elsewhere", key_prefix="ELSE")
    agent.projects.add(other)
    foreign = TaskFactory(project=other)
    planned = [{"ref": "a", "title": "A", "blocked_by": [foreign.key]}, {"ref": "b", "title": "B", "blocked_by": ["a"]}]
    response = apply(client, {"project": project.slug, "tasks": planned})
    assert response.status_code == 201, response.content
    a = Task.objects.get(key=response.json()["keys"]["a"])
    assert a.project_id == project.pk
    assert list(TaskDependency.objects.filter(task=a).values_list("blocked_by_id", flat=True)) == [foreign.pk]


def test_a_task_of_a_project_the_agent_cannot_see_is_no_blocker_of_a_plan(client, project):
    hidden = TaskFactory(project=ProjectFactory(slug="hidden", key_prefix="HID"), title="Hidden")
    planned = [{"ref": "a", "title": "A", "blocked_by": [hidden.key]}]
    listed = problems(apply(client, {"project": project.slug, "tasks": planned}))
    assert listed[0]["path"] == "tasks[0].blocked_by[0]"
    assert listed[0]["message"] == f"{hidden.key!r} is neither a ref of this plan nor a task you can see"
    assert "Hidden" not in json.dumps(listed)
    assert Task.objects.filter(project=project).count() == 0


def test_a_plans_decision_is_about_a_task_of_its_own_project_only(client, project, agent):
    other = ProjectFactory(slug="elsewhere", key_prefix="ELSE")
    agent.projects.add(other)
    foreign = TaskFactory(project=other)
    body = {
        "project": project.slug,
        "tasks": [{"ref": "a", "title": "A"}],
        "decisions": [{"title": "D", "task": foreign.key}],
    }
    listed = problems(apply(client, body))
    assert listed[0]["path"] == "decisions[0].task"
    assert f"nor a task of {project.slug}" in listed[0]["message"]


def test_a_cycle_in_a_plan_that_also_waits_on_another_project_names_its_refs(client, project, agent):
    """The plan's refs close the cycle; the foreign blockers along the way are not part of it."""
    other = ProjectFactory(slug="elsewhere", key_prefix="ELSE")
    agent.projects.add(other)
    foreign = TaskFactory(project=other)
    planned = [
        {"ref": "a", "title": "A", "blocked_by": [foreign.key, "b"]},
        {"ref": "b", "title": "B", "blocked_by": ["a", foreign.key]},
    ]
    error = assert_error(apply(client, {"project": project.slug, "tasks": planned}), 409, "DEPENDENCY_CYCLE")
    assert error["details"]["path"] == ["a", "b", "a"]
    assert not TaskDependency.objects.exists()


def test_a_project_the_agent_cannot_see_is_not_found(project):
    stranger = client_for(AgentFactory(projects=[ProjectFactory(slug="theirs")]))
    assert_error(apply(stranger, {"project": project.slug, "tasks": [{"ref": "a", "title": "A"}]}), 404, "NOT_FOUND")
    assert Task.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_two_plans_in_parallel_on_one_project_both_succeed_with_distinct_gap_free_keys(clock):
    project = ProjectFactory(slug="race")
    clients = [client_for(AgentFactory(projects=[project])) for _ in range(2)]
    TaskFactory(project=project)  # a key taken before the race

    def file(index: int) -> dict:
        response = apply(clients[index], {"project": project.slug, "tasks": layered_plan(30, 40, seed=index)})
        assert response.status_code == 201, response.content
        return response.json()["keys"]

    results = run_in_threads(2, file)
    assert not [r for r in results if isinstance(r, BaseException)], results
    numbers = [sorted(int(key.split("-")[1]) for key in keys.values()) for keys in results]
    assert sorted(numbers[0] + numbers[1]) == list(range(2, 62))
    # Each plan's keys are one run: the other plan's keys come before or after it, never in between.
    for own in numbers:
        assert own == list(range(own[0], own[0] + 30))


def test_decision_problems_are_named_by_path_too(client, project):
    planned = [{"ref": "a", "title": "A"}]
    decisions = [
        {"title": "Fine"},
        {"title": "x" * 201},
        {"title": "About nothing", "task": "zzz"},
        {"title": "Odd", "colour": "blue"},
    ]
    found = {
        p["path"] for p in problems(apply(client, {"project": project.slug, "tasks": planned, "decisions": decisions}))
    }
    assert found == {"decisions[1].title", "decisions[3].colour"}
    decisions = [{"title": "About nothing", "task": "zzz"}, {"title": "Fine", "task": "a"}]
    found = {
        p["path"] for p in problems(apply(client, {"project": project.slug, "tasks": planned, "decisions": decisions}))
    }
    assert found == {"decisions[0].task"}
    assert Decision.objects.count() == 0


def test_two_hundred_problems_are_counted_and_the_details_stay_small(client, project):
    planned = [{"ref": f"t{i}", "title": "T", "blocked_by": [f"missing-{i}"]} for i in range(200)]
    response = apply(client, {"project": project.slug, "tasks": planned})
    error = assert_error(response, 400, "VALIDATION_ERROR")
    assert error["details"]["error_count"] == 200
    assert error["details"]["truncated"] is True
    assert 10 <= len(error["details"]["errors"]) < 200
    assert error["details"]["errors"][0] == {
        "path": "tasks[0].blocked_by[0]",
        "ref": "t0",
        "message": "'missing-0' is neither a ref of this plan nor a task you can see",
    }
    assert len(response.content) < 5000


odd_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
task_items = st.dictionaries(
    st.sampled_from(["ref", "title", "status", "priority", "blocked_by", "blocked_reason", "task_class"]),
    odd_values,
    max_size=6,
)
odd_plans = st.fixed_dictionaries(
    {"project": st.just("web")},
    optional={"tasks": st.lists(task_items, max_size=5) | odd_values, "decisions": odd_values},
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=odd_plans)
def test_no_plan_however_odd_answers_5xx(client, project, body):
    response = client.post(PLANS, json.dumps(body), content_type="application/json")
    assert response.status_code in (201, 400, 409), (body, response.content[:300])
    if response.status_code >= 400:
        assert set(response.json()) == {"error"}


def test_a_plans_decisions_need_the_decision_permission_a_staff_user_may_lack(project, django_user_model):
    from django.contrib.auth.models import Permission
    from rest_framework.test import APIClient

    planner = django_user_model.objects.create_user(username="planner", password="pw", is_staff=True)
    planner.user_permissions.add(Permission.objects.get(codename="add_task", content_type__app_label="ledger"))
    staff = APIClient()
    staff.force_login(planner)
    body = {"project": project.slug, "tasks": [{"ref": "a", "title": "A"}], "decisions": [{"title": "TOML"}]}

    assert_error(apply(staff, body), 403, "PERMISSION_DENIED")
    assert not Task.objects.filter(project=project).exists()
    assert not Decision.objects.exists()
    assert apply(staff, {**body, "decisions": []}).status_code == 201
    planner.user_permissions.add(Permission.objects.get(codename="add_decision", content_type__app_label="ledger"))
    staff.force_login(django_user_model.objects.get(pk=planner.pk))  # permissions are cached per user object
    assert apply(staff, {**body, "tasks": [{"ref": "b", "title": "B"}]}).status_code == 201
    assert Decision.objects.count() == 1

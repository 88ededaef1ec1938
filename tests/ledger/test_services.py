from __future__ import annotations

import itertools

import pytest
from django.db import connection

from core.errors import DependencyCycle, InvalidStatusTransition, ValidationFailed, VersionConflict
from leases.services import task_update as leases_task_update
from ledger.actors import SYSTEM
from ledger.models import ALLOWED_TRANSITIONS, Event, EventType, Task, TaskStatus
from ledger.selectors import agent_for_token
from ledger.services import (
    agent_deactivate,
    agent_heartbeat,
    agent_rotate_token,
    dependency_add,
    dependency_remove,
    task_create,
)
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db


def task_update(**arguments):
    """The task update every door calls (no lease is live in these tests), answered as (task, changed fields)."""
    updated = leases_task_update(**arguments)
    return updated.task, updated.changed


def test_task_keys_are_prefix_plus_sequence_per_project():
    web = ProjectFactory(slug="web")
    api = ProjectFactory(slug="api-core")
    keys = [TaskFactory(project=web).key, TaskFactory(project=web).key, TaskFactory(project=api).key]
    assert keys == ["WEB-1", "WEB-2", "APICORE-1"]


def test_task_create_appends_one_created_event():
    task = TaskFactory(status=TaskStatus.OPEN)
    events = list(Event.objects.filter(task=task).values_list("type", flat=True))
    assert events == [EventType.TASK_CREATED]


def test_ready_task_records_when_it_became_ready(clock):
    task = TaskFactory(status=TaskStatus.READY)
    assert task.ready_since == clock.now()
    assert TaskFactory(status=TaskStatus.OPEN).ready_since is None


@pytest.mark.parametrize("status", [TaskStatus.REVIEW, TaskStatus.DONE, TaskStatus.CANCELLED, "in_progress"])
def test_a_task_cannot_be_born_in_a_later_status(status):
    project = ProjectFactory()
    with pytest.raises(ValidationFailed):
        task_create(project=project, title="x", status=status, actor=SYSTEM)
    assert not Task.objects.exists()


def test_blocked_needs_a_reason():
    project = ProjectFactory()
    with pytest.raises(ValidationFailed):
        task_create(project=project, title="x", status=TaskStatus.BLOCKED, actor=SYSTEM)
    task = TaskFactory(project=project, status=TaskStatus.OPEN)
    with pytest.raises(ValidationFailed):
        task_update(task=task, actor=SYSTEM, changes={"status": TaskStatus.BLOCKED})
    task, _changed = task_update(
        task=task, actor=SYSTEM, changes={"status": TaskStatus.BLOCKED, "blocked_reason": "waiting on infra"}
    )
    assert task.status == TaskStatus.BLOCKED
    task, _ = task_update(task=task, actor=SYSTEM, changes={"status": TaskStatus.READY})
    assert task.blocked_reason == ""


# `delivered` is entered only by finishing `done` or approving a review (SPEC §21.1), never by an update:
# tests/landing pins its edges, and the test below that an update refuses it.
ALL_PAIRS = [
    (a, b) for a, b in itertools.product(TaskStatus.values, repeat=2) if a != b and TaskStatus.DELIVERED not in (a, b)
]


def test_an_update_never_sets_delivered():
    task = TaskFactory(status=TaskStatus.READY)
    with pytest.raises(InvalidStatusTransition):
        task_update(task=task, actor=SYSTEM, changes={"status": TaskStatus.DELIVERED})
    task.refresh_from_db()
    assert task.status == TaskStatus.READY


@pytest.mark.parametrize(("old", "new"), ALL_PAIRS)
def test_status_transition_table(old, new):
    task = TaskFactory(status=TaskStatus.OPEN)
    # Walk to `old` along allowed edges, administratively.
    path = {
        "open": [],
        "ready": ["ready"],
        "blocked": ["blocked"],
        "review": ["ready", "review"],
        "done": ["ready", "done"],
        "cancelled": ["cancelled"],
    }[old]
    for step in path:
        task, _ = task_update(task=task, actor=SYSTEM, changes={"status": step, "blocked_reason": "r"})
    assert task.status == old
    changes = {"status": new, "blocked_reason": "because"}
    if new in ALLOWED_TRANSITIONS[old]:
        task, _ = task_update(task=task, actor=SYSTEM, changes=changes)
        assert task.status == new
    else:
        version = task.version
        with pytest.raises(InvalidStatusTransition):
            task_update(task=task, actor=SYSTEM, changes=changes)
        task.refresh_from_db()
        assert (task.status, task.version) == (old, version)


def test_update_bumps_version_once_and_records_events():
    task = TaskFactory(status=TaskStatus.OPEN)
    task, changed = task_update(
        task=task, actor=SYSTEM, expected_version=1, changes={"title": "New", "status": TaskStatus.READY}
    )
    assert task.version == 2
    assert changed == {"title", "status"}
    types = list(Event.objects.filter(task=task).values_list("type", flat=True))
    assert types == [EventType.TASK_CREATED, EventType.TASK_STATUS_CHANGED, EventType.TASK_UPDATED]


def test_update_with_stale_version_is_refused_and_changes_nothing():
    task = TaskFactory(status=TaskStatus.OPEN)
    task_update(task=task, actor=SYSTEM, changes={"title": "first"})
    with pytest.raises(VersionConflict) as caught:
        task_update(task=task, actor=SYSTEM, expected_version=1, changes={"title": "second"})
    assert caught.value.details["current_version"] == 2
    task.refresh_from_db()
    assert task.title == "first"


def test_update_that_changes_nothing_bumps_nothing():
    task = TaskFactory(title="Same")
    count = Event.objects.count()
    task, changed = task_update(task=task, actor=SYSTEM, changes={"title": "Same"})
    assert (task.version, changed, Event.objects.count()) == (1, frozenset(), count)


def test_update_refuses_server_owned_fields():
    task = TaskFactory()
    for field in ("epoch", "version", "key", "ready_since"):
        with pytest.raises(ValidationFailed):
            task_update(task=task, actor=SYSTEM, changes={field: 9})


def test_dependency_cycles_are_refused_with_the_path():
    project = ProjectFactory(slug="cyc")
    a, b, c = (TaskFactory(project=project) for _ in range(3))
    dependency_add(task=a, blocked_by=b, actor=SYSTEM)
    dependency_add(task=b, blocked_by=c, actor=SYSTEM)
    with pytest.raises(DependencyCycle) as caught:
        dependency_add(task=c, blocked_by=a, actor=SYSTEM)
    assert caught.value.details["path"] == ["CYC-3", "CYC-1", "CYC-2", "CYC-3"]
    with pytest.raises(DependencyCycle):
        dependency_add(task=a, blocked_by=a, actor=SYSTEM)


def test_removed_dependency_no_longer_counts_for_cycles():
    a, b = TaskFactory(), None
    b = TaskFactory(project=a.project)
    dependency_add(task=a, blocked_by=b, actor=SYSTEM)
    assert dependency_remove(task=a, blocked_by=b, actor=SYSTEM) is True
    dependency_add(task=b, blocked_by=a, actor=SYSTEM)
    types = list(Event.objects.filter(task__in=[a, b]).values_list("type", flat=True))
    assert types.count(EventType.TASK_DEPENDENCY_ADDED) == 2
    assert types.count(EventType.TASK_DEPENDENCY_REMOVED) == 1


def test_dependencies_may_cross_projects():
    """SPEC §22 (it was refused before): a task may wait for a task of another project."""
    a, b = TaskFactory(), TaskFactory()
    assert a.project_id != b.project_id
    dependency = dependency_add(task=a, blocked_by=b, actor=SYSTEM)
    assert (dependency.task_id, dependency.blocked_by_id) == (a.pk, b.pk)


def test_agent_token_authenticates_and_is_never_stored():
    agent = AgentFactory()
    token = agent.api_token
    assert agent_for_token(token) == agent
    assert token not in agent.token_hash
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM ledger_agent")
        rows = cursor.fetchall()
        cursor.execute("SELECT payload FROM ledger_event")
        payloads = cursor.fetchall()
    assert token not in repr(rows)
    assert token not in repr(payloads)


def test_rotation_retires_the_old_token_and_deactivation_refuses_the_new():
    agent = AgentFactory()
    old = agent.api_token
    agent, new = agent_rotate_token(agent=agent, actor=SYSTEM)
    assert agent_for_token(old) is None
    assert agent_for_token(new) == agent
    agent_deactivate(agent=agent, actor=SYSTEM)
    assert agent_for_token(new) is None
    types = list(Event.objects.filter(type__startswith="agent.").values_list("type", flat=True))
    assert types == [EventType.AGENT_CREATED, EventType.AGENT_TOKEN_ROTATED, EventType.AGENT_DEACTIVATED]


@pytest.mark.parametrize("bogus", ["", "lh_", "nope", "lh_" + "x" * 500, "lh_\x00"])
def test_bogus_tokens_authenticate_nobody(bogus):
    AgentFactory()
    assert agent_for_token(bogus) is None


def test_heartbeat_is_throttled_to_one_write_per_30_seconds(clock):
    agent = AgentFactory()
    agent_heartbeat(agent=agent)
    first = clock.now()
    clock.advance(10)
    agent_heartbeat(agent=agent)
    agent.refresh_from_db()
    assert agent.last_seen_at == first
    clock.advance(25)
    agent_heartbeat(agent=agent)
    agent.refresh_from_db()
    assert agent.last_seen_at == clock.now()


def test_uppercase_handles_are_refused():
    with pytest.raises(ValidationFailed):
        AgentFactory(handle="Agent-07")

"""SPEC §23.1: a task's `requires` labels; only an agent carrying all of them claims it."""

from __future__ import annotations

from typing import Any

import pytest

from core.errors import TaskNotClaimable, ValidationFailed
from leases.selectors import claimable_tasks, with_claimability, with_compact_state
from leases.services import lease_claim, lease_claim_next, task_update
from leases.services.claim_next import _FIRST_CANDIDATE
from ledger import clock
from ledger.actors import SYSTEM
from ledger.label_sets import LABELS_MAX_ITEMS
from ledger.models import Agent, Event, EventType, Task
from ledger.services import agent_deactivate, agent_set_labels
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def project():
    return ProjectFactory(slug="web")


@pytest.fixture
def plain(project):
    return AgentFactory(handle="plain-1", projects=[project])


@pytest.fixture
def gpu(project):
    return AgentFactory(handle="gpu-1", projects=[project], labels=["gpu"])


def test_claim_next_passes_a_gpu_task_by_for_an_agent_without_gpu(clock, project, plain, gpu):
    needs_gpu = TaskFactory(project=project, priority=10, requires=["gpu"])
    anyone = TaskFactory(project=project, priority=0)
    # The plain agent asks first (and so compiles the statement): the higher-priority gpu task is not its.
    grant = lease_claim_next(project=project, agent=plain)
    assert grant is not None
    assert grant.task.pk == anyone.pk
    assert lease_claim_next(project=project, agent=plain) is None
    taken = lease_claim_next(project=project, agent=gpu)
    assert taken is not None
    assert taken.task.pk == needs_gpu.pk


def test_every_required_label_must_be_carried(clock, project):
    task = TaskFactory(project=project, requires=["gpu", "cuda-12"])
    only_gpu = AgentFactory(projects=[project], labels=["gpu"])
    only_cuda = AgentFactory(projects=[project], labels=["cuda-12"])
    both = AgentFactory(projects=[project], labels=["postgres", "cuda-12", "gpu"])
    assert lease_claim_next(project=project, agent=only_gpu) is None
    assert lease_claim_next(project=project, agent=only_cuda) is None
    grant = lease_claim_next(project=project, agent=both)
    assert grant is not None
    assert grant.task.pk == task.pk


def test_the_agent_is_a_parameter_of_the_compiled_statement(project, plain, gpu):
    TaskFactory(project=project, requires=["gpu"])
    compiled = _FIRST_CANDIDATE[False].compiled()
    agent_slots = [name for _, name, _ in compiled.slots if name == "agent"]
    assert len(agent_slots) >= 2  # the reservation and the agent's labels
    assert '"labels"' in compiled.sql
    assert '"requires"' in compiled.sql


def test_a_labels_change_holds_from_the_next_claim(clock, project, plain):
    task = TaskFactory(project=project, requires=["gpu"])
    assert lease_claim_next(project=project, agent=plain) is None
    assert agent_set_labels(agent=plain, labels=["gpu"], actor=SYSTEM)
    assert not agent_set_labels(agent=plain, labels=["gpu"], actor=SYSTEM)  # no change, no event
    assert Event.objects.filter(type=EventType.AGENT_LABELS_CHANGED).count() == 1
    grant = lease_claim_next(project=Agent.objects.get(pk=plain.pk).projects.get(), agent=plain)
    assert grant is not None
    assert grant.task.pk == task.pk


def test_a_direct_claim_without_the_labels_is_refused_naming_the_missing_ones(clock, project, plain):
    task = TaskFactory(project=project, requires=["gpu", "cuda-12"])
    half = AgentFactory(projects=[project], labels=["gpu"])
    with pytest.raises(TaskNotClaimable) as caught:
        lease_claim(task=task, agent=half)
    assert caught.value.details["reason"] == "requires"
    assert caught.value.details["missing"] == ["cuda-12"]
    assert caught.value.details["requires"] == ["gpu", "cuda-12"]
    with pytest.raises(TaskNotClaimable) as caught:
        lease_claim(task=task, agent=plain)
    assert caught.value.details["missing"] == ["gpu", "cuda-12"]
    full = AgentFactory(projects=[project], labels=["cuda-12", "gpu"])
    assert lease_claim(task=task, agent=full).task.pk == task.pk


def test_the_claimable_column_and_list_agree_with_the_claim(clock, project, plain, gpu):
    task = TaskFactory(project=project, requires=["gpu"])
    now = clock.now()
    for agent, expected in ((plain, False), (gpu, True)):
        row = with_compact_state(Task.objects.filter(pk=task.pk), now=now, agent=agent).values("claimable").get()
        assert row["claimable"] is expected
        listed = claimable_tasks(project=project, now=now, agent=agent).filter(pk=task.pk).exists()
        assert listed is expected


def test_somebody_can_claim_it_only_while_an_active_agent_of_the_project_carries_the_labels(clock, project, plain):
    task = TaskFactory(project=project, requires=["gpu"])
    elsewhere = AgentFactory(projects=[ProjectFactory()], labels=["gpu"])

    def anyone_can() -> bool:
        annotated: Any = with_claimability(Task.objects.filter(pk=task.pk), now=clock.now())
        return bool(annotated.values("claimable").get()["claimable"])

    assert not anyone_can()  # the gpu agent does not serve this project
    gpu = AgentFactory(projects=[project], labels=["gpu", "cuda"])
    assert anyone_can()
    agent_deactivate(agent=gpu, actor=SYSTEM)
    assert not anyone_can()
    assert elsewhere.labels == ["gpu"]


def test_requires_can_be_changed_and_cleared(clock, project, plain):
    task = TaskFactory(project=project, requires=["gpu"])
    assert lease_claim_next(project=project, agent=plain) is None
    result = task_update(task=task, actor=SYSTEM, changes={"requires": []})
    assert "requires" in result.changed
    assert Event.objects.filter(type=EventType.TASK_UPDATED, task=task).latest("id").payload["fields"] == ["requires"]
    grant = lease_claim_next(project=project, agent=plain)
    assert grant is not None
    assert grant.task.pk == task.pk


@pytest.mark.parametrize(
    ("requires", "reason"),
    [
        ("gpu", "not_a_list"),
        (["GPU"], "invalid_label"),
        (["has space"], "invalid_label"),
        (["-leading"], "invalid_label"),
        (["x" * 65], "invalid_label"),
        ([""], "invalid_label"),
        ([7], "invalid_label"),
        (["gpu", "gpu"], "duplicate_label"),
        ([f"l{n}" for n in range(LABELS_MAX_ITEMS + 1)], "too_many_labels"),
    ],
)
def test_bad_labels_are_a_validation_error_with_a_stable_reason(project, plain, requires, reason):
    with pytest.raises(ValidationFailed) as caught:
        TaskFactory(project=project, requires=requires)
    assert caught.value.details["reason"] == reason
    assert "requires" in caught.value.details["fields"]
    task = TaskFactory(project=project)
    with pytest.raises(ValidationFailed) as caught:
        task_update(task=task, actor=SYSTEM, changes={"requires": requires})
    assert caught.value.details["reason"] == reason
    with pytest.raises(ValidationFailed) as caught:
        agent_set_labels(agent=plain, labels=requires, actor=SYSTEM)
    assert caught.value.details["reason"] == reason
    assert "labels" in caught.value.details["fields"]
    assert Task.objects.get(pk=task.pk).requires == []


def test_good_labels_are_kept_as_given(project):
    task = TaskFactory(project=project, requires=["postgres.16", "cuda_12", "x" * 64])
    assert Task.objects.get(pk=task.pk).requires == ["postgres.16", "cuda_12", "x" * 64]
    agent = AgentFactory(labels=["b", "a"])
    assert Agent.objects.get(pk=agent.pk).labels == ["b", "a"]
    assert clock.now() is not None

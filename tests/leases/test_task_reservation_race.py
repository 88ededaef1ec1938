"""Reassign racing deactivation (real threads, own connections): no task ends up reserved for an inactive agent.

Reassign locks the agent's row before it checks the agent, and deactivation updates that row before it
clears the agent's reservations, so one of the two always sees the other: either the reassign is
refused ("deactivated"), or it commits first and the deactivation clears the reservation it made.
"""

from __future__ import annotations

import pytest

from core.errors import ValidationFailed
from leases.services import task_reassign
from ledger.actors import SYSTEM
from ledger.models import Agent, Event, EventType, Task
from ledger.services import agent_deactivate
from tests.concurrency import run_in_threads
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("round_", range(4))
def test_reassign_and_deactivation_never_leave_a_reservation_for_an_inactive_agent(round_):
    project = ProjectFactory(slug=f"web{round_}")
    agent = AgentFactory(handle=f"target-{round_}", projects=[project])
    tasks = [TaskFactory(project=project, title=f"T{n}") for n in range(3)]

    def work(index: int) -> object:
        if index == 0:
            return agent_deactivate(agent=Agent.objects.get(pk=agent.pk), actor=SYSTEM)
        return task_reassign(task=tasks[index - 1], agent=agent, actor=SYSTEM, reason="race")

    results = run_in_threads(3, work)

    for result in results:
        assert not isinstance(result, Exception) or isinstance(result, ValidationFailed), repr(result)
    assert not Agent.objects.get(pk=agent.pk).is_active
    assert not Task.objects.filter(reserved_for=agent).exists()
    reassigned = [result for result in results[1:] if not isinstance(result, Exception)]
    # Every reassign that went through was cleared again by the deactivation that followed it.
    assert Event.objects.filter(type=EventType.TASK_RESERVATION_CLEARED).count() == len(reassigned)

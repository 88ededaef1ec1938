"""A restarted runner's lander slot: its live landing is handed back at once (SPEC §21.2, §23.1)."""

from __future__ import annotations

import pytest

from landing.models import Landing, LandingStatus, LandingTask
from landing.services import LandingSettings, landing_claim_next, project_set_landing
from leases.models import Attempt, AttemptStatus, InterruptionReason
from ledger.actors import SYSTEM
from ledger.models import Agent, Task, TaskStatus
from runners.models import RunnerSlot
from runners.services import runner_register, slot_cancel_attempt
from tests.factories import AgentFactory, TaskFactory
from tests.landing.helpers import deliver

pytestmark = pytest.mark.django_db


@pytest.fixture
def delivered(project):
    project_set_landing(project=project, settings=LandingSettings(target_branch="main"), actor=SYSTEM)
    task = TaskFactory(project=project)
    assert deliver(AgentFactory(projects=[project]), task.key)["status"] == 200
    return Task.objects.get(pk=task.pk)


def _landing_of(runner, project, clock):
    lander = Agent.objects.get(handle="gpu-box.1")
    grant = landing_claim_next(project=project, agent=lander, lease_seconds=600)
    assert grant is not None
    clock.advance(5)
    return Landing.objects.get(pk=grant.landing.pk)


def test_register_hands_back_a_slots_live_landing_and_its_task_stays_delivered(runner, project, delivered, clock):
    landing = _landing_of(runner, project, clock)
    attempt_id = LandingTask.objects.get(landing=landing).attempt_id
    registration = runner_register(runner=runner, host="h", version="v", pid=2, actor=SYSTEM)
    assert [(item.attempt_id, item.task) for item in registration.handed_off] == [(attempt_id, delivered.key)]
    landing.refresh_from_db()
    assert landing.status == LandingStatus.EXPIRED
    assert landing.finished_at is not None
    attempt = Attempt.objects.get(pk=attempt_id)
    assert (attempt.status, attempt.interruption_reason_code) == (
        AttemptStatus.INTERRUPTED,
        InterruptionReason.RUNNER_RESTART,
    )
    assert Task.objects.get(pk=delivered.pk).status == TaskStatus.DELIVERED
    # The target is free for the next lander at once, not when the lease would have lapsed.
    assert landing_claim_next(project=project, agent=Agent.objects.get(handle="gpu-box.2")) is not None


def test_cancel_of_a_landing_slot_hands_its_landing_back(runner, project, delivered, clock):
    landing = _landing_of(runner, project, clock)
    attempt_id = LandingTask.objects.get(landing=landing).attempt_id
    slot = RunnerSlot.objects.get(runner=runner, number=1)
    assert slot_cancel_attempt(slot=slot, actor=SYSTEM) == attempt_id
    assert Landing.objects.get(pk=landing.pk).status == LandingStatus.EXPIRED
    assert Attempt.objects.get(pk=attempt_id).interruption_reason_code == InterruptionReason.USER_REQUEST

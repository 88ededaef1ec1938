"""The runners room's services (SPEC §23.1): create, register, heartbeat, lost, cordon/drain, cancel."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.errors import AgentPaused, ValidationFailed
from leases.models import Attempt, AttemptStatus, InterruptionReason, Note
from leases.services import lease_claim, lease_claim_next
from ledger.actors import SYSTEM
from ledger.models import Agent, AgentKind, Event, EventType, Task, TaskStatus
from ledger.tokens import hash_token
from runners.models import Runner, RunnerSlot, SlotState
from runners.services import (
    SlotReport,
    runner_cordon,
    runner_create,
    runner_drain,
    runner_heartbeat,
    runner_register,
    runner_rotate_token,
    runner_uncordon,
    runner_undrain,
    runners_mark_lost,
    slot_cancel_attempt,
)
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db


def _register(runner: Runner):
    return runner_register(runner=runner, host="box-1", version="0.9", pid=4242, actor=SYSTEM)


def test_create_makes_one_script_agent_per_slot_with_the_runners_projects_and_labels(runner, project):
    agents = list(Agent.objects.filter(runner_slot__runner=runner).order_by("handle"))
    assert [agent.handle for agent in agents] == ["gpu-box.1", "gpu-box.2"]
    assert {agent.kind for agent in agents} == {AgentKind.SCRIPT}
    assert all(agent.labels == ["gpu"] for agent in agents)
    assert all(list(agent.projects.all()) == [project] for agent in agents)
    assert runner.token_hash == hash_token(runner.api_token)
    assert runner.api_token.startswith("lhr_")
    assert Event.objects.filter(type=EventType.RUNNER_CREATED, payload__runner="gpu-box").count() == 1


def test_create_refuses_a_taken_slot_handle_and_leaves_nothing(project):
    from tests.factories import AgentFactory

    AgentFactory(handle="box.2", projects=[project])
    with pytest.raises(ValidationFailed):
        runner_create(name="box", projects=[project], slots=2, actor=SYSTEM)
    assert not Runner.objects.filter(name="box").exists()
    assert not Agent.objects.filter(handle="box.1").exists()


@pytest.mark.parametrize("slots", [0, 65, True])
def test_create_refuses_a_slot_count_out_of_range(project, slots):
    with pytest.raises(ValidationFailed):
        runner_create(name="box", projects=[project], slots=slots, actor=SYSTEM)


def test_register_returns_fresh_slot_tokens_and_the_old_ones_stop_working(runner):
    first = _register(runner)
    second = _register(runner)
    for old, new in zip(first.slots, second.slots, strict=True):
        agent = Agent.objects.get(handle=new.agent)
        assert agent.token_hash == hash_token(new.token)
        assert agent.token_hash != hash_token(old.token)
    runner.refresh_from_db()
    assert (runner.host, runner.version, runner.pid) == ("box-1", "0.9", 4242)
    assert Event.objects.filter(type=EventType.RUNNER_REGISTERED).count() == 2


def test_register_hands_off_a_slots_live_attempt_at_once_as_runner_restart(runner, project, clock):
    task = TaskFactory(project=project)
    slot_agent = Agent.objects.get(handle="gpu-box.1")
    grant = lease_claim(task=task, agent=slot_agent, lease_seconds=600)
    clock.advance(5)  # far from the lease's end: the hand-off must not wait for expiry
    registration = _register(runner)
    attempt = Attempt.objects.get(pk=grant.attempt.pk)
    assert attempt.status == AttemptStatus.INTERRUPTED
    assert attempt.interruption_reason_code == InterruptionReason.RUNNER_RESTART
    assert [(item.attempt_id, item.task) for item in registration.handed_off] == [(attempt.pk, task.key)]
    assert Note.objects.filter(attempt=attempt, important=True).exists()
    # Claimable again now, by another slot.
    other = Agent.objects.get(handle="gpu-box.2")
    assert lease_claim_next(project=project, agent=other).task.pk == task.pk


def test_heartbeat_stores_slot_states_and_clears_lost(runner, clock):
    _register(runner)
    clock.advance(60)
    assert runners_mark_lost() == ["gpu-box"]
    answer = runner_heartbeat(
        runner=runner, slots=[SlotReport(number=1, state=SlotState.WORKING, attempt_id=7, task="WEB-1")]
    )
    assert (answer.cordoned, answer.draining, answer.cancel, answer.heartbeat_seconds) == (False, False, [], 15)
    runner.refresh_from_db()
    assert runner.lost_at is None
    slot = RunnerSlot.objects.get(runner=runner, number=1)
    assert (slot.state, slot.attempt_id, slot.task_key) == (SlotState.WORKING, 7, "WEB-1")


def _slot_writes(queries) -> list[str]:
    return [q["sql"] for q in queries if "runners_runnerslot" in q["sql"] and not q["sql"].startswith("SELECT")]


def test_an_unchanged_heartbeat_writes_no_slot_row_and_a_changed_slot_only_its_own(runner, clock):
    _register(runner)
    idle = [SlotReport(number=1, state=SlotState.IDLE), SlotReport(number=2, state=SlotState.IDLE)]
    registered_at = RunnerSlot.objects.get(runner=runner, number=1).reported_at
    clock.advance(15)
    with CaptureQueriesContext(connection) as unchanged:
        answer = runner_heartbeat(runner=runner, slots=idle)
    assert answer.cancel == []
    assert _slot_writes(unchanged.captured_queries) == []
    statements = [q["sql"] for q in unchanged.captured_queries if not q["sql"].startswith(("BEGIN", "SAVEPOINT"))]
    statements = [sql for sql in statements if not sql.startswith(("COMMIT", "RELEASE", "ROLLBACK"))]
    assert len(statements) == 2  # the runner's own row (its heartbeat), then its slots and flags in one read
    runner.refresh_from_db()
    assert runner.last_heartbeat_at == clock.now()
    assert RunnerSlot.objects.get(runner=runner, number=1).reported_at == registered_at
    clock.advance(15)
    busy = [SlotReport(number=1, state=SlotState.WORKING, attempt_id=7, task="WEB-1"), idle[1]]
    with CaptureQueriesContext(connection) as changed:
        runner_heartbeat(runner=runner, slots=busy)
    assert len(_slot_writes(changed.captured_queries)) == 1
    slot = RunnerSlot.objects.get(runner=runner, number=1)
    assert (slot.state, slot.attempt_id, slot.task_key, slot.reported_at) == ("working", 7, "WEB-1", clock.now())
    assert RunnerSlot.objects.get(runner=runner, number=2).reported_at == registered_at


def test_the_heartbeat_answers_cordoned_and_draining_from_the_runners_row(runner):
    _register(runner)
    runner_cordon(runner=runner, actor=SYSTEM)
    idle = [SlotReport(number=1, state=SlotState.IDLE)]
    assert runner_heartbeat(runner=runner, slots=idle).cordoned
    assert runner_heartbeat(runner=runner, slots=[]).cordoned
    runner_uncordon(runner=runner, actor=SYSTEM)
    runner_drain(runner=runner, actor=SYSTEM)
    answer = runner_heartbeat(runner=runner, slots=idle)
    assert (answer.cordoned, answer.draining) == (False, True)


@pytest.mark.parametrize(
    "reports",
    [
        [SlotReport(number=3, state="idle")],
        [SlotReport(number=1, state="sleeping")],
        [SlotReport(number=1, state="idle"), SlotReport(number=1, state="idle")],
        [SlotReport(number=1, state="working", attempt_id=0)],
    ],
)
def test_heartbeat_refuses_a_bad_report(runner, reports):
    _register(runner)
    with pytest.raises(ValidationFailed):
        runner_heartbeat(runner=runner, slots=reports)


def test_a_runner_is_lost_once_after_three_missed_heartbeats(runner, clock):
    _register(runner)
    clock.advance(44)
    assert runners_mark_lost() == []
    clock.advance(2)
    assert runners_mark_lost() == ["gpu-box"]
    clock.advance(60)
    assert runners_mark_lost() == []
    lost = Event.objects.filter(type=EventType.RUNNER_LOST)
    assert lost.count() == 1
    assert lost.get().severity == "warn"
    runner_heartbeat(runner=runner, slots=[])
    clock.advance(46)
    assert runners_mark_lost() == ["gpu-box"]


def test_a_never_registered_runner_is_not_lost(runner, clock):
    clock.advance(3600)
    assert runners_mark_lost() == []


def test_cordon_pauses_the_slot_agents_and_uncordon_resumes_them(runner, project):
    _register(runner)
    TaskFactory(project=project)
    slot_agent = Agent.objects.get(handle="gpu-box.1")
    assert runner_cordon(runner=runner, actor=SYSTEM) is True
    assert runner_cordon(runner=runner, actor=SYSTEM) is False
    slot_agent.refresh_from_db()
    with pytest.raises(AgentPaused):
        lease_claim_next(project=project, agent=slot_agent)
    assert runner_heartbeat(runner=runner, slots=[]).cordoned is True
    assert runner_uncordon(runner=runner, actor=SYSTEM) is True
    slot_agent.refresh_from_db()
    assert lease_claim_next(project=project, agent=slot_agent) is not None
    assert Event.objects.filter(type=EventType.RUNNER_CORDONED).count() == 1
    assert Event.objects.filter(type=EventType.RUNNER_UNCORDONED).count() == 1


def test_uncordon_keeps_a_draining_runner_paused_and_an_admins_pause_alone(runner, project):
    from ledger.services import agent_pause

    other = Agent.objects.get(handle="gpu-box.2")
    agent_pause(agent=other, actor=SYSTEM, reason="broken disk")
    runner_cordon(runner=runner, actor=SYSTEM)
    runner_drain(runner=runner, actor=SYSTEM)
    runner_uncordon(runner=runner, actor=SYSTEM)
    first = Agent.objects.get(handle="gpu-box.1")
    assert first.claims_paused_at is not None
    runner_undrain(runner=runner, actor=SYSTEM)
    first.refresh_from_db()
    other.refresh_from_db()
    assert first.claims_paused_at is None
    assert other.claims_paused_at is not None
    assert other.pause_reason == "broken disk"


def test_cancel_hands_the_attempt_off_and_the_heartbeat_lists_it_until_the_slot_moves_on(runner, project, clock):
    _register(runner)
    task = TaskFactory(project=project)
    slot_agent = Agent.objects.get(handle="gpu-box.1")
    grant = lease_claim(task=task, agent=slot_agent)
    slot = RunnerSlot.objects.get(runner=runner, number=1)
    assert (
        slot_cancel_attempt(slot=slot, actor=SYSTEM, attempt_id=grant.attempt.pk, note="wrong model")
        == grant.attempt.pk
    )
    attempt = Attempt.objects.get(pk=grant.attempt.pk)
    assert attempt.status == AttemptStatus.INTERRUPTED
    assert attempt.interruption_reason_code == InterruptionReason.USER_REQUEST
    assert "Cancelled from the console" in Note.objects.get(attempt=attempt).content
    assert Task.objects.get(pk=task.pk).status == TaskStatus.READY
    busy = [SlotReport(number=1, state=SlotState.WORKING, attempt_id=attempt.pk, task=task.key)]
    assert runner_heartbeat(runner=runner, slots=busy).cancel == [attempt.pk]
    assert runner_heartbeat(runner=runner, slots=busy).cancel == [attempt.pk]
    assert runner_heartbeat(runner=runner, slots=[SlotReport(number=1, state=SlotState.IDLE)]).cancel == []
    assert RunnerSlot.objects.get(pk=slot.pk).cancel_attempt_id is None
    assert Event.objects.filter(type=EventType.RUNNER_ATTEMPT_CANCELLED, attempt_id=attempt.pk).count() == 1


def test_cancel_refuses_a_slot_that_moved_on_or_holds_nothing(runner, project):
    slot = RunnerSlot.objects.get(runner=runner, number=1)
    with pytest.raises(ValidationFailed):
        slot_cancel_attempt(slot=slot, actor=SYSTEM)
    grant = lease_claim(task=TaskFactory(project=project), agent=slot.agent)
    with pytest.raises(ValidationFailed):
        slot_cancel_attempt(slot=slot, actor=SYSTEM, attempt_id=grant.attempt.pk + 1)
    assert Attempt.objects.get(pk=grant.attempt.pk).status == AttemptStatus.ACTIVE


def test_rotate_token_replaces_the_runner_token(runner):
    _, token = runner_rotate_token(runner=runner, actor=SYSTEM)
    runner.refresh_from_db()
    assert runner.token_hash == hash_token(token) != hash_token(runner.api_token)

"""A small fleet of runners in every state, for the runners' console tests (page and browser)."""

from __future__ import annotations

from dataclasses import dataclass

from leases.models import Attempt
from leases.services import lease_claim
from ledger import clock
from ledger.actors import SYSTEM
from ledger.models import Project, Task
from runners.models import Runner, RunnerSlot, SlotState
from runners.services import (
    SlotReport,
    runner_create,
    runner_heartbeat,
    runner_register,
    runners_mark_lost,
)
from tests.factories import ProjectFactory, TaskFactory


@dataclass
class RunnerFleet:
    project: Project
    busy: Runner  # online, slot 1 working on `attempt`, slot 2 idle
    lost: Runner  # registered, then silent: marked lost
    fresh: Runner  # created, never registered
    attempt: Attempt

    def slot(self, runner: Runner, number: int) -> RunnerSlot:
        return RunnerSlot.objects.select_related("agent").get(runner=runner, number=number)


def make_runner(name: str, project: Project, *, slots: int = 2, labels: tuple[str, ...] = ()) -> Runner:
    runner, _token = runner_create(name=name, projects=[project], slots=slots, labels=list(labels), actor=SYSTEM)
    return runner


def register(runner: Runner) -> None:
    runner_register(runner=runner, host=f"{runner.name}.internal", version="1.4.0", pid=4242, actor=SYSTEM)


def build_fleet(*, extra_runners: int = 0, slots: int = 2) -> RunnerFleet:
    """`lost` goes silent first, then time moves past the lost threshold, then `busy` claims and heartbeats."""
    project = ProjectFactory(slug="web", name="Web app")
    lost = make_runner("old-box", project, slots=slots)
    register(lost)
    runner_heartbeat(runner=lost, slots=[SlotReport(number=1, state=SlotState.IDLE)])
    clock.advance(120)
    runners_mark_lost()
    fresh = make_runner("new-box", project, slots=slots)
    busy = make_runner("gpu-box", project, slots=slots, labels=("gpu", "linux"))
    register(busy)
    for n in range(extra_runners):
        extra = make_runner(f"extra-{n:02d}", project, slots=slots)
        register(extra)
    first = RunnerSlot.objects.select_related("agent").get(runner=busy, number=1)
    task: Task = TaskFactory(project=project, title="Rewrite the search parser")  # type: ignore[assignment]
    grant = lease_claim(task=task, agent=first.agent, lease_seconds=1800)
    attempt = Attempt.objects.get(pk=grant.attempt.pk)
    reports = [SlotReport(number=1, state=SlotState.WORKING, attempt_id=attempt.pk, task=task.key)]
    reports += [SlotReport(number=n, state=SlotState.IDLE) for n in range(2, slots + 1)]
    runner_heartbeat(runner=busy, slots=reports)
    return RunnerFleet(project=project, busy=busy, lost=lost, fresh=fresh, attempt=attempt)

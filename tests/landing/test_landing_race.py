"""Landers racing for one queue (SPEC §21.2): real threads with their own connections, SQLite and PostgreSQL.

The database holds the rule — one live landing per (project, target) — so however many landers ask at
once, at most one landing is live at any moment, and every delivered task is landed exactly once.
"""

from __future__ import annotations

import threading
import time

import pytest

from core.errors import LeaseExpired, StorageBusy
from landing.models import Landing, LandingStatus
from landing.services import (
    LandingProof,
    LandingSettings,
    TaskResult,
    landing_claim_next,
    landing_finish,
    project_set_landing,
)
from leases.models import Attempt, AttemptKind
from ledger.actors import SYSTEM
from ledger.models import Event, EventType, Project, Task, TaskStatus
from tests.concurrency import run_in_threads
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db(transaction=True)

LANDERS = 8
TASKS = 24


def _delivered(project: Project, count: int) -> list[Task]:
    tasks: list[Task] = [TaskFactory(project=project) for _ in range(count)]  # type: ignore[misc]
    Task.objects.filter(pk__in=[task.pk for task in tasks]).update(
        status=TaskStatus.DELIVERED,
        delivered_branch="feat/x",
        delivered_commit="c" * 40,
        delivered_at=tasks[0].created_at,
    )
    return tasks


def test_racing_landers_never_hold_two_live_landings_and_land_every_task_once():
    project = ProjectFactory(slug="race", repository="/srv/race")
    project_set_landing(project=project, settings=LandingSettings(target_branch="main", batch_max=2), actor=SYSTEM)
    landers = [AgentFactory(projects=[project]) for _ in range(LANDERS)]
    tasks = _delivered(project, TASKS)
    # Until the queue is empty, within a deadline: a count of tries would run out while SQLite's one
    # writer keeps the others waiting on a loaded machine.
    deadline = time.monotonic() + 120
    lock = threading.Lock()
    live_seen: list[int] = []
    landed: list[str] = []

    def lander_loop(index: int) -> int:
        agent = landers[index]
        fresh = Project.objects.get(pk=project.pk)
        claimed = 0
        while time.monotonic() < deadline:
            try:
                grant = landing_claim_next(project=fresh, agent=agent)
            except StorageBusy:
                continue
            if grant is None:
                if not Task.objects.filter(project=project, status=TaskStatus.DELIVERED).exists():
                    return claimed
                time.sleep(0.005)  # another lander's landing holds the target
                continue
            keys = [entry.task.key for entry in grant.entries]
            # While this landing is held, it is the only live landing of the target.
            live = Landing.objects.filter(project=project, status=LandingStatus.ACTIVE).count()
            with lock:
                live_seen.append(live)
            proof = LandingProof(landing_id=grant.landing.pk, token=grant.token, epoch=grant.landing.epoch, agent=agent)
            for _ in range(20):  # a lander retries a finish the storage was too busy for, as the toolkit does
                try:
                    landing_finish(
                        proof=proof,
                        result="landed",
                        landed_commit=f"{grant.landing.pk:040x}",
                        tasks=[TaskResult(key=key, outcome="landed") for key in keys],
                    )
                    break
                except StorageBusy:
                    continue
            with lock:
                landed.extend(keys)
            claimed += 1
        return claimed

    results = run_in_threads(LANDERS, lander_loop)
    assert not [
        result for result in results if isinstance(result, BaseException) and not isinstance(result, LeaseExpired)
    ]
    assert set(live_seen) == {1}
    assert sorted(landed) == sorted(task.key for task in tasks)
    assert set(Task.objects.filter(project=project).values_list("status", flat=True)) == {TaskStatus.DONE}
    assert Event.objects.filter(project=project, type=EventType.TASK_LANDED).count() == TASKS
    assert Attempt.objects.filter(task__project=project, kind=AttemptKind.LAND).count() == TASKS
    assert not Landing.objects.filter(project=project, status=LandingStatus.ACTIVE).exists()


def test_two_landers_asking_at_once_get_one_landing():
    project = ProjectFactory(slug="pair", repository="/srv/pair")
    project_set_landing(project=project, settings=LandingSettings(target_branch="main"), actor=SYSTEM)
    landers = [AgentFactory(projects=[project]) for _ in range(2)]
    _delivered(project, 2)
    for _ in range(10):
        grants = run_in_threads(
            2, lambda i: landing_claim_next(project=Project.objects.get(pk=project.pk), agent=landers[i])
        )
        assert not [g for g in grants if isinstance(g, BaseException) and not isinstance(g, StorageBusy)]
        won = [g for g in grants if g is not None and not isinstance(g, BaseException)]
        assert len(won) == 1
        assert Landing.objects.filter(project=project, status=LandingStatus.ACTIVE).count() == 1
        grant = won[0]
        landing_finish(
            proof=LandingProof(
                landing_id=grant.landing.pk, token=grant.token, epoch=grant.landing.epoch, agent=grant.landing.agent
            ),
            result="conflict",
            tasks=[TaskResult(key=entry.task.key, outcome="deferred") for entry in grant.entries],
        )

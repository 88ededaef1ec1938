"""Claims under real parallel load: threads with their own connections, on SQLite and PostgreSQL."""

from __future__ import annotations

import itertools
import threading
import time
from collections import defaultdict

import pytest

from core.errors import TaskTaken
from leases.models import Attempt, AttemptStatus
from leases.services import attempt_finish, lease_claim, lease_claim_next, task_update
from ledger.actors import SYSTEM
from ledger.models import Event, EventType, Project, Task, TaskStatus
from tests.concurrency import run_in_threads
from tests.factories import AgentFactory, ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of

pytestmark = pytest.mark.django_db(transaction=True)

THREADS = 32
CALLS = 200
TASKS = 8


def test_claim_next_race_never_gives_one_task_two_live_attempts():
    project = ProjectFactory(slug="race")
    agents = [AgentFactory(projects=[project]) for _ in range(THREADS)]
    for _ in range(TASKS):
        TaskFactory(project=project)
    tickets = itertools.count()
    log: list[tuple[int, int, float, float]] = []  # task, epoch, claimed (returned), finishing (called)
    outcomes: dict[str, int] = defaultdict(int)
    lock = threading.Lock()

    def agent_loop(index: int) -> None:
        agent = agents[index]
        fresh_project = Project.objects.get(pk=project.pk)
        while next(tickets) < CALLS:
            try:
                grant = lease_claim_next(project=fresh_project, agent=agent)
            except TaskTaken:
                with lock:
                    outcomes["task_taken"] += 1
                continue
            if grant is None:
                with lock:
                    outcomes["nothing_claimable"] += 1
                continue
            claimed = time.monotonic()
            finishing = time.monotonic()
            attempt_finish(proof=proof_of(grant), outcome="done")
            # Re-arm: the task goes back to ready for the next claimant.
            task_update(task=grant.task, actor=SYSTEM, changes={"status": TaskStatus.READY})
            with lock:
                outcomes["claimed"] += 1
                log.append((grant.task.pk, grant.attempt.epoch, claimed, finishing))

    results = run_in_threads(THREADS, agent_loop, timeout=300)
    errors = [r for r in results if isinstance(r, BaseException)]
    assert errors == [], errors[:3]
    assert sum(outcomes.values()) == CALLS
    assert outcomes["claimed"] >= TASKS

    # The audit: per task, live intervals (claim returned → finish called) never overlap,
    # and epochs run 1..n without gaps or repeats.
    by_task: dict[int, list[tuple[int, float, float]]] = defaultdict(list)
    for task_id, epoch, claimed, finishing in log:
        by_task[task_id].append((epoch, claimed, finishing))
    for task_id, intervals in by_task.items():
        intervals.sort()
        assert [epoch for epoch, _, _ in intervals] == list(range(1, len(intervals) + 1))
        for (_, _, end), (_, start, _) in itertools.pairwise(intervals):
            assert end <= start, f"task {task_id}: two live attempts overlapped"
        assert Task.objects.get(pk=task_id).epoch == len(intervals)
    assert not Attempt.objects.filter(status=AttemptStatus.ACTIVE).exists()
    assert Attempt.objects.count() == outcomes["claimed"]
    assert Event.objects.filter(type=EventType.ATTEMPT_CLAIMED).count() == outcomes["claimed"]


def test_many_agents_claiming_one_task_one_wins_the_rest_get_task_taken():
    project = ProjectFactory(slug="one")
    agents = [AgentFactory(projects=[project]) for _ in range(THREADS)]
    task = TaskFactory(project=project)

    def claim(index: int):
        return lease_claim(task=Task.objects.get(pk=task.pk), agent=agents[index])

    results = run_in_threads(THREADS, claim)
    winners = [r for r in results if not isinstance(r, BaseException)]
    losers = [r for r in results if isinstance(r, BaseException)]
    assert len(winners) == 1
    assert all(isinstance(r, TaskTaken) for r in losers), {type(r).__name__ for r in losers}
    assert Attempt.objects.filter(task=task).count() == 1
    assert Task.objects.get(pk=task.pk).epoch == 1

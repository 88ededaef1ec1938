"""SPEC §23.1 under real parallel load: agents with and without a label race claim-next over a mix of tasks."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from core.errors import TaskTaken
from leases.models import Attempt
from leases.services import attempt_finish, lease_claim_next
from ledger.models import Project, Task, TaskStatus
from tests.concurrency import run_in_threads
from tests.factories import AgentFactory, ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of

pytestmark = pytest.mark.django_db(transaction=True)


def test_gpu_tasks_go_only_to_gpu_agents_and_every_task_once():
    project = ProjectFactory(slug="race")
    gpu_agents = [AgentFactory(projects=[project], labels=["gpu", "cuda"]) for _ in range(2)]
    plain_agents = [AgentFactory(projects=[project], labels=["postgres"]) for _ in range(2)]
    agents = gpu_agents + plain_agents
    # Gpu tasks first in the queue (highest priority), so the plain agents must walk past them every time.
    gpu_tasks = {TaskFactory(project=project, priority=10, requires=["gpu"]).pk for _ in range(6)}
    gpu_tasks |= {TaskFactory(project=project, priority=5, requires=["cuda", "gpu"]).pk for _ in range(2)}
    plain_tasks = {TaskFactory(project=project, priority=index % 3).pk for index in range(16)}
    claims: list[tuple[int, int]] = []  # task, agent
    lock = threading.Lock()

    def agent_loop(index: int) -> None:
        agent = agents[index]
        fresh_project = Project.objects.get(pk=project.pk)
        nothing = 0
        while nothing < 3:
            try:
                grant = lease_claim_next(project=fresh_project, agent=agent)
            except TaskTaken:
                continue
            if grant is None:
                nothing += 1
                continue
            with lock:
                claims.append((grant.task.pk, agent.pk))
            attempt_finish(proof=proof_of(grant), outcome="done")

    results = run_in_threads(len(agents), agent_loop, timeout=120)
    assert [r for r in results if isinstance(r, BaseException)] == []
    claimed = Counter(task for task, _ in claims)
    assert set(claimed) == gpu_tasks | plain_tasks  # everything was claimed
    assert max(claimed.values()) == 1  # each task once
    gpu_agent_ids = {agent.pk for agent in gpu_agents}
    assert {agent for task, agent in claims if task in gpu_tasks} <= gpu_agent_ids
    assert Task.objects.filter(project=project).exclude(status=TaskStatus.DONE).count() == 0
    assert Attempt.objects.filter(task__project=project).count() == len(claims)
    # Every attempt of a gpu task is a gpu agent's, as the ledger recorded it.
    assert set(Attempt.objects.filter(task__in=gpu_tasks).values_list("agent_id", flat=True)) <= gpu_agent_ids

"""The trigger-kept task counts behind /metrics (migration ledger.0012): exact after any write, by any path."""

from __future__ import annotations

import contextlib
import random
import threading

import pytest
from django.db import connection
from django.db.models import Count
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.errors import LedgerError
from insight.models import TaskCount, TaskCountChange
from insight.services.task_counts import task_counts_fold
from insight.status_counts import task_counts_by_effective_status, task_counts_by_status
from leases.selectors import with_lease_state
from leases.services import attempt_finish, attempt_release, lease_claim, sweep_expired, task_update
from ledger.actors import SYSTEM
from ledger.models import ALLOWED_TRANSITIONS, Project, Task, TaskStatus
from ledger.services import task_create
from tests.concurrency import run_in_threads
from tests.factories import AgentFactory, ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of

TRIGGERS = {"ledger_task_count_insert", "ledger_task_count_delete", "ledger_task_count_update"}


def counted_from_the_table() -> dict[tuple[int, str], int]:
    rows = Task.objects.order_by().values("project_id", "status").annotate(n=Count("*"))
    return {(row["project_id"], row["status"]): row["n"] for row in rows}


def assert_counts_exact() -> None:
    assert task_counts_by_status() == counted_from_the_table()


def assert_effective_counts_exact(now):
    """The metric's counts equal grouping the effective-status annotation that the API and admin use."""
    annotated = with_lease_state(Task.objects.all(), now=now)
    expected: dict[tuple[int, str], int] = {}
    for task in annotated:
        key = (task.project_id, task.effective_status)
        expected[key] = expected.get(key, 0) + 1
    assert task_counts_by_effective_status(now) == expected


def status_change(task: Task, rng: random.Random) -> None:
    fresh = Task.objects.get(pk=task.pk)
    target = rng.choice(sorted(ALLOWED_TRANSITIONS[fresh.status]))
    changes = {"status": target, **({"blocked_reason": "waiting"} if target == TaskStatus.BLOCKED else {})}
    task_update(task=fresh, actor=SYSTEM, changes=changes)


def one_write(step: int, rng: random.Random, projects: list[Project], agents: list, clock) -> None:
    """One of the writes that change a task's stored status (or none), chosen by `rng`."""
    tasks = list(Task.objects.filter(project__in=projects).order_by("pk"))
    kind = rng.choice(["create", "create", "status", "status", "claim", "sweep", "bulk", "fold"])
    if kind == "create" or not tasks:
        status = rng.choice([TaskStatus.READY, TaskStatus.OPEN, TaskStatus.BLOCKED])
        extra = {"blocked_reason": "waiting"} if status == TaskStatus.BLOCKED else {}
        task_create(project=rng.choice(projects), title=f"t{step}", status=status, actor=SYSTEM, **extra)
    elif kind == "status":
        status_change(rng.choice(tasks), rng)
    elif kind == "claim":
        ready = [task for task in tasks if task.status == TaskStatus.READY]
        if ready:
            grant = lease_claim(task=rng.choice(ready), agent=rng.choice(agents), lease_seconds=60)
            ending = rng.choice(["done", "failed", "release", "lapse"])
            if ending == "release":
                attempt_release(proof=proof_of(grant))
            elif ending != "lapse":
                extra = {"failure_reason_code": "implementation_error"} if ending == "failed" else {}
                attempt_finish(proof=proof_of(grant), outcome=ending, **extra)
    elif kind == "sweep":
        clock.advance(120)
        sweep_expired()
    elif kind == "bulk":
        # Past every service: a raw UPDATE of many rows is counted by the trigger all the same.
        Task.objects.filter(pk__in=[t.pk for t in rng.sample(tasks, min(3, len(tasks)))]).update(
            status=rng.choice(sorted(set(TaskStatus.values) - {TaskStatus.BLOCKED})), blocked_reason=""
        )
    else:
        task_counts_fold()


@pytest.mark.django_db
def test_the_task_triggers_exist_after_migrate():
    """A later migration that rebuilds ledger_task on SQLite drops them: it must recreate them."""
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'ledger_task'")
        else:
            cursor.execute("SELECT tgname FROM pg_trigger WHERE tgrelid = 'ledger_task'::regclass AND NOT tgisinternal")
        names = {row[0] for row in cursor.fetchall()}
    assert names >= TRIGGERS


@pytest.mark.django_db
def test_creates_status_changes_and_a_fold_keep_the_counts_exact():
    project = ProjectFactory()
    tasks = [TaskFactory(project=project) for _ in range(3)]
    TaskFactory(project=project, status=TaskStatus.OPEN)
    assert task_counts_by_status() == {(project.pk, "ready"): 3, (project.pk, "open"): 1}
    task_update(task=tasks[0], actor=SYSTEM, changes={"status": "done"})
    assert task_counts_by_status() == {(project.pk, "ready"): 2, (project.pk, "open"): 1, (project.pk, "done"): 1}
    assert task_counts_fold() == 6  # four creates, and the -1 / +1 of the change
    assert TaskCountChange.objects.count() == 0
    assert {(c.status, c.count) for c in TaskCount.objects.filter(project_id=project.pk)} == {
        ("ready", 2),
        ("open", 1),
        ("done", 1),
    }
    assert_counts_exact()
    # An update that leaves the status alone appends nothing.
    task_update(task=Task.objects.get(pk=tasks[1].pk), actor=SYSTEM, changes={"title": "renamed"})
    assert TaskCountChange.objects.count() == 0
    assert task_counts_fold() == 0
    # Past the services (no event): a bulk insert and a raw DELETE (tasks are never deleted otherwise).
    stamps = {"created_at": tasks[0].created_at, "updated_at": tasks[0].updated_at}
    (raw,) = Task.objects.bulk_create([Task(project=project, number=99, title="raw", status="review", **stamps)])
    assert task_counts_by_status()[(project.pk, "review")] == 1
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM ledger_task WHERE id = %s", [raw.pk])
    assert (project.pk, "review") not in task_counts_by_status()
    assert_counts_exact()


@pytest.mark.django_db
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(min_value=0, max_value=2**32 - 1), steps=st.integers(min_value=1, max_value=25))
def test_random_writes_never_make_the_counts_drift(clock, seed, steps):
    rng = random.Random(seed)
    projects = [ProjectFactory(), ProjectFactory()]
    agents = [AgentFactory(projects=projects) for _ in range(2)]
    for step in range(steps):
        with contextlib.suppress(LedgerError):  # a refused write changes nothing, and must count nothing
            one_write(step, rng, projects, agents, clock)
        assert_counts_exact()
        assert_effective_counts_exact(clock.now())


@pytest.mark.django_db(transaction=True)
def test_parallel_writers_and_folds_never_make_the_counts_drift(clock):
    projects = [ProjectFactory(), ProjectFactory()]
    agents = [AgentFactory(projects=projects) for _ in range(6)]
    for index in range(20):
        TaskFactory(project=projects[index % 2])
    folds_done = threading.Event()

    def work(index: int) -> int:
        if index == 0:  # a folding thread, as scrapes of several servers do, while the others write
            folded = 0
            while not folds_done.wait(0.005):
                folded += task_counts_fold()
            return folded
        rng = random.Random(index)
        for step in range(12):
            with contextlib.suppress(LedgerError):
                one_write(step, rng, projects, [agents[index - 1]], clock)
        return 0

    def writers_then_stop(index: int) -> int:
        try:
            return work(index)
        finally:
            if index != 0 and all_done.wait_for_others():
                folds_done.set()

    class _AllDone:
        def __init__(self, writers: int) -> None:
            self.left, self.lock = writers, threading.Lock()

        def wait_for_others(self) -> bool:
            with self.lock:
                self.left -= 1
                return self.left == 0

    all_done = _AllDone(writers=6)
    results = run_in_threads(7, writers_then_stop)
    assert [r for r in results if isinstance(r, BaseException)] == []
    assert_counts_exact()
    task_counts_fold()
    assert TaskCountChange.objects.count() == 0
    assert {(c.project_id, c.status): c.count for c in TaskCount.objects.all() if c.count} == counted_from_the_table()

"""Two additions that would close a cycle across projects, at once (SPEC §22): exactly one is written,
the other is DEPENDENCY_CYCLE with its path; never both (both databases, real threads)."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from core.errors import DependencyCycle
from ledger.actors import SYSTEM
from ledger.models import Task, TaskDependency
from ledger.services import dependencies, dependency_add, task_create
from tests.concurrency import run_in_threads
from tests.factories import ProjectFactory

pytestmark = pytest.mark.django_db(transaction=True)

ROUNDS = 8


def _race(a: Task, b: Task) -> list[object]:
    def add(index: int) -> object:
        task, blocker = (a, b) if index == 0 else (b, a)
        return dependency_add(
            task=Task.objects.get(pk=task.pk), blocked_by=Task.objects.get(pk=blocker.pk), actor=SYSTEM
        )

    return run_in_threads(2, add)


def _assert_one_wins(results: list[object], a: Task, b: Task) -> None:
    refused = [r for r in results if isinstance(r, BaseException)]
    assert len(refused) == 1, results
    assert isinstance(refused[0], DependencyCycle), refused[0]
    assert refused[0].details["path"][0] == refused[0].details["path"][-1]
    assert set(refused[0].details["path"]) == {a.key, b.key}
    edges = set(
        TaskDependency.objects.filter(task__in=[a, b], removed_at__isnull=True).values_list("task", "blocked_by")
    )
    assert len(edges) == 1
    assert edges in ({(a.pk, b.pk)}, {(b.pk, a.pk)})


def test_a_then_b_and_b_then_a_across_projects_at_once_never_both(clock):
    web, api = ProjectFactory(slug="web", key_prefix="WEB"), ProjectFactory(slug="api", key_prefix="API")
    for round_number in range(ROUNDS):
        a = task_create(project=web, title=f"A{round_number}", actor=SYSTEM)
        b = task_create(project=api, title=f"B{round_number}", actor=SYSTEM)
        _assert_one_wins(_race(a, b), a, b)


def test_both_walks_done_before_either_locks_still_never_both(clock, monkeypatch):
    """The widest window: each thread walks (unlocked) before the other writes; the walk taken again
    under the projects' locks must see the other's edge. On SQLite one writer runs at a time (the
    database's write lock), so the threads do not meet inside and the rendezvous is skipped."""
    web, api = ProjectFactory(slug="web", key_prefix="WEB"), ProjectFactory(slug="api", key_prefix="API")
    a = task_create(project=web, title="A", actor=SYSTEM)
    b = task_create(project=api, title="B", actor=SYSTEM)
    rendezvous = threading.Barrier(2)
    first_walk = threading.local()
    walk = dependencies._reachable

    def walk_then_meet(start: int) -> dict[int, int | None]:
        tree = walk(start)
        if connection.vendor == "postgresql" and not getattr(first_walk, "done", False):
            first_walk.done = True
            rendezvous.wait(timeout=30)
        return tree

    monkeypatch.setattr(dependencies, "_reachable", walk_then_meet)
    _assert_one_wins(_race(a, b), a, b)

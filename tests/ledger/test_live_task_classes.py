"""The task list's class filter reads the classes of live work by a loose index scan (issue 33): the same
classes as a DISTINCT over the live tasks, in order, at most the limit, one index probe per class."""

from __future__ import annotations

from typing import cast

import pytest
from django.db import connection

from ledger.models import RESOLVED_STATUSES, Task, TaskStatus
from ledger.selectors import _LIVE_CLASSES, live_task_classes
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db


def test_the_classes_of_live_work_in_order_and_no_more_than_asked(clock):
    def task(task_class: str, status: str) -> None:
        # A task is made ready; its status moved straight in the table (the loose scan reads nothing else).
        made = cast(Task, TaskFactory(task_class=task_class))
        Task.objects.filter(pk=made.pk).update(status=status)

    statuses = [TaskStatus.READY, TaskStatus.DONE, TaskStatus.DELIVERED, TaskStatus.CANCELLED] * 3
    for n, status in enumerate(statuses):
        task(["migration", "", "docs", "zeta", "alpha", "docs"][n % 6], status)
    task("only-done", TaskStatus.DONE)
    task("only-cancelled", TaskStatus.CANCELLED)
    live = sorted(set(Task.objects.exclude(status__in=RESOLVED_STATUSES).values_list("task_class", flat=True)))
    assert live_task_classes(100) == live
    assert "only-done" not in live
    assert "only-cancelled" not in live
    assert live_task_classes(2) == live[:2]
    assert live_task_classes(1) == live[:1]


def test_nothing_live_is_no_class():
    assert live_task_classes(100) == []


def test_each_class_is_one_probe_of_the_partial_index():
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("EXPLAIN QUERY PLAN " + _LIVE_CLASSES, [100])
            plan = "\n".join(str(row[-1]) for row in cursor.fetchall())
            assert "SEARCH ledger_task USING INDEX task_live_class (task_class>?)" in plan
        else:
            cursor.execute("SET enable_seqscan = off")  # a test table is tiny: ask which index serves the scan
            cursor.execute("EXPLAIN " + _LIVE_CLASSES, [100])
            plan = "\n".join(row[0] for row in cursor.fetchall())
            cursor.execute("RESET enable_seqscan")
            assert "Index Only Scan using task_live_class" in plan
        assert "SCAN ledger_task" not in plan
        assert "Seq Scan on ledger_task" not in plan

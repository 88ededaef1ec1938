"""The Tasks page's filters and pager cost what live work costs (issue 33), with the annotation's answers.

The effective-status and claimable filters are asked from the live attempts and the task's own columns,
not by comparing the per-row annotation over every task; each is held here to the annotation's rows. The
pager never counts every task: past its look-ahead it says "more than N", labelled as not counted in full.
The task-class filter offers the classes of live work (and the one chosen), not every class ever written.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from console.base import EstimatedCountPaginator
from leases.selectors import EFFECTIVE_STATUSES, with_claimability
from leases.services import attempt_finish, lease_claim
from ledger import clock as ledger_clock
from ledger.models import Task, TaskStatus
from tests.factories import AgentFactory, ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of

pytestmark = pytest.mark.django_db

TASKS = "/admin/ledger/task/"


def listed(client, query: str) -> set[str]:
    response = client.get(TASKS + query)
    assert response.status_code == 200
    return {row.key for row in response.context["cl"].result_list}


@pytest.fixture
def mixed(clock):
    """Tasks in every stored status, live leases of work, one lapsed unswept lease, a closed task still held."""
    project = ProjectFactory(slug="mix")
    agents = [AgentFactory(projects=[project]) for _ in range(3)]
    tasks = {status: TaskFactory(project=project, status=status) for status in (TaskStatus.READY, TaskStatus.OPEN)}
    held = TaskFactory(project=project, status=TaskStatus.READY, title="held")
    lease_claim(task=held, agent=agents[0], lease_seconds=3600)
    lapsed = TaskFactory(project=project, status=TaskStatus.READY, title="lapsed")
    lease_claim(task=lapsed, agent=agents[1], lease_seconds=60)
    done = TaskFactory(project=project, status=TaskStatus.READY, title="finished")
    grant = lease_claim(task=done, agent=agents[2], lease_seconds=3600)
    attempt_finish(proof=proof_of(grant), outcome="done", result_summary="Done")
    clock.advance(120)  # the 60-second lease lapsed; the sweep has not run
    TaskFactory(project=project, status=TaskStatus.BLOCKED, blocked_reason="waiting")
    return {"held": held, "lapsed": lapsed, "done": done, **tasks}


def annotated(status: str) -> set[str]:
    tasks: Any = with_claimability(Task.objects.all(), now=ledger_clock.now())
    return set(tasks.filter(effective_status=status).values_list("key", flat=True))


def test_every_effective_status_filter_lists_what_the_annotation_says(ops_client, mixed):
    assert annotated("in_progress") == {mixed["held"].key}
    for status in EFFECTIVE_STATUSES:
        assert listed(ops_client, f"?effective_status={status}") == annotated(status), status


def test_the_claimable_filter_lists_what_the_annotation_says(ops_client, mixed):
    tasks = with_claimability(Task.objects.all(), now=ledger_clock.now())
    claimable = set(tasks.filter(claimable=True).values_list("key", flat=True))
    assert mixed["lapsed"].key in claimable  # a lapsed lease holds nothing
    assert listed(ops_client, "?claimable=yes&work=all") == claimable
    not_claimable = set(tasks.filter(claimable=False).values_list("key", flat=True))
    assert listed(ops_client, "?claimable=no&work=all") == not_claimable


def test_the_effective_status_filter_reads_no_lease_annotation_in_its_where_clause(ops_client, mixed):
    with CaptureQueriesContext(connection) as captured:
        listed(ops_client, "?effective_status=in_progress")
    wheres = [
        query["sql"].split(" WHERE ", 1)[-1] for query in captured.captured_queries if "ledger_task" in query["sql"]
    ]
    # The filter is `id IN (live attempts' tasks)`: no CASE over per-row lease subqueries decides the rows.
    assert wheres
    assert not any("CASE WHEN" in where.split(" ORDER BY ")[0] for where in wheres)


def test_the_pager_labels_a_count_it_did_not_finish(ops_client, monkeypatch):
    monkeypatch.setattr(EstimatedCountPaginator, "lookahead_pages", 1)
    project = ProjectFactory(slug="many")
    TaskFactory.create_batch(60, project=project, status=TaskStatus.READY)
    body = ops_client.get(TASKS).content.decode()
    assert "More than 50 tasks" in body
    assert "not counted in full" in body
    few = ops_client.get(TASKS + f"?q={Task.objects.order_by('id').first().key}").content.decode()
    assert "not counted in full" not in few


def test_the_task_class_filter_offers_the_classes_of_live_work(ops_client, clock):
    project = ProjectFactory(slug="classes")
    TaskFactory(project=project, status=TaskStatus.READY, task_class="api")
    legacy = TaskFactory(project=project, status=TaskStatus.READY, task_class="legacy")
    Task.objects.filter(pk=legacy.pk).update(status=TaskStatus.DONE)
    response = ops_client.get(TASKS)
    spec = next(spec for spec in response.context["cl"].filter_specs if getattr(spec, "field_path", "") == "task_class")
    assert list(spec.lookup_choices) == ["api"]
    chosen = ops_client.get(TASKS + "?task_class=legacy&work=all")
    spec = next(spec for spec in chosen.context["cl"].filter_specs if getattr(spec, "field_path", "") == "task_class")
    assert "legacy" in list(spec.lookup_choices)
    assert {row.key for row in chosen.context["cl"].result_list} == set(
        Task.objects.filter(task_class="legacy").values_list("key", flat=True)
    )


@pytest.mark.parametrize("query", ["", "?claimable=yes", "?effective_status=delivered", "?work=all"])
def test_a_page_of_the_list_walks_the_list_order_index_and_sorts_nothing(ops_client, mixed, query):
    """Issue 33: the list's order (project id, priority desc, number, id desc) is the index `task_list_order`'s,
    so a page of any filter walks it and stops; ordered by the project's slug, the first 50 of 300k live tasks
    were sorted out of all of them (1.5-1.8 s at 1M tasks)."""
    response = ops_client.get(TASKS + query)
    keys = [row.key for row in response.context["cl"].result_list]
    ordered = Task.objects.filter(key__in=keys).order_by("project_id", "-priority", "number", "-id")
    assert keys == list(ordered.values_list("key", flat=True))
    if connection.vendor != "postgresql":
        return
    with CaptureQueriesContext(connection) as captured:
        ops_client.get(TASKS + query)
    pages = [q["sql"] for q in captured.captured_queries if q["sql"].startswith('SELECT "ledger_task"."id", ')]
    assert pages
    with connection.cursor() as cursor:
        # A test table is tiny (sorting its rows is cheaper than any walk): ask which index serves the order.
        cursor.execute("SET enable_seqscan = off; SET enable_sort = off; SET enable_incremental_sort = off")
        cursor.execute("EXPLAIN " + pages[-1])
        plan = "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute("RESET enable_seqscan; RESET enable_sort; RESET enable_incremental_sort")
    assert "task_list_order" in plan
    assert "Sort Key: ledger_task.project_id" not in plan

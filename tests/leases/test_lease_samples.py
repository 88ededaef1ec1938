"""The lease suggestion reads a bounded window (issue 33, SPEC §3 and §25), with the answers of the old walk.

`LeaseSample` rows are kept by triggers (`leases.models.lease_samples`); these
tests hold them to the attempts themselves after finishes, expiries, releases
and class changes, check that the suggestion equals the rule asked of the
attempts directly (the query it replaced), and show the read is one index range
of at most 1,000 entries: the plan names `lease_sample_recent` (PostgreSQL
`EXPLAIN`, SQLite `EXPLAIN QUERY PLAN`) and the rows it reads stop at the limit.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta

import pytest
from django.db import connection

from leases.models import Attempt, AttemptStatus, LeaseSample
from leases.selectors import suggested_lease_seconds
from leases.selectors.attempts import LEASE_SIZING_MIN_SAMPLES, LEASE_SIZING_SAMPLE_LIMIT, lease_sizing_window
from leases.services import attempt_finish, attempt_release, lease_claim, sweep_expired, task_update
from ledger.actors import SYSTEM
from ledger.models import Project, Task
from tests.factories import AgentFactory, ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def project():
    return ProjectFactory(slug="web", default_lease_seconds=900)


@pytest.fixture
def agent(project):
    return AgentFactory(handle="agent-07", projects=[project])


def live_samples() -> dict[int, tuple[int, str, object, object]]:
    """The rule asked of the attempts: completed, finished, on a task with a class (its current one)."""
    rows = (
        Attempt.objects.filter(status=AttemptStatus.COMPLETED, finished_at__isnull=False)
        .exclude(task__task_class="")
        .values_list("id", "task__project_id", "task__task_class", "claimed_at", "finished_at")
    )
    return {row[0]: tuple(row[1:]) for row in rows}  # type: ignore[misc]


def kept_samples() -> dict[int, tuple[int, str, object, object]]:
    rows = LeaseSample.objects.values_list("attempt_id", "project_id", "task_class", "claimed_at", "finished_at")
    return {row[0]: tuple(row[1:]) for row in rows}  # type: ignore[misc]


def walked_suggestion(*, project: Project, task_class: str) -> int | None:
    """The query the samples replaced, verbatim: every completed attempt, newest first, filtered by the task."""
    if not task_class:
        return None
    finished = list(
        Attempt.objects.filter(status=AttemptStatus.COMPLETED, task__project=project, task__task_class=task_class)
        .order_by("-finished_at")
        .values_list("claimed_at", "finished_at")[:LEASE_SIZING_SAMPLE_LIMIT]
    )
    if len(finished) < LEASE_SIZING_MIN_SAMPLES:
        return None
    durations = sorted((end - start).total_seconds() for start, end in finished if end is not None)
    return math.ceil(3 * durations[math.ceil(0.95 * len(durations)) - 1])


def finish_one(clock, *, task: Task, agent, seconds: float, outcome: str = "done", **kwargs) -> Attempt:
    grant = lease_claim(task=task, agent=agent, lease_seconds=86400)
    clock.advance(seconds)
    attempt_finish(proof=proof_of(grant), outcome=outcome, **kwargs)
    return Attempt.objects.get(pk=grant.attempt.pk)


def test_every_way_an_attempt_ends_keeps_the_samples_equal_to_the_attempts(clock, project, agent):
    migration = TaskFactory(project=project, task_class="migration")
    finish_one(clock, task=migration, agent=agent, seconds=120)  # done: sampled
    reviewed = TaskFactory(project=project, task_class="migration")
    finish_one(clock, task=reviewed, agent=agent, seconds=60, outcome="review")  # review: completed, sampled
    failing = TaskFactory(project=project, task_class="migration")
    finish_one(clock, task=failing, agent=agent, seconds=30, outcome="failed", failure_reason_code="tests_failed")
    released = lease_claim(task=failing, agent=agent)
    attempt_release(proof=proof_of(released))
    lapsing = lease_claim(task=TaskFactory(project=project, task_class="migration"), agent=agent, lease_seconds=30)
    clock.advance(31)
    sweep_expired()
    finish_one(clock, task=TaskFactory(project=project), agent=agent, seconds=45)  # no class: no sample
    assert Attempt.objects.get(pk=lapsing.attempt.pk).status == AttemptStatus.EXPIRED
    assert len(kept_samples()) == 2
    assert kept_samples() == live_samples()


def test_a_class_change_moves_the_task_samples_as_the_rule_reads_the_current_class(clock, project, agent):
    task = TaskFactory(project=project, task_class="migration")
    finish_one(clock, task=task, agent=agent, seconds=100, outcome="failed", failure_reason_code="other")
    finish_one(clock, task=task, agent=agent, seconds=200)
    unclassed = TaskFactory(project=project)
    finish_one(clock, task=unclassed, agent=agent, seconds=300)
    assert kept_samples() == live_samples()
    assert {row[1] for row in kept_samples().values()} == {"migration"}

    task = Task.objects.get(pk=task.pk)
    task_update(task=task, actor=SYSTEM, changes={"task_class": "docs"})
    task_update(task=Task.objects.get(pk=unclassed.pk), actor=SYSTEM, changes={"task_class": "docs"})
    assert sorted(row[1] for row in kept_samples().values()) == ["docs", "docs"]
    assert kept_samples() == live_samples()

    task_update(task=Task.objects.get(pk=task.pk), actor=SYSTEM, changes={"task_class": ""})
    assert kept_samples() == live_samples()
    assert len(kept_samples()) == 1
    # A write that leaves the class alone touches no sample.
    task_update(task=Task.objects.get(pk=unclassed.pk), actor=SYSTEM, changes={"title": "Renamed"})
    assert kept_samples() == live_samples()


def test_the_suggestion_equals_the_walk_over_the_attempts(clock, project, agent):
    other = ProjectFactory(slug="api", default_lease_seconds=600)
    stranger = AgentFactory(handle="agent-09", projects=[other])
    for index in range(30):
        finish_one(clock, task=TaskFactory(project=project, task_class="migration"), agent=agent, seconds=60 + index)
        if index < 22:
            finish_one(clock, task=TaskFactory(project=project, task_class="docs"), agent=agent, seconds=500 - index)
        if index < 19:
            finish_one(clock, task=TaskFactory(project=project, task_class="rare"), agent=agent, seconds=7)
        # Another project's attempts of the same class count for that project only.
        finish_one(clock, task=TaskFactory(project=other, task_class="migration"), agent=stranger, seconds=9000)
    cases = [(project, "migration"), (project, "docs"), (project, "rare"), (project, ""), (other, "migration")]
    answers = {(p.slug, c): suggested_lease_seconds(project=p, task_class=c) for p, c in cases}
    assert answers == {(p.slug, c): walked_suggestion(project=p, task_class=c) for p, c in cases}
    assert answers == {
        ("web", "migration"): 3 * 88,  # nearest-rank p95 of 60..89 s: the 29th
        ("web", "docs"): 3 * 499,  # 479..500 s: the 21st of 22
        ("web", "rare"): None,  # 19 completions: fewer than 20
        ("web", ""): None,
        ("api", "migration"): 3 * 9000,
    }
    # Moving a task into "rare" makes the twentieth sample: the suggestion follows the class, as the walk did.
    moved = Attempt.objects.filter(task__task_class="docs").select_related("task").first()
    assert moved is not None
    task_update(task=moved.task, actor=SYSTEM, changes={"task_class": "rare"})
    assert suggested_lease_seconds(project=project, task_class="rare") == walked_suggestion(
        project=project, task_class="rare"
    )
    assert suggested_lease_seconds(project=project, task_class="rare") is not None


def bulk_completed(task: Task, agent, *, count: int, first_epoch: int, seconds: int, clock) -> None:
    """`count` completed attempts on `task`, in one INSERT (the triggers sample them like any attempt)."""
    start = clock.now() - timedelta(days=3)
    Attempt.objects.bulk_create(
        [
            Attempt(
                task=task,
                agent=agent,
                epoch=first_epoch + index,
                status=AttemptStatus.COMPLETED,
                token_hash="0" * 64,
                token_salt="0" * 32,
                lease_seconds=900,
                claimed_at=start + timedelta(seconds=index),
                lease_expires_at=start + timedelta(seconds=index + 900),
                finished_at=start + timedelta(seconds=index + seconds),
                label=f"bulk-{index}",
                task_version_at_claim=1,
            )
            for index in range(count)
        ]
    )


def plan_of(project: Project, task_class: str) -> str:
    sql, params = lease_sizing_window(project=project, task_class=task_class).query.sql_with_params()
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("ANALYZE leases_leasesample")
            cursor.execute(f"EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) {sql}", params)
        else:
            cursor.execute("ANALYZE")
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
        return "\n".join(" ".join(str(part) for part in row) for row in cursor.fetchall())


def test_the_read_is_one_index_range_of_at_most_the_window(clock, project, agent):
    """3,000 completions of a busy class and 25 of a rare one: the rare class's read touches its own 25
    rows, the busy class's stops at the window (the walk over attempts read every completion in the database
    for a class with fewer than the window)."""
    busy = TaskFactory(project=project, task_class="busy")
    bulk_completed(busy, agent, count=3000, first_epoch=1, seconds=50, clock=clock)
    rare = TaskFactory(project=project, task_class="rare")
    bulk_completed(rare, agent, count=25, first_epoch=1, seconds=400, clock=clock)
    assert LeaseSample.objects.count() == 3025

    assert suggested_lease_seconds(project=project, task_class="rare") == 1200
    assert suggested_lease_seconds(project=project, task_class="busy") == 150
    assert walked_suggestion(project=project, task_class="rare") == 1200

    rare_plan, busy_plan = plan_of(project, "rare"), plan_of(project, "busy")
    for plan in (rare_plan, busy_plan):
        assert "lease_sample_recent" in plan, plan
    if connection.vendor == "postgresql":
        # A few rows may be fetched by bitmap and sorted; never a table scan, and the index scan's actual
        # rows are the class's own (25), or stop at the window (not the busy class's 3,000).
        assert "Seq Scan" not in rare_plan + busy_plan, (rare_plan, busy_plan)
        scanned = [int(n) for n in re.findall(r"Index (?:Only )?Scan[^\n]*?actual rows=(\d+)", rare_plan + busy_plan)]
        assert scanned == [25, LEASE_SIZING_SAMPLE_LIMIT], (rare_plan, busy_plan)
        assert "Sort" not in busy_plan, busy_plan
    else:
        for plan in (rare_plan, busy_plan):
            assert "USING COVERING INDEX lease_sample_recent (project_id=? AND task_class=?)" in plan, plan
            assert "TEMP B-TREE" not in plan, plan  # no sort: the index's order is the read's


@pytest.mark.django_db(transaction=True)
def test_the_migration_backfills_the_samples_of_existing_history(clock):
    """0019 forward samples the completed attempts already there (and then keeps them); backward drops all."""
    from django.core.management import call_command

    project = ProjectFactory()
    agent = AgentFactory(projects=[project])
    for index in range(3):
        finish_one(clock, task=TaskFactory(project=project, task_class="migration"), agent=agent, seconds=10 + index)
    finish_one(clock, task=TaskFactory(project=project), agent=agent, seconds=5)
    try:
        call_command("migrate", "leases", "0018_allocation_provisioned", verbosity=0)
        with connection.cursor() as cursor:
            assert "leases_leasesample" not in connection.introspection.table_names(cursor)
    finally:
        call_command("migrate", verbosity=0)
    assert len(kept_samples()) == 3
    assert kept_samples() == live_samples()
    finish_one(clock, task=TaskFactory(project=project, task_class="migration"), agent=agent, seconds=20)
    assert len(kept_samples()) == 4
    assert kept_samples() == live_samples()


def test_the_sqlite_triggers_exist():
    """A later SQLite table remake of `leases_attempt` or `ledger_task` would drop them silently."""
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's triggers")
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE '%lease_sample%'")
        names = {row[0] for row in cursor.fetchall()}
    assert names == {
        "leases_attempt_lease_sample_insert",
        "leases_attempt_lease_sample_update",
        "ledger_task_lease_samples",
    }

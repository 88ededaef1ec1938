"""`claimable_condition(holds=HOLDS_SET)`: the same rule, "no live attempt" read once as a set (issue 32).

The dashboard's claimable count and the task list's `claimable` column read every ready task; with
`NOT EXISTS` PostgreSQL planned a nested-loop anti join comparing each with every live attempt
(docs/performance.md, "Console pages, round three"). The set form must answer exactly the same.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from leases.models import Attempt
from leases.selectors import HOLDS_SET, claimable_tasks, with_claimability
from leases.services import lease_claim
from ledger.models import Agent, Task
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db


def test_the_set_form_answers_the_same_tasks_as_not_exists(clock):
    project = ProjectFactory()
    agent = AgentFactory(projects=[project])
    gone = AgentFactory(projects=[project])
    free = TaskFactory(project=project, title="free")
    held = TaskFactory(project=project, title="held")
    lease_claim(task=held, agent=agent)
    lapsed = TaskFactory(project=project, title="lapsed")
    lease_claim(task=lapsed, agent=agent)
    Attempt.objects.filter(task=lapsed).update(lease_expires_at=clock.now() - timedelta(seconds=1))
    TaskFactory(project=project, title="not ready", status="open")
    reserved = TaskFactory(project=project, title="reserved for an inactive agent")
    Task.objects.filter(pk=reserved.pk).update(reserved_for=gone)
    Agent.objects.filter(pk=gone.pk).update(is_active=False)
    mine = TaskFactory(project=project, title="reserved for the agent")
    Task.objects.filter(pk=mine.pk).update(reserved_for=agent)
    now = clock.now()

    for options in ({"by_anyone": True}, {"include_reserved": True}, {"agent": agent}, {}):
        exists = set(claimable_tasks(project=None, now=now, **options).values_list("pk", flat=True))
        as_set = set(claimable_tasks(project=None, now=now, holds=HOLDS_SET, **options).values_list("pk", flat=True))
        assert as_set == exists, options
    assert set(
        claimable_tasks(project=None, now=now, by_anyone=True, holds=HOLDS_SET).values_list("pk", flat=True)
    ) == {
        free.pk,
        lapsed.pk,
        mine.pk,
    }
    column = dict(with_claimability(Task.objects.all(), now=now).values_list("pk", "claimable"))
    assert {pk for pk, claimable in column.items() if claimable} == {free.pk, lapsed.pk, mine.pk}
    query = str(claimable_tasks(project=None, now=now, holds=HOLDS_SET).query)
    assert "NOT (" in query
    assert '"ledger_task"."id" IN (SELECT' in query

"""The changes feed reads the events it answers, not the history of other projects (issue 33, SPEC §25).

An agent's feed is read along `event_project_feed` (one project), or from the first event after `since`
of any of its projects (several): these tests hold its answers to the rule (every event of the agent's
projects after `since`, in id order, pages of `limit`) across long stretches of other projects' events.
"""

from __future__ import annotations

import pytest

from ledger.models import Event
from ledger.selectors import changes_since
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db


def rule(project_ids: set[int], since: int) -> list[int]:
    return list(
        Event.objects.filter(project_id__in=project_ids, id__gt=since).order_by("id").values_list("id", flat=True)
    )


def paged(agent, limit: int) -> list[int]:
    since, seen = 0, []
    while True:
        rows, more = changes_since(agent=agent, since=since, limit=limit)
        seen += [row["id"] for row in rows]
        if not more:
            return seen
        since = rows[-1]["id"]


@pytest.mark.parametrize("visible", [1, 2])
def test_an_agents_feed_is_every_event_of_its_projects_across_other_projects_history(visible):
    mine, second, other = (ProjectFactory(slug=slug) for slug in ("mine", "second", "other"))
    TaskFactory.create_batch(6, project=other)  # a stretch of another project's events first
    TaskFactory.create_batch(3, project=mine)
    TaskFactory.create_batch(6, project=other)
    TaskFactory.create_batch(2, project=second)
    TaskFactory.create_batch(2, project=mine)
    projects = [mine, second][:visible]
    agent = AgentFactory(projects=projects)
    expected = rule({project.pk for project in projects}, 0)
    assert expected
    assert paged(agent, limit=2) == expected
    assert paged(agent, limit=100) == expected
    middle = expected[len(expected) // 2]
    rows, more = changes_since(agent=agent, since=middle, limit=100)
    assert ([row["id"] for row in rows], more) == (rule({project.pk for project in projects}, middle), False)


def test_an_agent_without_projects_or_past_its_last_event_reads_nothing():
    project, empty = ProjectFactory(slug="mine"), ProjectFactory(slug="empty")
    TaskFactory(project=project)
    assert changes_since(agent=AgentFactory(projects=[]), since=0, limit=10) == ([], False)
    agent = AgentFactory(projects=[project, empty])
    last = Event.objects.filter(project=project).order_by("-id").values_list("id", flat=True).first()
    assert changes_since(agent=agent, since=last, limit=10) == ([], False)

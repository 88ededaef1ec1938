"""Lease-left is coloured by the share of its own lease left, not red whenever under a minute (issue 32)."""

from __future__ import annotations

import re

import pytest

from console.base import lease_level
from leases.services import lease_claim
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("left", "lease", "level"),
    [
        (55, 60, "lh-ok"),  # a healthy 60 s lease, just renewed
        (25, 60, "lh-soon"),  # missed a renewal
        (10, 60, "lh-urgent"),  # missed two
        (1500, 3600, "lh-soon"),  # 25 min of an hour: not "ok" because it is over ten minutes
        (3000, 3600, "lh-ok"),
        (30, None, "lh-urgent"),  # length unknown: the absolute thresholds
        (300, None, "lh-soon"),
    ],
)
def test_the_level_is_the_share_of_the_lease_left(left, lease, level):
    assert lease_level(left, lease) == level


def level_in_list(client, key: str) -> str:
    body = client.get("/admin/ledger/task/").content.decode()
    row = body[body.index(f">{key}<") :]
    row = row[: row.index("</tr>")]
    found = re.search(r'lh-remaining (lh-\w+)"', row)
    assert found, row
    return found.group(1)


def test_a_sixty_second_lease_is_not_red_on_the_list_the_task_page_or_the_attempt(ops_client, clock):
    project = ProjectFactory(slug="web")
    task = TaskFactory(project=project)
    grant = lease_claim(task=task, agent=AgentFactory(projects=[project]), lease_seconds=60)
    clock.advance(5)
    assert level_in_list(ops_client, task.key) == "lh-ok"
    page = ops_client.get(f"/admin/ledger/task/{task.pk}/change/").content.decode()
    assert 'lh-remaining lh-ok"' in page
    attempt_page = ops_client.get(f"/admin/leases/attempt/{grant.attempt.pk}/change/").content.decode()
    assert 'lh-remaining lh-ok"' in attempt_page
    clock.advance(45)  # 10 s of 60 left: two renewals missed
    assert level_in_list(ops_client, task.key) == "lh-urgent"

"""Fleet metrics per day over real rows: claims, lease conflicts, orphan rate (SPEC §7, §10)."""

from __future__ import annotations

import pytest

from core.errors import TaskTaken, ValidationFailed
from insight.metrics import claims_per_day, fleet_metrics, lease_conflicts_per_day, orphan_rate_per_day
from leases.models import ClaimRefusalTally
from leases.services import attempt_finish, attempt_release, lease_claim, task_update
from ledger.actors import Actor
from ledger.models import Event, EventType
from reconciliation.models import Condition, FindingStatus
from tests.factories import AgentFactory, FindingFactory, ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of

pytestmark = pytest.mark.django_db

DAY = 24 * 3600


def values(series):
    return [entry["value"] for entry in series]


def test_claims_per_day_zero_fills_the_window_oldest_first(clock):
    project = ProjectFactory()
    agent = AgentFactory(projects=[project])
    lease_claim(task=TaskFactory(project=project), agent=agent)
    clock.advance(DAY)
    for _ in range(2):
        lease_claim(task=TaskFactory(project=project), agent=agent)
    clock.advance(2 * DAY)

    series = claims_per_day(days=4)

    assert [entry["day"] for entry in series] == ["2026-01-05", "2026-01-06", "2026-01-07", "2026-01-08"]
    assert values(series) == [1, 2, 0, 0]
    assert values(claims_per_day(days=2)) == [0, 0]  # older days fall out of the window


def test_metrics_can_be_limited_to_one_project_or_to_the_projects_a_caller_sees(clock):
    mine, theirs = ProjectFactory(), ProjectFactory()
    agents = {}
    for project, claims in ((mine, 1), (theirs, 3)):
        agents[project] = agent = AgentFactory(projects=[project])
        for _ in range(claims):
            lease_claim(task=TaskFactory(project=project), agent=agent)

    assert values(claims_per_day(days=1)) == [4]
    assert values(claims_per_day(days=1, project=mine)) == [1]
    assert values(claims_per_day(days=1, visible_to=agents[theirs])) == [3]
    assert values(claims_per_day(days=1, visible_to=AgentFactory(projects=[]))) == [0]


def test_lease_conflicts_add_refused_claims_and_contested_writes_per_day(clock):
    project = ProjectFactory()
    holder, rival = AgentFactory(projects=[project]), AgentFactory(projects=[project])
    task = TaskFactory(project=project)
    lease_claim(task=task, agent=holder, lease_seconds=DAY)
    for _ in range(2):
        with pytest.raises(TaskTaken):
            lease_claim(task=task, agent=rival)
    clock.advance(15 * 3600)  # past midnight, the lease still live
    task_update(task=task, actor=Actor(agent=rival), changes={"status": "blocked", "blocked_reason": "waiting on QA"})

    assert ClaimRefusalTally.objects.get().count == 2
    assert Event.objects.filter(type=EventType.TASK_CONTESTED).count() == 1
    assert values(lease_conflicts_per_day(days=3)) == [0, 2, 1]
    assert values(lease_conflicts_per_day(days=3, project=ProjectFactory())) == [0, 0, 0]


def test_orphan_rate_is_orphans_first_found_over_attempts_finished_that_day(clock):
    project = ProjectFactory()
    agent = AgentFactory(projects=[project])
    for _ in range(4):
        grant = lease_claim(task=TaskFactory(project=project), agent=agent)
        attempt_finish(proof=proof_of(grant), outcome="failed", failure_reason_code="other")
    lease_claim(task=TaskFactory(project=project), agent=agent)  # still active: not finished
    for number, status in enumerate((FindingStatus.OPEN, FindingStatus.RESOLVED)):
        FindingFactory(
            project=project,
            subject_key=f"feature/orphan-{number}",
            status=status,
            resolved_at=clock.now() if status == FindingStatus.RESOLVED else None,
        )
    clock.advance(DAY)
    grant = lease_claim(task=TaskFactory(project=project), agent=agent)
    attempt_release(proof=proof_of(grant))

    series = orphan_rate_per_day(days=2)

    assert series == [
        {"day": "2026-01-05", "value": 0.5, "orphans": 2, "finished": 4},
        {"day": "2026-01-06", "value": 0.0, "orphans": 0, "finished": 1},
    ]


def test_orphan_rate_is_zero_on_a_day_when_nothing_finished_and_keeps_the_raw_counts(clock):
    project = ProjectFactory()
    FindingFactory(condition=Condition.ORPHAN_BRANCH, project=project, subject_key="feature/late-find")
    assert orphan_rate_per_day(days=1) == [{"day": "2026-01-05", "value": 0.0, "orphans": 1, "finished": 0}]


def test_fleet_metrics_bundles_the_three_series_over_one_window(clock):
    project = ProjectFactory()
    lease_claim(task=TaskFactory(project=project), agent=AgentFactory(projects=[project]))
    metrics = fleet_metrics(days=7)
    assert metrics["days"] == 7
    assert [len(metrics[name]) for name in ("claims", "lease_conflicts", "orphan_rate")] == [7, 7, 7]
    assert metrics["claims"][-1] == {"day": "2026-01-05", "value": 1}


@pytest.mark.parametrize("days", [0, -1, 367, "30", True])
def test_the_window_must_be_a_sensible_number_of_days(days):
    with pytest.raises(ValidationFailed):
        claims_per_day(days=days)

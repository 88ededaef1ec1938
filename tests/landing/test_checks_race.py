"""Concurrent check reports (SPEC §22): real threads with their own connections, SQLite and PostgreSQL.

The database holds "the latest result per (project, commit, name) wins": however many reports race,
exactly one row per name remains, and every report is an event.
"""

from __future__ import annotations

import pytest

from core.errors import StorageBusy
from landing.services import CheckReport, LandingSettings, check_report, project_set_landing
from leases.models import CheckResult
from ledger.actors import SYSTEM
from ledger.models import AgentKind, Event, EventType, Project
from tests.concurrency import run_in_threads
from tests.factories import AgentFactory, ProjectFactory

pytestmark = pytest.mark.django_db(transaction=True)

REPORTS = 50
NAMES = ("lint", "tests", "types")
COMMIT = "d" * 40


def test_fifty_concurrent_reports_for_one_commit_leave_one_latest_row_per_name():
    project = ProjectFactory(slug="race", repository="/srv/race")
    project_set_landing(project=project, settings=LandingSettings(target_branch="main"), actor=SYSTEM)
    ci = AgentFactory(handle="ci-race", kind=AgentKind.CI, projects=[project])
    states = ("pending", "success", "failure", "error")

    def one(index: int) -> str:
        fresh = Project.objects.get(pk=project.pk)
        report = CheckReport(commit=COMMIT, name=NAMES[index % len(NAMES)], state=states[index % len(states)])
        for _ in range(50):
            try:
                check, _ = check_report(project=fresh, agent=ci, report=report)
            except StorageBusy:
                continue
            return check.state
        raise AssertionError("never got through")

    results = run_in_threads(REPORTS, one)
    assert not [result for result in results if isinstance(result, BaseException)], results
    rows = list(CheckResult.objects.filter(project=project, commit=COMMIT).order_by("name"))
    assert [row.name for row in rows] == list(NAMES)
    events = Event.objects.filter(type=EventType.CHECK_REPORTED, project=project)
    assert events.count() == REPORTS
    # Each row holds the state of the last report of its name to commit.
    for row in rows:
        last = events.filter(payload__name=row.name).order_by("-id").first()
        assert last is not None
        assert last.payload["state"] == row.state

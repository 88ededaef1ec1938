"""A repository that cannot be read is an error on the run, never a crash, and proves nothing."""

from __future__ import annotations

import pytest

from ledger.models import Project
from reconciliation.models import Condition, Finding, FindingStatus, RunStatus
from reconciliation.services import reconcile
from tests.factories import ProjectFactory
from tests.reconciliation import scenarios

pytestmark = pytest.mark.django_db


def test_unreadable_repositories_are_run_errors_and_the_other_projects_still_reconcile(tmp_path, clock):
    (tmp_path / "not-a-repo").mkdir()
    broken = {
        "missing": ProjectFactory(repository=str(tmp_path / "missing")),
        "plain-dir": ProjectFactory(repository=str(tmp_path / "not-a-repo")),
        "bad-url": ProjectFactory(repository=(tmp_path / "nowhere.git").as_uri()),
        "relative": ProjectFactory(),
    }
    # A relative path is refused at creation now; a row from before that still must not crash a run.
    Project.objects.filter(pk=broken["relative"].pk).update(repository="some/relative/path")
    healthy = scenarios.duplicate_branch_label(tmp_path / "git", clock)

    run = reconcile()

    assert run.status == RunStatus.PARTIAL
    assert sorted(error["project"] for error in run.errors) == sorted(p.slug for p in broken.values())
    assert all(error["message"] for error in run.errors)
    finding = Finding.objects.get()
    assert finding.condition == healthy.condition
    assert run.counts[Condition.DUPLICATE_BRANCH_LABEL] == 1


def test_a_repository_that_becomes_unreadable_keeps_its_findings_open(tmp_path, clock):
    scenarios.branch_missing(tmp_path / "git", clock)
    reconcile()
    finding = Finding.objects.get()

    Project.objects.filter(pk=finding.project_id).update(repository=str(tmp_path / "gone"))
    clock.advance(60)
    run = reconcile()

    finding.refresh_from_db()
    assert finding.status == FindingStatus.OPEN  # a failed read proves nothing either way
    assert finding.last_seen_at == finding.first_seen_at < run.started_at
    assert len(run.errors) == 1
    assert run.resolved == 0


def test_a_missing_default_branch_is_an_error_not_a_flood_of_findings(tmp_path, clock):
    scenario_root = tmp_path / "git"
    scenarios.orphan_branch(scenario_root, clock)
    Project.objects.update(default_branch="trunk")
    run = reconcile()
    assert Finding.objects.count() == 0
    assert "trunk" in run.errors[0]["message"]


def test_a_path_inside_another_repository_is_not_read_as_that_repository(tmp_path, clock):
    from tests.reconciliation.gitworld import GitWorld

    world = GitWorld(tmp_path / "git")
    inner = world.clone / "subdir"
    inner.mkdir()
    ProjectFactory(repository=str(inner))
    run = reconcile()
    assert len(run.errors) == 1
    assert "not a git repository" in run.errors[0]["message"]

"""`manage.py reconcile` and the scheduled job run the same service."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from operations.schedules import SCHEDULES
from reconciliation.jobs import reconcile_job
from reconciliation.models import Condition, ReconciliationRun
from tests.factories import ProjectFactory
from tests.reconciliation import scenarios

pytestmark = pytest.mark.django_db


def test_command_prints_counts_per_condition_and_errors(tmp_path, clock):
    scenarios.duplicate_branch_label(tmp_path / "git", clock)
    broken = ProjectFactory(repository=str(tmp_path / "missing"))
    out, err = io.StringIO(), io.StringIO()

    call_command("reconcile", stdout=out, stderr=err)

    lines = out.getvalue().splitlines()
    assert lines[0].startswith("Reconciliation run ")
    assert "1 finding(s) opened" in lines[0]
    counts = dict(line.split() for line in lines[1:])
    assert counts == {c: ("1" if c == Condition.DUPLICATE_BRANCH_LABEL else "0") for c in Condition.values}
    assert f"Error ({broken.slug}):" in err.getvalue()
    assert "1 error(s)" in err.getvalue()


def test_the_job_reconciles_and_never_prunes(clock):
    result = reconcile_job()
    run = ReconciliationRun.objects.get()
    assert result == {"run": run.pk, "status": run.status, "counts": run.counts, "errors": 0, "landed": []}
    assert run.prune_worktrees is False


def test_reconciliation_is_scheduled_every_five_minutes():
    assert ("environments.reconcile", "reconciliation.jobs.reconcile_job", 5) in SCHEDULES

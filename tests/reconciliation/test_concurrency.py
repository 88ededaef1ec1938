"""Two reconciliations at once (the scheduled job and an operator's command) neither duplicate nor double-report."""

from __future__ import annotations

import pytest

from ledger.models import Event, EventType
from reconciliation.models import Finding, FindingStatus, ReconciliationRun, RunStatus
from reconciliation.services import reconcile
from tests.concurrency import run_in_threads
from tests.reconciliation import scenarios

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("rounds", range(3))
def test_concurrent_runs_open_one_finding_and_resolve_it_once(rounds, tmp_path, clock):
    scenario = scenarios.environment_collision(tmp_path / "git", clock)

    results = run_in_threads(2, lambda _: reconcile())

    assert not [r for r in results if isinstance(r, BaseException)], results
    assert {r.status for r in results} <= {RunStatus.SUCCEEDED, RunStatus.SUPERSEDED}
    assert sorted(Finding.objects.values_list("subject_key", flat=True)) == sorted(scenario.subjects)
    assert Event.objects.filter(type=EventType.FINDING_OPENED).count() == len(scenario.subjects)

    scenario.repair()
    results = run_in_threads(2, lambda _: reconcile())

    assert not [r for r in results if isinstance(r, BaseException)], results
    assert not Finding.objects.exclude(status=FindingStatus.RESOLVED).exists()
    assert Event.objects.filter(type=EventType.FINDING_RESOLVED).count() == len(scenario.subjects)
    assert ReconciliationRun.objects.filter(finished_at__isnull=True).count() == 0

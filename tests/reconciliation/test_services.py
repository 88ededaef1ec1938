"""Each condition alone, repeated runs, automatic resolution (SPEC §7)."""

from __future__ import annotations

import pytest

from ledger.models import Event, EventType
from reconciliation.models import Condition, Finding, FindingStatus, ReconciliationRun, RunStatus
from reconciliation.services import reconcile
from reconciliation.triage import RECONCILIATION_ACTOR
from tests.reconciliation.scenarios import SCENARIOS

pytestmark = pytest.mark.django_db

CONDITIONS = sorted(SCENARIOS)


def unresolved() -> list[Finding]:
    return list(Finding.objects.exclude(status=FindingStatus.RESOLVED).order_by("id"))


def test_every_condition_has_a_scenario():
    assert set(SCENARIOS) == set(Condition.values)


@pytest.mark.parametrize("condition", CONDITIONS)
def test_scenario_opens_exactly_its_finding(condition, tmp_path, clock):
    scenario = SCENARIOS[condition](tmp_path / "git", clock)

    run = reconcile()

    findings = unresolved()
    assert {f.condition for f in findings} == {condition}
    assert {f.subject_key for f in findings} == scenario.subjects
    assert all(f.first_seen_at == f.last_seen_at == clock.now() for f in findings)
    assert run.status == RunStatus.SUCCEEDED, run.errors
    assert run.counts == {c: (len(scenario.subjects) if c == condition else 0) for c in Condition.values}
    assert run.opened == len(scenario.subjects)
    opened = {e.payload["finding"]: e for e in Event.objects.filter(type=EventType.FINDING_OPENED)}
    assert sorted(opened) == [f.pk for f in findings]
    assert all(opened[f.pk].project_id == f.project_id for f in findings)
    assert all(opened[f.pk].payload["condition"] == condition for f in findings)


@pytest.mark.parametrize("condition", CONDITIONS)
def test_second_run_moves_last_seen_and_adds_no_duplicate(condition, tmp_path, clock):
    SCENARIOS[condition](tmp_path / "git", clock)
    reconcile()
    before = {f.pk: f.first_seen_at for f in unresolved()}
    clock.advance(60)

    second = reconcile()

    after = unresolved()
    assert {f.pk: f.first_seen_at for f in after} == before
    assert all(f.last_seen_at == clock.now() for f in after)
    assert second.opened == 0
    assert Finding.objects.count() == len(before)
    assert Event.objects.filter(type=EventType.FINDING_OPENED).count() == len(before)


@pytest.mark.parametrize("condition", CONDITIONS)
def test_repairing_the_scenario_resolves_its_finding(condition, tmp_path, clock):
    scenario = SCENARIOS[condition](tmp_path / "git", clock)
    reconcile()
    clock.advance(5)
    scenario.repair()

    run = reconcile()

    assert unresolved() == []
    findings = list(Finding.objects.all())
    assert len(findings) == len(scenario.subjects)
    assert all(f.status == FindingStatus.RESOLVED and f.resolved_at == clock.now() for f in findings)
    assert all(f.resolved_by == RECONCILIATION_ACTOR for f in findings)
    assert run.resolved == len(findings)
    assert run.counts[condition] == 0
    resolved_events = Event.objects.filter(type=EventType.FINDING_RESOLVED)
    assert sorted(e.payload["finding"] for e in resolved_events) == sorted(f.pk for f in findings)


def test_a_run_is_recorded_with_its_clock_reading(clock):
    run = reconcile()
    assert run.started_at == clock.now()
    assert run.finished_at is not None
    assert run.finished_at >= run.started_at
    assert run.status == RunStatus.SUCCEEDED
    assert run.errors == []
    assert ReconciliationRun.objects.count() == 1

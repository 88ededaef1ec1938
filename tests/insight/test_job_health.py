"""Job heartbeats: every job wrapper records its run; `job_health` says what is stale and whether a scheduler lives."""

from __future__ import annotations

import pytest

from insight.job_health import job_health
from insight.jobs import check_incidents_job
from insight.models.job_heartbeat import JobHeartbeat, JobOutcome
from leases import jobs
from leases.services import lease_claim
from reconciliation.jobs import reconcile_job
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db


def test_nothing_run_yet_means_every_job_stale_and_no_scheduler(clock):
    health = job_health(clock.now())
    assert not health.scheduler_alive
    assert health.last_heartbeat_at is None
    assert all(job.stale for job in health.jobs.values())
    assert not health.healthy


def test_each_wrapper_records_start_success_and_counts(clock):
    project = ProjectFactory()
    lease_claim(task=TaskFactory(project=project), agent=AgentFactory(projects=[project]), lease_seconds=60)
    clock.advance(120)
    jobs.sweep_expired_job()
    jobs.check_queue_wait_job()
    reconcile_job()
    jobs.purge_idempotency_job()
    check_incidents_job()
    rows = {row.name: row for row in JobHeartbeat.objects.all()}
    assert set(rows) == {"sweep_expired", "check_queue_wait", "reconcile", "purge_idempotency", "check_incidents"}
    sweep = rows["sweep_expired"]
    assert sweep.last_started_at == clock.now()
    assert sweep.last_succeeded_at == clock.now()
    assert sweep.last_outcome == JobOutcome.SUCCEEDED
    assert sweep.last_result["expired"] == 1
    assert sweep.runs == 1
    assert sweep.failures == 0
    assert rows["reconcile"].last_result["status"] == "succeeded"
    health = job_health(clock.now())
    assert health.scheduler_alive
    assert health.healthy


def test_a_sweep_older_than_three_minutes_is_stale_and_the_scheduler_silent(clock):
    jobs.sweep_expired_job()
    reconcile_job()
    clock.advance(3 * 60 + 1)
    health = job_health(clock.now())
    assert health.sweep.stale
    assert not health.reconcile.stale  # 15 minutes for reconciliation
    assert not health.scheduler_alive
    clock.advance(12 * 60)
    assert job_health(clock.now()).reconcile.stale


def test_a_failing_job_records_its_error_and_still_raises(clock, monkeypatch):
    def broken() -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(jobs, "sweep_expired", broken)
    with pytest.raises(RuntimeError):
        jobs.sweep_expired_job()
    row = JobHeartbeat.objects.get(name="sweep_expired")
    assert row.last_outcome == JobOutcome.FAILED
    assert row.last_error == "RuntimeError: disk on fire"
    assert row.failures == 1
    assert row.last_succeeded_at is None
    health = job_health(clock.now())
    assert [job.name for job in health.failing] == ["sweep_expired"]
    assert health.scheduler_alive  # it did start: a cluster is running, the job is what fails


def test_a_partial_reconciliation_counts_as_done_but_keeps_its_errors(clock):
    ProjectFactory(repository="/nonexistent/repository")
    reconcile_job()
    row = JobHeartbeat.objects.get(name="reconcile")
    assert row.last_outcome == JobOutcome.PARTIAL
    assert "nonexistent" in row.last_error
    assert row.last_succeeded_at == clock.now()
    assert job_health(clock.now()).reconcile.last_run_failed


@pytest.mark.django_db
def test_the_sweep_job_folds_the_task_count_changes(project):
    from insight.models.task_counts import TaskCountChange
    from insight.status_counts import task_counts_by_status

    TaskFactory(project=project)
    TaskFactory(project=project)
    assert TaskCountChange.objects.exists()
    before = task_counts_by_status()
    report = jobs.sweep_expired_job()
    assert report["task_count_changes_folded"] >= 2
    assert not TaskCountChange.objects.exists()
    assert task_counts_by_status() == before  # folding moves the count, never changes it

"""A real django-q2 cluster, in its own process, runs the schedules against the test database (SPEC §9).

The cluster is another process with its own clock, so this test alone uses
real time: the lease is claimed now and then moved into the past with a
queryset update. It waits (polling, at most 60 s) for the effects.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone
from django_q.models import Schedule
from django_q.models import Task as QueuedTask

from leases.models import Attempt, AttemptStatus
from leases.services import lease_claim
from ledger.models import Event, EventType
from operations.schedules import ensure_schedules
from reconciliation.models import ReconciliationRun
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

ROOT = Path(__file__).resolve().parents[2]
WAIT_SECONDS = 60


def start_cluster(log_path: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.qcluster_settings",
        "LEASEHOLD_QCLUSTER_TEST_DB": str(connection.settings_dict["NAME"]),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    with log_path.open("wb") as log:
        # Its own session, so stopping it reaches the workers it forks.
        return subprocess.Popen(
            [sys.executable, "manage.py", "qcluster"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop_cluster(cluster: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the cluster's main process stops it gracefully; then nothing of its group may linger."""
    if cluster.poll() is None:
        cluster.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            cluster.wait(timeout=30)
    with contextlib.suppress(ProcessLookupError):  # usually the whole group is gone already
        os.killpg(cluster.pid, signal.SIGKILL)
    cluster.wait(timeout=10)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_real_cluster_runs_the_due_sweep_and_reconcile_schedules(tmp_path):
    project = ProjectFactory()
    grant = lease_claim(task=TaskFactory(project=project), agent=AgentFactory(projects=[project]), lease_seconds=60)
    now = timezone.now()
    Attempt.objects.filter(pk=grant.attempt.pk).update(lease_expires_at=now - timedelta(seconds=5))
    ensure_schedules()
    Schedule.objects.update(next_run=now + timedelta(days=1))  # only what this test makes due runs
    Schedule.objects.filter(name="environments.reconcile").update(next_run=now - timedelta(minutes=1))
    Schedule.objects.create(
        name="test.sweep_expired",
        func="leases.jobs.sweep_expired_job",
        schedule_type=Schedule.MINUTES,
        minutes=1,
        repeats=-1,
        next_run=now - timedelta(minutes=1),
    )

    log_path = tmp_path / "qcluster.log"
    cluster = start_cluster(log_path)
    try:
        deadline = time.monotonic() + WAIT_SECONDS
        while time.monotonic() < deadline:
            expired = Attempt.objects.filter(pk=grant.attempt.pk, status=AttemptStatus.EXPIRED).exists()
            reconciled = ReconciliationRun.objects.filter(finished_at__isnull=False).exists()
            if expired and reconciled:
                break
            assert cluster.poll() is None, log_path.read_text()
            time.sleep(0.5)
    finally:
        stop_cluster(cluster)

    log = log_path.read_text()
    assert Attempt.objects.get(pk=grant.attempt.pk).status == AttemptStatus.EXPIRED, log
    assert Event.objects.filter(type=EventType.ATTEMPT_EXPIRED, attempt_id=grant.attempt.pk).count() == 1
    assert QueuedTask.objects.filter(func="leases.jobs.sweep_expired_job", success=True).exists(), log
    assert ReconciliationRun.objects.filter(finished_at__isnull=False).exists(), log
    assert QueuedTask.objects.filter(func="reconciliation.jobs.reconcile_job", success=True).exists(), log
    assert cluster.returncode is not None

"""`GET /healthz` (process up, no database) and `GET /readyz` (database, migrations, scheduler heartbeat)."""

from __future__ import annotations

import pytest

from leases import jobs


@pytest.mark.django_db
def test_healthz_answers_without_touching_the_database(client, django_assert_num_queries):
    with django_assert_num_queries(0):
        response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.django_db
def test_readyz_is_503_naming_the_scheduler_when_no_job_ever_ran(client, clock):
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["failing"] == ["scheduler"]
    assert body["checks"]["database"]["ok"]
    assert body["checks"]["migrations"]["ok"]
    assert "qcluster" in body["checks"]["scheduler"]["detail"]


@pytest.mark.django_db
def test_readyz_is_ready_after_a_job_ran_and_503_once_its_heartbeat_is_three_minutes_old(client, clock):
    jobs.sweep_expired_job()
    assert client.get("/readyz").status_code == 200
    clock.advance(180)
    assert client.get("/readyz").status_code == 200
    clock.advance(1)
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["failing"] == ["scheduler"]
    assert "181 s ago" in response.json()["checks"]["scheduler"]["detail"]


@pytest.mark.django_db
def test_readyz_names_unapplied_migrations(client, clock, monkeypatch):
    from operations.apis import health

    jobs.sweep_expired_job()
    monkeypatch.setattr(health, "_migrations_seen_applied", False)

    class Pending:
        app_label, name = "leases", "9999_future"

    monkeypatch.setattr(health.MigrationExecutor, "migration_plan", lambda self, targets: [(Pending(), False)])
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["failing"] == ["migrations"]
    assert "leases.9999_future" in response.json()["checks"]["migrations"]["detail"]


def test_probes_refuse_writes(client):
    assert client.post("/healthz").status_code == 405


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_readyz_follows_a_real_cluster_heartbeat_and_names_the_scheduler_once_it_is_old(client, tmp_path):
    """A real `qcluster` runs the due sweep (its own process, real time); then the fake clock moves past 3 min."""
    import time
    from datetime import timedelta

    from django.utils import timezone
    from django_q.models import Schedule

    from insight.models.job_heartbeat import JobHeartbeat
    from ledger import clock
    from operations.schedules import ensure_schedules
    from tests.reconciliation.test_qcluster import WAIT_SECONDS, start_cluster, stop_cluster

    now = timezone.now()
    ensure_schedules()
    Schedule.objects.update(next_run=now + timedelta(days=1))
    Schedule.objects.filter(name="leases.sweep_expired").update(next_run=now - timedelta(minutes=1))
    assert client.get("/readyz").status_code == 503
    log_path = tmp_path / "qcluster.log"
    cluster = start_cluster(log_path)
    try:
        deadline = time.monotonic() + WAIT_SECONDS
        while time.monotonic() < deadline:
            if JobHeartbeat.objects.filter(name="sweep_expired", last_succeeded_at__isnull=False).exists():
                break
            assert cluster.poll() is None, log_path.read_text()
            time.sleep(0.5)
    finally:
        stop_cluster(cluster)
    beat = JobHeartbeat.objects.get(name="sweep_expired")
    assert beat.last_succeeded_at is not None, log_path.read_text()
    assert beat.last_runner  # host:pid of the cluster's worker
    clock.freeze(timezone.now())
    try:
        assert client.get("/readyz").status_code == 200
        clock.advance(4 * 60)
        response = client.get("/readyz")
        assert response.status_code == 503
        assert response.json()["failing"] == ["scheduler"]
    finally:
        clock.unfreeze()

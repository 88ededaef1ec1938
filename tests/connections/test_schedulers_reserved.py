"""The schedulers never starve (SPEC §25): a web server at its whole pool leaves the cluster its connections.

PostgreSQL only. A role capped at exactly one server's budget (`core.connections`: 1 worker x
2 threads, a 1-worker cluster: 4 + 4 = 8) holds the web side at its full size — the pool the
settings give 2 threads, every connection taken, and the LISTEN connection — and then a real
django-q2 cluster starts as that role: it still connects, and its due sweep expires a lapsed
lease. The web pool cannot grow past its share (one more request waits for a pooled connection,
it takes none from the cluster), and the budget is exact: with the cluster running the role is
at its limit, so one connection more than the budget is refused.

The cluster is another process with its own clock: the lease is moved into the past with a
queryset update, and the test polls (at most 60 s) for the effect, as tests/reconciliation does.
"""

from __future__ import annotations

import os
import time
from contextlib import ExitStack
from datetime import timedelta

import psycopg
import pytest
from django.db import connection
from django.utils import timezone
from django_q.models import Schedule
from psycopg_pool import ConnectionPool, PoolTimeout

from core.connections import ConnectionBudget
from leases.models import Attempt, AttemptStatus
from leases.services import lease_claim
from operations.schedules import ensure_schedules
from tests.factories import AgentFactory, ProjectFactory, TaskFactory
from tests.reconciliation.test_qcluster import start_cluster, stop_cluster

pytestmark = pytest.mark.slow
WAIT_SECONDS = 60
BUDGET = ConnectionBudget(web_workers=1, web_threads=2, cluster_workers=1)


def _role_url(role: str) -> str:
    settings = connection.settings_dict
    return f"postgres://{role}@{settings['HOST'] or '127.0.0.1'}:{settings['PORT'] or 5432}/{settings['NAME']}"


def _role_connections(role: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE usename = %s", [role])
        return int(cursor.fetchone()[0])


@pytest.mark.django_db(transaction=True)
def test_a_saturated_web_pool_leaves_the_cluster_its_connections(tmp_path, monkeypatch):
    if connection.vendor != "postgresql":
        pytest.skip("a role's connection limit is PostgreSQL's; SQLite has no connections to budget")
    assert BUDGET.total == 8
    role = f"leasehold_budget_{os.getpid()}"
    with connection.cursor() as cursor:
        cursor.execute(f'DROP ROLE IF EXISTS "{role}"')
        cursor.execute(f'CREATE ROLE "{role}" LOGIN CONNECTION LIMIT {BUDGET.total}')
        for grant in (
            "ALL ON ALL TABLES IN SCHEMA public",
            "ALL ON ALL SEQUENCES IN SCHEMA public",
            "USAGE ON SCHEMA public",
        ):
            cursor.execute(f'GRANT {grant} TO "{role}"')
    project = ProjectFactory()
    grant = lease_claim(task=TaskFactory(project=project), agent=AgentFactory(projects=[project]), lease_seconds=60)
    now = timezone.now()
    Attempt.objects.filter(pk=grant.attempt.pk).update(lease_expires_at=now - timedelta(seconds=5))
    ensure_schedules()
    Schedule.objects.update(next_run=now + timedelta(days=1))  # only the sweep is due
    Schedule.objects.filter(name="leases.sweep_expired").update(next_run=now - timedelta(minutes=1))

    url = _role_url(role)
    log_path = tmp_path / "qcluster.log"
    try:
        with ExitStack() as held:
            # The web side at its whole budget: the pool a 2-thread worker gets, every connection out.
            web = held.enter_context(
                ConnectionPool(url, min_size=BUDGET.pool_size, max_size=BUDGET.pool_size, timeout=5, open=True)
            )
            taken = [held.enter_context(web.connection()) for _ in range(BUDGET.pool_size)]
            held.enter_context(psycopg.connect(url, autocommit=True)).execute("LISTEN ledger_event")
            assert len(taken) == BUDGET.pool_size
            assert _role_connections(role) == BUDGET.web
            with pytest.raises(PoolTimeout):
                web.getconn(timeout=0.5)  # one request more waits; the pool takes nothing from the cluster

            monkeypatch.setenv("DATABASE_URL", url)
            cluster = start_cluster(log_path)
            try:
                deadline = time.monotonic() + WAIT_SECONDS
                while not Attempt.objects.filter(pk=grant.attempt.pk, status=AttemptStatus.EXPIRED).exists():
                    assert cluster.poll() is None, log_path.read_text()
                    assert time.monotonic() < deadline, log_path.read_text()
                    time.sleep(0.5)
                # The budget is exact: web and cluster together are at the role's limit.
                deadline = time.monotonic() + 20
                while _role_connections(role) < BUDGET.total and time.monotonic() < deadline:
                    time.sleep(0.2)
                assert _role_connections(role) == BUDGET.total, log_path.read_text()
                with pytest.raises(psycopg.OperationalError, match="too many connections for role"):
                    psycopg.connect(url).close()
            finally:
                stop_cluster(cluster)
        log = log_path.read_text()
        assert "too many connections" not in log, log
    finally:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s AND pid <> pg_backend_pid()",
                [role],
            )
            cursor.execute(f'DROP OWNED BY "{role}"')
            cursor.execute(f'DROP ROLE IF EXISTS "{role}"')

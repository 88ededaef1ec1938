"""The connection budget (SPEC §25, "Connections are budgeted"): one formula, the settings sized from it.

The settings are loaded in a child process per case (they are read once, from the environment);
loading them connects to nothing, so these run on either database. What only PostgreSQL can
answer (its limits, `jit` as the application's sessions have it) is skipped on SQLite, where the
pool settings do nothing: SQLite has no pool, each thread keeps one connection to the file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from core.connections import ConnectionBudget, ServerLimits, describe, listen_connection_params, server_limits

ROOT = Path(__file__).resolve().parents[2]
PG_URL = "postgres://leasehold@db.example:5432/leasehold"


def test_the_default_server_budget_is_its_threads_its_listeners_and_its_cluster():
    budget = ConnectionBudget(web_workers=2, web_threads=8, cluster_workers=2)
    assert budget.pool_size == 10  # 8 request threads + 2 that resume woken waiters
    assert budget.web == 22  # 2 x (10 + 1 LISTEN connection)
    assert budget.cluster == 5  # 2 workers + sentinel, monitor, pusher
    assert budget.total == 27
    assert budget.listeners == 2
    assert budget.formula() == (
        "web 2 x (8 threads + 2 resume + 1 listener) = 22, "
        "cluster 2 workers + sentinel, monitor, pusher = 5: 27 per server"
    )
    assert ConnectionBudget(1, 2, 1, orm_broker=False).cluster == 3  # Redis: no pusher on the database
    assert ConnectionBudget(1, 2, 0).total == 4  # serve --no-cluster
    assert ConnectionBudget(1, 1, 0).pool_size == 2  # at least one resume thread


def _limits(**overrides) -> ServerLimits:
    values = {
        "max_connections": 100,
        "reserved": 3,
        "in_use": 1,
        "role": "leasehold",
        "role_limit": None,
        "jit": "off",
    }
    return ServerLimits(**{**values, **overrides})


def test_the_startup_line_says_whether_the_budget_fits():
    budget = ConnectionBudget(2, 8, 2)
    line, fits = describe(budget, _limits(), transaction_pooling=False)
    assert fits
    assert "27 per server" in line
    assert "max_connections 100 (97 for non-superusers, 1 in use now)" in line
    assert "WARNING" not in line

    line, fits = describe(budget, _limits(role_limit=26), transaction_pooling=False)
    assert not fits  # the measured case: a role capped at 26 starved the clusters
    assert "role leasehold limited to 26" in line
    assert "WARNING: this server needs 27" in line

    line, fits = describe(budget, _limits(in_use=80), transaction_pooling=False)
    assert not fits  # four servers in use: the fifth is refused

    # Behind a transaction pooler only the LISTEN connections reach PostgreSQL directly.
    line, fits = describe(budget, _limits(in_use=80, role_limit=26), transaction_pooling=True)
    assert fits, line

    line, fits = describe(budget, None, transaction_pooling=False)
    assert fits
    assert line.startswith("Connections: SQLite, no pool")


def _settings(env: dict[str, str], *args: str) -> dict:
    """DATABASES["default"] (and the pooling switch) as a process started with `env` and argv `args` sees them."""
    script = (
        "import json, sys; sys.argv = ['manage.py', *sys.argv[1:]];"
        "from django.conf import settings;"
        "db = settings.DATABASES['default'];"
        "print(json.dumps({'db': db, 'pooling': settings.LEASEHOLD_DB_TRANSACTION_POOLING}, default=str))"
    )
    base = {key: value for key, value in os.environ.items() if not key.startswith("LEASEHOLD_")}
    base.pop("DATABASE_URL", None)
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=ROOT,
        env={**base, "DJANGO_SETTINGS_MODULE": "config.settings.base", "LEASEHOLD_DEBUG": "1", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode != 0:
        return {"error": done.stderr}
    return json.loads(done.stdout)


def test_the_web_pool_is_sized_from_the_threads_and_returns_idle_connections_promptly():
    db = _settings({"DATABASE_URL": PG_URL, "LEASEHOLD_WEB_WORKERS": "3", "LEASEHOLD_WEB_THREADS": "4"})["db"]
    pool = dict(db["OPTIONS"]["pool"])
    # The pool's reset callback notes when a connection came back (core.pool_check: no probe when known good).
    assert pool.pop("reset").startswith("<function note_returned")
    assert pool == {"min_size": 1, "max_size": 5, "timeout": 10, "max_idle": 10}
    assert db["OPTIONS"]["options"] == "-c lock_timeout=20s -c jit=off"
    assert db["CONN_MAX_AGE"] == 0
    assert db["DISABLE_SERVER_SIDE_CURSORS"] is False

    default = _settings({"DATABASE_URL": PG_URL})["db"]
    assert default["OPTIONS"]["pool"]["max_size"] == 10  # serve's defaults: 8 threads + 2 resume


def test_the_cluster_keeps_its_own_connections_without_a_pool():
    db = _settings({"DATABASE_URL": PG_URL}, "qcluster")["db"]
    assert "pool" not in db["OPTIONS"]
    assert db["CONN_MAX_AGE"] is None  # each cluster process keeps its one connection
    assert db["CONN_HEALTH_CHECKS"] is True
    assert db["OPTIONS"]["options"] == "-c lock_timeout=20s -c jit=off"


def test_transaction_pooling_is_one_switch_and_needs_a_direct_listen_url():
    refused = _settings({"DATABASE_URL": PG_URL, "LEASEHOLD_DB_TRANSACTION_POOLING": "1"})
    assert "LEASEHOLD_DB_TRANSACTION_POOLING needs LEASEHOLD_LISTEN_DATABASE_URL" in refused["error"]

    seen = _settings(
        {
            "DATABASE_URL": PG_URL,
            "LEASEHOLD_DB_TRANSACTION_POOLING": "1",
            "LEASEHOLD_LISTEN_DATABASE_URL": "postgres://leasehold@db.example:5432/leasehold",
        }
    )
    db = seen["db"]
    assert seen["pooling"] is True
    assert "options" not in db["OPTIONS"]  # PgBouncer refuses startup options
    assert db["OPTIONS"]["prepare_threshold"] is None  # no server-side prepared statements
    assert db["PREPARED_STATEMENTS"] is False  # core.prepared's statements bind on the client, as Django's do
    assert db["DISABLE_SERVER_SIDE_CURSORS"] is True
    assert db["OPTIONS"]["pool"]["max_size"] == 10

    both = _settings(
        {
            "DATABASE_URL": PG_URL,
            "LEASEHOLD_DB_TRANSACTION_POOLING": "1",
            "LEASEHOLD_LISTEN_DATABASE_URL": "postgres://leasehold@db.example:5432/leasehold",
            "LEASEHOLD_DB_PREPARED_STATEMENTS": "1",
        }
    )
    assert "LEASEHOLD_DB_PREPARED_STATEMENTS cannot be on with LEASEHOLD_DB_TRANSACTION_POOLING" in both["error"]


def test_prepared_statements_are_on_by_default_and_can_be_turned_off():
    db = _settings({"DATABASE_URL": PG_URL})["db"]
    assert db["ENGINE"] == "core.postgresql"
    assert db["PREPARED_STATEMENTS"] is True
    assert db["OPTIONS"]["prepare_threshold"] == 2
    cluster = _settings({"DATABASE_URL": PG_URL}, "qcluster")["db"]
    assert cluster["ENGINE"] == "core.postgresql"  # the cluster's sweeps prepare theirs too
    assert cluster["PREPARED_STATEMENTS"] is True
    off = _settings(
        {"DATABASE_URL": PG_URL, "LEASEHOLD_DB_PREPARED_STATEMENTS": "0", "LEASEHOLD_DB_PREPARE_THRESHOLD": "5"}
    )["db"]
    assert off["PREPARED_STATEMENTS"] is False
    assert off["OPTIONS"]["prepare_threshold"] == 5


def test_sqlite_has_no_pool_whatever_the_threads():
    seen = _settings({"LEASEHOLD_WEB_THREADS": "32", "LEASEHOLD_DB_TRANSACTION_POOLING": "1"})
    assert "pool" not in seen["db"]["OPTIONS"]
    assert seen["db"]["CONN_MAX_AGE"] is None  # each thread keeps its connection to the file


@pytest.mark.django_db
def test_the_applications_sessions_run_without_jit_and_the_limits_are_read(settings):
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's limits and jit; SQLite has neither")
    limits = server_limits(connection)
    assert limits.jit == "off"
    assert limits.max_connections >= limits.in_use >= 1
    with connection.cursor() as cursor:
        cursor.execute("SHOW lock_timeout")
        assert cursor.fetchone()[0] == "20s"

    params = listen_connection_params()
    assert "conninfo" not in params  # the database's own connection
    settings.LEASEHOLD_LISTEN_DATABASE_URL = "postgres://listener@127.0.0.1:5432/elsewhere"
    params = listen_connection_params()
    assert params["conninfo"] == "postgres://listener@127.0.0.1:5432/elsewhere"
    assert params["options"] == "-c lock_timeout=20s -c jit=off"

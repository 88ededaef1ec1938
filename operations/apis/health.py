"""`GET /healthz` and `GET /readyz` (SPEC §18): for load balancers and orchestrators, no login.

- `/healthz`: the process is up and serving. It touches no database, so a
  database outage never makes an orchestrator restart healthy web servers.
- `/readyz`: this server can do its work: the database answers, every
  migration is applied, and a scheduler heartbeat (some django-q2 job
  started, `insight.job_health.job_health`) is at most 3 minutes
  old. Any failing check answers 503 and is named in `failing`; the body
  says nothing a stranger could use beyond that.
"""

from __future__ import annotations

from typing import Any

from django.db import DatabaseError, connection
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from insight.job_health import SCHEDULER_HEARTBEAT_MAX_AGE, job_health
from ledger import clock

# Migrations are not un-applied under a running server: once seen applied, the plan is not read again.
_migrations_seen_applied = False


@never_cache
@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


def _database() -> tuple[bool, str]:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except DatabaseError as exc:
        return False, f"the database did not answer ({type(exc).__name__})"
    return True, "the database answers"


def _migrations() -> tuple[bool, str]:
    global _migrations_seen_applied
    if _migrations_seen_applied:
        return True, "every migration is applied"
    executor = MigrationExecutor(connection)
    pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if pending:
        names = ", ".join(f"{migration.app_label}.{migration.name}" for migration, _ in pending[:5])
        return False, f"{len(pending)} migration(s) not applied: {names}"
    _migrations_seen_applied = True
    return True, "every migration is applied"


def _scheduler() -> tuple[bool, str]:
    health = job_health(clock.now())
    if health.last_heartbeat_at is None:
        return False, "no scheduled job has ever run: is a cluster (manage.py qcluster) running?"
    age = int((health.now - health.last_heartbeat_at).total_seconds())
    limit = int(SCHEDULER_HEARTBEAT_MAX_AGE.total_seconds())
    if not health.scheduler_alive:
        return False, f"the last scheduled job started {age} s ago (more than {limit} s): no cluster is running"
    return True, f"the last scheduled job started {age} s ago"


@never_cache
@require_safe
def readyz(request: HttpRequest) -> JsonResponse:
    checks: dict[str, dict[str, Any]] = {}
    ok, detail = _database()
    checks["database"] = {"ok": ok, "detail": detail}
    # Without a database the other two cannot be read; they fail as "not checked".
    for name, check in (("migrations", _migrations), ("scheduler", _scheduler)):
        if not ok:
            checks[name] = {"ok": False, "detail": "not checked: the database did not answer"}
            continue
        try:
            passed, detail = check()
        except DatabaseError as exc:
            passed, detail = False, f"could not be read ({type(exc).__name__})"
        checks[name] = {"ok": passed, "detail": detail}
    failing = [name for name, result in checks.items() if not result["ok"]]
    body = {"status": "ready" if not failing else "not ready", "failing": failing, "checks": checks}
    return JsonResponse(body, status=200 if not failing else 503)

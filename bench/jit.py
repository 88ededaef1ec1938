"""`python -m bench.jit`: what PostgreSQL's JIT does to the console's queries (issue 34), measured.

Seeds the ledger of `bench.pages` (scale 1: 10,000 tasks, 30,000 attempts, 100,000 events), then,
for every console page of `bench/page_list.py`, captures the queries the page runs and runs each
with `EXPLAIN (ANALYZE, FORMAT JSON)` three times with `jit = on` (PostgreSQL's default) and three
times with `jit = off` (what the application's sessions have, config/settings/base.py
`DB_SESSION_SETTINGS`), each in a transaction of its own (`SET LOCAL`). Reports, per page: the
queries JIT compiled when allowed, their JIT time (generation, inlining, optimization, emission)
and the page's summed execution time (median per query) with and without JIT.

    python -m bench.jit [--scale 1] [--json bench/results/jit.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RUNS = 3


def _explain(sql: str, params: Any, jit: str) -> tuple[float, float]:
    """(execution ms, JIT ms) of one run of the statement with jit on or off."""
    from django.db import connection, transaction

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL jit = {jit}")
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
        plan = cursor.fetchone()[0]
        transaction.set_rollback(True)  # a captured write (a cache row, a heartbeat) must not stay
    plan = json.loads(plan) if isinstance(plan, str) else plan
    timing = plan[0].get("JIT", {}).get("Timing", {})
    jit_ms = float(timing.get("Total", 0.0))
    return float(plan[0]["Execution Time"]) + float(plan[0].get("Planning Time", 0.0)), jit_ms


def measure_pages(links: dict[str, Any]) -> list[dict[str, Any]]:
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from bench.page_list import PAGES

    user = get_user_model().objects.create_superuser(username="bench-jit", password="x" * 20)
    client = Client()
    client.force_login(user)
    rows = []
    for name, pattern in PAGES:
        url = pattern.format(**links)
        client.get(url)  # warm: caches and prepared statements as in a running server
        with CaptureQueriesContext(connection) as captured:
            assert client.get(url).status_code == 200, url
        on_ms = off_ms = jit_ms = 0.0
        compiled = 0
        for query in captured.captured_queries:
            sql = query["sql"]
            if not sql.lstrip().upper().startswith(("SELECT", "WITH")):
                continue
            # psycopg's client-side binding: the captured SQL carries its values already.
            on = [_explain(sql, None, "on") for _ in range(RUNS)]
            off = [_explain(sql, None, "off") for _ in range(RUNS)]
            on_ms += statistics.median(run[0] for run in on)
            off_ms += statistics.median(run[0] for run in off)
            query_jit = statistics.median(run[1] for run in on)
            if query_jit > 0:
                compiled += 1
                jit_ms += query_jit
        rows.append(
            {
                "page": name,
                "queries": len(captured.captured_queries),
                "jit_compiled": compiled,
                "jit_ms": round(jit_ms, 1),
                "with_jit_ms": round(on_ms, 1),
                "without_jit_ms": round(off_ms, 1),
            }
        )
    return rows


def child(scale: int, out: Path | None) -> int:
    from bench.environment import configure_django, create_target, drop_target, migrate, new_workdir

    target = create_target("postgresql", workdir=new_workdir(), database_name=f"leasehold_jit_{os.getpid()}")
    target.env["LEASEHOLD_ALLOWED_HOSTS"] = "testserver,localhost"
    configure_django(target)
    try:
        migrate()
        from bench.pages import seed
        from ledger import clock

        now = datetime.now(UTC).replace(microsecond=0)
        clock.freeze(now)
        links = seed(scale, now).pop("links")
        rows = measure_pages(links)
    finally:
        drop_target(target)
    print("| page | queries | JIT-compiled | JIT ms | with JIT ms | without JIT ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        print(
            f"| {row['page']} | {row['queries']} | {row['jit_compiled']} | {row['jit_ms']} | "
            f"{row['with_jit_ms']} | {row['without_jit_ms']} |"
        )
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"scale": scale, "pages": rows}, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.jit", description=__doc__)
    parser.add_argument("--scale", type=int, default=1)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    return child(args.scale, args.json)


if __name__ == "__main__":
    sys.exit(main())

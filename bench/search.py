"""Search, indexed (issue 33, SPEC §25): `GET /api/v1/search/`'s service at scale, against the raw SQL.

    python -m bench.search --database postgres --tasks 1000000     # 3 notes per task: 3M notes
    python -m bench.search --database sqlite --tasks 100000

Seeds a fresh database: `--tasks` ready tasks (bulk, `bench.data`), one finished attempt per task
and `--notes` checkpoint notes per attempt (`bench.data.note_text`: ten words of a 400-word
vocabulary and a ticket number shared by one note in 50,000). The bulk rows go through the
schema's triggers, so the tsvector columns (PostgreSQL) and FTS5 tables (SQLite) are filled as
any write fills them. Then, for each query, `--runs` runs of `--requests` calls of
`leases.search.search` as an agent of the project (the API's call), each against the raw
reference in the same run: the two candidate statements (tasks, notes) through the plain
driver cursor, no snippets. Reported per query: hits, the median of each run (ms) as a range
over the runs, and service ÷ raw.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import UTC, datetime
from typing import Any

from bench.environment import (
    Target,
    configure_django,
    create_target,
    drop_target,
    migrate,
    new_workdir,
    pg_admin_url,
)

RAW_TIMEOUT_MS = 10_000  # the raw reference gets the same plan settings, and a cap of its own
QUERIES = {
    "a number (1 task, 1 note)": "{number}",
    "a ticket (rare word)": "ticket-4242",
    "two words": "flakyless deployous",
    "one common word": "migration",
    # Planted by `_plant`: stop 39's worst cases around its probe limit (10,000 matches); since stop 40 (id
    # segments) words with a window's worth of matches spread thin or all old.
    "10,000 notes, spread evenly (GIN's worst)": "okapi",
    "10,001 notes, spread evenly (the walk's worst)": "quokka",
    "15,000 notes, spread evenly (walk)": "narwhal",
    "10,001 notes, the oldest (the walk's pathological case)": "wombat",
}
# word: (how many notes, where: spread evenly over the table or the oldest)
PLANTED = {
    "okapi": (10_000, "spread"),
    "quokka": (10_001, "spread"),
    "narwhal": (15_000, "spread"),
    "wombat": (10_001, "oldest"),
}


def _plant(vendor: str) -> bool:
    """Append each planted word to its notes (through the triggers), once."""
    from django.db import connection

    planted = False
    with connection.cursor() as cursor:
        cursor.execute("SELECT min(id), count(*) FROM leases_note")
        low, total = cursor.fetchone()
        for word, (count, where) in PLANTED.items():
            if _matches(vendor, word):
                continue
            step = max(1, total // count)
            chosen = f"(id - {low}) % {step} = 0" if where == "spread" else "1 = 1"
            cursor.execute(
                f"UPDATE leases_note SET content = content || ' {word}' WHERE id IN "
                f"(SELECT id FROM leases_note WHERE {chosen} ORDER BY id LIMIT {count})"
            )
            planted = True
        if planted and vendor == "postgresql":
            cursor.execute("VACUUM ANALYZE leases_note")
    return planted


def _raw(vendor: str, query: str, project_id: int, agent_id: int) -> int:
    from django.db import connection

    try:
        return _raw_statements(vendor, query, project_id)
    except Exception:
        if vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.cursor.execute("ROLLBACK")
        raise


def _raw_statements(vendor: str, query: str, project_id: int) -> int:
    """The service's statements bare: per kind, (PostgreSQL: the walk of the newest segments, the estimate, the probe,
    the walk on and its skips: `leases.search._postgres_window_rows` itself, on the driver's cursor) the
    window of the newest RANK_WINDOW + 1 matches with their rank, under the same planner settings;
    ranked by the caller."""
    from django.db import connection

    from leases.search import GIN_PLAN, PLAN_SETTINGS, RANK_WINDOW, _postgres_scope, _postgres_window_rows
    from leases.search_text import fts5_expression, parse, websearch_text

    with connection.cursor() as cursor:
        raw = cursor.cursor
        found = 0
        if vendor == "postgresql":
            text = websearch_text(query)
            raw.execute("BEGIN")
            raw.execute("SET LOCAL statement_timeout = %s", [RAW_TIMEOUT_MS])
            for name, value in PLAN_SETTINGS.items():
                raw.execute(f"SET LOCAL {name} = {value}")
            raw.execute("SELECT EXISTS (SELECT 1 FROM ledger_project WHERE id <> %s)", [project_id])
            projects = _postgres_scope([project_id]) if raw.fetchone()[0] else []  # as the service scopes

            def run(sql: str, params: list[Any]) -> list[tuple[int, float]]:
                raw.execute(sql, params)
                return raw.fetchall()

            for table in ("ledger_task", "leases_note"):
                raw.execute(f"SELECT max(id) FROM {table}")
                last = raw.fetchone()[0]
                for name, value in GIN_PLAN.items():
                    raw.execute(f"SET LOCAL {name} = {value}")
                found += len(_postgres_window_rows(run, table, projects, text, last))
                for name in GIN_PLAN:
                    raw.execute(f"SET LOCAL {name} = on")
            raw.execute("COMMIT")
            return found
        expression = fts5_expression(parse(query))
        for fts, weights, scope in (
            ("ledger_task_fts", "2.5, 1.0", "SELECT 1 FROM ledger_task t WHERE t.id = f.rowid AND t.project_id = ?"),
            (
                "leases_note_fts",
                "1.0",
                "SELECT 1 FROM leases_note n JOIN leases_attempt a ON a.id = n.attempt_id "
                "JOIN ledger_task t ON t.id = a.task_id WHERE n.id = f.rowid AND t.project_id = ?",
            ),
        ):
            raw.execute(
                f"SELECT f.rowid, -bm25({fts}, {weights}) FROM {fts} f WHERE {fts} MATCH ? AND EXISTS ({scope}) "
                "ORDER BY f.rowid DESC LIMIT ?",
                [expression, project_id, RANK_WINDOW + 1],
            )
            found += len(raw.fetchall())
        return found


def _matches(vendor: str, query: str) -> int:
    """How many notes and tasks the query matches in all (what ranking has to read)."""
    from django.db import connection

    from leases.search_text import fts5_expression, parse, websearch_text

    with connection.cursor() as cursor:
        if vendor == "postgresql":
            total = 0
            for table in ("ledger_task", "leases_note"):
                cursor.execute(
                    f"SELECT count(*) FROM {table} WHERE search_vector @@ websearch_to_tsquery('english', %s)",
                    [websearch_text(query)],
                )
                total += cursor.fetchone()[0]
            return total
        total = 0
        for fts in ("ledger_task_fts", "leases_note_fts"):
            cursor.execute(f"SELECT count(*) FROM {fts} WHERE {fts} MATCH %s", [fts5_expression(parse(query))])
            total += cursor.fetchone()[0]
        return total


def _timed(call: Any, requests: int) -> tuple[float, str]:
    samples, outcome = [], "ok"
    for _ in range(requests):
        started = time.perf_counter()
        try:
            call()
        except Exception as exc:  # SEARCH_TOO_BROAD is an answer, reported as such
            outcome = getattr(exc, "code", type(exc).__name__)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000, outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.search", description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=["postgres", "sqlite"], required=True)
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--notes", type=int, default=3, help="notes per task")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--keep", action="store_true", help="keep the PostgreSQL database")
    parser.add_argument(
        "--database-name", metavar="NAME", help="the PostgreSQL database to create (default: one per process)"
    )
    parser.add_argument(
        "--reuse", metavar="DATABASE", help="measure an existing (kept) PostgreSQL database, no seeding"
    )
    args = parser.parse_args(argv)
    vendor = "postgresql" if args.database == "postgres" else "sqlite"
    if args.reuse:
        url = pg_admin_url().rsplit("/", 1)[0] + "/" + args.reuse
        target = Target(
            vendor="postgresql", env={"DATABASE_URL": url, "LEASEHOLD_DATA_DIR": str(new_workdir())}, dsn=url
        )
        target.env["DJANGO_SETTINGS_MODULE"] = "config.settings.base"
        target.env.setdefault("LEASEHOLD_SECRET_KEY", "bench-search-reuse-" + "x" * 40)
    else:
        target = create_target(vendor, workdir=new_workdir(), database_name=args.database_name)
    try:
        configure_django(target)
        from bench import data
        from leases.models import Attempt, Note
        from leases.search import search, search_answer
        from ledger.models import Agent, Project

        if args.reuse:
            project = Project.objects.get(slug="search")
            agent = Agent.objects.get(handle="search-000")
            args.tasks = project.task_sequence
            notes = Note.objects.count()
            print(f"{vendor}: {args.tasks:,} tasks, {notes:,} notes (reused {args.reuse})", flush=True)
        else:
            migrate()
            fleet = data.make_project("search", agents=1)
            agent, project = fleet.agents[0], fleet.project
            now = datetime.now(UTC)
            started = time.perf_counter()
            first, last = data.bulk_ready_tasks(project, args.tasks, since=now)
            data.bulk_history(
                project, agent, first_task=first, last_task=last, finished_per_task=1, lapsed=False, now=now
            )
            ids = Attempt.objects.filter(task__project=project).order_by("id").values_list("id", flat=True)
            notes = data.bulk_notes(ids.first(), ids.last(), per_attempt=args.notes, now=now)
            data.vacuum_analyze()
            seeded = time.perf_counter() - started
            print(f"{vendor}: {args.tasks:,} tasks, {notes:,} notes, seeded in {seeded:.0f} s", flush=True)
        planted = time.perf_counter()
        if _plant(vendor):
            print(f"planted the probe-limit words in {time.perf_counter() - planted:.0f} s", flush=True)
        number = str(args.tasks // 2)
        print("| query | matches | hits | windowed | service ms (median per run, range) | raw ms | ratio | answer |")
        print("| --- | ---: | ---: | --- | --- | --- | ---: | --- |")
        for name, template in QUERIES.items():
            query = template.format(number=number)
            windowed = "-"
            try:
                answer = search_answer(query=query, agent=agent, limit=20)
                hits, windowed = str(len(answer.hits)), "yes" if answer.windowed else "no"
            except Exception as exc:  # SEARCH_TOO_BROAD
                hits = getattr(exc, "code", type(exc).__name__)
            service, raw, outcome = [], [], "ok"
            for _ in range(args.runs):
                ms, outcome = _timed(lambda q=query: search(query=q, agent=agent, limit=20), args.requests)
                service.append(ms)
                raw_ms, _ = _timed(lambda q=query: _raw(vendor, q, project.pk, agent.pk), args.requests)
                raw.append(raw_ms)
            ratio = statistics.median(service) / statistics.median(raw)
            print(
                f"| {name}: `{query}` | {_matches(vendor, query):,} | {hits} | {windowed} "
                f"| {min(service):.1f}-{max(service):.1f} | {min(raw):.1f}-{max(raw):.1f} | {ratio:.2f} | {outcome} |",
                flush=True,
            )
    finally:
        if not args.keep and not args.reuse:
            drop_target(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())

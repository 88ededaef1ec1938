"""The trigger-kept rollups equal the live counts, on both databases, and stay right across midnight.

`FleetDayTally` (claims, finishes, contested writes per UTC day, project and
agent) and `TaskFirstReady` (when a task first became ready) are written by
triggers in the writing transaction (`insight.models.rollups`). Each test
here computes the same figures from the attempts and events themselves and
asserts equality, after writes made through the services under the fake
clock; the day-boundary tests are the case a "roll up closed days" job gets
wrong: an expiry after midnight finishes the attempt on the day before.
"""

from __future__ import annotations

import importlib
import itertools
import re
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta

import pytest
from django.db import connection
from django.db.models import F, Min, Q

from insight.metrics import claims_per_day, fleet_metrics, lease_conflicts_per_day, orphan_rate_per_day
from insight.models import FleetDayTally, FleetDayTallyChange, TaskFirstReady
from insight.reports import fleet_report
from insight.services.rollups import fleet_tally_fold
from leases.models import Attempt
from leases.services import attempt_finish, attempt_renew, lease_claim, note_add, sweep_expired, task_update
from ledger.actors import SYSTEM, Actor
from ledger.models import Event, EventType, TaskStatus
from ledger.services import task_create
from tests.concurrency import run_in_threads
from tests.factories import AgentFactory, ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of

pytestmark = pytest.mark.django_db

DAYS = 4


def live_counts() -> dict[str, Counter[tuple[date, int]]]:
    """Claims, finishes and contested writes per (UTC day, project), counted from the rows themselves."""
    counts: dict[str, Counter[tuple[date, int]]] = {"claims": Counter(), "finished": Counter(), "contested": Counter()}
    for claimed, finished, project in Attempt.objects.values_list("claimed_at", "finished_at", "task__project_id"):
        counts["claims"][(claimed.astimezone(UTC).date(), project)] += 1
        if finished is not None:
            counts["finished"][(finished.astimezone(UTC).date(), project)] += 1
    for created, project in Event.objects.filter(type=EventType.TASK_CONTESTED).values_list("created_at", "project_id"):
        counts["contested"][(created.astimezone(UTC).date(), project or 0)] += 1
    return counts


def tallied_counts() -> dict[str, Counter[tuple[date, int]]]:
    """The tally as the readers see it: the folded rows plus the changes not folded yet."""
    counts: dict[str, Counter[tuple[date, int]]] = {"claims": Counter(), "finished": Counter(), "contested": Counter()}
    rows = [
        *FleetDayTally.objects.values_list("day", "project_id", *counts),
        *FleetDayTallyChange.objects.values_list("day", "project_id", *counts),
    ]
    for day, project, *values in rows:
        for column, value in zip(counts, values, strict=True):
            counts[column][(day, project)] += value
    # A folded key whose changes net to zero leaves no entry (negative ones stay: a drift to see).
    return {column: Counter({key: n for key, n in counter.items() if n}) for column, counter in counts.items()}


def live_first_ready() -> dict[int, datetime]:
    """The report's rule, asked of the events: created ready, or the first status change to ready."""
    became_ready = Q(type=EventType.TASK_CREATED, payload__status=TaskStatus.READY) | Q(
        type=EventType.TASK_STATUS_CHANGED, payload__to=TaskStatus.READY
    )
    rows = Event.objects.filter(became_ready, task__isnull=False).values("task_id").annotate(first=Min("created_at"))
    return {row["task_id"]: row["first"] for row in rows.order_by()}


def assert_rollups_match() -> None:
    assert tallied_counts() == live_counts()
    assert dict(TaskFirstReady.objects.values_list("task_id", "ready_at")) == live_first_ready()


def test_claims_finishes_and_contested_writes_are_tallied_exactly_per_day_and_project(clock):
    mine, theirs = ProjectFactory(), ProjectFactory()
    agents = {project.pk: AgentFactory(projects=[project]) for project in (mine, theirs)}
    for day in range(DAYS):
        for project, claims in ((mine, day + 1), (theirs, 2)):
            for number in range(claims):
                grant = lease_claim(task=TaskFactory(project=project), agent=agents[project.pk], lease_seconds=3600)
                if number % 2 == 0:
                    attempt_finish(proof=proof_of(grant), outcome="failed", failure_reason_code="other")
        held = lease_claim(task=TaskFactory(project=mine), agent=agents[mine.pk], lease_seconds=3600)
        task_update(
            task=held.attempt.task,
            actor=Actor(agent=AgentFactory(projects=[mine])),
            changes={"status": "blocked", "blocked_reason": "waiting on QA"},
        )
        clock.advance(24 * 3600)

    assert_rollups_match()
    assert sum(tallied_counts()["contested"].values()) == DAYS
    live = live_counts()
    # The metrics read the tally: the same numbers as counting the rows, fleet-wide and per project.
    assert [entry["value"] for entry in claims_per_day(days=DAYS + 1, project=mine)] == [
        live["claims"][(clock.now().date() - timedelta(days=DAYS - offset), mine.pk)] for offset in range(DAYS + 1)
    ]
    fleet_finished = [entry["finished"] for entry in orphan_rate_per_day(days=DAYS + 1)]
    assert fleet_finished == [
        sum(n for (day, _), n in live["finished"].items() if day == clock.now().date() - timedelta(days=DAYS - offset))
        for offset in range(DAYS + 1)
    ]
    assert [entry["value"] for entry in lease_conflicts_per_day(days=DAYS + 1, visible_to=agents[theirs.pk])] == [0] * 5
    assert sum(entry["value"] for entry in lease_conflicts_per_day(days=DAYS + 1, project=mine)) == DAYS


def test_an_expiry_swept_after_midnight_counts_on_the_day_the_lease_lapsed(clock):
    """The day boundary: yesterday's finished count grows today, and the tally follows it."""
    project = ProjectFactory()
    agent = AgentFactory(projects=[project])
    clock.freeze(datetime(2026, 1, 5, 23, 58, tzinfo=UTC))
    lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=60)  # lapses at 23:59
    clock.advance(5 * 60)  # 00:03 on the 6th: the lease has lapsed, nobody has noticed yet
    before = orphan_rate_per_day(days=2)
    assert [entry["finished"] for entry in before] == [0, 0]
    assert [entry["value"] for entry in claims_per_day(days=2)] == [1, 0]

    assert sweep_expired().expired == 1

    attempt = Attempt.objects.get()
    assert attempt.finished_at == datetime(2026, 1, 5, 23, 59, tzinfo=UTC)
    # The 5th, a closed day, gained its finish after it closed: counted there, live.
    assert [entry["finished"] for entry in orphan_rate_per_day(days=2)] == [1, 0]
    assert_rollups_match()


def test_a_claim_in_the_last_second_of_a_day_counts_on_that_day_and_its_finish_on_the_next(clock):
    project = ProjectFactory()
    agent = AgentFactory(projects=[project])
    clock.freeze(datetime(2026, 1, 5, 23, 59, 59, 999999, tzinfo=UTC))
    grant = lease_claim(task=TaskFactory(project=project), agent=agent)
    clock.advance(1e-6)  # exactly midnight
    attempt_finish(proof=proof_of(grant), outcome="failed", failure_reason_code="other")

    metrics = fleet_metrics(days=2)
    assert [entry["value"] for entry in metrics["claims"]] == [1, 0]
    assert [entry["finished"] for entry in metrics["orphan_rate"]] == [0, 1]
    assert fleet_tally_fold() == 2  # the claim's row (the 5th) and the finish's (the 6th)
    assert FleetDayTally.objects.get(day=date(2026, 1, 6)).finished == 1
    assert fleet_metrics(days=2) == metrics
    assert_rollups_match()


def test_first_ready_is_the_earliest_ready_event_of_each_task(clock):
    project = ProjectFactory()
    created_ready = task_create(project=project, title="Ready at once", actor=SYSTEM, status=TaskStatus.READY)
    later = task_create(project=project, title="Ready later", actor=SYSTEM, status=TaskStatus.OPEN)
    never = task_create(project=project, title="Never ready", actor=SYSTEM, status=TaskStatus.OPEN)
    clock.advance(3600)
    task_update(task=later, actor=SYSTEM, changes={"status": TaskStatus.READY})
    first = clock.now()
    clock.advance(3600)
    later.refresh_from_db()
    task_update(task=later, actor=SYSTEM, changes={"status": TaskStatus.OPEN})
    later.refresh_from_db()
    clock.advance(3600)
    task_update(task=later, actor=SYSTEM, changes={"status": TaskStatus.READY})  # a second time: not the first

    ready = dict(TaskFirstReady.objects.values_list("task_id", "ready_at"))
    assert ready[later.pk] == first
    assert created_ready.pk in ready
    assert never.pk not in ready
    assert_rollups_match()


def test_the_report_lead_time_starts_at_the_first_ready_time(clock):
    project = ProjectFactory()
    agent = AgentFactory(projects=[project])
    clock.advance(0.000007)  # microseconds count: the lead is exact on both databases
    ready_at = clock.now()
    task = task_create(project=project, title="Lead", actor=SYSTEM, status=TaskStatus.READY)
    clock.advance(2 * 3600)
    grant = lease_claim(task=task, agent=agent, lease_seconds=7200)
    clock.advance(3600.000013)
    attempt_finish(proof=proof_of(grant), outcome="done", result_summary="Done it")

    report = fleet_report(first=clock.now().date(), last=clock.now().date())

    assert report.total.completed == 1
    assert report.finished == 1
    # One lead time in its bucket: the report's median is that lead time (the bucket's mean), to the microsecond.
    assert report.total.lead_median == pytest.approx((clock.now() - ready_at).total_seconds(), abs=1e-9)
    assert report.total.lead_median == pytest.approx(10800.000013, abs=1e-9)


def test_the_migration_backfill_computes_what_the_triggers_kept(clock):
    """Rows written before the rollups existed are counted by the migration's backfill, by the same rules."""
    project = ProjectFactory()
    agent = AgentFactory(projects=[project])
    for hours in (0, 20, 30):
        clock.advance(hours * 3600)
        grant = lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=60)
        if hours != 20:
            attempt_finish(proof=proof_of(grant), outcome="failed", failure_reason_code="other")
    clock.advance(3600)
    sweep_expired()
    kept = (tallied_counts(), dict(TaskFirstReady.objects.values_list("task_id", "ready_at")))
    FleetDayTally.objects.all().delete()
    FleetDayTallyChange.objects.all().delete()
    TaskFirstReady.objects.all().delete()
    migration = importlib.import_module("leases.migrations.0011_rollups")
    postgres = connection.vendor == "postgresql"
    with connection.cursor() as cursor:
        for sql in migration._backfill(migration._pg_day if postgres else migration._sqlite_day):
            cursor.execute(sql)
        cursor.execute(migration._first_ready_backfill(connection.vendor))

    assert (tallied_counts(), dict(TaskFirstReady.objects.values_list("task_id", "ready_at"))) == kept
    assert_rollups_match()


def test_an_update_of_many_attempts_moves_their_counts_in_one_statement(clock):
    """A set-based UPDATE (the sweep's on PostgreSQL, or any correction) takes the old counts back and adds the new."""
    project = ProjectFactory()
    agents = [AgentFactory(projects=[project]) for _ in range(2)]
    for agent in agents * 2:
        grant = lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=3600)
        attempt_finish(proof=proof_of(grant), outcome="failed", failure_reason_code="other")
    clock.advance(3600)
    lease_claim(task=TaskFactory(project=project), agent=agents[0], lease_seconds=60)  # live: no finish yet

    moved = Attempt.objects.exclude(status="active").update(
        claimed_at=F("claimed_at") - timedelta(days=1), finished_at=F("finished_at") - timedelta(days=2)
    )
    Attempt.objects.filter(status="active").update(lease_expires_at=F("lease_expires_at") + timedelta(seconds=30))

    assert moved == 4
    assert [entry["value"] for entry in claims_per_day(days=3)] == [0, 4, 1]
    assert [entry["finished"] for entry in orphan_rate_per_day(days=3)] == [4, 0, 0]
    assert_rollups_match()


@pytest.mark.django_db(transaction=True)
def test_concurrent_claims_and_finishes_keep_the_tally_exact(clock):
    """Threads with their own connections, two per agent (so two writers share each tally row)."""
    project = ProjectFactory(slug="tally-race")
    agents = [AgentFactory(projects=[project]) for _ in range(4)]
    tasks = [TaskFactory(project=project) for _ in range(32)]

    writing = threading.Event()
    writers_left = [8]
    lock = threading.Lock()

    def work(index: int) -> int:
        if index == 8:  # a fold beside the writers, as the sweep job's
            folded = 0
            while writing.is_set():
                folded += fleet_tally_fold()
                assert sum(entry["value"] for entry in claims_per_day(days=1)) <= 32
            return folded + fleet_tally_fold()
        agent = agents[index % len(agents)]
        done = 0
        for task in tasks[index::8]:
            grant = lease_claim(task=task, agent=agent, lease_seconds=3600)
            attempt_finish(proof=proof_of(grant), outcome="failed", failure_reason_code="other")
            done += 1
        with lock:
            writers_left[0] -= 1
            if not writers_left[0]:
                writing.clear()
        return done

    writing.set()
    results = run_in_threads(9, work)

    assert results[:8] == [4] * 8, results
    assert isinstance(results[8], int), results
    assert results[8] > 0  # the fold moved what the writers appended
    assert sum(entry["value"] for entry in claims_per_day(days=1)) == 32
    assert_rollups_match()


@pytest.mark.django_db(transaction=True)
def test_takeover_claims_crosswise_do_not_deadlock_on_the_tally(clock, monkeypatch):
    """Two agents each take over the other's lapsed lease at once, many rounds, from real threads.

    Each claim ends the old holder's attempt (a finish on the old holder's tally key) and then inserts its
    own (a claim on its own key): with counters updated in place, two such claims crosswise lock the two
    agents' rows in opposite orders and PostgreSQL breaks the deadlock after `deadlock_timeout`, which
    `write_transaction` retries. Writers that only append take no lock a crosswise claim waits on.
    """
    if connection.vendor != "postgresql":
        pytest.skip("SQLite serializes writers: there is no lock order to cross")
    import core.db

    deadlocks: list[str] = []
    transient = core.db.is_transient_lock_error

    def counting(exc: BaseException) -> bool:
        if getattr(exc.__cause__, "sqlstate", None) == "40P01":
            deadlocks.append(str(exc))
        return transient(exc)

    monkeypatch.setattr(core.db, "is_transient_lock_error", counting)
    project = ProjectFactory(slug="crosswise")
    agents = [AgentFactory(projects=[project]) for _ in range(2)]
    rounds = 12
    pairs = [(TaskFactory(project=project), TaskFactory(project=project)) for _ in range(rounds)]
    for first, second in pairs:
        lease_claim(task=first, agent=agents[0], lease_seconds=60)
        lease_claim(task=second, agent=agents[1], lease_seconds=60)
    clock.advance(120)  # every lease has lapsed; nobody swept
    barrier = threading.Barrier(2)

    def work(index: int) -> int:
        taken = 0
        for pair in pairs:
            barrier.wait(timeout=30)
            # Agent 0 takes agent 1's task and agent 1 takes agent 0's, at the same moment.
            lease_claim(task=pair[1 - index], agent=agents[index], lease_seconds=3600)
            taken += 1
        return taken

    results = run_in_threads(2, work)

    assert results == [rounds, rounds], results
    assert deadlocks == []
    assert_rollups_match()


ATTEMPT_UPDATE = re.compile(r'\s*UPDATE\s+"?leases_attempt"?\s', re.IGNORECASE)
# An UPDATE that sets a column the lease clock's trigger is on (its SET list, up to the WHERE).
LEASE_CLOCK_COLUMNS = re.compile(
    r'\bSET\b(?:(?!\bWHERE\b).)*"?\b(lease_expires_at|status|task_id)"?\s*=', re.IGNORECASE
)


@contextmanager
def attempt_trigger_runs() -> Iterator[Counter[str]]:
    """How often the tally's trigger code ran on `leases_attempt` inside the block.

    PostgreSQL: the calls of each `leases_*` plpgsql function in this
    transaction (`pg_stat_xact_user_functions`, with `track_functions`
    on). SQLite: each UPDATE of `leases_attempt` that entered a trigger
    program (WHEN included) is traced twice or more in a row (the program
    repeats its statement's text); one whose UPDATE OF columns it does not
    set is traced once.
    """
    runs: Counter[str] = Counter()
    if connection.vendor == "postgresql":
        read = "SELECT funcname, calls FROM pg_stat_xact_user_functions WHERE funcname LIKE 'leases%%'"
        with connection.cursor() as cursor:
            cursor.execute("SET track_functions = 'pl'")
            cursor.execute(read)
            before = dict(cursor.fetchall())
        try:
            yield runs
        finally:
            with connection.cursor() as cursor:
                cursor.execute(read)
                for name, calls in cursor.fetchall():
                    if calls - before.get(name, 0):
                        runs[name] += calls - before.get(name, 0)
                cursor.execute("RESET track_functions")
        return
    traced: list[str] = []
    connection.ensure_connection()
    connection.connection.set_trace_callback(traced.append)
    try:
        yield runs
    finally:
        connection.connection.set_trace_callback(None)
        for line, repeats in itertools.groupby(traced):
            # Each trigger program entered repeats the text twice; the lease clock's (SPEC §25, leases 0022)
            # is entered by every UPDATE that sets its columns, renewals included, and is not a tally.
            programs = (len(list(repeats)) - 1) // 2 - (1 if LEASE_CLOCK_COLUMNS.search(line) else 0)
            if ATTEMPT_UPDATE.match(line) and programs > 0:
                runs["trigger program"] += 1


def test_a_renewal_or_a_note_appends_no_change_and_runs_no_tally_trigger(clock):
    project = ProjectFactory()
    agent = AgentFactory(projects=[project])
    grant = lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=600)
    changes = FleetDayTallyChange.objects.count()
    assert changes == 1  # the claim

    with attempt_trigger_runs() as runs:
        clock.advance(60)
        attempt_renew(proof=proof_of(grant), lease_seconds=600)
        note_add(proof=proof_of(grant), kind="progress", content="Half way")
        # Any UPDATE that leaves the counted columns alone, set-based too.
        renewed = F("lease_expires_at") + timedelta(seconds=1)
        Attempt.objects.filter(pk=grant.attempt.pk).update(lease_expires_at=renewed)

    # The note's search index is kept on write (leases/search.py); the lease clock follows every renewal
    # (leases/models/lease_clock.py). Neither is a tally.
    runs.pop("leases_note_search_vector", None)
    runs.pop("leases_attempt_clock_kept", None)
    assert runs == Counter()
    assert FleetDayTallyChange.objects.count() == changes
    # The control: the finish runs the UPDATE trigger once and appends one row (+1 finished; the claim nets out).
    with attempt_trigger_runs() as runs:
        attempt_finish(proof=proof_of(grant), outcome="failed", failure_reason_code="other")
    expected = "leases_attempt_tally_updated" if connection.vendor == "postgresql" else "trigger program"
    assert runs[expected] == 1, runs
    assert list(FleetDayTallyChange.objects.order_by("id").values_list("claims", "finished"))[changes:] == [(0, 1)]
    assert_rollups_match()


def test_the_readers_are_exact_before_and_after_a_fold(clock):
    """The charts and the report read folded rows plus pending changes: a fold changes no figure."""
    project, other = ProjectFactory(), ProjectFactory()
    agents = [AgentFactory(projects=[project, other]) for _ in range(2)]
    sees_other = AgentFactory(projects=[other])

    def activity() -> None:
        for number, agent in enumerate(agents * 2):
            task = TaskFactory(project=project if number % 2 else other)
            grant = lease_claim(task=task, agent=agent, lease_seconds=60)
            if number < 3:
                attempt_finish(proof=proof_of(grant), outcome="done", result_summary="Done")
        task_update(
            task=TaskFactory(project=project),
            actor=Actor(agent=agents[0]),
            changes={"status": "blocked", "blocked_reason": "waiting"},
        )
        clock.advance(20 * 3600)
        sweep_expired()  # the lapsed ones finish yesterday

    def figures() -> tuple[object, ...]:
        day = clock.now().date()
        return (
            fleet_metrics(days=4),
            fleet_metrics(days=4, project=project),
            lease_conflicts_per_day(days=4, visible_to=sees_other),
            fleet_report(first=day - timedelta(days=3), last=day),
        )

    activity()
    unfolded = figures()
    assert FleetDayTallyChange.objects.exists()
    assert fleet_tally_fold() > 0
    assert not FleetDayTallyChange.objects.exists()
    assert figures() == unfolded
    assert_rollups_match()
    activity()  # half folded, half pending
    pending = figures()
    assert pending != unfolded
    assert_rollups_match()
    fleet_tally_fold()
    assert figures() == pending
    assert fleet_tally_fold() == 0
    assert_rollups_match()


def test_the_tally_triggers_exist_after_migrate():
    """A later SQLite migration that rebuilds `leases_attempt` or `ledger_event` drops them silently."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT tgname FROM pg_trigger WHERE tgname LIKE 'leases%%' AND NOT tgisinternal")
        else:
            cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'leases%'")
        names = {name for (name,) in cursor.fetchall()}
    expected = {"leases_attempt_tally_insert", "leases_attempt_tally_update"}
    # The lease suggestion's samples (leases.models.lease_samples; tests/leases/test_lease_samples.py).
    expected |= {"leases_attempt_lease_sample_insert", "leases_attempt_lease_sample_update"}
    expected |= {"leases_attempt_held_insert", "leases_attempt_held_update"}  # SPEC §25: Task.held
    expected |= {"leases_attempt_clock_insert", "leases_attempt_clock_update"}  # SPEC §25: the lease clock
    # The notes' search index (leases/search.py, migration leases 0020): a tsvector or an FTS5 table.
    if connection.vendor == "sqlite":
        expected |= {"leases_note_fts_insert", "leases_note_fts_update", "leases_note_fts_delete"}
    else:
        expected |= {"leases_note_search_insert", "leases_note_search_update"}
        expected |= {"leases_note_search_moved"}  # on ledger_task: a moved task's notes (leases 0025)
    if connection.vendor == "postgresql":
        expected |= {"leases_event_rollups"}
    else:
        expected |= {"leases_event_tally_contested", "leases_event_first_ready"}
    assert names == expected


@pytest.mark.django_db(transaction=True)
def test_the_migration_to_appended_changes_keeps_every_count_both_ways(clock):
    """0012 forward starts from 0011's in-place tally (the folded state); backward folds the pending changes."""
    from django.core.management import call_command

    project = ProjectFactory()
    agents = [AgentFactory(projects=[project]) for _ in range(2)]

    def activity() -> None:
        for agent in agents:
            grant = lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=60)
            attempt_finish(proof=proof_of(grant), outcome="failed", failure_reason_code="other")
            lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=60)
        task_update(
            task=TaskFactory(project=project),
            actor=Actor(agent=agents[1]),
            changes={"status": "blocked", "blocked_reason": "waiting"},
        )
        clock.advance(23 * 3600)
        sweep_expired()

    def tally_rows() -> Counter[tuple[date, int]]:
        counts: Counter[tuple[date, int]] = Counter()
        for row in FleetDayTally.objects.all():
            counts[(row.day, row.project_id)] += row.claims + 10 * row.finished + 100 * row.contested
        return counts

    def live() -> Counter[tuple[date, int]]:
        counts = live_counts()
        weights = {"claims": 1, "finished": 10, "contested": 100}
        return Counter({k: sum(weights[c] * counts[c][k] for c in counts) for c in counts for k in counts[c]})

    activity()
    fleet_tally_fold()
    activity()  # pending changes at the migration
    assert FleetDayTallyChange.objects.exists()
    try:
        call_command("migrate", "leases", "0011_rollups", verbosity=0)
        assert tally_rows() == live()  # folded into the in-place table
        # No activity at 0011 itself: today's models write columns 0011 lacks (leases 0016's attempt
        # token), so 0011's in-place triggers are exercised by the migration tests of their own time.
    finally:
        call_command("migrate", verbosity=0)  # every app: the rooms that moved off leases 0013 come back too
    assert not FleetDayTallyChange.objects.exists()
    assert_rollups_match()
    activity()
    assert FleetDayTallyChange.objects.exists()
    assert_rollups_match()
    test_the_tally_triggers_exist_after_migrate()

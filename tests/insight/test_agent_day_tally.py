"""Agent health's 7-day counts equal the attempts they count, on both databases, whatever was written.

`AgentDayTally` (plus the changes not folded yet) holds, per agent and UTC day
of the finish, the completed, failed and expired attempts and the latest end
the agent wrote itself (`insight.models.agent_day_tally`, migration
`insight.0005_agent_day_tally`). Each test computes the same from the
attempts and asserts equality after a random mix of writes through the
services (claims, finishes of every kind, releases, hand-offs, expiries,
force-releases, days crossed), bulk inserts of ended attempts, set-based
UPDATEs that move ends between days, agents and statuses, and folds at random
moments; the page's reader (`insight.agent_health.week_counts`) is compared
with the same counts read from the attempts after every step.
"""

from __future__ import annotations

import importlib
import random
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.db.models import F

from insight.agent_health import (
    agent_health,
    week_counts,
    week_counts_from_attempts,
    week_first_day,
)
from insight.models import AgentDayTally, AgentDayTallyChange
from insight.models.agent_day_tally import AGENT_ENDED, COUNTED
from insight.services.rollups import agent_day_tally_fold
from leases.models import Attempt, AttemptStatus
from leases.services import (
    attempt_finish,
    attempt_release,
    lease_claim,
    sweep_expired,
    task_force_release,
)
from ledger.actors import SYSTEM
from ledger.models import Agent
from tests.factories import AgentFactory, ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of

pytestmark = pytest.mark.django_db

Key = tuple[int, object]  # (agent, day)
Counts = tuple[int, int, int]


def counted_from_attempts() -> dict[Key, Counts]:
    counts: Counter[tuple[int, object, str]] = Counter()
    for agent_id, finished, status in Attempt.objects.filter(finished_at__isnull=False).values_list(
        "agent_id", "finished_at", "status"
    ):
        assert finished is not None
        counts[(agent_id, finished.astimezone(UTC).date(), status)] += 1
    keys = {(agent, day) for agent, day, _ in counts}
    found = {
        (agent, day): (
            counts[(agent, day, "completed")],
            counts[(agent, day, "failed")],
            counts[(agent, day, "expired")],
        )
        for agent, day in keys
    }
    return {key: value for key, value in found.items() if any(value)}


def latest_from_attempts() -> dict[Key, datetime]:
    latest: dict[Key, datetime] = {}
    for agent_id, finished in Attempt.objects.filter(status__in=AGENT_ENDED).values_list("agent_id", "finished_at"):
        assert finished is not None
        key = (agent_id, finished.astimezone(UTC).date())
        latest[key] = max(latest.get(key, finished), finished)
    return latest


def tallied() -> dict[Key, Counts]:
    """The counts as the page reads them: folded rows plus pending changes."""
    counts: dict[Key, list[int]] = {}
    for model in (AgentDayTally, AgentDayTallyChange):
        for agent_id, day, done, failed, expired in model.objects.values_list(
            "agent_id", "day", "done", "failed", "expired"
        ):
            row = counts.setdefault((agent_id, day), [0, 0, 0])
            row[0] += done
            row[1] += failed
            row[2] += expired
    return {key: (row[0], row[1], row[2]) for key, row in counts.items() if any(row)}


def folded_latest() -> dict[Key, datetime | None]:
    return {
        (agent_id, day): last
        for agent_id, day, last in AgentDayTally.objects.filter(last_ended_at__isnull=False).values_list(
            "agent_id", "day", "last_ended_at"
        )
    }


def assert_reader_matches(now: datetime) -> None:
    """The page's reader (rollup, pending changes, rechecks) equals the week read from the attempts."""
    ids = list(Agent.objects.values_list("pk", flat=True))
    first_day = week_first_day(now)
    from_rollup = {
        agent: counts
        for agent, counts in week_counts(ids, first_day).items()
        if counts[:3] != (0, 0, 0) or counts[3] is not None
    }
    assert from_rollup == week_counts_from_attempts(ids, first_day)


def assert_tally_matches(now: datetime) -> None:
    assert tallied() == counted_from_attempts()
    assert_reader_matches(now)


def assert_folded_matches(now: datetime) -> None:
    agent_day_tally_fold()
    assert not AgentDayTallyChange.objects.exists()
    assert tallied() == counted_from_attempts()
    assert folded_latest() == latest_from_attempts()
    assert_reader_matches(now)


def test_a_random_mix_of_writes_is_counted_exactly(clock):
    rng = random.Random(40)
    project = ProjectFactory()
    agents = [AgentFactory(projects=[project]) for _ in range(3)]
    for step in range(60):
        agent = rng.choice(agents)
        action = rng.randrange(10)
        if action <= 5:  # a claim, ended by its holder in one of its ways, or left to lapse
            grant = lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=rng.choice((60, 3600)))
            clock.advance(rng.randrange(1, 50))  # within the shortest lease
            how = rng.randrange(6)
            if how == 0:
                attempt_finish(proof=proof_of(grant), outcome="done", result_summary="Done")
            elif how == 1:
                attempt_finish(proof=proof_of(grant), outcome="failed", failure_reason_code="tests_failed")
            elif how == 2:
                attempt_release(proof=proof_of(grant))
            elif how == 3:
                attempt_finish(proof=proof_of(grant), outcome="handoff", interruption_reason_code="context_limit")
            elif how == 4:
                task_force_release(task=grant.attempt.task, actor=SYSTEM, reason="ops")
        elif action == 6:  # hours pass, across midnight now and then; the sweep expires what lapsed
            clock.advance(rng.randrange(3600, 30 * 3600))
            sweep_expired()
        elif action == 7:
            agent_day_tally_fold()
        elif action == 8:  # a hand-written UPDATE of ended attempts: another day, agent or status
            ended = list(Attempt.objects.filter(finished_at__isnull=False).values_list("pk", flat=True))
            if ended:
                chosen = rng.sample(ended, min(3, len(ended)))
                change = rng.randrange(3)
                if change == 0:
                    Attempt.objects.filter(pk__in=chosen).update(finished_at=F("finished_at") - timedelta(days=1))
                elif change == 1:
                    Attempt.objects.filter(pk__in=chosen).update(agent=rng.choice(agents))
                else:
                    Attempt.objects.filter(pk__in=chosen, status=AttemptStatus.COMPLETED).update(
                        status=AttemptStatus.RELEASED
                    )
        else:  # a bulk insert of ended attempts (an import; one statement)
            now = clock.now()
            tasks = [TaskFactory(project=project) for _ in range(3)]
            Attempt.objects.bulk_create(
                [
                    Attempt(
                        task=task,
                        agent=rng.choice(agents),
                        epoch=1,
                        status=status,
                        token_hash="0" * 64,
                        lease_seconds=600,
                        lease_expires_at=now - timedelta(hours=index),
                        claimed_at=now - timedelta(hours=index, minutes=10),
                        finished_at=now - timedelta(hours=index),
                        task_version_at_claim=1,
                        failure_reason_code="tests_failed" if status == "failed" else "",
                        interruption_reason_code="handoff" if status == "interrupted" else "",
                    )
                    for index, (task, status) in enumerate(zip(tasks, rng.sample(COUNTED, 3), strict=True))
                ]
            )
        assert_tally_matches(clock.now()), step
    assert_folded_matches(clock.now())
    assert AgentDayTally.objects.exists()
    statuses = set(Attempt.objects.values_list("status", flat=True))
    assert {"completed", "failed", "expired", "released", "interrupted"} <= statuses


def test_a_claim_and_a_renewal_append_nothing(clock):
    project = ProjectFactory()
    agent = AgentFactory(projects=[project])
    before = AgentDayTallyChange.objects.count()
    grant = lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=600)
    Attempt.objects.filter(pk=grant.attempt.pk).update(last_renewed_at=clock.now(), renew_count=F("renew_count") + 1)
    assert AgentDayTallyChange.objects.count() == before


def test_an_end_taken_back_is_read_again_until_the_fold_and_after(clock):
    """A maximum cannot be taken back by a change: the page reads that agent's week from the attempts until
    the fold reads the day again."""
    project = ProjectFactory()
    agent = AgentFactory(projects=[project])
    early = lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=3600)
    attempt_finish(proof=proof_of(early), outcome="done", result_summary="Done")
    clock.advance(60)
    late = lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=3600)
    clock.advance(60)
    attempt_finish(proof=proof_of(late), outcome="done", result_summary="Done")
    agent_day_tally_fold()
    first_day = week_first_day(clock.now())
    assert week_counts([agent.pk], first_day)[agent.pk][3] == clock.now()
    revoked = {"status": AttemptStatus.REVOKED, "revoked_by": "user:x", "revoke_reason": "r"}
    Attempt.objects.filter(pk=late.attempt.pk).update(**revoked)
    assert AgentDayTallyChange.objects.filter(recheck__gt=0).exists()
    early_end = Attempt.objects.get(pk=early.attempt.pk).finished_at
    assert week_counts([agent.pk], first_day)[agent.pk] == (1, 0, 0, early_end)
    assert_folded_matches(clock.now())
    assert AgentDayTally.objects.get(agent_id=agent.pk).last_ended_at == early_end


def test_the_week_is_today_and_the_six_days_before(clock):
    project = ProjectFactory()
    agent = AgentFactory(projects=[project])
    grant = lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=3600)
    attempt_finish(proof=proof_of(grant), outcome="failed", failure_reason_code="tests_failed")
    agent_day_tally_fold()
    ended = clock.now().astimezone(UTC).date()
    midnight = datetime.combine(ended, datetime.min.time(), tzinfo=UTC)
    clock.freeze(midnight + timedelta(days=6, hours=23))
    [row] = agent_health(clock.now(), agents=Agent.objects.filter(pk=agent.pk))
    assert row.failed_7d == 1
    clock.freeze(midnight + timedelta(days=7))
    [row] = agent_health(clock.now(), agents=Agent.objects.filter(pk=agent.pk))
    assert (row.done_7d, row.failed_7d, row.expired_7d, row.last_ended_at) == (0, 0, 0, None)


def test_the_migration_backfill_computes_what_the_triggers_kept(clock):
    rng = random.Random(7)
    project = ProjectFactory()
    agents = [AgentFactory(projects=[project]) for _ in range(2)]
    for _ in range(12):
        grant = lease_claim(task=TaskFactory(project=project), agent=rng.choice(agents), lease_seconds=120)
        clock.advance(30)
        if rng.random() < 0.3:
            attempt_finish(proof=proof_of(grant), outcome="done", result_summary="Done")
        elif rng.random() < 0.6:
            attempt_finish(proof=proof_of(grant), outcome="failed", failure_reason_code="tests_failed")
        clock.advance(rng.randrange(60, 20_000))
    clock.advance(3600)
    sweep_expired()
    agent_day_tally_fold()
    kept, latest = tallied(), folded_latest()
    AgentDayTally.objects.all().delete()
    AgentDayTallyChange.objects.all().delete()
    migration = importlib.import_module("insight.migrations.0005_agent_day_tally")
    with connection.cursor() as cursor:
        cursor.execute(migration.backfill(connection.vendor))
    assert tallied() == kept == counted_from_attempts()
    assert folded_latest() == latest == latest_from_attempts()


def test_the_page_reads_at_most_seven_rows_per_agent(clock, django_assert_max_num_queries):
    project = ProjectFactory()
    agent = AgentFactory(projects=[project])
    for _ in range(10):
        grant = lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=600)
        attempt_finish(proof=proof_of(grant), outcome="done", result_summary="Done")
        clock.advance(86400)
    agent_day_tally_fold()
    first_day = week_first_day(clock.now())
    assert AgentDayTally.objects.filter(agent_id=agent.pk, day__gte=first_day).count() <= 7
    assert week_counts([agent.pk], first_day)[agent.pk][0] == 6  # today has none yet
    with django_assert_max_num_queries(7):
        agent_health(clock.now())


def test_the_triggers_exist_after_migrate():
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT tgname FROM pg_trigger WHERE tgrelid = 'leases_attempt'::regclass AND NOT tgisinternal"
            )
        else:
            cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'leases_attempt'")
        names = {name for (name,) in cursor.fetchall()}
    assert {"insight_attempt_agent_day_insert", "insight_attempt_agent_day_update"} <= names


def test_quarantined_work_is_read_from_the_blocked_tasks_not_every_task():
    """Agent health's quarantined count starts from the `task_blocked` partial index (live work): on SQLite it
    scanned every task (159 ms at 40k tasks in bench.pages) before its attempts."""
    from insight.agent_health import QUARANTINED_TASKS
    from leases.services.quarantine import QUARANTINE_REASON_PREFIX

    assert f"status = 'blocked' AND blocked_reason LIKE '{QUARANTINE_REASON_PREFIX}%'" in QUARANTINED_TASKS
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("EXPLAIN QUERY PLAN " + QUARANTINED_TASKS)
            plan = " ".join(str(row[-1]) for row in cursor.fetchall())
        else:
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("EXPLAIN " + QUARANTINED_TASKS)
            plan = " ".join(row[0] for row in cursor.fetchall())
    assert "task_blocked" in plan

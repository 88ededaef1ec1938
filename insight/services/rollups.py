"""Folding the fleet tally's changes, which the attempt and event triggers append, into one row per key.

The triggers of migration `leases.0012_tally_changes` append a
`FleetDayTallyChange` row for every claim, finish and contested write (and
-1 / +1 rows when an UPDATE moves an attempt), so the figures are exact
without this fold (`insight.metrics` adds the pending changes); folding only
keeps the change table short, so that a chart sums a few rows per day. The
sweep job (`leases.jobs.sweep_expired_job`) folds every minute. The report's
rollup (`insight.models.report_tally`, migration `insight.0003_report_tally`)
is folded the same way, by `report_tally_fold`, beside it, and agent health's 7-day counts
(`insight.models.agent_day_tally`, migration `insight.0005_agent_day_tally`) by `agent_day_tally_fold`.
"""

from __future__ import annotations

from django.db import connection

from core.db import write_transaction

# Only folds write the tally now (the triggers append changes): a fold's table lock keeps a second fold
# out until the first commits, and no writer or reader waits on it (they take no lock it conflicts with).
POSTGRES_ONE_FOLD = "LOCK TABLE leases_fleetdaytally IN SHARE ROW EXCLUSIVE MODE"
POSTGRES_FOLD = """
WITH moved AS (
    DELETE FROM leases_fleetdaytallychange RETURNING day, project_id, agent_id, claims, finished, contested
),
folded AS (
    INSERT INTO leases_fleetdaytally (day, project_id, agent_id, claims, finished, contested)
    SELECT day, project_id, agent_id, sum(claims), sum(finished), sum(contested) FROM moved
    GROUP BY day, project_id, agent_id HAVING sum(claims) <> 0 OR sum(finished) <> 0 OR sum(contested) <> 0
    ON CONFLICT (day, project_id, agent_id) DO UPDATE SET claims = leases_fleetdaytally.claims + EXCLUDED.claims,
        finished = leases_fleetdaytally.finished + EXCLUDED.finished,
        contested = leases_fleetdaytally.contested + EXCLUDED.contested
)
SELECT count(*) FROM moved
"""
SQLITE_FOLD = """
INSERT INTO leases_fleetdaytally (day, project_id, agent_id, claims, finished, contested)
SELECT day, project_id, agent_id, sum(claims), sum(finished), sum(contested) FROM leases_fleetdaytallychange
WHERE id <= %s
GROUP BY day, project_id, agent_id HAVING sum(claims) <> 0 OR sum(finished) <> 0 OR sum(contested) <> 0
ON CONFLICT (day, project_id, agent_id) DO UPDATE SET claims = leases_fleetdaytally.claims + excluded.claims,
    finished = leases_fleetdaytally.finished + excluded.finished,
    contested = leases_fleetdaytally.contested + excluded.contested
"""


# The report's rollup (insight.models.report_tally): keyed by day, project, agent, class, status, reason
# and lead bucket; the same fold, with the lead times added up beside the counts.
POSTGRES_REPORT_ONE_FOLD = "LOCK TABLE insight_reportdaytally IN SHARE ROW EXCLUSIVE MODE"
POSTGRES_REPORT_FOLD = """
WITH moved AS (
    DELETE FROM insight_reportdaytallychange
    RETURNING day, project_id, agent_id, task_class, status, failure_reason_code, lead_bucket, n, lead_seconds
),
folded AS (
    INSERT INTO insight_reportdaytally
        (day, project_id, agent_id, task_class, status, failure_reason_code, lead_bucket, n, lead_seconds)
    SELECT day, project_id, agent_id, task_class, status, failure_reason_code, lead_bucket, sum(n), sum(lead_seconds)
    FROM moved GROUP BY day, project_id, agent_id, task_class, status, failure_reason_code, lead_bucket
    HAVING sum(n) <> 0 OR sum(lead_seconds) <> 0
    ON CONFLICT (day, project_id, agent_id, task_class, status, failure_reason_code, lead_bucket)
    DO UPDATE SET n = insight_reportdaytally.n + EXCLUDED.n,
        lead_seconds = insight_reportdaytally.lead_seconds + EXCLUDED.lead_seconds
)
SELECT count(*) FROM moved
"""
SQLITE_REPORT_FOLD = """
INSERT INTO insight_reportdaytally
    (day, project_id, agent_id, task_class, status, failure_reason_code, lead_bucket, n, lead_seconds)
SELECT day, project_id, agent_id, task_class, status, failure_reason_code, lead_bucket, sum(n), sum(lead_seconds)
FROM insight_reportdaytallychange WHERE id <= %s
GROUP BY day, project_id, agent_id, task_class, status, failure_reason_code, lead_bucket
HAVING sum(n) <> 0 OR sum(lead_seconds) <> 0
ON CONFLICT (day, project_id, agent_id, task_class, status, failure_reason_code, lead_bucket)
DO UPDATE SET n = insight_reportdaytally.n + excluded.n,
    lead_seconds = insight_reportdaytally.lead_seconds + excluded.lead_seconds
"""


@write_transaction
def fleet_tally_fold() -> int:
    """Move every committed tally change into `FleetDayTally`; returns how many change rows were folded.

    As `insight.services.task_counts.task_counts_fold`: on PostgreSQL one
    statement deletes the changes it can see and adds them up, so a change
    committed meanwhile stays for the next fold; a second fold at once
    waits for the first to commit (the tally's table lock: no change row is
    locked by two folds in two orders) and folds what is left. SQLite
    serializes writers, so every change up to the highest id is committed
    and moves in two statements. No writer ever waits on a fold: writers
    only insert changes, and only a fold writes the tally.
    """
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(POSTGRES_ONE_FOLD)
            cursor.execute(POSTGRES_FOLD)
            (moved,) = cursor.fetchone()
            return int(moved)
        cursor.execute("SELECT max(id), count(*) FROM leases_fleetdaytallychange")
        highest, moved = cursor.fetchone()
        if highest is None:
            return 0
        cursor.execute(SQLITE_FOLD, [highest])
        cursor.execute("DELETE FROM leases_fleetdaytallychange WHERE id <= %s", [highest])
        return int(moved)


@write_transaction
def report_tally_fold() -> int:
    """Move every committed change of the report's rollup (`insight.models.report_tally`) into
    `ReportDayTally`, by `fleet_tally_fold`'s rules; returns how many change rows were folded."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(POSTGRES_REPORT_ONE_FOLD)
            cursor.execute(POSTGRES_REPORT_FOLD)
            (moved,) = cursor.fetchone()
            return int(moved)
        cursor.execute("SELECT max(id), count(*) FROM insight_reportdaytallychange")
        highest, moved = cursor.fetchone()
        if highest is None:
            return 0
        cursor.execute(SQLITE_REPORT_FOLD, [highest])
        cursor.execute("DELETE FROM insight_reportdaytallychange WHERE id <= %s", [highest])
        return int(moved)


# Agent health's 7-day counts (insight.models.agent_day_tally): keyed by agent and day; the counts add up and
# the day's latest own end is the larger one, unless a change asks for a recheck: then that (agent, day) is
# read again from the attempts after the fold (one day of one agent, by the finished_at index; only an import
# or a hand-written UPDATE of an ended attempt asks for one). The statuses are `agent_day_tally.AGENT_ENDED`.
POSTGRES_AGENT_DAY_ONE_FOLD = "LOCK TABLE insight_agentdaytally IN SHARE ROW EXCLUSIVE MODE"
POSTGRES_AGENT_DAY_FOLD = """
WITH moved AS (
    DELETE FROM insight_agentdaytallychange
    RETURNING agent_id, day, done, failed, expired, last_ended_at, recheck
),
folded AS (
    INSERT INTO insight_agentdaytally (agent_id, day, done, failed, expired, last_ended_at)
    SELECT agent_id, day, sum(done), sum(failed), sum(expired), max(last_ended_at) FROM moved
    GROUP BY agent_id, day
    ON CONFLICT (agent_id, day) DO UPDATE SET done = insight_agentdaytally.done + EXCLUDED.done,
        failed = insight_agentdaytally.failed + EXCLUDED.failed,
        expired = insight_agentdaytally.expired + EXCLUDED.expired,
        last_ended_at = GREATEST(insight_agentdaytally.last_ended_at, EXCLUDED.last_ended_at)
)
SELECT agent_id, day, count(*), sum(recheck) FROM moved GROUP BY agent_id, day
"""
POSTGRES_AGENT_DAY_RECHECK = """
UPDATE insight_agentdaytally t SET last_ended_at = (
    SELECT max(a.finished_at) FROM leases_attempt a
    WHERE a.finished_at >= (t.day::timestamp AT TIME ZONE 'UTC')
      AND a.finished_at < ((t.day + 1)::timestamp AT TIME ZONE 'UTC')
      AND a.agent_id = t.agent_id AND a.status IN ('completed', 'failed', 'released', 'interrupted')
)
WHERE (t.agent_id, t.day) IN (SELECT * FROM unnest(%s::bigint[], %s::date[]))
"""
SQLITE_AGENT_DAY_FOLD = """
INSERT INTO insight_agentdaytally (agent_id, day, done, failed, expired, last_ended_at)
SELECT agent_id, day, sum(done), sum(failed), sum(expired), max(last_ended_at) FROM insight_agentdaytallychange
WHERE id <= %s
GROUP BY agent_id, day
ON CONFLICT (agent_id, day) DO UPDATE SET done = insight_agentdaytally.done + excluded.done,
    failed = insight_agentdaytally.failed + excluded.failed,
    expired = insight_agentdaytally.expired + excluded.expired,
    last_ended_at = CASE
        WHEN insight_agentdaytally.last_ended_at IS NULL THEN excluded.last_ended_at
        WHEN excluded.last_ended_at IS NULL THEN insight_agentdaytally.last_ended_at
        ELSE max(insight_agentdaytally.last_ended_at, excluded.last_ended_at) END
"""
SQLITE_AGENT_DAY_RECHECK = """
UPDATE insight_agentdaytally SET last_ended_at = (
    SELECT max(a.finished_at) FROM leases_attempt a
    WHERE a.finished_at >= insight_agentdaytally.day AND a.finished_at < date(insight_agentdaytally.day, '+1 day')
      AND a.agent_id = insight_agentdaytally.agent_id AND a.status IN ('completed', 'failed', 'released', 'interrupted')
)
WHERE agent_id = %s AND day = %s
"""


@write_transaction
def agent_day_tally_fold() -> int:
    """Move every committed change of agent health's 7-day counts (`insight.models.agent_day_tally`) into
    `AgentDayTally`, by `fleet_tally_fold`'s rules, then read the days that asked for a recheck again
    from the attempts; returns how many change rows were folded.

    On PostgreSQL the recheck runs in a later snapshot than the fold's DELETE: an attempt change
    committed in between is already in the day it reads, and its change row, left for the next fold,
    only takes the larger end or asks again (a maximum taken twice is the same maximum).
    """
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(POSTGRES_AGENT_DAY_ONE_FOLD)
            cursor.execute(POSTGRES_AGENT_DAY_FOLD)
            groups = cursor.fetchall()
            recheck = [(agent_id, day) for agent_id, day, _, rechecks in groups if rechecks]
            if recheck:
                agents, days = zip(*recheck, strict=True)
                cursor.execute(POSTGRES_AGENT_DAY_RECHECK, [list(agents), list(days)])
            return sum(int(n) for _, _, n, _ in groups)
        cursor.execute("SELECT max(id), count(*) FROM insight_agentdaytallychange")
        highest, moved = cursor.fetchone()
        if highest is None:
            return 0
        cursor.execute(
            "SELECT DISTINCT agent_id, day FROM insight_agentdaytallychange WHERE id <= %s AND recheck > 0", [highest]
        )
        recheck = cursor.fetchall()
        cursor.execute(SQLITE_AGENT_DAY_FOLD, [highest])
        cursor.execute("DELETE FROM insight_agentdaytallychange WHERE id <= %s", [highest])
        for agent_id, day in recheck:
            cursor.execute(SQLITE_AGENT_DAY_RECHECK, [agent_id, day])
        return int(moved)

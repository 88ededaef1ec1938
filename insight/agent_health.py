"""Agent health: is each agent alive, late or silent, what it holds, what it did this week.

Read in a fixed number of queries whatever the history: the agents, their
live attempts and their last renewal (the partial index on active
leases), the 7 days' counts per agent (at most 7 rows per agent of a rollup kept by
triggers: `insight.models.agent_day_tally`; the 7 days are today and the 6 days
before, whole UTC days), and each agent's latest checkpoint note if it is of the
last 7 x 24 hours (one row per agent kept by a trigger: `insight.models.agent_checkpoint`).

An agent is **heard from** by its run heartbeat (`last_seen_at`), a renewal
or a claim of a live lease. It is **alive** when heard from within 2 minutes
(two run heartbeats at the default 60 s), **late** within
`LEASEHOLD_AGENT_SILENCE_SECONDS` (the silence that reconciliation's
`live_lease_dead_agent` acts on), and **silent** after that, since the last
time it was heard from.

The evidence then overrides the clock (issue 32: a keeper renewing for a
dead process looked "alive"):

- **silent · renewed**: the reconciler holds an open `live_lease_dead_agent`
  or `stalled_attempt` finding on one of its attempts and its run heartbeat
  is not fresh, or its run heartbeat (once sent) is older than the silence
  limit while its leases are still renewed: something renews, nothing works;
- **budget spent**: silent, late or never heard from while its daily budget
  (SPEC §19) is spent today: it is refused, not lost;
- `paused` (an operator drained it), `quarantined` (tasks quarantined after
  this agent's failed or expired attempts of the week) and the open findings
  per condition ride along as flags for the page's badges and links.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Count, Max, Q, QuerySet
from django.utils.dateparse import parse_datetime

from insight.models import AgentCheckpoint
from leases.models import AgentDailyUsage, Attempt, AttemptStatus, Note
from leases.selectors import live_attempts
from ledger.models import Agent
from reconciliation.models import UNRESOLVED_FINDING_STATUSES, Condition, Finding

ALIVE_WITHIN = timedelta(minutes=2)
WEEK = timedelta(days=7)
WEEK_DAYS = 7  # the 7-day counts: today and the 6 days before, whole UTC days (insight.models.agent_day_tally)
# Ends of an attempt that the agent itself wrote.
AGENT_ENDED = (AttemptStatus.COMPLETED, AttemptStatus.FAILED, AttemptStatus.RELEASED, AttemptStatus.INTERRUPTED)
ALIVE, LATE, SILENT, NEVER = "alive", "late", "silent", "never heard from"
SILENT_RENEWED, BUDGET_SPENT = "silent · renewed", "budget spent"
# The reconciler's word that an agent's process is gone (or stuck) although its lease lives on.
DEAD_CONDITIONS: tuple[str, ...] = (Condition.LIVE_LEASE_DEAD_AGENT, Condition.STALLED_ATTEMPT)


def silence_limit() -> timedelta:
    return timedelta(seconds=settings.LEASEHOLD_AGENT_SILENCE_SECONDS)


def liveness(last_heard_at: datetime | None, now: datetime) -> str:
    if last_heard_at is None:
        return NEVER
    age = now - last_heard_at
    if age <= ALIVE_WITHIN:
        return ALIVE
    return LATE if age <= silence_limit() else SILENT


@dataclass
class AgentHealth:
    agent: Agent
    now: datetime
    live: list[Attempt] = field(default_factory=list)
    last_renewed_at: datetime | None = None
    last_checkpoint: Note | None = None
    done_7d: int = 0
    failed_7d: int = 0
    expired_7d: int = 0
    last_ended_at: datetime | None = None
    # Unresolved findings on this agent's attempts, per condition.
    findings: dict[str, int] = field(default_factory=dict)
    budget_spent: bool = False
    quarantined: int = 0

    @property
    def paused(self) -> bool:
        return self.agent.claims_paused_at is not None

    @property
    def dead_findings(self) -> int:
        return sum(self.findings.get(condition, 0) for condition in DEAD_CONDITIONS)

    @property
    def open_findings(self) -> int:
        return sum(self.findings.values())

    @property
    def renewed_recently(self) -> bool:
        renewed = self.last_renewed_at
        return renewed is not None and self.now - renewed <= silence_limit()

    @property
    def heartbeat_fresh(self) -> bool:
        age = self.heartbeat_age
        return age is not None and age <= ALIVE_WITHIN

    @property
    def presumed_dead(self) -> bool:
        """The evidence says its process is gone while its leases live on (the findings, or a stopped run
        heartbeat beside fresh renewals)."""
        if self.heartbeat_fresh:
            return False
        if self.dead_findings:
            return True
        age = self.heartbeat_age
        return age is not None and age > silence_limit() and self.renewed_recently

    @property
    def last_heard_at(self) -> datetime | None:
        moments = [
            self.agent.last_seen_at,
            self.last_renewed_at,
            self.last_ended_at,
            *(a.claimed_at for a in self.live),
        ]
        known = [moment for moment in moments if moment is not None]
        return max(known, default=None)

    @property
    def state(self) -> str:
        if self.presumed_dead:
            return SILENT_RENEWED if self.live and self.renewed_recently else SILENT
        state = liveness(self.last_heard_at, self.now)
        if state != ALIVE and self.budget_spent:
            return BUDGET_SPENT
        return state

    @property
    def heartbeat_age(self) -> timedelta | None:
        seen = self.agent.last_seen_at
        return None if seen is None else self.now - seen

    @property
    def heard_age(self) -> timedelta | None:
        heard = self.last_heard_at
        return None if heard is None else self.now - heard


def agent_health(now: datetime, *, agents: QuerySet[Agent] | None = None) -> list[AgentHealth]:
    """One `AgentHealth` per agent of `agents` (default: every agent), in the queryset's order."""
    agent_list = list((agents if agents is not None else Agent.objects.all()).order_by("-is_active", "handle"))
    rows = {agent.pk: AgentHealth(agent=agent, now=now) for agent in agent_list}
    if not rows:
        return []
    ids = list(rows)
    for attempt in live_attempts(now).filter(agent_id__in=ids).select_related("task").order_by("lease_expires_at"):
        rows[attempt.agent_id].live.append(attempt)
    week_ago = now - WEEK
    # Two windows, each served by its own index, never an OR that falls back to every attempt an agent
    # ever had: live renewals (the partial index on active leases) and the week's ends (finished_at).
    renewals = (
        Attempt.objects.filter(agent_id__in=ids, status=AttemptStatus.ACTIVE)
        .order_by()
        .values("agent_id")
        .annotate(last_renewed=Max("last_renewed_at"))
    )
    for row in renewals:
        rows[row["agent_id"]].last_renewed_at = row["last_renewed"]
    # The 7 days' counts and latest own end: at most 7 rows per agent of the trigger-kept rollup, plus its
    # changes not folded yet, in one statement (insight.models.agent_day_tally).
    first_day = week_first_day(now)
    for agent_id, counts in week_counts(ids, first_day).items():
        health = rows[agent_id]
        health.done_7d, health.failed_7d, health.expired_7d, health.last_ended_at = counts
    # Each agent's latest checkpoint, kept by a trigger on the note table (one row per agent, not the week's
    # checkpoints grouped: insight.models.agent_checkpoint), shown when it is of the week.
    latest = AgentCheckpoint.objects.filter(agent_id__in=ids, created_at__gte=week_ago).values("note_id")
    for note in Note.objects.filter(pk__in=latest).select_related("attempt__task"):
        rows[note.attempt.agent_id].last_checkpoint = note
    _add_evidence(rows, now)
    return list(rows.values())


def week_first_day(now: datetime) -> date:
    """The first UTC day of agent health's week: today and the 6 days before (whole days, as rolled up)."""
    return now.astimezone(UTC).date() - timedelta(days=WEEK_DAYS - 1)


WeekCounts = tuple[int, int, int, datetime | None]  # done, failed, expired, latest own end

# The rollup's rows of the agents since the first day and the changes not folded yet, summed per agent: one
# statement, so a fold committing meanwhile neither doubles nor drops a count. `recheck` > 0: a change took
# back an end counted in the day's latest, which the rollup cannot take back until the fold reads it again.
WEEK_READ = """
SELECT agent_id, sum(done), sum(failed), sum(expired), max(last_ended_at), sum(recheck) FROM (
    SELECT agent_id, done, failed, expired, last_ended_at, 0 AS recheck FROM insight_agentdaytally
    WHERE agent_id IN ({agents}) AND day >= %s
    UNION ALL
    SELECT agent_id, done, failed, expired, last_ended_at, recheck FROM insight_agentdaytallychange
    WHERE agent_id IN ({agents}) AND day >= %s
) AS week GROUP BY agent_id
"""


def _moment(value: datetime | str | None) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    # SQLite returns a raw column's datetime as its stored UTC text.
    parsed = parse_datetime(value)
    assert parsed is not None, value
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed


def week_counts(agent_ids: list[int], first_day: date) -> dict[int, WeekCounts]:
    """Per agent of `agent_ids` with an end since `first_day`: its completed, failed and expired attempts
    and its latest own end (completed, failed, released, interrupted), from the rollup."""
    if not agent_ids:
        return {}
    agents = ", ".join(["%s"] * len(agent_ids))
    with connection.cursor() as cursor:
        cursor.execute(WEEK_READ.format(agents=agents), [*agent_ids, first_day, *agent_ids, first_day])
        found = cursor.fetchall()
    counts: dict[int, WeekCounts] = {}
    recheck = []
    for agent_id, done, failed, expired, last_ended, rechecks in found:
        if rechecks:
            recheck.append(agent_id)
            continue
        counts[agent_id] = (int(done), int(failed), int(expired), _moment(last_ended))
    if recheck:
        counts.update(week_counts_from_attempts(recheck, first_day))
    return counts


def week_counts_from_attempts(agent_ids: list[int], first_day: date) -> dict[int, WeekCounts]:
    """The same from the attempts themselves (the week's ends, by the finished_at index): the rollup's
    definition, read where a recheck is pending, and what the tests compare the rollup with."""
    since = datetime.combine(first_day, time.min, tzinfo=UTC)
    # Not filtered by agent in SQL: given `agent_id IN (…)`, SQLite's planner walks the agent/status index
    # through every attempt those agents ever had instead of the week's.
    week = (
        Attempt.objects.filter(finished_at__gte=since)
        .order_by()
        .values("agent_id")
        .annotate(
            # Finishing, releasing or handing off is hearing from the agent too (expiry and revocation are not).
            last_ended=Max("finished_at", filter=Q(status__in=AGENT_ENDED)),
            done=Count("agent", filter=Q(status=AttemptStatus.COMPLETED)),
            failed=Count("agent", filter=Q(status=AttemptStatus.FAILED)),
            expired=Count("agent", filter=Q(status=AttemptStatus.EXPIRED)),
        )
    )
    wanted = set(agent_ids)
    return {
        row["agent_id"]: (row["done"], row["failed"], row["expired"], row["last_ended"])
        for row in week
        if row["agent_id"] in wanted
        and (row["done"] or row["failed"] or row["expired"] or row["last_ended"] is not None)
    }


# The quarantined tasks: blocked, with the quarantine's reason (the `task_blocked` partial index of ledger 0025).
QUARANTINED_TASKS = "SELECT id FROM ledger_task WHERE status = 'blocked' AND blocked_reason LIKE 'quarantined:%'"


def _add_evidence(rows: dict[int, AgentHealth], now: datetime) -> None:
    """The reconciler's open findings, today's spend against the daily budget, and quarantined work: bounded
    reads (the unresolved-findings index, one day of usage, the blocked tasks and their attempts)."""
    ids = list(rows)
    findings = (
        Finding.objects.filter(status__in=UNRESOLVED_FINDING_STATUSES, attempt__agent_id__in=ids)
        .order_by()
        .values("attempt__agent_id", "condition")
        .annotate(n=Count("id"))
    )
    for row in findings:
        rows[row["attempt__agent_id"]].findings[row["condition"]] = row["n"]
    budgeted = {
        pk: health.agent
        for pk, health in rows.items()
        if health.agent.daily_budget_tokens is not None or health.agent.daily_budget_cost_usd is not None
    }
    if budgeted:
        for usage in AgentDailyUsage.objects.filter(agent_id__in=list(budgeted), day=now.date()):
            agent = budgeted[usage.agent_id]
            tokens = usage.input_tokens + usage.output_tokens
            rows[usage.agent_id].budget_spent = (
                agent.daily_budget_tokens is not None and tokens >= agent.daily_budget_tokens
            ) or (agent.daily_budget_cost_usd is not None and usage.cost_usd >= agent.daily_budget_cost_usd)
    # Driven from the blocked tasks (the `task_blocked` partial index: live work), then their attempts by the
    # task index: not the week's failed and expired attempts joined to their tasks (a week's activity).
    # Literal SQL: SQLite uses a partial index only when the statement's own text implies its condition (with
    # `status = ?` it scanned every task).
    with connection.cursor() as cursor:
        cursor.execute(QUARANTINED_TASKS)
        quarantined_tasks = [task_id for (task_id,) in cursor.fetchall()]
    if not quarantined_tasks:
        return
    quarantined = (
        Attempt.objects.filter(
            task_id__in=quarantined_tasks,
            agent_id__in=ids,
            finished_at__gte=now - WEEK,
            status__in=(AttemptStatus.FAILED, AttemptStatus.EXPIRED),
        )
        .order_by()
        .values("agent_id")
        .annotate(n=Count("task_id", distinct=True))
    )
    for row in quarantined:
        rows[row["agent_id"]].quarantined = row["n"]


def holders_health(attempts: list[Attempt], now: datetime) -> dict[int, AgentHealth]:
    """The health of the agents holding `attempts`, by agent id (for the revoke confirmation)."""
    agent_ids = {attempt.agent_id for attempt in attempts}
    if not agent_ids:
        return {}
    health = agent_health(now, agents=Agent.objects.filter(pk__in=agent_ids))
    return {item.agent.pk: item for item in health}

"""Agent health: is each agent alive, late or silent, what it holds, what it did this week.

Read in a fixed number of queries whatever the history: the agents, their
live attempts and their last renewal (the partial index on active
leases), one aggregate over attempts finished within the last 7 days (the
finished_at index), and each agent's latest checkpoint note if it is of the week (one row per agent kept
by a trigger: `insight.models.agent_checkpoint`).

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
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Count, Max, Q, QuerySet

from insight.models import AgentCheckpoint
from leases.models import AgentDailyUsage, Attempt, AttemptStatus, Note
from leases.selectors import live_attempts
from leases.services.quarantine import QUARANTINE_REASON_PREFIX
from ledger.models import Agent, TaskStatus
from reconciliation.models import UNRESOLVED_FINDING_STATUSES, Condition, Finding

ALIVE_WITHIN = timedelta(minutes=2)
WEEK = timedelta(days=7)
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
    # Not filtered by agent in SQL: given `agent_id IN (…)`, SQLite's planner walks the agent/status index
    # through every attempt those agents ever had (1.8 s at 300,000 attempts) instead of the week's.
    week = (
        Attempt.objects.filter(finished_at__gte=week_ago)
        .order_by()
        .values("agent_id")
        .annotate(
            # Finishing, releasing or handing off is hearing from the agent too (expiry and revocation are not).
            last_ended=Max("finished_at", filter=Q(status__in=AGENT_ENDED)),
            # Counted on `agent` (never null), not `id`: every column is then in the covering
            # `attempt_finished_cover`, an index-only scan on PostgreSQL (7 ms, not a 46 ms seq scan).
            done=Count("agent", filter=Q(status=AttemptStatus.COMPLETED)),
            failed=Count("agent", filter=Q(status=AttemptStatus.FAILED)),
            expired=Count("agent", filter=Q(status=AttemptStatus.EXPIRED)),
        )
    )
    for row in week:
        if row["agent_id"] not in rows:
            continue
        health = rows[row["agent_id"]]
        health.last_ended_at = row["last_ended"]
        health.done_7d, health.failed_7d, health.expired_7d = row["done"], row["failed"], row["expired"]
    # Each agent's latest checkpoint, kept by a trigger on the note table (one row per agent, not the week's
    # checkpoints grouped: insight.models.agent_checkpoint), shown when it is of the week.
    latest = AgentCheckpoint.objects.filter(agent_id__in=ids, created_at__gte=week_ago).values("note_id")
    for note in Note.objects.filter(pk__in=latest).select_related("attempt__task"):
        rows[note.attempt.agent_id].last_checkpoint = note
    _add_evidence(rows, now)
    return list(rows.values())


def _add_evidence(rows: dict[int, AgentHealth], now: datetime) -> None:
    """The reconciler's open findings, today's spend against the daily budget, and quarantined work: three
    bounded reads (the unresolved-findings index, one day of usage, the few quarantined tasks)."""
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
    quarantined = (
        Attempt.objects.filter(
            agent_id__in=ids,
            finished_at__gte=now - WEEK,
            status__in=(AttemptStatus.FAILED, AttemptStatus.EXPIRED),
            task__status=TaskStatus.BLOCKED,
            task__blocked_reason__startswith=QUARANTINE_REASON_PREFIX,
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

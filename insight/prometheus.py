"""The fleet in Prometheus' terms (SPEC §18), read from the database at scrape time so every server answers the same.

`FleetCollector.collect()` issues a fixed handful of aggregate statements,
each served by an index (named in each reader); none scans the task or the
event table: the task counts come from the trigger-kept `TaskCount`
(`insight.status_counts.task_counts_by_status`, folded at each scrape), the
counters from the running tally (`insight.services.event_tally`), which a scrape
advances by the events since the previous scrape.

Metrics (all prefixed `leasehold_`):
- `tasks{project, effective_status}`: tasks per project and effective status
  (`in_progress` while a live lease exists, `in_review` while a reviewer holds one, else the stored status).
- `live_leases`, `leases_expiring_soon` (within 10 minutes).
- counters: `claims_total`, `lease_conflicts_total` (claims refused as taken
  plus contested writes), `contested_writes_total`,
  `attempts_finished_total{status}`, `expiries_total`, `revocations_total`.
- `open_findings{condition}`, `queue_wait_oldest_seconds{project}` (the
  longest a ready, unleased task has waited), `webhook_deliveries{status}`,
  `last_reconciliation_timestamp_seconds` and `last_reconciliation_errors` (the last finished run).
- spend (SPEC §19): `spent_tokens_total{project}` and `spent_cost_usd_total{project}`
  (counters over the daily totals), `spent_tokens_today{project}` and
  `spent_cost_usd_today{project}` (the current UTC day, the unit of the daily budgets).
- landing (SPEC §21.2): `landing_queue_depth{project}` (delivered tasks),
  `landed_tasks_total{result}` (landed, conflict, check_failed, target_moved,
  expired) and `landing_duration_seconds{quantile}` over the latest 100 ended landings.
- runners (SPEC §23.1): `runners{status}` (online, offline: lost, silent past the lost threshold,
  or never registered), `runner_slots{state}` (busy, idle: the slots of online runners, as they
  last reported) and `runner_heartbeats_missed{runner}` (whole heartbeats missed since its last).
- jobs: `last_sweep_timestamp_seconds` (the last successful expiry sweep) and
  `scheduler_heartbeat_timestamp_seconds` (the last start of any scheduled
  job), from the job heartbeats that `/readyz` reads too (0: never).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import Count, Exists, OuterRef, Sum
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from core.db import write_transaction
from insight.job_health import job_health
from insight.models.job_heartbeat import JobName
from insight.services.event_tally import SCRAPE_LIMIT, event_tally_advance
from insight.services.rollups import fleet_tally_fold, report_tally_fold
from insight.services.task_counts import task_counts_fold
from insight.status_counts import task_counts_by_effective_status, task_counts_by_status
from landing.models import Landing
from leases.models import AttemptStatus, ClaimRefusalTally, ProjectDailyUsage
from leases.selectors import EFFECTIVE_STATUSES, live_attempts
from ledger import clock
from ledger.models import EventType, Project, Task, TaskStatus
from push.models import DeliveryStatus, WebhookDelivery
from reconciliation.models import Finding, FindingStatus, ReconciliationRun
from runners.models import BUSY_STATES, Runner, RunnerSlot
from runners.selectors import runner_online
from runners.services import HEARTBEAT_SECONDS

EXPIRING_SOON = timedelta(minutes=10)
FINISHED_STATUSES = (
    AttemptStatus.COMPLETED,
    AttemptStatus.FAILED,
    AttemptStatus.INTERRUPTED,
    AttemptStatus.RELEASED,
    AttemptStatus.EXPIRED,
    AttemptStatus.REVOKED,
)


def _tasks(now: datetime, slugs: dict[int, str]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(
        "leasehold_tasks", "Tasks by project and effective status.", labels=["project", "effective_status"]
    )
    # Trigger-kept counts (insight/models/task_counts.py) and the live leases: a few rows, however many tasks.
    counts = task_counts_by_effective_status(now)
    for project_id, slug in sorted(slugs.items(), key=lambda item: item[1]):
        for status in EFFECTIVE_STATUSES:
            family.add_metric([slug, status], counts.get((project_id, status), 0))
    return family


def _leases(now: datetime) -> Iterator[Metric]:
    live = live_attempts(now)
    yield GaugeMetricFamily("leasehold_live_leases", "Active attempts whose lease has not lapsed.", value=live.count())
    soon = live.filter(lease_expires_at__lte=now + EXPIRING_SOON).count()
    yield GaugeMetricFamily("leasehold_leases_expiring_soon", "Live leases lapsing within 10 minutes.", value=soon)


@write_transaction
def advance_tallies() -> dict[tuple[str, str], int]:
    """Fold the task-count and fleet-tally changes and advance the event tally: the scrape's writes, in
    one commit (the sweep job folds too; either keeps the change tables short).

    On PostgreSQL the commit does not wait for its WAL flush (`synchronous_commit
    = off` for this transaction alone): a crash can lose only this whole
    transaction (the tally's position moves with its counts), and the next
    scrape counts the same events again, so no fsync is worth a scrape's wait.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit = off")
    task_counts_fold()
    fleet_tally_fold()
    report_tally_fold()
    return event_tally_advance(limit=SCRAPE_LIMIT)


def _counters(tally: dict[tuple[str, str], int]) -> Iterator[Metric]:

    def total(event_type: str) -> int:
        return sum(count for (kind, _), count in tally.items() if kind == event_type)

    claims = total(EventType.ATTEMPT_CLAIMED)
    contested = total(EventType.TASK_CONTESTED)
    refused = ClaimRefusalTally.objects.aggregate(n=Sum("count"))["n"] or 0
    yield CounterMetricFamily("leasehold_claims", "Claims granted (attempt.claimed events).", value=claims)
    yield CounterMetricFamily(
        "leasehold_lease_conflicts", "Claims refused as TASK_TAKEN plus contested writes.", value=refused + contested
    )
    yield CounterMetricFamily("leasehold_contested_writes", "Writes under another agent's live lease.", value=contested)
    finished = CounterMetricFamily("leasehold_attempts_finished", "Attempts ended, by status.", labels=["status"])
    by_status: dict[str, int] = {str(status): 0 for status in FINISHED_STATUSES}
    for (kind, status), count in tally.items():
        if kind == EventType.ATTEMPT_FINISHED and status in by_status:
            by_status[status] += count
    by_status[AttemptStatus.RELEASED] += total(EventType.ATTEMPT_RELEASED)
    by_status[AttemptStatus.EXPIRED] += total(EventType.ATTEMPT_EXPIRED)
    by_status[AttemptStatus.REVOKED] += total(EventType.ATTEMPT_REVOKED)
    for status, count in by_status.items():
        finished.add_metric([status], count)
    yield finished
    yield CounterMetricFamily("leasehold_expiries", "Leases that lapsed (attempt.expired).", value=by_status["expired"])
    yield CounterMetricFamily("leasehold_revocations", "Leases revoked (attempt.revoked).", value=by_status["revoked"])


LANDING_DURATIONS_SAMPLED = 100
_LANDING_RESULT_EVENTS = {
    "landed": EventType.TASK_LANDED,
    "conflict": EventType.LANDING_CONFLICT,
    "check_failed": EventType.LANDING_CHECK_FAILED,
    "target_moved": EventType.LANDING_TARGET_MOVED,
    "expired": EventType.LANDING_EXPIRED,
}


def _landing(tally: dict[tuple[str, str], int], slugs: dict[int, str]) -> Iterator[Metric]:
    """SPEC §21.2: the queue's depth per project, tasks by landing result (from the event tally: landed
    counts reconciliation's too), and how long the latest landings took."""
    depth = GaugeMetricFamily(
        "leasehold_landing_queue_depth", "Delivered tasks waiting to land (or landing), by project.", labels=["project"]
    )
    for (project_id, status), count in sorted(task_counts_by_status().items()):
        if status == TaskStatus.DELIVERED and project_id in slugs:
            depth.add_metric([slugs[project_id]], count)
    yield depth
    results = CounterMetricFamily("leasehold_landed_tasks", "Tasks through a landing, by result.", labels=["result"])
    for result, event_type in _LANDING_RESULT_EVENTS.items():
        results.add_metric([result], sum(n for (kind, _), n in tally.items() if kind == event_type))
    yield results
    # The primary key's order: the latest finished landings, whatever their project.
    spans = sorted(
        (finished - claimed).total_seconds()
        for claimed, finished in Landing.objects.filter(finished_at__isnull=False)
        .order_by("-id")
        .values_list("claimed_at", "finished_at")[:LANDING_DURATIONS_SAMPLED]
        if finished is not None
    )
    duration = GaugeMetricFamily(
        "leasehold_landing_duration_seconds",
        f"Wall time of the latest {LANDING_DURATIONS_SAMPLED} ended landings, by quantile.",
        labels=["quantile"],
    )
    for quantile in (0.5, 0.9, 1.0):
        duration.add_metric([str(quantile)], spans[min(len(spans) - 1, int(quantile * len(spans)))] if spans else 0.0)
    yield duration


def _findings() -> GaugeMetricFamily:
    family = GaugeMetricFamily("leasehold_open_findings", "Unresolved reconciliation findings.", labels=["condition"])
    # Partial index finding_unresolved.
    rows = Finding.objects.exclude(status=FindingStatus.RESOLVED).order_by().values("condition").annotate(n=Count("id"))
    for row in sorted(rows, key=lambda r: r["condition"]):
        family.add_metric([row["condition"]], row["n"])
    return family


def _queue_wait(now: datetime, slugs: dict[int, str]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(
        "leasehold_queue_wait_oldest_seconds",
        "How long the longest-waiting ready task without a live lease has waited, per project.",
        labels=["project"],
    )
    held = live_attempts(now).filter(task=OuterRef("pk"))
    oldest: dict[int, datetime] = {}
    for project_id in slugs:
        # Partial index task_ready_since, walked from the longest waiting: it stops at the first task not held.
        first = (
            Task.objects.filter(project_id=project_id, status=TaskStatus.READY, ready_since__isnull=False)
            .exclude(Exists(held))
            .order_by("ready_since")
            .values_list("ready_since", flat=True)
            .first()
        )
        if first is not None:
            oldest[project_id] = first
    for project_id, slug in sorted(slugs.items(), key=lambda item: item[1]):
        since = oldest.get(project_id)
        family.add_metric([slug], max(0.0, (now - since).total_seconds()) if since else 0.0)
    return family


def _deliveries() -> GaugeMetricFamily:
    family = GaugeMetricFamily("leasehold_webhook_deliveries", "Webhook deliveries by status.", labels=["status"])
    # Index webhook_delivery_status.
    counts = {
        row["status"]: row["n"] for row in WebhookDelivery.objects.order_by().values("status").annotate(n=Count("id"))
    }
    for status in DeliveryStatus.values:
        family.add_metric([status], counts.get(status, 0))
    return family


def _last_reconciliation() -> Iterator[Metric]:
    last = (
        ReconciliationRun.objects.filter(finished_at__isnull=False)
        .order_by("-id")
        .values("finished_at", "errors")
        .first()
    )
    yield GaugeMetricFamily(
        "leasehold_last_reconciliation_timestamp_seconds",
        "When the last reconciliation run finished (Unix time; 0: never).",
        value=last["finished_at"].timestamp() if last and last["finished_at"] else 0.0,
    )
    yield GaugeMetricFamily(
        "leasehold_last_reconciliation_errors",
        "Errors of the last finished reconciliation run (a check that could not run).",
        value=len(last["errors"] or []) if last else 0,
    )


def _spend(now: datetime, slugs: dict[int, str]) -> Iterator[Metric]:
    # One row per project and UTC day (unique index project_daily_usage_unique): small, whatever the history.
    totals: dict[int, tuple[int, float]] = {}
    today: dict[int, tuple[int, float]] = {}
    rows = ProjectDailyUsage.objects.order_by().values_list(
        "project_id", "day", "input_tokens", "output_tokens", "cost_usd"
    )
    for project_id, day, input_tokens, output_tokens, cost in rows:
        tokens, dollars = totals.get(project_id, (0, 0.0))
        totals[project_id] = (tokens + input_tokens + output_tokens, dollars + float(cost))
        if day == now.date():
            today[project_id] = (input_tokens + output_tokens, float(cost))
    families = (
        (CounterMetricFamily, "leasehold_spent_tokens", "Tokens reported spent (input + output), all time.", totals, 0),
        (CounterMetricFamily, "leasehold_spent_cost_usd", "US dollars reported spent, all time.", totals, 1),
        (GaugeMetricFamily, "leasehold_spent_tokens_today", "Tokens spent in the current UTC day.", today, 0),
        (GaugeMetricFamily, "leasehold_spent_cost_usd_today", "US dollars spent in the current UTC day.", today, 1),
    )
    for kind, name, documentation, values, index in families:
        family = kind(name, documentation, labels=["project"])
        for project_id, slug in sorted(slugs.items(), key=lambda item: item[1]):
            family.add_metric([slug], values.get(project_id, (0, 0.0))[index])
        yield family


def _jobs(now: datetime) -> Iterator[Metric]:
    health = job_health(now)
    swept = health.jobs[JobName.SWEEP].last_succeeded_at
    yield GaugeMetricFamily(
        "leasehold_last_sweep_timestamp_seconds",
        "When the expiry sweep last succeeded (Unix time; 0: never).",
        value=swept.timestamp() if swept else 0.0,
    )
    beat = health.last_heartbeat_at
    yield GaugeMetricFamily(
        "leasehold_scheduler_heartbeat_timestamp_seconds",
        "When any scheduled job last started (Unix time; 0: never).",
        value=beat.timestamp() if beat else 0.0,
    )


def _runners(now: datetime) -> Iterator[Metric]:
    """Runners online and offline, their slots busy and idle, heartbeats missed: one read of the (few) runners."""
    runners = list(Runner.objects.filter(is_active=True).order_by("name"))
    online = [runner for runner in runners if runner_online(runner, now=now)]
    status = GaugeMetricFamily("leasehold_runners", "Active runners by status.", labels=["status"])
    status.add_metric(["online"], len(online))
    status.add_metric(["offline"], len(runners) - len(online))
    yield status
    states = dict(RunnerSlot.objects.filter(runner__in=online).values_list("state").annotate(n=Count("id")).order_by())
    slots = GaugeMetricFamily("leasehold_runner_slots", "Slots of online runners, as last reported.", labels=["state"])
    slots.add_metric(["busy"], sum(n for state, n in states.items() if state in BUSY_STATES))
    slots.add_metric(["idle"], sum(n for state, n in states.items() if state not in BUSY_STATES))
    yield slots
    missed = GaugeMetricFamily(
        "leasehold_runner_heartbeats_missed",
        "Whole heartbeats missed since the runner's last (registered runners).",
        labels=["runner"],
    )
    for runner in runners:
        if runner.last_heartbeat_at is not None:
            seconds = max(0.0, (now - runner.last_heartbeat_at).total_seconds())
            missed.add_metric([runner.name], int(seconds // HEARTBEAT_SECONDS))
    yield missed


class FleetCollector(Collector):
    """Everything of SPEC §18's list, against one reading of the clock."""

    def collect(self) -> Iterator[Metric]:
        now = clock.now()
        slugs = dict(Project.objects.values_list("id", "slug"))
        tally = advance_tallies()
        yield _tasks(now, slugs)
        yield from _leases(now)
        yield from _counters(tally)
        yield from _landing(tally, slugs)
        yield _findings()
        yield _queue_wait(now, slugs)
        yield _deliveries()
        yield from _last_reconciliation()
        yield from _spend(now, slugs)
        yield from _jobs(now)
        yield from _runners(now)


def fleet_registry() -> CollectorRegistry:
    """A registry of its own per scrape: no process-global state, so every server reports the database alone."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FleetCollector())
    return registry

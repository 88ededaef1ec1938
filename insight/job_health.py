"""`job_health(now)`: is each scheduled job running, and is a scheduler alive? One query.

The same facts feed the job-health tiles of the admin and `GET /readyz`:

- a job is **stale** when its last success (a partial run counts: it did its
  work where it could) is older than its limit, or it never succeeded:
  sweep 3 min, queue-wait check and reconciliation 15 min, idempotency purge
  3 h (three missed runs of a 1-, 5- and 60-minute schedule);
- a **scheduler is alive** when some job started within the last 3 minutes
  (the sweep starts every minute in every cluster);
- a job whose last run failed or was partial carries its error;
- a run still "running" after django-q2's task timeout (`Q_CLUSTER["timeout"]`,
  plus a minute's grace) was **killed**: the worker that ran it was ended,
  so its wrapper never wrote the end. It counts as a failed run (and one
  more failure) until the job's next run records its start.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings

from insight.models.job_heartbeat import JobHeartbeat, JobName, JobOutcome

SCHEDULER_HEARTBEAT_MAX_AGE = timedelta(minutes=3)
STALE_AFTER: dict[str, timedelta] = {
    JobName.SWEEP: timedelta(minutes=3),
    JobName.QUEUE_WAIT: timedelta(minutes=15),
    JobName.RECONCILE: timedelta(minutes=15),
    JobName.PURGE: timedelta(hours=3),
    JobName.INCIDENTS: timedelta(minutes=5),
}
# Past the task timeout, a worker is being ended; the grace keeps a run finishing on the bell from looking killed.
KILL_GRACE = timedelta(minutes=1)


def task_timeout() -> timedelta:
    """How long django-q2 lets one task run before it kills the worker (`Q_CLUSTER["timeout"]`)."""
    return timedelta(seconds=int(settings.Q_CLUSTER.get("timeout") or 0) or 240)


@dataclass(frozen=True)
class JobState:
    name: str
    label: str
    stale_after: timedelta
    last_started_at: datetime | None
    last_succeeded_at: datetime | None
    last_failed_at: datetime | None
    last_outcome: str
    last_error: str
    last_result: dict[str, object]
    last_duration_ms: int | None
    last_runner: str
    runs: int
    failures: int
    now: datetime

    @property
    def success_age(self) -> timedelta | None:
        return None if self.last_succeeded_at is None else self.now - self.last_succeeded_at

    @property
    def stale(self) -> bool:
        age = self.success_age
        return age is None or age > self.stale_after

    @property
    def killed(self) -> bool:
        """Started and never ended within django-q2's timeout: the cluster killed it."""
        return (
            self.last_outcome == JobOutcome.RUNNING
            and self.last_started_at is not None
            and self.now - self.last_started_at > task_timeout() + KILL_GRACE
        )

    @property
    def error_text(self) -> str:
        if self.killed and self.last_started_at is not None:
            ran = int((self.now - self.last_started_at).total_seconds())
            limit = int(task_timeout().total_seconds())
            return f"killed: started {ran} s ago and never ended, past django-q2's {limit} s timeout"
        return self.last_error

    @property
    def outcome_text(self) -> str:
        return "killed" if self.killed else self.last_outcome

    @property
    def failed_at(self) -> datetime | None:
        return self.last_started_at if self.killed else self.last_failed_at

    @property
    def failures_seen(self) -> int:
        """The recorded failures, plus the killed run (which could not record itself)."""
        return self.failures + (1 if self.killed else 0)

    @property
    def last_run_failed(self) -> bool:
        return self.killed or self.last_outcome in (JobOutcome.FAILED, JobOutcome.PARTIAL)


@dataclass(frozen=True)
class JobHealth:
    now: datetime
    jobs: dict[str, JobState]
    last_heartbeat_at: datetime | None

    @property
    def scheduler_alive(self) -> bool:
        return self.last_heartbeat_at is not None and self.now - self.last_heartbeat_at <= SCHEDULER_HEARTBEAT_MAX_AGE

    @property
    def sweep(self) -> JobState:
        return self.jobs[JobName.SWEEP]

    @property
    def reconcile(self) -> JobState:
        return self.jobs[JobName.RECONCILE]

    @property
    def failing(self) -> list[JobState]:
        return [job for job in self.jobs.values() if job.last_run_failed]

    @property
    def healthy(self) -> bool:
        return self.scheduler_alive and not any(job.stale for job in self.jobs.values())


def job_health(now: datetime) -> JobHealth:
    rows = {row.name: row for row in JobHeartbeat.objects.all()}
    jobs: dict[str, JobState] = {}
    for name, label in JobName.choices:
        row = rows.get(name) or JobHeartbeat(name=name)
        jobs[name] = JobState(
            name=name,
            label=str(label),
            stale_after=STALE_AFTER[name],
            last_started_at=row.last_started_at,
            last_succeeded_at=row.last_succeeded_at,
            last_failed_at=row.last_failed_at,
            last_outcome=row.last_outcome,
            last_error=row.last_error,
            last_result=row.last_result or {},
            last_duration_ms=row.last_duration_ms,
            last_runner=row.last_runner,
            runs=row.runs,
            failures=row.failures,
            now=now,
        )
    starts = [job.last_started_at for job in jobs.values() if job.last_started_at is not None]
    return JobHealth(now=now, jobs=jobs, last_heartbeat_at=max(starts, default=None))

"""The report's rollup: attempts ended per UTC day, with their lead-time bucket, kept by triggers.

The managers' report (`insight.reports`) counts the attempts that ended in a
range of days by agent, task class, status and failure reason, and the lead
times (first ready → finish) of the completed ones. Read from the attempts it
grew with the range's activity (issue 32: 2.9 to 5 times slower at 4 times the ledger); read from
this rollup it sums at most one row per day, project, agent, class, status,
reason and lead bucket, whatever the number of attempts.

- `ReportDayTally`: one row per key, as of the last fold; `ReportDayTallyChange`:
  +n / -n rows appended by the triggers of migration `insight.0003_report_tally`
  (on the attempt, on `TaskFirstReady` and on a task's class or project), folded
  away by `insight.services.rollups.fleet_tally_fold` (the sweep job, every
  minute). The true figure is the tally plus the changes not folded yet.
- A row's key is what the report groups by, as the attempt, its task and the
  task's first ready time stand now: when any of them changes, its trigger takes
  the old row back (-1) and adds the new one (+1), so a task whose first ready
  time arrives after its attempts (an import writes events last) moves them from
  "no lead time" to their bucket.
- `LeadBucket`: the lead time in logarithmic buckets 2 % wide (bucket 0 is
  [0 s, 1 s); bucket k ≥ 1 starts at 1.02^(k-1) s), so the report's median and
  90th percentile are the mean of the lead times in the bucket they fall in
  (kept beside the count): within 2 % of the exact value, and exact when the
  bucket holds one lead time. `NO_LEAD` (-1) is the bucket of an attempt that is not
  completed, whose task has no first ready time, or that finished before it.
"""

from __future__ import annotations

import math

from django.db import models

NO_LEAD = -1
LEAD_BUCKET_STEP = 1.02
LEAD_BUCKETS = 1100  # 1.02^1099 s ≈ 85 years: every lead time has a bucket


def lead_bucket_lower(bucket: int) -> float:
    """The first lead time, in seconds, of `bucket` (the rows of `LeadBucket`)."""
    return 0.0 if bucket == 0 else LEAD_BUCKET_STEP ** (bucket - 1)


def lead_bucket_of(seconds: float) -> int:
    """The bucket of a lead time, as the triggers find it (the last bucket starting at or before it)."""
    if seconds < 0:
        return NO_LEAD
    if seconds < 1:
        return 0
    bucket = int(math.log(seconds, LEAD_BUCKET_STEP)) + 1
    # Floating-point edges: the stored lower bounds decide, as in SQL.
    while bucket + 1 < LEAD_BUCKETS and lead_bucket_lower(bucket + 1) <= seconds:
        bucket += 1
    while bucket > 1 and lead_bucket_lower(bucket) > seconds:
        bucket -= 1
    return min(bucket, LEAD_BUCKETS - 1)


class ReportCounts(models.Model):
    """Attempts ended on `day` (UTC, by `finished_at`) with this agent, task project and class, status,
    failure reason and lead bucket."""

    day = models.DateField()
    # Plain ids, not foreign keys: the triggers write these rows and a fold deletes them.
    project_id = models.BigIntegerField()
    agent_id = models.BigIntegerField()
    task_class = models.CharField(max_length=64, blank=True)
    status = models.CharField(max_length=16)
    failure_reason_code = models.CharField(max_length=32, blank=True)
    lead_bucket = models.IntegerField(default=NO_LEAD)
    n = models.BigIntegerField(default=0)
    # The lead times of the bucket's attempts added up (seconds; 0 for NO_LEAD): the report shows a
    # percentile as its bucket's mean, exact when the bucket holds one lead time.
    lead_seconds = models.FloatField(default=0)

    class Meta:
        abstract = True


class ReportDayTally(ReportCounts):
    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["day", "project_id", "agent_id", "task_class", "status", "failure_reason_code", "lead_bucket"],
                name="report_day_tally_unique",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.day} agent {self.agent_id} {self.status}: {self.n}"


class ReportDayTallyChange(ReportCounts):
    """Counts to add to `ReportDayTally`, appended by the triggers; folded away. No index but the key."""

    def __str__(self) -> str:
        return f"{self.day} agent {self.agent_id} {self.status}: {self.n:+d}"


class LeadBucket(models.Model):
    """Bucket `id` holds the lead times from `lower_seconds` to the next bucket's (written by the migration)."""

    id = models.IntegerField(primary_key=True)
    lower_seconds = models.FloatField(unique=True)

    def __str__(self) -> str:
        return f"bucket {self.id} from {self.lower_seconds:.3f} s"

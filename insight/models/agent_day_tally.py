"""Agent health's 7-day counts: per agent and UTC day of the finish, kept by triggers (stop 40).

Agent health showed, per agent, the attempts completed, failed and expired in
the last 7 days and the latest end the agent wrote itself (a finish, a release,
a hand-off: hearing from it). Read from the attempts it grew with a week's
activity (2.07x of CPU on SQLite from 10k to 40k tasks in `bench.pages`); read
from this rollup it is at most 7 rows per agent shown, whatever the number of
attempts.

- `AgentDayTally`: one row per (agent, day) as of the last fold;
  `AgentDayTallyChange`: +1 / -1 rows appended by the triggers of migration
  `insight.0005_agent_day_tally` (an attempt inserted finished; an update of an
  attempt's finish, status or agent), folded away by
  `insight.services.rollups.agent_day_tally_fold` (the sweep job, every
  minute). The true figure is the tally plus the changes not folded yet, read
  in one statement (`insight.agent_health`).
- `last_ended_at` is the latest `finished_at` of the day's attempts with a status
  of `AGENT_ENDED` (completed, failed, released, interrupted): a maximum, kept by
  taking the larger. A maximum cannot be taken back, so an update that moves an
  attempt already counted in it (only an import or a hand-written UPDATE does:
  the services end active attempts only) appends a change with `recheck = 1`;
  the fold then reads that agent's day again from the attempts (one day, by the
  `attempt_finished_cover` index), and until then the page reads that agent's
  week from the attempts. Exact at every moment (`tests/insight/test_agent_day_tally.py`).
- The week is the 7 UTC days up to today (today and the 6 days before), whole
  days: what a per-day row can answer exactly.
"""

from __future__ import annotations

from django.db import models

# Ends of an attempt that the agent itself wrote (agent health's "heard from"), and the statuses counted.
AGENT_ENDED = ("completed", "failed", "released", "interrupted")
COUNTED = (*AGENT_ENDED, "expired")


class AgentDayCounts(models.Model):
    """Attempts of agent `agent_id` that ended on `day` (UTC, by `finished_at`)."""

    # Plain ids, not foreign keys: the triggers write these rows and a fold deletes them.
    agent_id = models.BigIntegerField()
    day = models.DateField()
    done = models.BigIntegerField(default=0)
    failed = models.BigIntegerField(default=0)
    expired = models.BigIntegerField(default=0)
    # The latest finish among the day's completed, failed, released and interrupted attempts.
    last_ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True


class AgentDayTally(AgentDayCounts):
    class Meta:
        constraints = [
            # Also the page's read: `agent_id IN (…) AND day >= first day`, at most 7 rows per agent.
            models.UniqueConstraint(fields=["agent_id", "day"], name="agent_day_tally_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.day} agent {self.agent_id}: {self.done} · {self.failed} · {self.expired}"


class AgentDayTallyChange(AgentDayCounts):
    """Counts to add to `AgentDayTally`, appended by the triggers; folded away. No index but the key."""

    # 1 when an attempt counted in `last_ended_at` left this (agent, day) or its status: the day's latest end
    # must be read again from the attempts (the fold does it; the page, until then, reads the agent's week).
    recheck = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.day} agent {self.agent_id}: {self.done:+d} · {self.failed:+d} · {self.expired:+d}"

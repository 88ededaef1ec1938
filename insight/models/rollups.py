"""Rollups kept by triggers in the writing transaction, so the dashboard and the report read no history.

- `FleetDayTally`: per UTC day, project and agent, the attempts claimed
  (by `claimed_at`), the attempts finished (by `finished_at`) and the
  `task.contested` events (by `created_at`), as of the last fold; the
  changes since are `FleetDayTallyChange` rows. The fleet metrics
  (`insight.metrics`) sum both instead of counting a month of attempts.
- `TaskFirstReady`: when each task first became ready (created ready, or
  its first `task.status_changed` to ready): the start of the report's lead
  time (`insight.reports`), instead of searching every completed task's events.

Both are written only by triggers (migrations `leases.0011_rollups` and
`leases.0012_tally_changes`), in the transaction that writes the attempt or
the event, so they are exact and live (today included) by construction: an
attempt that expires after midnight is finished on the day its lease lapsed
(`finished_at = lease_expires_at`), and the trigger counts it there, although
that day had closed; a job rolling up "closed days" would have missed it.

The tally's writers only append (+1 per claim, finish or contested write;
-1 / +1 when an UPDATE moves an attempt's day, agent or task), as the task
counts do (`insight.models.task_counts`): no writer updates a shared counter
row, so two claims that each end the other agent's lapsed attempt take no
lock the other waits on (in place, they locked two counter rows in opposite
orders and deadlocked), and the UPDATE triggers name their columns, so a
renewal or a note fires nothing. `insight.services.rollups.fleet_tally_fold`
moves committed changes into `FleetDayTally` (the sweep job runs it every
minute); the true figure is always `FleetDayTally` plus the changes not
folded yet, which `insight.metrics` reads in one statement. Not audit rows.
`TaskFirstReady` is written once per task (an earlier ready event, which
only an import or a clock step back can bring, moves it back).
"""

from __future__ import annotations

from django.db import models

from ledger.models import Task

NO_AGENT = 0  # `agent_id` of a contested write by a user or the system
NO_PROJECT = 0  # `project_id` of a contested event without a project


class DayCounts(models.Model):
    """Counts of one (UTC day, project, agent): the tally's row, or a change to add to it."""

    day = models.DateField()
    # Plain ids, not foreign keys: 0 stands for "none" (NO_AGENT, NO_PROJECT).
    project_id = models.BigIntegerField()
    agent_id = models.BigIntegerField()
    claims = models.BigIntegerField(default=0)
    finished = models.BigIntegerField(default=0)
    contested = models.BigIntegerField(default=0)

    class Meta:
        abstract = True


class FleetDayTally(DayCounts):
    class Meta:
        db_table = "leases_fleetdaytally"  # kept from before the move to this room
        constraints = [
            models.UniqueConstraint(fields=["day", "project_id", "agent_id"], name="fleet_day_tally_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.day} project {self.project_id} agent {self.agent_id}"


class FleetDayTallyChange(DayCounts):
    """Counts to add to `FleetDayTally`'s row of (day, project, agent), appended by the triggers; folded away.

    No unique key and no index but the primary key: writers only append, the fold reads the whole table.
    """

    class Meta:
        db_table = "leases_fleetdaytallychange"  # kept from before the move to this room

    def __str__(self) -> str:
        return f"{self.day} project {self.project_id} agent {self.agent_id}: {self.claims:+d} {self.finished:+d}"


class TaskFirstReady(models.Model):
    task = models.OneToOneField(Task, primary_key=True, on_delete=models.PROTECT, related_name="first_ready")
    ready_at = models.DateTimeField()

    class Meta:
        db_table = "leases_taskfirstready"  # kept from before the move to this room

    def __str__(self) -> str:
        return f"task {self.task_id} first ready at {self.ready_at.isoformat()}"

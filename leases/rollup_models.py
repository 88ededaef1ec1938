"""Rollups kept by triggers in the writing transaction, so the dashboard and the report read no history.

- `FleetDayTally`: per UTC day, project and agent, the attempts claimed
  (by `claimed_at`), the attempts finished (by `finished_at`) and the
  `task.contested` events (by `created_at`). The fleet metrics
  (`leases.metrics`) sum it instead of counting a month of attempts.
- `TaskFirstReady`: when each task first became ready (created ready, or
  its first `task.status_changed` to ready): the start of the report's lead
  time (`leases.reports`), instead of searching every completed task's events.

Both are written only by the triggers of migration `leases.0011_rollups`, in
the transaction that writes the attempt or the event, so they are exact and
live (today included) by construction: an attempt that expires after
midnight is finished on the day its lease lapsed (`finished_at =
lease_expires_at`), and the trigger counts it there, although that day had
closed; a job rolling up "closed days" would have missed it. Per agent, like
`ClaimRefusalTally`, so concurrent claims of different agents do not queue on
one counter row. Not audit rows: the counters change in place.
"""

from __future__ import annotations

from django.db import models

from ledger.models import Task

NO_AGENT = 0  # `agent_id` of a contested write by a user or the system
NO_PROJECT = 0  # `project_id` of a contested event without a project


class FleetDayTally(models.Model):
    day = models.DateField()
    # Plain ids, not foreign keys: 0 stands for "none" (NO_AGENT, NO_PROJECT).
    project_id = models.BigIntegerField()
    agent_id = models.BigIntegerField()
    claims = models.BigIntegerField(default=0)
    finished = models.BigIntegerField(default=0)
    contested = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["day", "project_id", "agent_id"], name="fleet_day_tally_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.day} project {self.project_id} agent {self.agent_id}"


class TaskFirstReady(models.Model):
    task = models.OneToOneField(Task, primary_key=True, on_delete=models.PROTECT, related_name="first_ready")
    ready_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"task {self.task_id} first ready at {self.ready_at.isoformat()}"

"""What attempts spend and which paths they hold (SPEC §19).

Usage totals: one row per attempt, per task, per agent and UTC day, per
project and UTC day, each incremented by a conditional UPDATE in the holder
call that reports the usage (`leases.services.usage`). The rows of a budgeted
subject carry `warned_at` / `exhausted_at`: set once, by a conditional
UPDATE, when the total first reaches 80 % / 100 % of the budget, so the
`budget.warning` and `budget.exhausted` events are written exactly once.
"""

from __future__ import annotations

from django.db import models

from ledger.models import BUDGET_COST_DIGITS, Agent, Project, Task


class UsageCounts(models.Model):
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=BUDGET_COST_DIGITS, decimal_places=6, default=0)
    updated_at = models.DateTimeField()

    class Meta:
        abstract = True

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class BudgetFlags(UsageCounts):
    # When the total first reached 80 % / 100 % of the budget (the events' once-only guard).
    warned_at = models.DateTimeField(null=True, blank=True)
    exhausted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True


class AttemptUsage(UsageCounts):
    attempt = models.OneToOneField("leases.Attempt", on_delete=models.PROTECT, primary_key=True, related_name="usage")

    def __str__(self) -> str:
        return f"usage of attempt {self.attempt_id}"


class TaskUsage(BudgetFlags):
    task = models.OneToOneField(Task, on_delete=models.PROTECT, primary_key=True, related_name="usage")

    def __str__(self) -> str:
        return f"usage of task {self.task_id}"


class AgentDailyUsage(BudgetFlags):
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    day = models.DateField(help_text="UTC day.")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "day"], name="agent_daily_usage_unique")]
        # Serves the dashboard's spend per day.
        indexes = [models.Index(fields=["day"], name="agent_daily_usage_day")]

    def __str__(self) -> str:
        return f"usage of agent {self.agent_id} on {self.day}"


class ProjectDailyUsage(BudgetFlags):
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="+")
    day = models.DateField(help_text="UTC day.")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "day"], name="project_daily_usage_unique")]
        indexes = [models.Index(fields=["day"], name="project_daily_usage_day")]

    def __str__(self) -> str:
        return f"usage of project {self.project_id} on {self.day}"

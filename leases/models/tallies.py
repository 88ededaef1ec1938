"""The refused-claim counter, written by the claim path."""

from __future__ import annotations

from django.db import models

from ledger.models import Agent


class ClaimRefusalTally(models.Model):
    """Claims refused as `TASK_TAKEN`, counted per day, project and agent (a fleet metric, SPEC §7).

    A refusal changes no state, so it is not an event; one row per agent per
    day keeps concurrent losers from queueing on a single counter.
    """

    day = models.DateField()
    project = models.ForeignKey("ledger.Project", on_delete=models.PROTECT, related_name="+")
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    count = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["day", "project", "agent"], name="claim_refusal_tally_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.agent_id}: {self.count}"

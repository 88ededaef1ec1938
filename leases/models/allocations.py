"""Allocations: the environment an attempt holds, for as long as its lease."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from environments.models import Environment
from leases.models.attempts import Attempt
from ledger.models import NoDeleteModel


class AllocationStatus(models.TextChoices):
    ACTIVE = "active", "Active"
    STALE = "stale", "Stale"
    RELEASED = "released", "Released"


class Allocation(NoDeleteModel):
    """A lease on an environment, bound to an attempt (SPEC §6).

    Finishing or releasing the attempt releases it; expiry and revocation
    mark it stale: the environment may hold the dead attempt's work, so only
    an admin (or a re-claim of the same task) decides what happens to it.
    """

    environment = models.ForeignKey(Environment, on_delete=models.PROTECT, related_name="allocations")
    attempt = models.ForeignKey(Attempt, on_delete=models.PROTECT, related_name="allocations")
    status = models.CharField(max_length=16, choices=AllocationStatus.choices, default=AllocationStatus.ACTIVE)
    allocated_at = models.DateTimeField()
    released_at = models.DateTimeField(null=True, blank=True)
    # What a runner's environment provider made for this attempt (SPEC §23.3): database_url, ports,
    # container, host_path. The work context lays it over the environment's catalogued resources.
    provisioned = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            # One non-released allocation per environment, enforced by the database.
            models.UniqueConstraint(
                fields=["environment"],
                condition=~Q(status=AllocationStatus.RELEASED),
                name="allocation_one_live_per_environment",
            ),
            models.CheckConstraint(condition=Q(status__in=AllocationStatus.values), name="allocation_status_valid"),
            models.CheckConstraint(
                condition=Q(status=AllocationStatus.RELEASED, released_at__isnull=False)
                | (~Q(status=AllocationStatus.RELEASED) & Q(released_at__isnull=True)),
                name="allocation_released_at_iff_released",
            ),
        ]
        indexes = [
            models.Index(fields=["attempt", "status"], name="allocation_attempt_status"),
        ]

    def __str__(self) -> str:
        return f"{self.environment_id} → attempt {self.attempt_id} ({self.status})"

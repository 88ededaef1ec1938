"""Path reservations: one row per attempt that claimed paths. A reservation is
live exactly while its attempt's lease is (active and unexpired); nothing
ends it separately. Claims that carry paths lock their project's
`ReservationLock` row first, so the overlap check and the insert are one
serialized step per project (see docs/architecture.md).
"""

from __future__ import annotations

from django.db import models

from ledger.models import PathsMode, Project


class PathReservation(models.Model):
    """The paths an attempt claimed; live while the attempt's lease is."""

    attempt = models.OneToOneField(
        "leases.Attempt", on_delete=models.PROTECT, primary_key=True, related_name="reservation"
    )
    # The attempt's project, kept here so the check reads one project's rows by index.
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="+")
    paths = models.JSONField(default=list)
    mode = models.CharField(max_length=16, choices=PathsMode.choices, default=PathsMode.EXCLUSIVE)
    created_at = models.DateTimeField()

    class Meta:
        indexes = [
            # Serves the claim's overlap check and GET /reservations/: a project's newest first.
            models.Index(fields=["project", "-attempt"], name="path_reservation_project"),
        ]

    def __str__(self) -> str:
        return f"{self.mode} paths of attempt {self.attempt_id}"


class ReservationLock(models.Model):
    """One row per project: claims that carry paths lock it, so their checks take turns."""

    project = models.OneToOneField(Project, on_delete=models.PROTECT, primary_key=True, related_name="+")

    def __str__(self) -> str:
        return f"reservation lock of project {self.project_id}"

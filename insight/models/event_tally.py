"""The /metrics event counter, advanced at scrape time."""

from __future__ import annotations

from django.db import models


class EventTally(models.Model):
    """Running counts of events by type (and, for `attempt.finished`, by the attempt's status), for /metrics.

    Advanced at scrape time by `insight.services.event_tally.event_tally_advance`
    from the events after `through_event_id` (the row with type `*` holds the
    position and the total), so a scrape counts only what is new instead of
    the whole event table, and the event path itself writes nothing. Not an
    audit row: rows are updated in place.
    """

    type = models.CharField(max_length=64)
    status = models.CharField(max_length=16, blank=True)
    count = models.BigIntegerField(default=0)
    through_event_id = models.BigIntegerField(default=0)

    class Meta:
        db_table = "ledger_eventtally"  # kept from before the move to this room
        constraints = [models.UniqueConstraint(fields=["type", "status"], name="event_tally_unique")]

    def __str__(self) -> str:
        return f"{self.type}:{self.status} = {self.count}"

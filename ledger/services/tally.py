"""The running event tally behind /metrics' counters (SPEC §18: "as counters from the event log").

A scrape counts only the events appended since the previous one, grouped by
type (and by the attempt's status for `attempt.finished`), and adds them to
`EventTally`; so its cost follows the event rate, not the size of the event
table, and the event path writes nothing extra. The position row (type `*`)
is locked first, so two servers scraping at once never count an event
twice. On PostgreSQL only events up to the feed's horizon are counted
(`ledger.selectors.event_horizon`): an event with a lower id that commits
later is counted by the next scrape, never skipped.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Max
from django.db.models.fields.json import KT

from config.db import write_transaction
from ledger.models import Event, EventTally, EventType
from ledger.selectors import event_horizon

POSITION = "*"
# Event types counted by an attempt status taken from the payload.
BY_STATUS = frozenset({EventType.ATTEMPT_FINISHED})


@write_transaction
def event_tally_advance() -> dict[tuple[str, str], int]:
    """Count the events since the last call into the tally; returns every count, keyed (type, status)."""
    position, _ = EventTally.objects.get_or_create(type=POSITION, status="")
    position = EventTally.objects.select_for_update(no_key=True).get(pk=position.pk)
    horizon = event_horizon()
    new = Event.objects.filter(id__gt=position.through_event_id)
    if horizon is not None:
        new = new.filter(id__lte=horizon)
    through = position.through_event_id
    rows = list(new.order_by().values("type").annotate(n=Count("id"), last=Max("id")))
    finished_rows: list[dict[str, Any]] = []
    if any(row["type"] in BY_STATUS for row in rows):
        finished_rows = list(
            new.filter(type__in=BY_STATUS)
            .order_by()
            .values("type")
            .annotate(status=KT("payload__status"))
            .values("type", "status")
            .annotate(n=Count("id"))
        )
    additions: dict[tuple[str, str], int] = {}
    for row in rows:
        through = max(through, int(row["last"]))
        if row["type"] not in BY_STATUS:
            additions[(str(row["type"]), "")] = int(row["n"])
    for row in finished_rows:
        key = (str(row["type"]), str(row["status"] or ""))
        additions[key] = additions.get(key, 0) + int(row["n"])
    if additions:
        existing = {(t.type, t.status): t for t in EventTally.objects.filter(type__in={k[0] for k in additions})}
        for key, count in additions.items():
            tally = existing.get(key)
            if tally is None:
                EventTally.objects.create(type=key[0], status=key[1], count=count)
            else:
                EventTally.objects.filter(pk=tally.pk).update(count=tally.count + count)
        position.count += sum(additions.values())
        position.through_event_id = through
        position.save(update_fields=["count", "through_event_id"])
    return {(t.type, t.status): t.count for t in EventTally.objects.exclude(type=POSITION)}

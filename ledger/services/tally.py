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
    # The tally is a few dozen rows: all of them, locked, in one statement.
    tallies = {(t.type, t.status): t for t in EventTally.objects.select_for_update(no_key=True)}
    position = tallies.pop((POSITION, ""), None)
    if position is None:
        position = EventTally.objects.create(type=POSITION, status="")
    horizon = event_horizon()
    new = Event.objects.filter(id__gt=position.through_event_id)
    if horizon is not None:
        new = new.filter(id__lte=horizon)
    rows = list(new.order_by().values("type").annotate(n=Count("id"), last=Max("id")))
    if not rows:
        return {key: tally.count for key, tally in tallies.items()}
    additions: dict[tuple[str, str], int] = {}
    for row in rows:
        if row["type"] not in BY_STATUS:
            additions[(str(row["type"]), "")] = int(row["n"])
    if any(row["type"] in BY_STATUS for row in rows):
        by_status: list[dict[str, Any]] = list(
            new.filter(type__in=BY_STATUS)
            .order_by()
            .values("type")
            .annotate(status=KT("payload__status"))
            .values("type", "status")
            .annotate(n=Count("id"))
        )
        for row in by_status:
            key = (str(row["type"]), str(row["status"] or ""))
            additions[key] = additions.get(key, 0) + int(row["n"])
    for key, count in additions.items():
        tally = tallies.get(key)
        if tally is None:
            tallies[key] = EventTally.objects.create(type=key[0], status=key[1], count=count)
        else:
            tally.count += count
            EventTally.objects.filter(pk=tally.pk).update(count=tally.count)
    EventTally.objects.filter(pk=position.pk).update(
        count=position.count + sum(additions.values()),
        through_event_id=max(int(row["last"]) for row in rows),
    )
    return {key: tally.count for key, tally in tallies.items()}

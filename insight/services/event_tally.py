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

from django.db import connection

from core.db import write_transaction
from insight.models import EventTally
from ledger.models import EventType
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
    additions: dict[tuple[str, str], int] = {}
    through = position.through_event_id
    while True:
        rows = _counted_chunk(after=through, upto=horizon)
        if not rows:
            break
        for event_type, status, count, last in rows:
            key = (str(event_type), str(status or "") if event_type in BY_STATUS else "")
            additions[key] = additions.get(key, 0) + int(count)
            through = max(through, int(last))
        if sum(int(row[2]) for row in rows) < CHUNK:
            break
    if not additions:
        return {key: tally.count for key, tally in tallies.items()}
    for key, count in additions.items():
        tally = tallies.get(key)
        if tally is None:
            tallies[key] = EventTally.objects.create(type=key[0], status=key[1], count=count)
        else:
            tally.count += count
            EventTally.objects.filter(pk=tally.pk).update(count=tally.count)
    EventTally.objects.filter(pk=position.pk).update(
        count=position.count + sum(additions.values()),
        through_event_id=through,
    )
    return {key: tally.count for key, tally in tallies.items()}


CHUNK = 100_000


def _counted_chunk(*, after: int, upto: int | None) -> list[tuple[Any, ...]]:
    """(type, status, count, highest id) of the next CHUNK events after `after`, read along the primary key.

    The inner `ORDER BY id LIMIT` keeps both planners on the primary key's
    range: grouped directly, SQLite prefers the (type, created_at) index and
    reads the whole table.
    """
    status = "payload->>'status'" if connection.vendor == "postgresql" else "json_extract(payload, '$.status')"
    bound = "AND id <= %s" if upto is not None else ""
    params: list[Any] = [after, *([upto] if upto is not None else []), CHUNK]
    # Fixed SQL text (the two vendor expressions and placeholders); every value is a parameter.
    sql = (
        f"SELECT type, CASE WHEN type IN ({', '.join(['%s'] * len(BY_STATUS))}) THEN {status} ELSE '' END, "  # noqa: S608
        "count(*), max(id) "
        f"FROM (SELECT id, type, payload FROM ledger_event WHERE id > %s {bound} ORDER BY id LIMIT %s) AS chunk "
        "GROUP BY 1, 2"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*sorted(BY_STATUS), *params])
        return list(cursor.fetchall())

"""The running event tally behind /metrics' counters (SPEC §18: "as counters from the event log").

A scrape counts only the events appended since the previous one, grouped by
type (and by the attempt's status for `attempt.finished`), and adds them to
`EventTally`; so its cost follows the event rate, not the size of the event
table, and the event path writes nothing extra. A scrape counts at most
SCRAPE_LIMIT events: after a restore or a bulk load (millions of events not
counted yet) the incidents job catches up every minute in bounded
transactions (`event_tally_catch_up`), and the counters climb to their totals
meanwhile, as counters after a reset do. The position row (type `*`)
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
def event_tally_advance(*, limit: int | None = None) -> dict[tuple[str, str], int]:
    """Count the events since the last call into the tally; returns every count, keyed (type, status).

    With `limit`, stop after the chunk that reaches `limit` events: a scrape after a restore or a bulk
    load counts a bounded slice (the first scrape at 10,000,000 events took 12.4 s, past Prometheus'
    default timeout) and `event_tally_catch_up` counts the rest in bounded transactions.
    """
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
        if limit is not None and sum(additions.values()) >= limit:
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
# What a scrape counts at most (`insight.prometheus.advance_tallies`): two chunks, about 0.25 s.
SCRAPE_LIMIT = 2 * CHUNK
# What one transaction of `event_tally_catch_up` counts at most, so a scrape never waits long on the position.
CATCH_UP_LIMIT = 5 * CHUNK


def event_tally_catch_up() -> int:
    """Advance the tally to the horizon in transactions of at most CATCH_UP_LIMIT events each (the
    incidents job, every minute); returns how many events it counted. A scrape meanwhile waits at most
    one such transaction for the position row."""
    counted = 0
    while True:
        before = _position()
        event_tally_advance(limit=CATCH_UP_LIMIT)
        after = _position()
        counted += after[1] - before[1]
        if after[0] == before[0]:
            return counted


def _position() -> tuple[int, int]:
    """(the last event counted, how many were counted in all)."""
    row = EventTally.objects.filter(type=POSITION, status="").values_list("through_event_id", "count").first()
    return (int(row[0]), int(row[1])) if row else (0, 0)


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

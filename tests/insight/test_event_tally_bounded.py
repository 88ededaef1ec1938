"""/metrics' event tally counts a bounded slice per scrape and catches up in bounded transactions (issue 33).

After a restore or a bulk load the tally's position is far behind the event log: the first scrape at
10,000,000 events took 12.4 s. A scrape now counts at most `SCRAPE_LIMIT` events (whole chunks), and the
incidents job's `event_tally_catch_up` counts the rest, one bounded transaction at a time; the counters
only grow and end at the totals the event log holds.
"""

from __future__ import annotations

from collections import Counter

import pytest

from insight.jobs import check_incidents_job
from insight.models import EventTally
from insight.services import event_tally
from insight.services.event_tally import POSITION, event_tally_advance, event_tally_catch_up
from ledger.actors import SYSTEM
from ledger.models import Event
from ledger.services import task_create
from tests.factories import ProjectFactory

pytestmark = pytest.mark.django_db


def logged() -> Counter[str]:
    return Counter(Event.objects.values_list("type", flat=True))


def counted() -> Counter[str]:
    tallies = EventTally.objects.exclude(type=POSITION)
    return Counter({t.type: t.count for t in tallies if t.count})


def test_a_bounded_advance_counts_whole_chunks_up_to_the_limit_and_the_catch_up_the_rest(monkeypatch, clock):
    monkeypatch.setattr(event_tally, "CHUNK", 3)
    monkeypatch.setattr(event_tally, "CATCH_UP_LIMIT", 3)
    project = ProjectFactory()
    for number in range(10):
        task_create(project=project, title=f"T{number}", actor=SYSTEM)
    total = sum(logged().values())
    assert total >= 10

    event_tally_advance(limit=3)
    first = sum(counted().values())
    assert first == 3  # one chunk: the limit, not the whole log

    assert event_tally_catch_up() == total - first
    assert counted() == logged()
    assert event_tally_catch_up() == 0  # nothing left: one empty transaction


def test_the_incidents_job_catches_the_tally_up(monkeypatch, clock):
    monkeypatch.setattr(event_tally, "CHUNK", 2)
    monkeypatch.setattr(event_tally, "CATCH_UP_LIMIT", 2)
    project = ProjectFactory()
    for number in range(5):
        task_create(project=project, title=f"T{number}", actor=SYSTEM)
    check_incidents_job()
    assert counted() == logged()

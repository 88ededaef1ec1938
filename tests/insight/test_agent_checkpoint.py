"""Each agent's latest checkpoint note, kept by a trigger (`insight.models.agent_checkpoint`), on both databases.

Agent health reads one row per agent instead of grouping the week's checkpoint
notes. Each test computes the latest checkpoint per agent from the notes
themselves (by creation time, then id) and asserts the kept rows equal it,
after notes written through the service, a bulk insert out of order, and the
migration's backfill.
"""

from __future__ import annotations

import importlib
from datetime import timedelta

import pytest
from django.db import connection

from insight.agent_health import agent_health
from insight.models import AgentCheckpoint
from leases.models import Note, NoteKind
from leases.services import attempt_finish, lease_claim, note_add
from ledger.models import Agent
from tests.factories import AgentFactory, ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of

pytestmark = pytest.mark.django_db


def latest_from_notes() -> dict[int, int]:
    """agent id → the id of its latest checkpoint note, from the notes."""
    latest: dict[int, tuple[object, int]] = {}
    for note_id, created_at, agent_id in Note.objects.filter(kind=NoteKind.CHECKPOINT).values_list(
        "id", "created_at", "attempt__agent_id"
    ):
        if agent_id not in latest or (created_at, note_id) > latest[agent_id]:
            latest[agent_id] = (created_at, note_id)
    return {agent_id: note_id for agent_id, (_, note_id) in latest.items()}


def kept() -> dict[int, int]:
    return dict(AgentCheckpoint.objects.values_list("agent_id", "note_id"))


def test_a_checkpoint_replaces_its_agents_row_and_other_notes_do_not(clock):
    project = ProjectFactory()
    first, second = AgentFactory(projects=[project]), AgentFactory(projects=[project])
    grant = lease_claim(task=TaskFactory(project=project), agent=first, lease_seconds=600)
    other = lease_claim(task=TaskFactory(project=project), agent=second, lease_seconds=600)
    assert kept() == {}
    note_add(proof=proof_of(grant), kind="checkpoint", content="one")
    clock.advance(60)
    note_add(proof=proof_of(other), kind="checkpoint", content="two")
    assert kept() == latest_from_notes()
    assert len(kept()) == 2
    before = kept()
    clock.advance(60)
    note_add(proof=proof_of(grant), kind="progress", content="not a checkpoint")
    note_add(proof=proof_of(grant), kind="warning", content="nor this")
    assert kept() == before
    clock.advance(60)
    note_add(proof=proof_of(grant), kind="checkpoint", content="three")
    assert kept()[first.pk] == Note.objects.get(content="three").pk
    assert kept()[second.pk] == before[second.pk]
    assert kept() == latest_from_notes()


def test_a_bulk_insert_out_of_order_keeps_the_latest_per_agent(clock):
    """One statement of many notes (an import, a bulk load): the latest by creation time wins, not the last id."""
    project = ProjectFactory()
    agents = [AgentFactory(projects=[project]) for _ in range(3)]
    grants = [lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=600) for agent in agents]
    now = clock.now()
    notes = []
    for index, grant in enumerate(grants * 3):
        # Creation times out of id order; the first agent's newest note comes first in the statement.
        minutes = (7 * index) % 5
        notes.append(
            Note(
                attempt=grant.attempt,
                kind="checkpoint",
                content=f"n{index}",
                created_at=now - timedelta(minutes=minutes),
            )
        )
    notes.append(Note(attempt=grants[0].attempt, kind="progress", content="late progress", created_at=now))
    Note.objects.bulk_create(notes)
    assert kept() == latest_from_notes()
    assert set(kept()) == {agent.pk for agent in agents}
    # An older checkpoint written later does not replace a newer one.
    newest = kept()[agents[0].pk]
    Note.objects.create(attempt=grants[0].attempt, kind="checkpoint", content="old", created_at=now - timedelta(days=1))
    assert kept()[agents[0].pk] == newest
    assert kept() == latest_from_notes()


def test_the_backfill_computes_what_the_trigger_kept(clock):
    project = ProjectFactory()
    agents = [AgentFactory(projects=[project]) for _ in range(2)]
    for number in range(4):
        grant = lease_claim(task=TaskFactory(project=project), agent=agents[number % 2], lease_seconds=600)
        note_add(proof=proof_of(grant), kind="checkpoint", content=f"c{number}")
        clock.advance(30)
        attempt_finish(proof=proof_of(grant), outcome="done")
    expected = kept()
    assert expected == latest_from_notes()
    AgentCheckpoint.objects.all().delete()
    migration = importlib.import_module("insight.migrations.0004_agent_checkpoint")
    with connection.cursor() as cursor:
        cursor.execute(migration.backfill())
    assert kept() == expected


def test_agent_health_shows_the_latest_checkpoint_of_the_week_only(clock):
    project = ProjectFactory()
    agent, idle = AgentFactory(projects=[project]), AgentFactory(projects=[project])
    grant = lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=1800)
    note_add(proof=proof_of(grant), kind="checkpoint", content="first")
    clock.advance(60)
    note_add(proof=proof_of(grant), kind="checkpoint", content="second")
    note_add(proof=proof_of(grant), kind="progress", content="after")
    rows = {health.agent.pk: health for health in agent_health(clock.now())}
    shown = rows[agent.pk].last_checkpoint
    assert shown is not None
    assert shown.content == "second"
    assert shown.attempt.task.key == grant.attempt.task.key
    assert rows[idle.pk].last_checkpoint is None
    clock.advance(7 * 86400 + 61)
    rows = {health.agent.pk: health for health in agent_health(clock.now(), agents=Agent.objects.all())}
    assert rows[agent.pk].last_checkpoint is None  # older than the week


def test_the_trigger_exists_after_migrate():
    """A later SQLite migration that rebuilds `leases_note` drops it silently (core.sqlite_triggers keeps it)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT tgname FROM pg_trigger WHERE tgrelid = 'leases_note'::regclass AND NOT tgisinternal")
        else:
            cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'leases_note'")
        names = {name for (name,) in cursor.fetchall()}
    assert "insight_note_checkpoint_insert" in names

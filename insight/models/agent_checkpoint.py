"""Each agent's latest checkpoint note, kept by a trigger on the note table (agent health's "last checkpoint").

Agent health showed the latest checkpoint of the week per agent by grouping the
week's checkpoint notes joined to their attempts: it grew with a week's activity
(a sequential scan at 1M tasks). This row per agent is the answer kept on write:
the trigger of migration `insight.0004_agent_checkpoint` (after each INSERT on
`leases_note`: a statement trigger on PostgreSQL, one grouped upsert per bulk
load; a row trigger on checkpoints only on SQLite) replaces the agent's row when
the new checkpoint is later by `(created_at, id)`. Notes are append-only
(`NoDeleteModel`) and an attempt's agent never changes, so an insert is the only
write to follow. The page reads one row per agent it shows and keeps the week's
rule itself (a checkpoint older than 7 days is not shown).
"""

from __future__ import annotations

from django.db import models


class AgentCheckpoint(models.Model):
    """The latest checkpoint note (by creation time, then id) of the attempts of agent `agent_id`."""

    agent_id = models.BigIntegerField(primary_key=True)
    note_id = models.BigIntegerField()
    created_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"agent {self.agent_id}: checkpoint note {self.note_id}"

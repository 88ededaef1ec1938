# Written by hand: the event table's NOTIFY payload also names the types committed per project (SPEC §25).

import importlib
from typing import Any

from django.db import migrations

POSTGRES_FUNCTION = """
    CREATE OR REPLACE FUNCTION ledger_event_after_insert() RETURNS trigger AS $$
    DECLARE
        latest bigint;
        projects text;
        types text;
    BEGIN
        -- A statement that inserted no row (the lease sweep's INSERT ... SELECT
        -- when nothing lapsed) has nothing to deliver and no one to wake (issue 27).
        IF NOT EXISTS (SELECT 1 FROM new_events) THEN
            RETURN NULL;
        END IF;
        IF EXISTS (SELECT 1 FROM ledger_webhookendpoint WHERE is_active) THEN
            INSERT INTO ledger_webhookdelivery (endpoint_id, event_id, status, attempts, next_attempt_at,
                                                created_at, last_error)
            SELECT e.id, n.id, 'pending', 0, n.created_at, n.created_at, ''
            FROM new_events n
            JOIN ledger_webhookendpoint e
              ON e.is_active
             AND (e.project_id IS NULL OR e.project_id = n.project_id)
             AND (jsonb_array_length(e.event_types) = 0 OR e.event_types ? n.type)
             AND e.min_severity_rank <= CASE n.severity WHEN 'error' THEN 2 WHEN 'warn' THEN 1 ELSE 0 END;
        END IF;
        -- Waiters (GET /changes/?wait=, /changes/stream/, claims/next with wait) listen on this channel;
        -- NOTIFY is delivered at COMMIT, never for a rolled-back insert.
        -- Payload: the highest id, the projects touched (0: no project) or * for too many, then
        -- <project>:<type> pairs (push.claim_waiters wakes only for the types that can make work
        -- claimable), left out when they would not fit.
        SELECT max(id), string_agg(DISTINCT coalesce(project_id, 0)::text, ',') INTO latest, projects FROM new_events;
        IF length(projects) > 7000 THEN
            projects := '*';
        END IF;
        SELECT string_agg(DISTINCT coalesce(project_id, 0)::text || ':' || type, ',') INTO types FROM new_events;
        IF projects = '*' OR length(projects) + length(types) > 7800 THEN
            types := '';
        END IF;
        PERFORM pg_notify('ledger_event', latest::text || ' ' || coalesce(projects, '*') || ' ' || coalesce(types, ''));
        RETURN NULL;
    END;
    $$ LANGUAGE plpgsql;
    """


def _previous_function() -> str:
    return str(importlib.import_module("ledger.migrations.0014_event_notify_needs_rows").POSTGRES_FUNCTION)


def forwards(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(POSTGRES_FUNCTION)


def backwards(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(_previous_function())


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0016_agent_pause"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]

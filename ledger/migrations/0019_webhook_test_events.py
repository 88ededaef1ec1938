# Written by hand: the delivery trigger makes no row for a `webhook.test` event (issue 32, "Send test"):
# push.services.webhooks.webhook_send_test makes the one delivery for the endpoint it tests.

import importlib
from typing import Any

from django.db import migrations

TEST_TYPE = "webhook.test"

SQLITE_TRIGGER = f"""
    CREATE TRIGGER ledger_event_webhook_deliveries AFTER INSERT ON ledger_event
    WHEN NEW.type <> '{TEST_TYPE}'
    BEGIN
        INSERT INTO ledger_webhookdelivery (endpoint_id, event_id, status, attempts, next_attempt_at, created_at,
                                            last_error)
        SELECT e.id, NEW.id, 'pending', 0, NEW.created_at, NEW.created_at, ''
        FROM ledger_webhookendpoint e
        WHERE e.is_active
          AND (e.project_id IS NULL OR e.project_id = NEW.project_id)
          AND (json_array_length(e.event_types) = 0
               OR EXISTS (SELECT 1 FROM json_each(e.event_types) t WHERE t.value = NEW.type))
          AND e.min_severity_rank <= CASE NEW.severity WHEN 'error' THEN 2 WHEN 'warn' THEN 1 ELSE 0 END;
    END;
    """


def _previous_postgres_function() -> str:
    return str(importlib.import_module("ledger.migrations.0017_event_notify_types").POSTGRES_FUNCTION)


def _previous_sqlite_trigger() -> str:
    return str(importlib.import_module("ledger.migrations.0011_webhooks").SQLITE_CREATE[0])


def _postgres_function() -> str:
    previous = _previous_postgres_function()
    join = "            FROM new_events n\n            JOIN ledger_webhookendpoint e\n              ON e.is_active\n"
    assert join in previous, "0017's function changed: rewrite this migration's edit"
    return previous.replace(
        join,
        "            FROM new_events n\n            JOIN ledger_webhookendpoint e\n"
        f"              ON n.type <> '{TEST_TYPE}'\n             AND e.is_active\n",
    )


def forwards(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(_postgres_function())
    elif schema_editor.connection.vendor == "sqlite":
        schema_editor.execute("DROP TRIGGER IF EXISTS ledger_event_webhook_deliveries;")
        schema_editor.execute(SQLITE_TRIGGER)


def backwards(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(_previous_postgres_function())
    elif schema_editor.connection.vendor == "sqlite":
        schema_editor.execute("DROP TRIGGER IF EXISTS ledger_event_webhook_deliveries;")
        schema_editor.execute(_previous_sqlite_trigger())


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0018_agent_kind_ci"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]

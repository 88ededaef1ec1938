"""SPEC §23.1: `Task.requires` and `Agent.labels` (a claimer carries every label a task requires)."""

from django.db import migrations, models

from core.sqlite_triggers import keeping_sqlite_triggers


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0019_webhook_test_events"),
    ]

    # SQLite remakes these tables to add a column: keep the triggers on and reading them.
    operations = keeping_sqlite_triggers(
        ["ledger_agent", "ledger_task"],
        [
            migrations.AddField(
                model_name="agent",
                name="labels",
                field=models.JSONField(blank=True, default=list),
            ),
            migrations.AddField(
                model_name="task",
                name="requires",
                field=models.JSONField(blank=True, default=list),
            ),
        ],
    )

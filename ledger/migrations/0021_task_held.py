"""SPEC §25: `Task.held` (an active attempt exists) and claim-next's queue index of ready tasks nobody holds.

The column is kept by triggers on the attempt table, which `leases` owns (`leases/migrations/0021_task_held.py`
creates them and sets the column for the attempts active at migration time).
"""

from django.db import migrations, models

from core.sqlite_triggers import keeping_sqlite_triggers


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0020_task_requires_agent_labels"),
    ]

    # SQLite remakes the task table to add a column: keep the triggers on and reading it.
    operations = keeping_sqlite_triggers(
        ["ledger_task"],
        [
            migrations.AddField(
                model_name="task",
                name="held",
                field=models.BooleanField(default=False, editable=False),
            ),
            migrations.AddIndex(
                model_name="task",
                index=models.Index(
                    models.F("project"),
                    models.OrderBy(models.F("priority"), descending=True),
                    models.F("ready_since"),
                    models.F("id"),
                    condition=models.Q(("held", False), ("status", "ready")),
                    name="task_claim_queue",
                ),
            ),
        ],
    )

"""SPEC §25: reconciliation's lookup of the tasks delivered or landed from the branches git reported,
by index instead of every task of the project (an index remakes no table on SQLite)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0022_event_partitions"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="task",
            index=models.Index(
                condition=models.Q(("delivered_branch", ""), _negated=True),
                fields=["project", "delivered_branch"],
                name="task_delivered_branch",
            ),
        ),
    ]

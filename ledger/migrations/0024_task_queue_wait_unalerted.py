"""SPEC §25: the queue-wait check reads the ready tasks not yet alerted for their waiting period by a partial
index, instead of every ready task past the threshold (the alerted backlog) on each run."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0023_task_delivered_branch"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="task",
            index=models.Index(
                condition=models.Q(
                    ("status", "ready"),
                    models.Q(
                        ("queue_wait_alerted_for__isnull", True),
                        models.Q(("queue_wait_alerted_for", models.F("ready_since")), _negated=True),
                        _connector="OR",
                    ),
                ),
                fields=["project", "ready_since", "id"],
                name="task_queue_wait_unalerted",
            ),
        ),
    ]

# Written by hand from what Django generated 5.2.19 on 2026-12-02 01:58

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('ledger', '0012_task_counts'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            # The models moved to insight/ and push/ keep their tables: only the state moves.
            state_operations=[
                migrations.DeleteModel(
                    name='EventTally',
                ),
                migrations.DeleteModel(
                    name='TaskCount',
                ),
                migrations.DeleteModel(
                    name='TaskCountChange',
                ),
                migrations.RemoveField(
                    model_name='webhookendpoint',
                    name='project',
                ),
                migrations.DeleteModel(
                    name='WebhookDelivery',
                ),
                migrations.DeleteModel(
                    name='WebhookEndpoint',
                ),
            ],
            database_operations=[],
        ),
    ]

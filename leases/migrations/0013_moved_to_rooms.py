# Written by hand from what Django generated 5.2.19 on 2026-12-02 01:58

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('leases', '0012_tally_changes'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            # The models moved to reconciliation/ and insight/ keep their tables: only the state moves.
            state_operations=[
                migrations.RemoveField(
                    model_name='attemptdiscard',
                    name='attempt',
                ),
                migrations.RemoveField(
                    model_name='finding',
                    name='attempt',
                ),
                migrations.RemoveField(
                    model_name='finding',
                    name='environment',
                ),
                migrations.RemoveField(
                    model_name='finding',
                    name='project',
                ),
                migrations.RemoveField(
                    model_name='finding',
                    name='task',
                ),
                migrations.DeleteModel(
                    name='FleetDayTally',
                ),
                migrations.DeleteModel(
                    name='FleetDayTallyChange',
                ),
                migrations.DeleteModel(
                    name='JobHeartbeat',
                ),
                migrations.DeleteModel(
                    name='ReconciliationRun',
                ),
                migrations.RemoveField(
                    model_name='taskfirstready',
                    name='task',
                ),
                migrations.DeleteModel(
                    name='AttemptDiscard',
                ),
                migrations.DeleteModel(
                    name='Finding',
                ),
                migrations.DeleteModel(
                    name='TaskFirstReady',
                ),
            ],
            database_operations=[],
        ),
    ]

# Written by hand from what Django generated 5.2.19 on 2026-12-02 01:58

import django.db.models.deletion
from django.db import migrations, models

from core.model_moves import content_types_move


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('contenttypes', '0002_remove_content_type_name'),
        ('leases', '0013_moved_to_rooms'),
        ('ledger', '0013_moved_to_rooms'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            # The tables exist since leases 0008/0011/0012 and ledger 0011/0012 (Meta.db_table): only the state moves here.
            state_operations=[
                migrations.CreateModel(
                    name='FleetDayTallyChange',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('day', models.DateField()),
                        ('project_id', models.BigIntegerField()),
                        ('agent_id', models.BigIntegerField()),
                        ('claims', models.BigIntegerField(default=0)),
                        ('finished', models.BigIntegerField(default=0)),
                        ('contested', models.BigIntegerField(default=0)),
                    ],
                    options={
                        'db_table': 'leases_fleetdaytallychange',
                    },
                ),
                migrations.CreateModel(
                    name='TaskCountChange',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('project_id', models.BigIntegerField()),
                        ('status', models.CharField(max_length=16)),
                        ('delta', models.BigIntegerField()),
                    ],
                    options={
                        'db_table': 'ledger_taskcountchange',
                    },
                ),
                migrations.CreateModel(
                    name='TaskFirstReady',
                    fields=[
                        ('task', models.OneToOneField(on_delete=django.db.models.deletion.PROTECT, primary_key=True, related_name='first_ready', serialize=False, to='ledger.task')),
                        ('ready_at', models.DateTimeField()),
                    ],
                    options={
                        'db_table': 'leases_taskfirstready',
                    },
                ),
                migrations.CreateModel(
                    name='EventTally',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('type', models.CharField(max_length=64)),
                        ('status', models.CharField(blank=True, max_length=16)),
                        ('count', models.BigIntegerField(default=0)),
                        ('through_event_id', models.BigIntegerField(default=0)),
                    ],
                    options={
                        'db_table': 'ledger_eventtally',
                        'constraints': [models.UniqueConstraint(fields=('type', 'status'), name='event_tally_unique')],
                    },
                ),
                migrations.CreateModel(
                    name='FleetDayTally',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('day', models.DateField()),
                        ('project_id', models.BigIntegerField()),
                        ('agent_id', models.BigIntegerField()),
                        ('claims', models.BigIntegerField(default=0)),
                        ('finished', models.BigIntegerField(default=0)),
                        ('contested', models.BigIntegerField(default=0)),
                    ],
                    options={
                        'db_table': 'leases_fleetdaytally',
                        'constraints': [models.UniqueConstraint(fields=('day', 'project_id', 'agent_id'), name='fleet_day_tally_unique')],
                    },
                ),
                migrations.CreateModel(
                    name='JobHeartbeat',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.CharField(choices=[('sweep_expired', 'Lease sweep'), ('check_queue_wait', 'Queue-wait check'), ('reconcile', 'Reconciliation'), ('purge_idempotency', 'Idempotency purge')], max_length=40, unique=True)),
                        ('last_started_at', models.DateTimeField(blank=True, null=True)),
                        ('last_finished_at', models.DateTimeField(blank=True, null=True)),
                        ('last_succeeded_at', models.DateTimeField(blank=True, null=True)),
                        ('last_failed_at', models.DateTimeField(blank=True, null=True)),
                        ('last_outcome', models.CharField(blank=True, choices=[('running', 'Running'), ('succeeded', 'Succeeded'), ('partial', 'Finished with errors'), ('failed', 'Failed')], max_length=16)),
                        ('last_error', models.TextField(blank=True)),
                        ('last_result', models.JSONField(blank=True, default=dict)),
                        ('last_duration_ms', models.PositiveIntegerField(blank=True, null=True)),
                        ('last_runner', models.CharField(blank=True, max_length=200)),
                        ('runs', models.PositiveIntegerField(default=0)),
                        ('failures', models.PositiveIntegerField(default=0)),
                    ],
                    options={
                        'db_table': 'leases_jobheartbeat',
                        'ordering': ['name'],
                        'constraints': [models.CheckConstraint(condition=models.Q(('name__in', ['sweep_expired', 'check_queue_wait', 'reconcile', 'purge_idempotency'])), name='job_heartbeat_name_valid')],
                    },
                ),
                migrations.CreateModel(
                    name='TaskCount',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('project_id', models.BigIntegerField()),
                        ('status', models.CharField(max_length=16)),
                        ('count', models.BigIntegerField(default=0)),
                    ],
                    options={
                        'db_table': 'ledger_taskcount',
                        'constraints': [models.UniqueConstraint(fields=('project_id', 'status'), name='task_count_unique')],
                    },
                ),
            ],
            database_operations=[],
        ),
        content_types_move(old_label='leases', new_label='insight', models=('jobheartbeat', 'fleetdaytally', 'fleetdaytallychange', 'taskfirstready')),
        content_types_move(old_label='ledger', new_label='insight', models=('taskcount', 'taskcountchange', 'eventtally')),
    ]

# Written by hand from what Django generated 5.2.19 on 2026-12-02 01:58

import django.db.models.deletion
from django.db import migrations, models

from core.model_moves import content_types_move


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('contenttypes', '0002_remove_content_type_name'),
        ('environments', '0001_initial'),
        ('leases', '0013_moved_to_rooms'),
        ('ledger', '0013_moved_to_rooms'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            # The tables exist since leases 0004 and 0007 (Meta.db_table): only the state moves here.
            state_operations=[
                migrations.CreateModel(
                    name='ReconciliationRun',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('started_at', models.DateTimeField()),
                        ('finished_at', models.DateTimeField(blank=True, null=True)),
                        ('status', models.CharField(choices=[('running', 'Running'), ('succeeded', 'Succeeded'), ('partial', 'Finished with errors'), ('superseded', 'Superseded'), ('failed', 'Failed')], default='running', max_length=16)),
                        ('counts', models.JSONField(blank=True, default=dict)),
                        ('opened', models.PositiveIntegerField(default=0)),
                        ('resolved', models.PositiveIntegerField(default=0)),
                        ('errors', models.JSONField(blank=True, default=list)),
                        ('prune_worktrees', models.BooleanField(default=False)),
                        ('pruned', models.JSONField(blank=True, default=list)),
                    ],
                    options={
                        'db_table': 'leases_reconciliationrun',
                        'ordering': ['-id'],
                        'constraints': [models.CheckConstraint(condition=models.Q(('status__in', ['running', 'succeeded', 'partial', 'superseded', 'failed'])), name='reconciliation_run_status_valid')],
                    },
                ),
                migrations.CreateModel(
                    name='AttemptDiscard',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('discarded_by', models.CharField(help_text='Actor label.', max_length=200)),
                        ('reason', models.TextField()),
                        ('discarded_at', models.DateTimeField()),
                        ('attempt', models.OneToOneField(on_delete=django.db.models.deletion.PROTECT, related_name='discard', to='leases.attempt')),
                    ],
                    options={
                        'db_table': 'leases_attemptdiscard',
                        'constraints': [models.CheckConstraint(condition=models.Q(('reason', ''), _negated=True), name='attempt_discard_needs_reason')],
                    },
                ),
                migrations.CreateModel(
                    name='Finding',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('condition', models.CharField(choices=[('live_lease_dead_agent', 'Live lease, silent agent'), ('expired_lease_still_active', 'Expired lease still active'), ('branch_missing', 'Branch missing'), ('orphan_branch', 'Orphan branch'), ('duplicate_branch_label', 'Branch named by two live attempts'), ('leaked_environment', 'Leaked environment'), ('environment_collision', 'Environment collision'), ('insufficient_isolation', 'Insufficient isolation'), ('orphan_worktree', 'Orphan worktree'), ('completed_branch_missing', 'Completed work without a branch'), ('stalled_attempt', 'Renewed, but not working'), ('unreserved_change', 'Changed paths another attempt reserved')], max_length=40)),
                        ('subject_type', models.CharField(choices=[('task', 'Task'), ('attempt', 'Attempt'), ('branch', 'Branch'), ('environment', 'Environment'), ('worktree', 'Worktree')], max_length=16)),
                        ('subject_key', models.CharField(max_length=500)),
                        ('detail', models.JSONField(blank=True, default=dict)),
                        ('status', models.CharField(choices=[('open', 'Open'), ('acknowledged', 'Acknowledged'), ('resolved', 'Resolved')], default='open', max_length=16)),
                        ('first_seen_at', models.DateTimeField()),
                        ('last_seen_at', models.DateTimeField()),
                        ('acknowledged_at', models.DateTimeField(blank=True, null=True)),
                        ('acknowledged_by', models.CharField(blank=True, help_text='Actor label.', max_length=200)),
                        ('owner', models.CharField(blank=True, max_length=200)),
                        ('resolved_at', models.DateTimeField(blank=True, null=True)),
                        ('resolved_by', models.CharField(blank=True, help_text="Actor label; 'reconciliation' when the condition stopped holding.", max_length=200)),
                        ('resolution_note', models.TextField(blank=True)),
                        ('attempt', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='leases.attempt')),
                        ('environment', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='environments.environment')),
                        ('project', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='ledger.project')),
                        ('task', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='ledger.task')),
                    ],
                    options={
                        'db_table': 'leases_finding',
                        'ordering': ['-last_seen_at', '-id'],
                        'indexes': [models.Index(condition=models.Q(('status', 'resolved'), _negated=True), fields=['condition', 'project'], name='finding_unresolved'), models.Index(fields=['condition', 'first_seen_at'], name='finding_condition_first_seen')],
                        'constraints': [models.UniqueConstraint(condition=models.Q(('status', 'resolved'), _negated=True), fields=('project', 'condition', 'subject_type', 'subject_key'), name='finding_one_unresolved_per_subject'), models.CheckConstraint(condition=models.Q(('condition__in', ['live_lease_dead_agent', 'expired_lease_still_active', 'branch_missing', 'orphan_branch', 'duplicate_branch_label', 'leaked_environment', 'environment_collision', 'insufficient_isolation', 'orphan_worktree', 'completed_branch_missing', 'stalled_attempt', 'unreserved_change'])), name='finding_condition_valid'), models.CheckConstraint(condition=models.Q(('status__in', ['open', 'acknowledged', 'resolved'])), name='finding_status_valid'), models.CheckConstraint(condition=models.Q(models.Q(('resolved_at__isnull', False), ('status', 'resolved')), models.Q(models.Q(('status', 'resolved'), _negated=True), ('resolved_at__isnull', True)), _connector='OR'), name='finding_resolved_at_iff_resolved')],
                    },
                ),
            ],
            database_operations=[],
        ),
        content_types_move(old_label='leases', new_label='reconciliation', models=('finding', 'reconciliationrun', 'attemptdiscard')),
    ]

# Written by hand from what Django generated 5.2.19 on 2026-12-02 01:58

import django.db.models.deletion
from django.db import migrations, models

from core.model_moves import content_types_move


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('contenttypes', '0002_remove_content_type_name'),
        ('ledger', '0013_moved_to_rooms'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            # The tables exist since ledger 0011 (Meta.db_table): only the state moves here.
            state_operations=[
                migrations.CreateModel(
                    name='WebhookEndpoint',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('url', models.URLField(max_length=500)),
                        ('event_types', models.JSONField(blank=True, default=list, help_text='Event types to post; empty: all.')),
                        ('min_severity', models.CharField(choices=[('info', 'Info'), ('warn', 'Warning'), ('error', 'Error')], default='info', max_length=8)),
                        ('min_severity_rank', models.PositiveSmallIntegerField(default=0, editable=False)),
                        ('format', models.CharField(choices=[('json', 'JSON (the event, signed)'), ('slack', 'Slack (one line of text)')], default='json', max_length=8)),
                        ('is_active', models.BooleanField(default=True)),
                        ('secret', models.CharField(editable=False, max_length=100)),
                        ('previous_secret', models.CharField(blank=True, editable=False, max_length=100)),
                        ('previous_secret_expires_at', models.DateTimeField(blank=True, editable=False, null=True)),
                        ('consecutive_failures', models.PositiveIntegerField(default=0, editable=False)),
                        ('disabled_at', models.DateTimeField(blank=True, editable=False, null=True)),
                        ('created_at', models.DateTimeField(editable=False)),
                        ('project', models.ForeignKey(blank=True, help_text='Empty: all projects.', null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='ledger.project')),
                    ],
                    options={
                        'db_table': 'ledger_webhookendpoint',
                        'ordering': ['id'],
                    },
                ),
                migrations.CreateModel(
                    name='WebhookDelivery',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('status', models.CharField(choices=[('pending', 'Pending'), ('delivered', 'Delivered'), ('failed', 'Failed (will retry)'), ('dead', 'Dead')], default='pending', max_length=12)),
                        ('attempts', models.PositiveIntegerField(default=0)),
                        ('next_attempt_at', models.DateTimeField()),
                        ('claimed_until', models.DateTimeField(blank=True, null=True)),
                        ('last_attempt_at', models.DateTimeField(blank=True, null=True)),
                        ('last_status_code', models.PositiveIntegerField(blank=True, null=True)),
                        ('last_error', models.CharField(blank=True, max_length=300)),
                        ('delivered_at', models.DateTimeField(blank=True, null=True)),
                        ('created_at', models.DateTimeField()),
                        ('event', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='ledger.event')),
                        ('endpoint', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='deliveries', to='push.webhookendpoint')),
                    ],
                    options={
                        'db_table': 'ledger_webhookdelivery',
                        'ordering': ['-id'],
                    },
                ),
                migrations.AddIndex(
                    model_name='webhookendpoint',
                    index=models.Index(condition=models.Q(('is_active', True)), fields=['project'], name='webhook_active_endpoints'),
                ),
                migrations.AddConstraint(
                    model_name='webhookendpoint',
                    constraint=models.CheckConstraint(condition=models.Q(('min_severity_rank__lte', 2)), name='webhook_severity_rank_valid'),
                ),
                migrations.AddIndex(
                    model_name='webhookdelivery',
                    index=models.Index(condition=models.Q(('status__in', ('pending', 'failed'))), fields=['endpoint', 'event'], name='webhook_delivery_open'),
                ),
                migrations.AddIndex(
                    model_name='webhookdelivery',
                    index=models.Index(fields=['status'], name='webhook_delivery_status'),
                ),
                migrations.AddConstraint(
                    model_name='webhookdelivery',
                    constraint=models.UniqueConstraint(fields=('endpoint', 'event'), name='webhook_delivery_once_per_event'),
                ),
                migrations.AddConstraint(
                    model_name='webhookdelivery',
                    constraint=models.CheckConstraint(condition=models.Q(('status__in', ['pending', 'delivered', 'failed', 'dead'])), name='webhook_delivery_status_valid'),
                ),
            ],
            database_operations=[],
        ),
        content_types_move(old_label='ledger', new_label='push', models=('webhookendpoint', 'webhookdelivery')),
    ]

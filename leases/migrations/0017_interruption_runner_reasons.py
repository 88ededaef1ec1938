# SPEC §23: two more reasons an attempt is handed off (`runner_restart`, `environment_unavailable`).
# Choices only: no SQL on either database (the interruption CHECK needs only a non-empty code).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('leases', '0016_attempt_command_token'),
    ]

    operations = [
        migrations.AlterField(
            model_name='attempt',
            name='interruption_reason_code',
            field=models.CharField(blank=True, choices=[('handoff', 'Handoff'), ('context_limit', 'Context Limit'), ('user_request', 'User Request'), ('client_shutdown', 'Client Shutdown'), ('environment_change', 'Environment Change'), ('runner_restart', 'Runner Restart'), ('environment_unavailable', 'Environment Unavailable'), ('other', 'Other')], max_length=32),
        ),
    ]

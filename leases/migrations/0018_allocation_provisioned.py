# SPEC §23.3: what a runner's environment provider made for the attempt, recorded on its allocation.
# No trigger reads leases_allocation, so SQLite's table remake needs no `keeping_sqlite_triggers`.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("leases", "0017_interruption_runner_reasons"),
    ]

    operations = [
        migrations.AddField(
            model_name="allocation",
            name="provisioned",
            field=models.JSONField(blank=True, default=dict),
        ),
    ]

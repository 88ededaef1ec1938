"""SPEC §25: reconciliation reads what changed since its last run (`ReconcileCursor`), `reconcile --full`
re-reads everything, and an index finds the findings resolved since a watermark."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0013_moved_to_rooms"),
        ("reconciliation", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="reconciliationrun",
            name="full",
            field=models.BooleanField(default=False),
        ),
        migrations.AddIndex(
            model_name="finding",
            index=models.Index(
                condition=models.Q(("status", "resolved")),
                fields=["condition", "resolved_at"],
                name="finding_resolved_recently",
            ),
        ),
        migrations.CreateModel(
            name="ReconcileCursor",
            fields=[
                (
                    "project",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="+",
                        serialize=False,
                        to="ledger.project",
                    ),
                ),
                ("watermark_at", models.DateTimeField()),
                ("heads", models.JSONField(blank=True, default=dict)),
                ("scan_after_id", models.BigIntegerField(blank=True, null=True)),
                ("updated_at", models.DateTimeField()),
            ],
            options={"db_table": "reconciliation_cursor"},
        ),
    ]

"""SPEC §25: an index on `leases_attempt.branch`, for reconciliation's reads by branch (its branch
histories, and the ended attempts of a branch whose tip moved). Creating an index remakes no table."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("leases", "0022_lease_clock"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="attempt",
            index=models.Index(fields=["branch"], name="attempt_branch"),
        ),
    ]

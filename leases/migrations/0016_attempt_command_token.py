# The command's credential (SPEC §23.2): the SHA-256 of the attempt token its holder minted.

from django.db import migrations, models

from core.sqlite_triggers import keeping_sqlite_triggers


class Migration(migrations.Migration):
    dependencies = [
        ("leases", "0015_check_results"),
    ]

    # SQLite remakes the table to add a column with a default: keep the triggers on and reading it.
    operations = keeping_sqlite_triggers(
        ["leases_attempt"],
        [
            migrations.AddField(
                model_name="attempt",
                name="command_token_hash",
                field=models.CharField(blank=True, default="", editable=False, max_length=64),
            ),
        ],
    )

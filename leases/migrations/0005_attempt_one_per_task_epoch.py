"""One attempt per (task, epoch), enforced by the database.

On PostgreSQL the unique index is built CONCURRENTLY (claims and holder calls
keep running while it builds) and then attached as the constraint; this is why
the migration is not atomic. Existing duplicates, which no release of
Leasehold writes, stop it with the rows named instead of a bare
IntegrityError.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations, models

NAME = "attempt_one_per_task_epoch"
CONSTRAINT = models.UniqueConstraint(fields=("task", "epoch"), name=NAME)


def forwards(apps: Any, schema_editor: Any) -> None:
    attempt = apps.get_model("leases", "Attempt")
    duplicates = list(
        attempt.objects.values("task_id", "epoch").annotate(n=models.Count("id")).filter(n__gt=1)[:10]
    )
    if duplicates:
        raise RuntimeError(f"Attempts share a (task, epoch); resolve these before migrating: {duplicates}")
    table = attempt._meta.db_table
    if schema_editor.connection.vendor != "postgresql":
        # SQLite: a unique index (a table rebuild here would use the state without the constraint).
        schema_editor.execute(f'CREATE UNIQUE INDEX "{NAME}" ON "{table}" ("task_id", "epoch")')
        return
    schema_editor.execute(f'CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS "{NAME}" ON "{table}" ("task_id", "epoch")')
    schema_editor.execute(f'ALTER TABLE "{table}" ADD CONSTRAINT "{NAME}" UNIQUE USING INDEX "{NAME}"')


def backwards(apps: Any, schema_editor: Any) -> None:
    table = apps.get_model("leases", "Attempt")._meta.db_table
    if schema_editor.connection.vendor != "postgresql":
        schema_editor.execute(f'DROP INDEX IF EXISTS "{NAME}"')
    else:
        schema_editor.execute(f'ALTER TABLE "{table}" DROP CONSTRAINT IF EXISTS "{NAME}"')


class Migration(migrations.Migration):
    atomic = False
    dependencies = [("leases", "0004_reconciliation")]
    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.AddConstraint(model_name="attempt", constraint=CONSTRAINT)],
            database_operations=[migrations.RunPython(forwards, backwards)],
        )
    ]

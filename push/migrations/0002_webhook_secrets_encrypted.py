# Written by hand (issue 27): the signing secrets at rest are encrypted (push.secret_box); the rows that exist
# are encrypted here, and decrypted again going back.

from typing import Any

from django.db import migrations, models

from push import secret_box


def _convert(apps: Any, convert: Any) -> None:
    endpoints = apps.get_model("push", "WebhookEndpoint").objects
    for pk, secret, previous_secret in endpoints.values_list("pk", "secret", "previous_secret"):
        endpoints.filter(pk=pk).update(secret=convert(secret), previous_secret=convert(previous_secret))


def encrypt_secrets(apps: Any, schema_editor: Any) -> None:
    _convert(apps, secret_box.encrypt)


def decrypt_secrets(apps: Any, schema_editor: Any) -> None:
    _convert(apps, secret_box.decrypt)


def _set_length(schema_editor: Any, length: int) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"ALTER TABLE ledger_webhookendpoint ALTER COLUMN secret TYPE varchar({length}), "
            f"ALTER COLUMN previous_secret TYPE varchar({length})"
        )


def widen_columns(apps: Any, schema_editor: Any) -> None:
    _set_length(schema_editor, 255)


def narrow_columns(apps: Any, schema_editor: Any) -> None:
    _set_length(schema_editor, 100)


class Migration(migrations.Migration):

    dependencies = [
        ('push', '0001_initial'),
    ]

    operations = [
        # A Fernet token of a 48-character secret is 164 characters. SQLite does not enforce a
        # varchar's length, and its table remake for AlterField would break the ledger_event
        # trigger that reads this table: the column is widened on PostgreSQL only.
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='webhookendpoint',
                    name='previous_secret',
                    field=models.CharField(blank=True, editable=False, max_length=255),
                ),
                migrations.AlterField(
                    model_name='webhookendpoint',
                    name='secret',
                    field=models.CharField(editable=False, max_length=255),
                ),
            ],
            database_operations=[migrations.RunPython(widen_columns, narrow_columns)],
        ),
        migrations.RunPython(encrypt_secrets, decrypt_secrets),
    ]

"""Create the groups `Ledger admins` and `Managers` (SPEC §10).

Their permissions are (re)synced by `ledger.permissions.sync_group_permissions`
after every migrate, once Django has created the permissions of all models.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

GROUPS = ("Ledger admins", "Managers")


def create_groups(apps: Any, schema_editor: Any) -> None:
    Group = apps.get_model("auth", "Group")
    for name in GROUPS:
        Group.objects.using(schema_editor.connection.alias).get_or_create(name=name)


class Migration(migrations.Migration):
    dependencies = [("ledger", "0002_event_append_only"), ("auth", "0012_alter_user_first_name_max_length")]
    operations = [migrations.RunPython(create_groups, migrations.RunPython.noop)]

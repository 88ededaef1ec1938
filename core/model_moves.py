"""Moving a model to another app without touching its table (STYLE.md, Layout).

The model keeps its table (`Meta.db_table`); the two apps' migrations move
only Django's state (`SeparateDatabaseAndState`), and this operation moves
the content types, so permissions, group grants and the admin's log entries
follow the model to its new app. It runs backwards too.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations


def content_types_move(*, old_label: str, new_label: str, models: tuple[str, ...]) -> migrations.RunPython:
    """A RunPython that relabels the content types of `models` (lower-case names) from one app to the other."""

    def relabel(apps: Any, schema_editor: Any, source: str, target: str) -> None:
        content_type = apps.get_model("contenttypes", "ContentType")
        rows = content_type.objects.using(schema_editor.connection.alias)
        for model in models:
            # A content type that already exists under the target label (made by a migrate that ran
            # between a backward and a forward move) is kept; the source one then stays as it is.
            if not rows.filter(app_label=target, model=model).exists():
                rows.filter(app_label=source, model=model).update(app_label=target)

    return migrations.RunPython(
        lambda apps, schema_editor: relabel(apps, schema_editor, old_label, new_label),
        lambda apps, schema_editor: relabel(apps, schema_editor, new_label, old_label),
        elidable=False,
    )

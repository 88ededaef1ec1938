"""An export of a serving database is one snapshot and holds no writer off (SPEC §17)."""

from __future__ import annotations

import io
import threading

import pytest
from django.db import connections

from ledger.actors import SYSTEM
from ledger.models import Project, Task
from ledger.services import task_create
from operations.transfer.export import project_export
from tests.factories import ProjectFactory, TaskFactory
from tests.operations.transfer.scenario import lines_of

pytestmark = pytest.mark.django_db(transaction=True)


class _WritesMidway(io.StringIO):
    """On the export's first line, another thread (its own connection) creates a task and must finish in time."""

    def __init__(self, project_pk: int) -> None:
        super().__init__()
        self.project_pk = project_pk
        self.finished_in_time: bool | None = None

    def write(self, text: str) -> int:
        if self.finished_in_time is None:

            def create() -> None:
                try:
                    task_create(project=Project.objects.get(pk=self.project_pk), title="written midway", actor=SYSTEM)
                finally:
                    connections.close_all()

            writer = threading.Thread(target=create)
            writer.start()
            writer.join(3)  # below SQLite's 5 s busy timeout: a held write lock would show here
            self.finished_in_time = not writer.is_alive()
            writer.join()
        return super().write(text)


def test_a_write_during_an_export_neither_waits_nor_shows_in_the_file():
    project = ProjectFactory(slug="live", key_prefix="LIVE")
    TaskFactory(project=project, title="before")
    out = _WritesMidway(project.pk)
    project_export(project=project, out=out)
    assert out.finished_in_time is True
    assert Task.objects.filter(project=project, title="written midway").exists()
    titles = [row["title"] for row in lines_of(out.getvalue()) if row["type"] == "task"]
    assert titles == ["before"]

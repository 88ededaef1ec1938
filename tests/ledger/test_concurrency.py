from __future__ import annotations

import pytest

from ledger.actors import SYSTEM
from ledger.models import Event, EventType, Project, Task
from ledger.services import task_create
from tests.concurrency import run_in_threads
from tests.factories import ProjectFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_forty_concurrent_creates_get_forty_gap_free_keys():
    project = ProjectFactory(slug="race")

    def create(index: int) -> str:
        fresh = Project.objects.get(pk=project.pk)
        return task_create(project=fresh, title=f"t{index}", actor=SYSTEM).key

    results = run_in_threads(40, create)
    errors = [r for r in results if isinstance(r, BaseException)]
    assert errors == []
    assert sorted(results, key=lambda key: int(key.split("-")[1])) == [f"RACE-{n}" for n in range(1, 41)]
    assert Task.objects.filter(project=project).count() == 40
    assert Event.objects.filter(type=EventType.TASK_CREATED).count() == 40

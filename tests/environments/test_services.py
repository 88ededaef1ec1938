from __future__ import annotations

import pytest

from core.errors import ValidationFailed
from environments.services import environment_create, environment_update
from ledger.actors import SYSTEM
from ledger.models import Event, EventType
from tests.factories import ProjectFactory

pytestmark = pytest.mark.django_db


def test_the_mapping_is_edited_through_the_service_with_one_event():
    env = environment_create(project=ProjectFactory(), name="preview-b", kind="database", actor=SYSTEM)
    changed = environment_update(
        environment=env,
        actor=SYSTEM,
        changes={"isolation": "container", "resources": {"ports": [5433]}, "kind": "database"},
    )
    assert (changed.isolation, changed.resources) == ("container", {"ports": [5433]})
    event = Event.objects.get(type=EventType.ENVIRONMENT_UPDATED)
    assert event.payload == {"environment": "preview-b", "fields": ["isolation", "resources"]}
    environment_update(environment=env, actor=SYSTEM, changes={"isolation": "container"})
    assert Event.objects.filter(type=EventType.ENVIRONMENT_UPDATED).count() == 1  # no change, no event


@pytest.mark.parametrize(
    "changes",
    [
        {"resources": {"database_url": "postgres://u:secret@db/x"}},
        {"resources": {"ports": [0]}},
        {"resources": {"unknown": 1}},
        {"isolation": "bunker"},
        {"name": "renamed"},
    ],
)
def test_bad_mappings_are_refused_and_change_nothing(changes):
    env = environment_create(project=ProjectFactory(), name="preview-b", kind="database", actor=SYSTEM)
    with pytest.raises(ValidationFailed):
        environment_update(environment=env, actor=SYSTEM, changes=changes)
    env.refresh_from_db()
    assert (env.isolation, env.resources, env.name) == ("none", {}, "preview-b")

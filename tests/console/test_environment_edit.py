from __future__ import annotations

import pytest

from environments.models import Environment
from ledger.models import Event, EventType
from tests.factories import EnvironmentFactory, ProjectFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def environment():
    return EnvironmentFactory(project=ProjectFactory(slug="web"), name="preview-b", kind="database")


def change_url(environment):
    return f"/admin/environments/environment/{environment.pk}/change/"


def test_a_ledger_admin_edits_the_mapping_through_the_service(ops_client, environment):
    response = ops_client.post(
        change_url(environment),
        {
            "kind": "container",
            "isolation": "microvm",
            "resources": '{"container_name": "pb"}',
            "credentials_ref": "vault/pb",
        },
    )
    assert response.status_code == 302, response.content[:2000]
    environment.refresh_from_db()
    assert (environment.kind, environment.isolation, environment.credentials_ref) == (
        "container",
        "microvm",
        "vault/pb",
    )
    assert environment.resources == {"container_name": "pb"}
    assert Event.objects.get(type=EventType.ENVIRONMENT_UPDATED).actor_user is not None


def test_a_password_in_the_mapping_is_refused_on_the_form(ops_client, environment):
    response = ops_client.post(
        change_url(environment),
        {"kind": "database", "isolation": "none", "resources": '{"database_url": "postgres://u:pw@db/x"}'},
    )
    assert response.status_code == 200
    assert b"password" in response.content
    assert Environment.objects.get(pk=environment.pk).resources == {}


def test_a_manager_cannot_edit_the_mapping(manager_client, environment):
    page = manager_client.get(change_url(environment))
    assert page.status_code == 200
    assert b'name="isolation"' not in page.content
    response = manager_client.post(change_url(environment), {"kind": "vm", "isolation": "none", "resources": "{}"})
    assert response.status_code == 403
    assert Environment.objects.get(pk=environment.pk).kind == "database"

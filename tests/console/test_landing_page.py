"""The landing page of a project in the console (SPEC §21.1): the queue, the results, the settings form."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry

from landing.services import LandingSettings, project_set_landing
from ledger.actors import SYSTEM
from ledger.models import Project
from tests.factories import AgentFactory, ProjectFactory, TaskFactory
from tests.landing.helpers import deliver, head

pytestmark = pytest.mark.django_db

URL = "/admin/landing/queue/web/"


@pytest.fixture
def project(clock) -> Project:
    project: Project = ProjectFactory(slug="web", repository="/srv/web")  # type: ignore[assignment]
    project_set_landing(project=project, settings=LandingSettings(target_branch="main"), actor=SYSTEM)
    return project


def test_the_page_shows_the_queue_in_order(ops_client, project):
    agent = AgentFactory(projects=[project])
    low = TaskFactory(project=project, title="low one")
    high = TaskFactory(project=project, title="high one", priority=9)
    deliver(agent, low.key, commit=head(1))
    deliver(agent, high.key, commit=head(2))
    page = ops_client.get(URL)
    assert page.status_code == 200
    html = page.content.decode()
    assert "Queue · 2 delivered" in html
    assert html.index("high one") < html.index("low one")
    assert "Landing is <b>on</b>" in html


def test_a_ledger_admin_changes_the_settings_through_the_service_with_a_log_entry(ops_client, project, ledger_admin):
    form = {
        "target_branch": "trunk",
        "land_method": "squash",
        "check_command": "make test\r\n",
        "check_timeout_seconds": "600",
        "required_approvals": "0",
        "required_checks": "",
        "batch_max": "4",
        "max_failed_landings": "2",
    }
    response = ops_client.post(URL, form)
    assert response.status_code == 302
    project.refresh_from_db()
    assert (project.target_branch, project.land_method, project.check_command, project.batch_max) == (
        "trunk",
        "squash",
        "make test",
        4,
    )
    entry = LogEntry.objects.get(user=ledger_admin)
    assert "batch_max" in entry.change_message


def test_a_bad_setting_is_shown_on_the_form_and_changes_nothing(ops_client, project):
    form = {
        "target_branch": "bad..name",
        "land_method": "merge",
        "check_command": "",
        "check_timeout_seconds": "600",
        "required_approvals": "0",
        "required_checks": "",
        "batch_max": "1",
        "max_failed_landings": "3",
    }
    response = ops_client.post(URL, form)
    assert response.status_code == 200
    assert "VALIDATION_ERROR" in response.content.decode()
    project.refresh_from_db()
    assert project.target_branch == "main"


def test_a_manager_sees_the_queue_but_may_not_change_the_settings(manager_client, project):
    assert manager_client.get(URL).status_code == 200
    assert "Save landing settings" not in manager_client.get(URL).content.decode()
    assert manager_client.post(URL, {"target_branch": ""}).status_code == 403
    project.refresh_from_db()
    assert project.target_branch == "main"

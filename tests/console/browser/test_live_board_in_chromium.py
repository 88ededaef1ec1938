"""The task board is live (issue 32): a change made through the services moves its card within seconds,
without the page reloading; another project's change does not refresh it."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from playwright.sync_api import expect

from leases.services import lease_claim
from ledger.actors import SYSTEM
from ledger.permissions import MANAGERS
from ledger.services import task_create
from tests.console.browser.conftest import login
from tests.console.conftest import PASSWORD
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("feed_waiters_ended")]

# Well under the board's 30 s fallback reload: an update seen within this came through the stream.
LIVE_MS = 8_000


@pytest.fixture
def manager_user(django_user_model):
    user = django_user_model.objects.create_user(username="boss", password=PASSWORD, is_staff=True)
    user.groups.add(Group.objects.get(name=MANAGERS))
    return user


def test_the_board_moves_a_card_when_a_service_changes_its_task_without_a_reload(page, manager_user):
    project = ProjectFactory(slug="web", name="Web app")
    other = ProjectFactory(slug="api", name="API")
    agent = AgentFactory(handle="agent-07", projects=[project, other])
    task = TaskFactory(project=project, title="Fix the search copy")
    login(page, "boss")
    page.goto(f"/admin/ledger/task/board/{project.slug}/")
    expect(page.locator("#lh-column-ready")).to_contain_text(task.key)
    expect(page.locator("#lh-board-live")).to_have_attribute("data-state", "live")
    page.evaluate("window.lhNotReloaded = true")

    # Another project's work: no refresh of this board.
    lease_claim(task=TaskFactory(project=other, title="Elsewhere"), agent=agent)
    page.wait_for_timeout(1_500)
    assert page.locator("#lh-board").get_attribute("data-updates") is None

    lease_claim(task=task, agent=agent, lease_seconds=600)
    expect(page.locator("#lh-column-in_progress")).to_contain_text(task.key, timeout=LIVE_MS)
    expect(page.locator("#lh-column-ready")).not_to_contain_text(task.key)
    expect(page.locator("#lh-column-in_progress")).to_contain_text("agent-07")

    # Several changes at once are one refresh or a few, never one per event, and the page was never reloaded.
    updates = int(page.locator("#lh-board").get_attribute("data-updates") or "0")
    for number in range(5):
        task_create(project=project, title=f"New work {number}", actor=SYSTEM)
    expect(page.locator("#lh-column-open")).to_contain_text("New work 4", timeout=LIVE_MS)
    page.wait_for_timeout(1_000)
    assert int(page.locator("#lh-board").get_attribute("data-updates") or "0") - updates <= 3
    assert page.evaluate("window.lhNotReloaded") is True

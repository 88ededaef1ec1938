"""axe-core in Chromium on every console page a Ledger admin can open (issue 32): no `serious` or
`critical` violation. axe-core is vendored beside this file (tests/console/browser/axe/, pinned)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from playwright.sync_api import Page

from leases.services import lease_claim
from ledger.actors import SYSTEM
from ledger.services import dependency_add
from push.services.webhooks import webhook_set_active
from tests.console.browser.conftest import login
from tests.factories import (
    AgentFactory,
    AttemptFactory,
    FindingFactory,
    ProjectFactory,
    ReviewRequestFactory,
    TaskFactory,
    WebhookEndpointFactory,
)

pytestmark = pytest.mark.django_db(transaction=True)

AXE = Path(__file__).parent / "axe" / "axe.min.js"
AXE_VERSION = "4.10.3"
BLOCKING = {"serious", "critical"}


@pytest.fixture
def console_world():
    project = ProjectFactory(slug="web", name="Web app")
    agent = AgentFactory(handle="agent-07", projects=[project])
    other = AgentFactory(handle="agent-09", projects=[project])
    held = TaskFactory(project=project, title="Fix the search copy", paths=["src/search"])
    blocked = TaskFactory(project=project, title="Tidy the footer")
    dependency_add(task=blocked, blocked_by=held, actor=SYSTEM)
    lease_claim(task=held, agent=agent, lease_seconds=600)
    review = ReviewRequestFactory(attempt=AttemptFactory(task=TaskFactory(project=project), agent=other))
    FindingFactory(project=project, subject_key="lh/orphan-branch")
    endpoint = WebhookEndpointFactory()
    webhook_set_active(endpoint=WebhookEndpointFactory(), active=False, actor=SYSTEM)
    return project, held, review, endpoint


def console_pages(project, held, review, endpoint) -> list[str]:
    return [
        "/admin/",
        "/admin/ledger/task/",
        f"/admin/ledger/task/{held.pk}/change/",
        f"/admin/ledger/task/board/{project.slug}/?refresh=off",
        f"/admin/landing/queue/{project.slug}/",
        "/admin/reconciliation/finding/",
        "/admin/leases/attempt/",
        "/admin/ledger/agent/",
        "/admin/ledger/agent/health/",
        "/admin/jobs/",
        "/admin/insight/incident/",
        "/admin/push/webhookendpoint/",
        f"/admin/push/webhookendpoint/{endpoint.pk}/change/",
        "/admin/leases/pathreservation/",
        "/admin/leases/reviewrequest/",
        f"/admin/leases/reviewrequest/{review.pk}/change/",
        "/admin/reports/",
    ]


def blocking_violations(page: Page) -> list[str]:
    page.add_script_tag(path=str(AXE))
    result = page.evaluate("async () => await axe.run(document, {resultTypes: ['violations']})")
    found = []
    for violation in result["violations"]:
        if violation["impact"] in BLOCKING:
            targets = [json.dumps(node["target"]) for node in violation["nodes"][:3]]
            found.append(f"{violation['impact']} {violation['id']}: {violation['help']} at {', '.join(targets)}")
    return found


def test_the_vendored_axe_core_is_the_pinned_version():
    assert AXE.read_text()[:40].startswith(f"/*! axe v{AXE_VERSION}")


def test_no_serious_or_critical_axe_violation_on_any_console_page(page, ledger_admin, console_world):
    login(page, "ops")
    problems: dict[str, list[str]] = {}
    for url in console_pages(*console_world):
        response = page.goto(url)
        assert response is not None
        assert response.status == 200, url
        found = blocking_violations(page)
        if found:
            problems[url] = found
    assert problems == {}, "\n".join(f"{url}\n  " + "\n  ".join(lines) for url, lines in problems.items())

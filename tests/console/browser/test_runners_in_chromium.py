"""The Runners pages in real Chromium (SPEC §23.1): from the dashboard to the list, cordon a runner through
the confirmation page and see its badge; then its page, and cancel a slot's attempt."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from playwright.sync_api import Page, expect

from leases.models import Attempt, AttemptStatus
from ledger import clock
from ledger.permissions import LEDGER_ADMINS
from runners.models import Runner
from runners.services.pausing import CORDONED_REASON
from tests.console.browser.conftest import login, screenshot
from tests.console.conftest import PASSWORD
from tests.console.runner_fleet import build_fleet

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def operator(django_user_model):
    user = django_user_model.objects.create_user(username="ops", password=PASSWORD, is_staff=True)
    user.groups.add(Group.objects.get(name=LEDGER_ADMINS))
    return user


@pytest.fixture
def runners():
    clock.freeze(clock.now().replace(microsecond=0))
    yield build_fleet()
    clock.unfreeze()


def test_cordon_a_runner_from_the_list_and_cancel_a_slots_attempt_from_its_page(page: Page, operator, runners):
    login(page, "ops")
    page.goto("/admin/")
    page.click("#lh-runners-link")
    row = page.locator("#result_list tr", has=page.locator("#runner-gpu-box"))
    expect(row).to_contain_text("online")
    expect(row).not_to_contain_text("cordoned")
    expect(page.locator("#result_list tr", has=page.locator("#runner-old-box"))).to_contain_text("lost")
    screenshot(page, "runners-list.png")

    row.locator("input.action-select").check()
    page.select_option("select[name=action]", "cordon")
    page.click("button[name=index]")
    expect(page.locator("h1")).to_contain_text("Cordon 1 runner")
    assert Runner.objects.get(pk=runners.busy.pk).cordoned_at is None  # nothing happens before the confirmation
    page.click("#lh-confirm-submit")
    expect(page.locator(".messagelist")).to_contain_text("Cordoned: 1 runner (gpu-box).")
    expect(row.locator(".lh-runner-cordoned")).to_have_text("cordoned")
    assert {slot.agent.pause_reason for slot in Runner.objects.get(pk=runners.busy.pk).slot_rows.all()} == {
        CORDONED_REASON
    }

    page.click("#runner-gpu-box")
    expect(page.locator("#lh-runner-status")).to_contain_text("cordoned")
    expect(page.locator("#slot-1")).to_contain_text(runners.attempt.task.key)
    expect(page.locator("#lh-runner-uncordon")).to_be_visible()
    screenshot(page, "runners-detail.png")

    page.click("#lh-cancel-slot-1")
    expect(page.locator("h1")).to_contain_text(f"Cancel attempt {runners.attempt.pk}")
    page.fill("#id_note", "wrong model")
    page.click("#lh-confirm-submit")
    expect(page.locator(".messagelist")).to_contain_text(f"Cancelled attempt {runners.attempt.pk} on slot 1")
    expect(page.locator("#slot-1")).to_contain_text("cancel asked")
    assert Attempt.objects.get(pk=runners.attempt.pk).status == AttemptStatus.INTERRUPTED

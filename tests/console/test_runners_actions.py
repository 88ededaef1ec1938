"""The runners' levers in the console (SPEC §23.1): each confirmed first, refused to Managers, written to the
LogEntry, and run through `runners.services` (slot agents paused, attempts handed off, tokens rotated)."""

from __future__ import annotations

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.models import LogEntry
from django.urls import reverse

from leases.models import Attempt, AttemptStatus, InterruptionReason
from ledger.models import Event, EventType, Task
from ledger.tokens import hash_token
from runners.models import Runner, RunnerSlot, SlotState
from runners.services import SlotReport, runner_heartbeat
from runners.services.pausing import CORDONED_REASON, DRAINING_REASON
from tests.console.runner_fleet import RunnerFleet, build_fleet

pytestmark = pytest.mark.django_db

LIST = "/admin/runners/runner/"


@pytest.fixture
def runners(clock) -> RunnerFleet:
    return build_fleet()


def url(name: str, runner: Runner, *args: int) -> str:
    return reverse(f"admin:runners_runner_{name}", args=[runner.pk, *args])


def slot_agents(runner: Runner):
    return [slot.agent for slot in RunnerSlot.objects.filter(runner=runner).select_related("agent").order_by("number")]


def entries(runner: Runner) -> list[str]:
    return list(LogEntry.objects.filter(object_id=str(runner.pk)).values_list("change_message", flat=True))


def test_cordon_from_the_list_asks_first_then_pauses_the_slot_agents_and_writes_a_log_entry(ops_client, runners):
    selected = {"action": "cordon", ACTION_CHECKBOX_NAME: [runners.busy.pk, runners.lost.pk]}
    page = ops_client.post(LIST, selected)
    assert page.status_code == 200
    html = page.content.decode()
    assert "Cordon 2 runners" in html
    assert "Yes, cordon" in html
    assert not Runner.objects.filter(cordoned_at__isnull=False).exists()
    assert not LogEntry.objects.exists()

    done = ops_client.post(LIST, {**selected, "post": "yes"}, follow=True)
    assert "Cordoned: 2 runners (gpu-box, old-box)." in done.content.decode()
    runners.busy.refresh_from_db()
    assert runners.busy.cordoned_at is not None
    assert all(a.claims_paused_at is not None and a.pause_reason == CORDONED_REASON for a in slot_agents(runners.busy))
    assert entries(runners.busy) == ["Cordoned: its slots take no new work."]
    assert Event.objects.filter(type=EventType.RUNNER_CORDONED, payload__runner="gpu-box").count() == 1
    # The running attempt goes on: cordon takes no work away.
    assert Attempt.objects.get(pk=runners.attempt.pk).status == AttemptStatus.ACTIVE
    html = ops_client.get(LIST).content.decode()
    assert html.count("lh-badge lh-runner-cordoned") == 2


def test_uncordon_from_the_list_resumes_the_slot_agents_and_reports_what_was_not_cordoned(ops_client, runners):
    cordon = {"action": "cordon", ACTION_CHECKBOX_NAME: [runners.busy.pk], "post": "yes"}
    ops_client.post(LIST, cordon)
    uncordon = {"action": "uncordon", ACTION_CHECKBOX_NAME: [runners.busy.pk, runners.fresh.pk], "post": "yes"}
    html = ops_client.post(LIST, uncordon, follow=True).content.decode()
    assert "Uncordoned: 1 runner (gpu-box)." in html
    assert "Not cordoned: new-box." in html
    assert all(agent.claims_paused_at is None for agent in slot_agents(runners.busy))
    assert entries(runners.fresh) == []


def test_drain_and_undrain_from_a_runners_page(ops_client, runners):
    confirm = ops_client.get(url("drain", runners.busy))
    assert confirm.status_code == 200
    assert "Yes, drain" in confirm.content.decode()
    assert Runner.objects.get(pk=runners.busy.pk).draining_at is None
    done = ops_client.post(url("drain", runners.busy), {"post": "yes"})
    assert done.status_code == 302
    assert done["Location"] == reverse("admin:runners_runner_change", args=[runners.busy.pk])
    assert all(agent.pause_reason == DRAINING_REASON for agent in slot_agents(runners.busy))
    answer = runner_heartbeat(runner=runners.busy, slots=[SlotReport(number=1, state=SlotState.WORKING)])
    assert answer.draining is True
    page = ops_client.get(done["Location"]).content.decode()
    assert "lh-runner-draining" in page
    assert 'id="lh-runner-undrain"' in page
    ops_client.post(url("undrain", runners.busy), {"post": "yes"})
    assert all(agent.claims_paused_at is None for agent in slot_agents(runners.busy))
    assert entries(runners.busy) == [
        "Undrained: its slots take work again (unless cordoned).",
        "Drain: finishes what runs, takes no new work.",
    ]


def test_cancel_attempt_asks_first_then_hands_the_attempt_off_and_tells_the_runner(ops_client, runners, ledger_admin):
    attempt = runners.attempt
    target = url("cancel_attempt", runners.busy, 1, attempt.pk)
    confirm = ops_client.get(target)
    html = confirm.content.decode()
    assert confirm.status_code == 200
    assert attempt.task.key in html
    assert "Yes, cancel the attempt" in html
    assert Attempt.objects.get(pk=attempt.pk).status == AttemptStatus.ACTIVE

    done = ops_client.post(target, {"post": "yes", "note": "wrong model"}, follow=True)
    assert f"Cancelled attempt {attempt.pk} on slot 1 of gpu-box" in done.content.decode()
    ended = Attempt.objects.get(pk=attempt.pk)
    assert ended.status == AttemptStatus.INTERRUPTED
    assert ended.interruption_reason_code == InterruptionReason.USER_REQUEST
    assert RunnerSlot.objects.get(runner=runners.busy, number=1).cancel_attempt_id == attempt.pk
    assert Task.objects.get(pk=attempt.task_id).status == "ready"
    # The runner's next heartbeat is told to SIGTERM the command.
    report = SlotReport(number=1, state=SlotState.WORKING, attempt_id=attempt.pk, task=attempt.task.key)
    assert runner_heartbeat(runner=runners.busy, slots=[report]).cancel == [attempt.pk]
    event = Event.objects.get(type=EventType.RUNNER_ATTEMPT_CANCELLED)
    assert event.actor_user == ledger_admin
    assert event.payload["note"] == "wrong model"
    [entry] = entries(runners.busy)
    assert f"Cancelled attempt {attempt.pk} on slot 1 (gpu-box.1)" in entry
    assert (
        "cancel asked #"
        in ops_client.get(reverse("admin:runners_runner_change", args=[runners.busy.pk])).content.decode()
    )


def test_cancelling_an_attempt_the_slot_no_longer_holds_cancels_nothing(ops_client, runners):
    target = url("cancel_attempt", runners.busy, 1, runners.attempt.pk + 1000)
    page = ops_client.post(target, {"post": "yes"}, follow=True)
    assert "holds no live attempt" in page.content.decode()
    assert Attempt.objects.get(pk=runners.attempt.pk).status == AttemptStatus.ACTIVE
    assert not LogEntry.objects.exists()
    assert "no longer holds" in ops_client.get(target, follow=True).content.decode()


def test_rotate_token_asks_first_then_shows_the_new_token_once(ops_client, runners):
    before = Runner.objects.get(pk=runners.busy.pk).token_hash
    confirm = ops_client.get(url("rotate", runners.busy))
    assert "Yes, rotate" in confirm.content.decode()
    assert Runner.objects.get(pk=runners.busy.pk).token_hash == before
    page = ops_client.post(url("rotate", runners.busy), {"post": "yes"})
    assert page.status_code == 200
    assert "no-store" in page["Cache-Control"]
    html = page.content.decode()
    assert "will not be shown again" in html
    start = html.index('id="lh-token-gpu-box"')
    token = html[html.index(">", start) + 1 : html.index("</p>", start)]
    assert token.startswith("lhr_")
    assert Runner.objects.get(pk=runners.busy.pk).token_hash == hash_token(token) != before
    assert entries(runners.busy) == ["Rotated the runner token; the new one was shown once."]
    assert token not in str(list(Event.objects.values_list("payload", flat=True)))


@pytest.mark.parametrize("name", ["cordon", "uncordon", "drain", "undrain", "rotate"])
def test_a_manager_may_not_run_a_lever_from_a_runners_page(manager_client, runners, name):
    assert manager_client.get(url(name, runners.busy)).status_code == 403
    assert manager_client.post(url(name, runners.busy), {"post": "yes"}).status_code == 403
    runner = Runner.objects.get(pk=runners.busy.pk)
    assert runner.cordoned_at is None
    assert runner.draining_at is None
    assert not LogEntry.objects.exists()


def test_a_manager_may_not_cancel_an_attempt_nor_see_the_list_actions(manager_client, runners):
    target = url("cancel_attempt", runners.busy, 1, runners.attempt.pk)
    assert manager_client.post(target, {"post": "yes"}).status_code == 403
    assert Attempt.objects.get(pk=runners.attempt.pk).status == AttemptStatus.ACTIVE
    html = manager_client.get(LIST).content.decode()
    assert 'name="action"' not in html
    manager_client.post(LIST, {"action": "cordon", ACTION_CHECKBOX_NAME: [runners.busy.pk], "post": "yes"})
    assert Runner.objects.get(pk=runners.busy.pk).cordoned_at is None
    assert not LogEntry.objects.exists()

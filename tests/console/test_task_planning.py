"""Planning in the admin (issue 15): edit through the lease-aware service, dependencies, reservations,
status buttons, the queue, claimability, cancel-with-release; and bugs 1, 4, 6, 8, 9 on the task pages."""

from __future__ import annotations

from datetime import timedelta

import pytest

from leases.models import Attempt
from leases.services import HolderProof, attempt_renew, lease_claim, task_reassign, task_update
from ledger.actors import SYSTEM
from ledger.models import Event, EventType, Task, TaskDependency
from ledger.services import agent_deactivate, dependency_add
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db

TASKS = "/admin/ledger/task/"


def page(client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def edit_data(task: Task, **changes) -> dict:
    data = {
        "edited_version": task.version,
        "title": task.title,
        "description": task.description,
        "acceptance_criteria": task.acceptance_criteria,
        "priority": task.priority,
        "task_class": task.task_class,
        "labels": ", ".join(task.labels),
    }
    return {**data, **changes}


# --- editing ---------------------------------------------------------------------------


def test_editing_the_priority_goes_through_the_service_and_bumps_the_version(ops_client, fleet):
    task = fleet.idle
    body = page(ops_client, f"{TASKS}{task.pk}/edit/")
    assert f'<span id="lh-edited-version">{task.version}</span>' in body
    response = ops_client.post(f"{TASKS}{task.pk}/edit/", edit_data(task, priority=7, labels="ui, copy"))
    assert response.status_code == 302
    task.refresh_from_db()
    assert (task.priority, task.labels, task.version) == (7, ["ui", "copy"], 2)
    event = Event.objects.filter(task=task, type=EventType.TASK_UPDATED).latest("id")
    assert event.payload == {"fields": ["labels", "priority"], "version": 2}
    assert event.actor_user.username == "ops"


def test_a_stale_edit_is_refused_with_a_clear_message_and_nothing_saved(ops_client, fleet):
    task = fleet.idle
    stale = edit_data(task, priority=9)
    task_update(task=task, actor=SYSTEM, changes={"title": "Renamed meanwhile"})
    response = ops_client.post(f"{TASKS}{task.pk}/edit/", stale)
    assert response.status_code == 200
    body = response.content.decode()
    assert "changed since you opened this page: you edited version 1, it is now version 2" in body
    assert "Nothing was saved" in body
    task.refresh_from_db()
    assert (task.priority, task.title) == (0, "Renamed meanwhile")


def test_an_edit_under_a_live_lease_warns_and_keeps_the_lease(ops_client, fleet):
    body = page(ops_client, f"{TASKS}{fleet.held.pk}/edit/")
    assert "agent-07 holds a live lease" in body
    response = ops_client.post(f"{TASKS}{fleet.held.pk}/edit/", edit_data(fleet.held, description="Now in French"))
    assert response.status_code == 302
    assert Attempt.objects.get(pk=fleet.grant.attempt.pk).status == "active"


def test_managers_cannot_edit(manager_client, fleet):
    assert manager_client.get(f"{TASKS}{fleet.idle.pk}/edit/").status_code == 403
    assert manager_client.post(f"{TASKS}{fleet.idle.pk}/edit/", edit_data(fleet.idle, priority=5)).status_code == 403


# --- dependencies ----------------------------------------------------------------------


def test_adding_and_removing_a_dependency_on_the_task_page(ops_client, fleet):
    task, blocker = fleet.idle, fleet.held
    response = ops_client.post(f"{TASKS}{task.pk}/dependencies/add/", {"blocked_by": blocker.key.lower()}, follow=True)
    assert f"{task.key} now waits for {blocker.key}" in response.content.decode()
    assert TaskDependency.objects.filter(task=task, blocked_by=blocker, removed_at__isnull=True).exists()
    assert Event.objects.filter(type=EventType.TASK_DEPENDENCY_ADDED, task=task, actor_user__username="ops").exists()

    response = ops_client.post(f"{TASKS}{task.pk}/dependencies/remove/", {"blocked_by": blocker.key}, follow=True)
    assert f"{task.key} no longer waits for {blocker.key}" in response.content.decode()
    assert TaskDependency.objects.get(task=task, blocked_by=blocker).removed_at is not None


def test_a_cycle_is_refused_with_the_services_path(ops_client, fleet):
    a, b = fleet.idle, fleet.held
    c = TaskFactory(project=fleet.project, title="Third")
    dependency_add(task=a, blocked_by=b, actor=SYSTEM)
    dependency_add(task=b, blocked_by=c, actor=SYSTEM)
    response = ops_client.post(f"{TASKS}{c.pk}/dependencies/add/", {"blocked_by": a.key}, follow=True)
    body = response.content.decode()
    assert f"{c.key} blocked by {a.key} would close a cycle." in body
    assert f"The cycle: {c.key} → {a.key} → {b.key} → {c.key}." in body
    assert not TaskDependency.objects.filter(task=c).exists()


def test_the_blocked_by_list_shows_the_blockers_effective_status(ops_client, fleet):
    # Bug 4: a blocker under a live lease is "In progress", not its stored "Ready".
    dependency_add(task=fleet.idle, blocked_by=fleet.held, actor=SYSTEM)
    body = page(ops_client, f"{TASKS}{fleet.idle.pk}/change/")
    inline = body[body.index('id="dependencies-group"') :]
    inline = inline[: inline.index("</fieldset>")]
    assert "In progress" in inline
    card = body[body.index('id="dependencies"') :]
    assert "In progress" in card[: card.index("</table>")]


# --- reservations (bug 1) --------------------------------------------------------------


def test_reassign_offers_only_agents_that_can_claim_the_task(ops_client, fleet):
    AgentFactory(handle="outsider", projects=[ProjectFactory(slug="api")])
    gone = AgentFactory(handle="gone-agent", projects=[fleet.project])
    agent_deactivate(agent=gone, actor=SYSTEM)
    body = page(ops_client, f"{TASKS}{fleet.idle.pk}/reassign/")
    assert ">agent-09<" in body
    assert "outsider" not in body
    assert "gone-agent" not in body
    stranger = AgentFactory(handle="stranger", projects=[ProjectFactory(slug="ops")])
    response = ops_client.post(
        f"{TASKS}{fleet.idle.pk}/reassign/",
        {"post": "yes", "agent": stranger.pk, "reason": "x", "process_gone": "on"},
    )
    assert response.status_code == 200
    assert "That agent cannot claim these tasks" in response.content.decode()
    assert Task.objects.get(pk=fleet.idle.pk).reserved_for_id is None


def test_a_reservation_is_cleared_from_the_task_page(ops_client, fleet):
    task_reassign(task=fleet.idle, agent=fleet.other, actor=SYSTEM, reason="for agent-09")
    body = page(ops_client, f"{TASKS}{fleet.idle.pk}/change/")
    assert "Clear reservation" in body
    response = ops_client.post(f"{TASKS}{fleet.idle.pk}/reservation/clear/", follow=True)
    assert "no longer reserved for agent-09" in response.content.decode()
    assert Task.objects.get(pk=fleet.idle.pk).reserved_for_id is None
    assert Event.objects.get(type=EventType.TASK_RESERVATION_CLEARED).actor_user.username == "ops"


def test_the_dashboard_ready_count_leaves_out_tasks_nobody_can_claim(ops_client, fleet):
    # Bugs 1 and 4: one claimable task (idle); add one blocked and one stranded by a reservation.
    blocked = TaskFactory(project=fleet.project, title="Blocked twice")
    for _ in range(2):
        dependency_add(task=blocked, blocked_by=TaskFactory(project=fleet.project, status="open"), actor=SYSTEM)
    stranded = TaskFactory(project=fleet.project, title="Stranded")
    Task.objects.filter(pk=stranded.pk).update(reserved_for=AgentFactory(handle="elsewhere"))
    body = page(ops_client, "/admin/")
    tile = body[: body.index("Ready, unclaimed")]
    tile = tile[tile.rindex('href="') :]
    assert "claimable=yes" in tile
    assert '<div class="lh-stat-value">1</div>' in tile


# --- the list: claimability, default view, ordering --------------------------------------


def test_the_list_says_blocked_by_n_and_filters_on_claimability(ops_client, fleet):
    blocked = TaskFactory(project=fleet.project, title="Waits for two")
    for _ in range(2):
        dependency_add(task=blocked, blocked_by=TaskFactory(project=fleet.project, status="open"), actor=SYSTEM)
    body = page(ops_client, TASKS)
    row = body[body.index(blocked.key) :]
    row = row[: row.index("</tr>")]
    assert "Ready (blocked)" in row
    assert "blocked by 2" in row
    claimable = page(ops_client, TASKS + "?claimable=yes")
    assert fleet.idle.title in claimable
    assert blocked.title not in claimable
    assert fleet.held.title not in claimable
    assert blocked.title in page(ops_client, TASKS + "?claimable=blocked")
    assert blocked.title in page(ops_client, TASKS + "?claimable=no")


def test_the_list_defaults_to_active_work(ops_client, fleet):
    done = TaskFactory(project=fleet.project, title="Finished work")
    task_update(task=done, actor=SYSTEM, changes={"status": "done"})
    cancelled = TaskFactory(project=fleet.project, title="Dropped work")
    task_update(task=cancelled, actor=SYSTEM, changes={"status": "cancelled"})
    # Closed in the ledger but still under a live lease (its holder has not heard yet): still work.
    held_closed = TaskFactory(project=fleet.project, title="Closed under a live lease")
    lease_claim(task=held_closed, agent=AgentFactory(projects=[fleet.project]))
    Task.objects.filter(pk=held_closed.pk).update(status="cancelled")
    active = page(ops_client, TASKS)
    assert fleet.idle.title in active
    assert held_closed.title in active
    assert done.title not in active
    assert cancelled.title not in active
    assert "Active (not done, not cancelled)" in active
    everything = page(ops_client, TASKS + "?work=all")
    assert done.title in everything
    assert cancelled.title in everything
    closed = page(ops_client, TASKS + "?work=closed")
    assert done.title in closed
    assert fleet.idle.title not in closed
    assert done.title in page(ops_client, TASKS + "?status__exact=done")


def test_lease_left_sorts_soonest_expiring_first_with_no_lease_last(clock, ops_client, fleet):
    soon = TaskFactory(project=fleet.project, title="Expires soon")
    lease_claim(task=soon, agent=fleet.other, lease_seconds=60)
    later = TaskFactory(project=fleet.project, title="Expires later")
    lease_claim(task=later, agent=fleet.other, lease_seconds=5000)
    column = TaskAdminColumns.lease_left_index(page(ops_client, TASKS))
    body = page(ops_client, TASKS + f"?o={column}")
    positions = [body.index(task.title) for task in (soon, fleet.held, later, fleet.idle)]
    assert positions == sorted(positions)


class TaskAdminColumns:
    @staticmethod
    def lease_left_index(body: str) -> int:
        from django.contrib import admin

        display = admin.site._registry[Task].list_display
        return list(display).index("lease_remaining_display") + 1  # the admin's o= counts from 1


# --- cancel (bug 6) ---------------------------------------------------------------------


def test_cancel_of_a_held_task_asks_and_force_releases_by_default(ops_client, fleet):
    data = {"action": "cancel", "_selected_action": [fleet.held.pk], "index": 0}
    body = ops_client.post(TASKS, data).content.decode()
    assert "Also force-release the live lease" in body
    assert 'name="also_release" checked' in body or 'checked name="also_release"' in body or "checked" in body
    response = ops_client.post(
        TASKS,
        {**data, "post": "yes", "also_release": "on", "reason": "The task was cancelled.", "process_gone": "on"},
        follow=True,
    )
    assert "1 task cancelled. Revoked 1 live lease." in response.content.decode()
    assert Attempt.objects.get(pk=fleet.grant.attempt.pk).status == "revoked"
    assert Task.objects.get(pk=fleet.held.pk).status == "cancelled"


def test_cancel_without_release_shows_cancelled_lease_still_live(ops_client, fleet):
    response = ops_client.post(f"{TASKS}{fleet.held.pk}/cancel/", {"post": "yes", "reason": ""})
    assert response.status_code == 302
    assert Attempt.objects.get(pk=fleet.grant.attempt.pk).status == "active"
    assert "Cancelled (lease still live)" in page(ops_client, TASKS)
    assert "Cancelled (lease still live)" in page(ops_client, f"{TASKS}{fleet.held.pk}/change/")
    grant = fleet.grant
    proof = HolderProof(attempt_id=grant.attempt.pk, token=grant.token, epoch=grant.attempt.epoch, agent=fleet.holder)
    assert attempt_renew(proof=proof).task.status == "cancelled"


# --- status buttons and the queue ---------------------------------------------------------


def test_status_buttons_on_the_task_page(ops_client, fleet):
    opened = TaskFactory(project=fleet.project, status="open", title="Not yet")
    body = page(ops_client, f"{TASKS}{opened.pk}/change/")
    assert f"{TASKS}{opened.pk}/status/ready/" in body
    assert f"{TASKS}{opened.pk}/cancel/" in body
    ops_client.post(f"{TASKS}{opened.pk}/status/ready/")
    assert Task.objects.get(pk=opened.pk).status == "ready"
    assert ops_client.get(f"{TASKS}{opened.pk}/status/ready/").status_code == 405
    assert ops_client.post(f"{TASKS}{opened.pk}/status/bogus/").status_code == 404


def test_the_queue_lists_ready_tasks_in_claim_next_order(ops_client, fleet, clock):
    urgent = TaskFactory(project=fleet.project, title="Urgent", priority=5)
    blocked = TaskFactory(project=fleet.project, title="Urgent but blocked", priority=9)
    dependency_add(task=blocked, blocked_by=TaskFactory(project=fleet.project, status="open"), actor=SYSTEM)
    clock.advance(timedelta(minutes=1).total_seconds())
    reserved = TaskFactory(project=fleet.project, title="Reserved one", priority=5)
    task_reassign(task=reserved, agent=fleet.other, actor=SYSTEM, reason="for agent-09")
    body = page(ops_client, f"{TASKS}queue/web/")
    table = body[body.index('id="lh-queue"') :]
    order = [table.index(task.key) for task in (blocked, urgent, reserved, fleet.idle)]
    assert order == sorted(order)
    assert "blocked by 1" in table
    assert "only agent-09" in table
    assert table.index("#1") < table.index(urgent.key) + 400
    assert "held" in table  # fleet.held is ready and leased


# --- bugs 8 and 9 ----------------------------------------------------------------------------


def test_the_add_form_shows_the_services_message_on_the_reason_field(ops_client):
    # Bug 8: not `Constraint "task_blocked_needs_reason" is violated.`
    project = ProjectFactory(slug="docs")
    data = {"project": project.pk, "title": "Blocked one", "status": "blocked", "blocked_reason": "", "priority": 0}
    body = ops_client.post(f"{TASKS}add/", data).content.decode()
    assert "is violated" not in body
    field = body[body.index("field-blocked_reason") :]
    assert "A blocked task needs a blocked_reason." in field[: field.index("</div>") + 400]


def test_the_attempt_page_is_titled_by_task_key_and_attempt_number(ops_client, fleet):
    # Bug 9: not "attempt 40 of task 36".
    attempt = fleet.grant.attempt
    body = page(ops_client, f"/admin/leases/attempt/{attempt.pk}/change/")
    assert f"<title>{fleet.held.key} · attempt 1 (epoch 1)" in body
    assert f"attempt {attempt.pk} of task {fleet.held.pk}" not in body

"""Each admin action produces the same events as the service call it mirrors, and a LogEntry.

Every scenario builds two identical twins under a frozen clock, changes one
through the admin (a real POST, as Ledger admins do it) and the other through
the service the API and the CLI call, with the same user as actor; the events
must match type by type, severity, actor and payload. Names and ids that
necessarily differ between the twins are replaced by placeholders.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry

from environments.models import Environment
from environments.services import environment_create, environment_set_status
from leases.models import Allocation, AllocationStatus
from leases.services import (
    agent_set_projects,
    allocation_release,
    lease_claim,
    task_cancel,
    task_force_release,
    task_reassign,
    task_update,
)
from ledger.actors import SYSTEM, Actor
from ledger.models import Event, Project
from ledger.services import (
    agent_create,
    agent_deactivate,
    agent_rotate_token,
    project_create,
    task_create,
    task_reservation_clear,
)
from reconciliation.models import Finding
from reconciliation.services import reconcile
from reconciliation.triage import finding_acknowledge, finding_resolve
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db

REASON = "Host rebooted; the agent process is confirmed gone."


def last_event_id() -> int:
    return Event.objects.order_by("-id").values_list("id", flat=True).first() or 0


def normalized(value: Any, subs: dict[str, str]) -> Any:
    if isinstance(value, dict):
        return {key: normalized(item, subs) for key, item in value.items()}
    if isinstance(value, list):
        return [normalized(item, subs) for item in value]
    if isinstance(value, str):
        for original, placeholder in subs.items():
            value = value.replace(original, placeholder)
    return value


def shape(events: list[Event], subs: dict[str, str], drop: frozenset[str]) -> list[tuple[Any, ...]]:
    return [
        (
            event.type,
            event.severity,
            event.actor_user_id,
            event.actor_agent_id,
            event.task_id is not None,
            event.attempt_id is not None,
            normalized({k: v for k, v in event.payload.items() if k not in drop}, subs),
        )
        for event in events
    ]


@dataclass
class Twins:
    via_admin: Callable[[Any], Any]
    via_service: Callable[[Actor], Any]
    subs: dict[str, str] = field(default_factory=dict)
    drop: frozenset[str] = frozenset()
    logged: int = 1


def changelist(model: str) -> str:
    return f"/admin/{model}/"


def action(client, model: str, name: str, pks: list[int], **extra: Any):
    data = {"action": name, "_selected_action": pks, "index": 0, **extra}
    response = client.post(changelist(model), data)
    assert response.status_code in (200, 302), response.content[:500]
    return response


def confirmed(client, model: str, name: str, pks: list[int], **fields: Any):
    return action(client, model, name, pks, post="yes", **fields)


@pytest.fixture
def web(clock):
    return ProjectFactory(slug="web", name="Web app")


def two_tasks(project, **kwargs):
    return TaskFactory(project=project, title="Twin", **kwargs), TaskFactory(project=project, title="Twin", **kwargs)


def scenario_mark_ready(web):
    a, b = two_tasks(web, status="open")
    return Twins(
        via_admin=lambda client: action(client, "ledger/task", "mark_ready", [a.pk]),
        via_service=lambda actor: task_update(task=b, actor=actor, changes={"status": "ready"}),
    )


def scenario_cancel_under_a_live_lease(web):
    a, b = two_tasks(web)
    holder = AgentFactory(handle="holder", projects=[web])
    lease_claim(task=a, agent=holder)
    lease_claim(task=b, agent=holder)
    return Twins(
        # The confirmation's "also force-release" left unticked: the holder keeps its lease.
        via_admin=lambda client: confirmed(client, "ledger/task", "cancel", [a.pk], reason=""),
        via_service=lambda actor: task_update(task=b, actor=actor, changes={"status": "cancelled"}),
    )


def scenario_cancel_and_force_release(web):
    a, b = two_tasks(web)
    holder = AgentFactory(handle="holder", projects=[web])
    lease_claim(task=a, agent=holder)
    lease_claim(task=b, agent=holder)
    return Twins(
        via_admin=lambda client: confirmed(
            client, "ledger/task", "cancel", [a.pk], also_release="on", reason=REASON, process_gone="on"
        ),
        via_service=lambda actor: task_cancel(task=b, actor=actor, release=True, reason=REASON),
    )


def scenario_clear_reservation(web):
    a, b = two_tasks(web, status="ready")
    agent = AgentFactory(handle="reserved", projects=[web])
    for task in (a, b):
        task_reassign(task=task, agent=agent, actor=SYSTEM, reason=REASON)
    return Twins(
        via_admin=lambda client: action(client, "ledger/task", "clear_reservation", [a.pk]),
        via_service=lambda actor: task_reservation_clear(task=b, actor=actor, reason="cleared in the admin"),
    )


def scenario_reopen(web):
    a, b = two_tasks(web)
    for task in (a, b):
        task_update(task=task, actor=SYSTEM, changes={"status": "done"})
    return Twins(
        via_admin=lambda client: action(client, "ledger/task", "reopen", [a.pk]),
        via_service=lambda actor: task_update(task=b, actor=actor, changes={"status": "ready"}),
    )


def scenario_force_release(web):
    a, b = two_tasks(web)
    holder = AgentFactory(handle="holder", projects=[web])
    lease_claim(task=a, agent=holder)
    lease_claim(task=b, agent=holder)
    return Twins(
        via_admin=lambda client: confirmed(
            client, "ledger/task", "force_release", [a.pk], reason=REASON, process_gone="on"
        ),
        via_service=lambda actor: task_force_release(task=b, actor=actor, reason=REASON),
    )


def scenario_reassign(web):
    a, b = two_tasks(web)
    holder = AgentFactory(handle="holder", projects=[web])
    target = AgentFactory(handle="target", projects=[web])
    lease_claim(task=a, agent=holder)
    lease_claim(task=b, agent=holder)
    return Twins(
        via_admin=lambda client: confirmed(
            client, "ledger/task", "reassign", [a.pk], reason=REASON, process_gone="on", agent=target.pk
        ),
        via_service=lambda actor: task_reassign(task=b, agent=target, actor=actor, reason=REASON),
    )


def two_environments(project) -> tuple[Environment, Environment]:
    return tuple(  # type: ignore[return-value]
        environment_create(project=project, name=name, kind="sandbox", actor=SYSTEM)
        for name in ("sandbox-a", "sandbox-b")
    )


ENV_SUBS = {"sandbox-a": "<env>", "sandbox-b": "<env>"}


def scenario_quarantine(web):
    a, b = two_environments(web)
    return Twins(
        via_admin=lambda client: confirmed(client, "environments/environment", "quarantine", [a.pk], reason=REASON),
        via_service=lambda actor: environment_set_status(
            environment=b, status="quarantined", actor=actor, reason=REASON
        ),
        subs=ENV_SUBS,
    )


def scenario_retire(web):
    a, b = two_environments(web)
    return Twins(
        via_admin=lambda client: action(client, "environments/environment", "retire", [a.pk]),
        via_service=lambda actor: environment_set_status(
            environment=b, status="retired", actor=actor, reason="Retired from the admin."
        ),
        subs=ENV_SUBS,
    )


def scenario_make_available(web):
    a, b = two_environments(web)
    for environment in (a, b):
        environment_set_status(environment=environment, status="quarantined", actor=SYSTEM, reason="inspect")
    return Twins(
        via_admin=lambda client: action(client, "environments/environment", "make_available", [a.pk]),
        via_service=lambda actor: environment_set_status(environment=b, status="available", actor=actor),
        subs=ENV_SUBS,
    )


def scenario_release_stale_allocation(web):
    a, b = two_environments(web)
    holder = AgentFactory(handle="holder", projects=[web])
    for environment in (a, b):
        task = TaskFactory(project=web, title="Twin")
        lease_claim(task=task, agent=holder, environment=environment.name)
        task_force_release(task=task, actor=SYSTEM, reason="dead")
    stale_b = Allocation.objects.get(environment=b, status=AllocationStatus.STALE)
    return Twins(
        via_admin=lambda client: action(client, "environments/environment", "release_stale_allocations", [a.pk]),
        via_service=lambda actor: allocation_release(allocation=stale_b, actor=actor),
        subs=ENV_SUBS,
    )


def two_findings(web, clock) -> tuple[Finding, Finding]:
    holder = AgentFactory(handle="holder", projects=[web])
    for _ in range(2):
        lease_claim(task=TaskFactory(project=web, title="Twin"), agent=holder, lease_seconds=60)
    clock.advance(120)
    reconcile()
    found = list(Finding.objects.filter(condition="expired_lease_still_active").order_by("id"))
    assert len(found) == 2
    return found[0], found[1]


def scenario_acknowledge_finding(web, clock):
    a, b = two_findings(web, clock)
    return Twins(
        via_admin=lambda client: action(client, "reconciliation/finding", "acknowledge", [a.pk]),
        via_service=lambda actor: finding_acknowledge(finding=b, actor=actor),
        drop=frozenset({"finding", "subject"}),
    )


def scenario_resolve_finding(web, clock):
    a, b = two_findings(web, clock)
    return Twins(
        via_admin=lambda client: action(client, "reconciliation/finding", "resolve", [a.pk]),
        via_service=lambda actor: finding_resolve(finding=b, actor=actor),
        drop=frozenset({"finding", "subject"}),
    )


def scenario_deactivate_agent(web):
    a = AgentFactory(handle="twin-a", projects=[web])
    b = AgentFactory(handle="twin-b", projects=[web])
    return Twins(
        via_admin=lambda client: confirmed(client, "ledger/agent", "deactivate", [a.pk], reason="retired"),
        via_service=lambda actor: agent_deactivate(agent=b, actor=actor, reason="retired"),
        subs={"twin-a": "<agent>", "twin-b": "<agent>"},
    )


def scenario_rotate_token(web):
    a = AgentFactory(handle="twin-a", projects=[web])
    b = AgentFactory(handle="twin-b", projects=[web])
    return Twins(
        via_admin=lambda client: confirmed(client, "ledger/agent", "rotate_token", [a.pk]),
        via_service=lambda actor: agent_rotate_token(agent=b, actor=actor),
        subs={"twin-a": "<agent>", "twin-b": "<agent>"},
    )


def scenario_change_agent_projects(web):
    docs = ProjectFactory(slug="docs")
    a = AgentFactory(handle="twin-a", projects=[web])
    b = AgentFactory(handle="twin-b", projects=[web])

    def via_admin(client):
        response = client.post(f"/admin/ledger/agent/{a.pk}/projects/", {"projects": [docs.pk]})
        assert response.status_code == 302, response.content.decode()[:2000]

    return Twins(
        via_admin=via_admin,
        via_service=lambda actor: agent_set_projects(agent=b, projects=[docs], actor=actor),
        subs={"twin-a": "<agent>", "twin-b": "<agent>"},
    )


def scenario_create_agent(web):
    def via_admin(client):
        data = {"handle": "twin-a", "kind": "codex", "projects": [web.pk]}
        response = client.post("/admin/ledger/agent/add/", data)
        assert response.status_code == 200
        assert b'class="lh-token"' in response.content

    return Twins(
        via_admin=via_admin,
        via_service=lambda actor: agent_create(handle="twin-b", kind="codex", projects=[web], actor=actor),
        subs={"twin-a": "<agent>", "twin-b": "<agent>"},
    )


def scenario_create_environment(web):
    def via_admin(client):
        data = {
            "project": web.pk,
            "name": "sandbox-a",
            "kind": "database",
            "isolation": "container",
            "resources": '{"database_url": "postgres://db/preview_a", "ports": [5433]}',
            "credentials_ref": "vault:preview",
        }
        response = client.post("/admin/environments/environment/add/", data)
        assert response.status_code == 302, response.content.decode()[:2000]

    return Twins(
        via_admin=via_admin,
        via_service=lambda actor: environment_create(
            project=web,
            name="sandbox-b",
            kind="database",
            isolation="container",
            resources={"database_url": "postgres://db/preview_b", "ports": [5433]},
            credentials_ref="vault:preview",
            actor=actor,
        ),
        subs=ENV_SUBS,
    )


def scenario_create_task(web):
    fields = {"title": "Twin", "description": "Both", "status": "ready", "priority": 3, "task_class": "refactor"}

    def via_admin(client):
        data = {"project": web.pk, "acceptance_criteria": "", "blocked_reason": "", **fields}
        response = client.post("/admin/ledger/task/add/", data)
        assert response.status_code == 302, response.content.decode()[:2000]

    keys = {"WEB-1": "<key>", "WEB-2": "<key>"}
    return Twins(
        via_admin=via_admin, via_service=lambda actor: task_create(project=web, actor=actor, **fields), subs=keys
    )


def scenario_create_project(web):
    def via_admin(client):
        data = {
            "slug": "twin-a",
            "name": "Twin",
            "key_prefix": "",
            "repository": "",
            "default_branch": "main",
            "default_lease_seconds": 900,
            "queue_wait_max_seconds": 3600,
            "required_isolation": "none",
        }
        response = client.post("/admin/ledger/project/add/", data)
        assert response.status_code == 302, response.content.decode()[:2000]

    return Twins(
        via_admin=via_admin,
        via_service=lambda actor: project_create(slug="twin-b", name="Twin", actor=actor),
        subs={"twin-a": "<slug>", "twin-b": "<slug>", "TWINA": "<prefix>", "TWINB": "<prefix>"},
    )


SCENARIOS = {
    name.removeprefix("scenario_"): function for name, function in globals().items() if name.startswith("scenario_")
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_admin_action_appends_the_same_events_as_the_service(name, web, clock, ops_client, ledger_admin):
    build = SCENARIOS[name]
    twins = build(web, clock) if "clock" in build.__code__.co_varnames else build(web)
    logged_before = LogEntry.objects.count()

    before = last_event_id()
    twins.via_admin(ops_client)
    admin_events = list(Event.objects.filter(id__gt=before).order_by("id"))

    before = last_event_id()
    twins.via_service(Actor(user=ledger_admin))
    service_events = list(Event.objects.filter(id__gt=before).order_by("id"))

    assert admin_events, "the admin action appended no event"
    assert shape(admin_events, twins.subs, twins.drop) == shape(service_events, twins.subs, twins.drop)
    assert {event.actor_user_id for event in admin_events} == {ledger_admin.pk}
    assert LogEntry.objects.count() - logged_before == twins.logged
    assert Project.objects.filter(slug="web").exists()

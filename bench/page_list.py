"""The console pages `python -m bench.pages` requests, and the rows the later pages read (issue 32).

A page's URL may name `{task}` (a task under a live lease), `{project}` (the first
bench project's slug, the one with landing on) or `{runner}` (a seeded runner's
id): `seed_extras` returns them. The issue's "every console page" includes a
Budgets page; none is routed in this build (`console/reports/budgets.py` holds
the "Set budget…" action only), so it has no row yet.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

PAGES: tuple[tuple[str, str], ...] = (
    ("dashboard", "/admin/"),
    # The same page with Django's cache emptied before every request. The charts had a 60-second cache
    # until they read the trigger-kept tally (insight.models.rollups); kept so runs compare with earlier ones.
    ("dashboard, charts uncached", "/admin/?uncached"),
    ("task list", "/admin/ledger/task/"),
    ("agent list", "/admin/ledger/agent/"),
    ("events list", "/admin/ledger/event/"),
    ("agent health", "/admin/ledger/agent/health/"),
    ("job health", "/admin/jobs/"),
    ("findings", "/admin/reconciliation/finding/"),
    ("report (30 d)", "/admin/reports/"),
    # Issue 32's rows: the pages added since issue 15, and the task page and attempts list.
    ("task page (held)", "/admin/ledger/task/{task}/change/"),
    ("attempts list", "/admin/leases/attempt/"),
    ("incidents", "/admin/insight/incident/"),
    # Stop 40: every incident kept, resolved ones included (one page of the `incident_recent` index).
    ("incidents, all", "/admin/insight/incident/?status__exact=all"),
    ("task board", "/admin/ledger/task/board/{project}/"),
    ("reservations", "/admin/leases/pathreservation/"),
    ("landing queue", "/admin/landing/queue/{project}/"),
    ("runners list", "/admin/runners/runner/"),
    ("runner page", "/admin/runners/runner/{runner}/change/"),
    # Issue 33's rows: the task list's filters that an operator opens from the dashboard's tiles (the live
    # leases, the claimable tasks, in review, delivered) and a project's claim queue.
    ("live leases", "/admin/ledger/task/?effective_status=in_progress"),
    ("claimable tasks", "/admin/ledger/task/?claimable=yes"),
    ("in review", "/admin/ledger/task/?effective_status=in_review"),
    ("delivered", "/admin/ledger/task/?effective_status=delivered"),
    ("queue page", "/admin/ledger/task/queue/{project}/"),
)

RUNNERS = 3
RUNNER_SLOTS = 4
# Per scale unit (10,000 tasks): incidents kept (history). Open ones: a tenth of scale 1's at every scale, the
# live work the default (open) list shows; the rest resolved. Until stop 40 a tenth of every scale was open, so
# the list rendered 20 rows at scale 1 and a full page of 50 at scale 4 (1.8-3x: the page's rows, not history).
INCIDENTS = 200
OPEN_INCIDENTS = 20
# Delivered tasks waiting in the landing project's queue, at every scale: the queue is today's work,
# not history, and longer than the page shows (`landing.selectors.QUEUE_SHOWN`, 200).
DELIVERED = 250
# One attempt in RESERVING claimed paths (history grows with scale; the live ones all did).
RESERVING = 10


def seed_extras(scale: int, now: datetime) -> dict[str, Any]:
    """Runners (through `runner_create`), incidents, path reservations and a landing queue; the URL fields."""
    from bench.data import _copy_rows
    from insight.models import Incident, IncidentRule, IncidentStatus
    from leases.models import Attempt
    from ledger.actors import SYSTEM
    from ledger.models import Project, Task
    from runners.services import runner_create

    project = Project.objects.order_by("id").first()
    assert project is not None
    runners = [
        runner_create(name=f"bench-r{index}", projects=[project], slots=RUNNER_SLOTS, actor=SYSTEM)[0]
        for index in range(RUNNERS)
    ]

    # Landing on in the first project, with delivered work waiting in its queue.
    Project.objects.filter(pk=project.pk).update(target_branch="main")
    waiting = list(
        Task.objects.filter(project=project, status="ready")
        .order_by("id")
        .values_list("id", flat=True)[: DELIVERED * scale]
    )
    for index, task_id in enumerate(waiting):
        Task.objects.filter(pk=task_id).update(
            status="delivered",
            delivered_at=now - timedelta(minutes=index),
            delivered_branch=f"feature/t{task_id}",
            delivered_commit=f"{task_id:040x}",
        )

    rules = list(IncidentRule.values)
    incidents = []
    for index in range(INCIDENTS * scale):
        opened = now - timedelta(minutes=7 * index)
        is_open = index % 10 == 0 and index < OPEN_INCIDENTS * 10
        incidents.append(
            Incident(
                rule=rules[index % len(rules)],
                subject=f"agent:bench-{index}",
                project=project,
                title=f"Bench incident {index}",
                detail={"count": index},
                status=IncidentStatus.OPEN if is_open else IncidentStatus.RESOLVED,
                opened_at=opened,
                last_seen_at=opened + timedelta(minutes=5),
                resolved_at=None if is_open else opened + timedelta(minutes=30),
            )
        )
    Incident.objects.bulk_create(incidents, batch_size=2000)

    # Read whole before the COPY: the connection cannot stream a cursor and a COPY at once.
    attempts = list(Attempt.objects.order_by("id").values_list("id", "task__project_id", "status", "claimed_at"))

    def reservations() -> Iterator[tuple[Any, ...]]:
        for index, (attempt_id, project_id, status, claimed_at) in enumerate(attempts):
            if status == "active" or index % RESERVING == 0:
                paths = json.dumps([f"src/module{attempt_id % 97}/", f"docs/{attempt_id % 13}.md"])
                yield (attempt_id, project_id, paths, "exclusive", claimed_at)

    _copy_rows("leases_pathreservation", ("attempt_id", "project_id", "paths", "mode", "created_at"), reservations())

    held = Attempt.objects.filter(status="active").order_by("-id").values_list("task_id", flat=True).first()
    return {"task": held, "project": project.slug, "runner": runners[0].pk}

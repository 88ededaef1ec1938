"""A project's task board for managers (issue 32): one column per effective status, a card per task.

Columns by `leases.selectors.with_lease_state`'s effective status, `delivered` and `landing`
included; a quarantined task is a blocked card with its badge. Each column shows its CARDS_SHOWN
cards of highest priority and links the task list filtered to it for the rest, so the board costs
one GROUP BY over an index, one read of the live leases and one bounded query per column at any
size. At 390 px the columns stack.

The board is live unless `?refresh=off`: a small script follows the changes stream
(`/api/v1/changes/stream/?project=<slug>&since=<the last event before the board was read>`,
Server-Sent Events) and, a moment after an event of the project arrives (events coming together
are one refresh), fetches the board again and swaps it in without reloading the page. Without
JavaScript (or when the stream is refused) the page reloads itself every REFRESH_SECONDS instead
(a meta refresh inside `<noscript>`, or the script's own timer).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django.core.exceptions import PermissionDenied
from django.db.models import OuterRef, QuerySet, Subquery
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import reverse

from console.base import EMPTY, task_lease_left
from console.tasks.parts import status_cell
from insight.status_counts import task_counts_by_status
from leases.models import AttemptKind
from leases.selectors import IN_PROGRESS, IN_REVIEW, LANDING, live_attempts, with_compact_state
from ledger import clock
from ledger.models import Event, EventType, Project, Task, TaskStatus

CARDS_SHOWN = 25
REFRESH_SECONDS = 30
# Events arriving within this of the first are one refresh of the board.
LIVE_DEBOUNCE_MILLISECONDS = 400
# Left to right, the way work moves.
BOARD_COLUMNS: tuple[tuple[str, str], ...] = (
    (TaskStatus.OPEN, "Open"),
    (TaskStatus.READY, "Ready"),
    (IN_PROGRESS, "In progress"),
    (TaskStatus.BLOCKED, "Blocked"),
    (TaskStatus.REVIEW, "Review"),
    (IN_REVIEW, "In review"),
    (TaskStatus.DELIVERED, "Delivered"),
    (LANDING, "Landing"),
    (TaskStatus.DONE, "Done"),
    (TaskStatus.CANCELLED, "Cancelled"),
)
# The columns only a live lease puts a task in.
LIVE_COLUMNS = frozenset({IN_PROGRESS, IN_REVIEW, LANDING})


@dataclass
class Card:
    task: Task
    url: str
    status: Any
    holder: str
    lease_left: Any


@dataclass
class Column:
    status: str
    label: str
    count: int = 0
    cards: list[Card] = field(default_factory=list)
    all_url: str = ""

    @property
    def more(self) -> int:
        return self.count - len(self.cards)


def live_statuses(project: Project, now: datetime) -> dict[int, tuple[str, str]]:
    """The project's tasks under a live lease: their stored status and the effective status the lease
    gives (the rule of `with_lease_state`: the newest live attempt decides; review is in review,
    landing is landing, any other kind in progress)."""
    shown: dict[str, str] = {AttemptKind.REVIEW: IN_REVIEW, AttemptKind.LAND: LANDING}
    live = live_attempts(now).filter(task__project=project).order_by("id")
    return {
        task_id: (stored, shown.get(kind, IN_PROGRESS))
        for task_id, stored, kind in live.values_list("task_id", "task__status", "kind")
    }


def board_columns(project: Project) -> list[Column]:
    """Counted from the stored statuses (the trigger-kept counts, `insight.status_counts`) moved by the live
    leases, and each column's cards read by stored status in the board's order (index `task_project_status`)
    or by the live tasks' ids, before the lease state is annotated: no query reads or evaluates a lease
    subquery per task of the project (the board's cost grew with it, issues 32 and 33)."""
    now = clock.now()
    live = live_statuses(project, now)
    project_tasks = Task.objects.filter(project=project)
    counts = Counter(
        {status: n for (project_id, status), n in task_counts_by_status().items() if project_id == project.pk}
    )
    for stored, effective in live.values():
        counts[stored] -= 1
        counts[effective] += 1
    live_length = live_attempts(now).filter(task=OuterRef("pk")).values("lease_seconds")[:1]
    list_url = reverse("admin:ledger_task_changelist")
    columns = []
    for status, label in BOARD_COLUMNS:
        column = Column(status=status, label=label, count=counts.get(status, 0))
        column.all_url = list_url + "?" + urlencode({"project__id__exact": project.pk, "effective_status": status})
        if column.count:
            if status in LIVE_COLUMNS:
                held = [task_id for task_id, (_, shown) in live.items() if shown == status]
                chosen = project_tasks.filter(pk__in=held)
            else:
                chosen = project_tasks.filter(status=status).exclude(pk__in=list(live))
            # With `blocked_by_count`, so a ready task that waits for another says "Ready (blocked)".
            cards: QuerySet[Any] = with_compact_state(chosen, now=now)
            rows = (
                cards.annotate(holder_lease_seconds=Subquery(live_length))
                .select_related("project")
                .order_by("-priority", "number")[:CARDS_SHOWN]
            )
            column.cards = [
                Card(
                    task=task,
                    url=reverse("admin:ledger_task_change", args=[task.pk]),
                    status=status_cell(task),
                    holder=getattr(task, "holder_handle", None) or EMPTY,
                    lease_left=task_lease_left(task, now),
                )
                for task in rows
            ]
        columns.append(column)
    return columns


def board_view(model_admin: Any, request: HttpRequest, slug: str | None = None) -> HttpResponse:
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    active_projects = Project.objects.filter(archived_at__isnull=True).order_by("slug")
    if slug is None:
        first = active_projects.values_list("slug", flat=True).first()
        if first is None:
            raise Http404("No project has a board yet.")
        return HttpResponseRedirect(reverse("admin:ledger_task_board", args=[first]))
    project = get_object_or_404(Project, slug=slug)
    refresh = None if request.GET.get("refresh") == "off" else REFRESH_SECONDS
    # Read before the columns: an event committed while they are read is one the stream brings after.
    since = Event.objects.order_by("-id").values_list("id", flat=True).first() or 0
    opts = Task._meta
    context = {
        **model_admin.admin_site.each_context(request),
        "title": f"Board of {project.name}",
        "subtitle": None,
        "opts": opts,
        "project": project,
        "projects": list(
            Project.objects.filter(archived_at__isnull=True).order_by("slug").values_list("slug", flat=True)
        ),
        "columns": board_columns(project),
        "now": clock.now().strftime("%Y-%m-%d %H:%M:%S"),
        "refresh_seconds": refresh,
        "live": None
        if refresh is None
        else {
            "stream_url": reverse("api:changes-stream") + "?" + urlencode({"project": project.slug, "since": since}),
            "event_types": list(EventType.values),
            "debounce_ms": LIVE_DEBOUNCE_MILLISECONDS,
            "fallback_ms": refresh * 1000,
        },
        "cards_shown": CARDS_SHOWN,
    }
    request.current_app = model_admin.admin_site.name
    return TemplateResponse(request, "admin/ledger/task/board.html", context)

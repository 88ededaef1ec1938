"""The dependency graph around a task, or of a project (SPEC §17): bounded nodes, their edges, entry points.

A read with a fixed number of statements whatever the graph's size: the walk
from a task goes breadth-first by levels, one statement per level and
direction (at most `MAX_GRAPH_DEPTH` levels), then one statement reads the
edges among the chosen nodes and one reads the nodes themselves
(`with_compact_state`, so each row carries `effective_status`, the
unresolved-blocker count and `claimable` for the caller). A project's graph
is one count, one node statement and one edge statement.

- Edges are `(blocker, blocked)`: present dependencies (`removed_at` null)
  whose both ends are in the answer.
- `truncated` is true when `max_nodes` left out a node the walk (or the
  project) had: the nodes nearest the task are kept, level by level, lowest
  task number first within a level; a project's graph keeps its unfinished
  tasks first (neither done nor cancelled), then by number.
- `entry_points`: nodes that are neither done nor cancelled and have no
  unresolved blocker — in the answer or outside it — where work can start
  now or once they are made ready (claimable ones also have `claimable`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from django.db.models import Case, IntegerField, Q, Value, When

from leases.selectors import with_compact_state
from ledger.models import RESOLVED_STATUSES, Agent, Project, Task, TaskDependency

DEFAULT_GRAPH_DEPTH = 3
MAX_GRAPH_DEPTH = 10
DEFAULT_GRAPH_NODES = 100
MAX_GRAPH_NODES = 500
Direction = Literal["up", "down", "both"]


@dataclass(frozen=True)
class TaskGraph:
    """`rows`: one `with_compact_state(...).values(*fields)` row per node, ordered as chosen."""

    rows: list[dict[str, Any]]
    edges: list[tuple[str, str]]
    entry_points: list[str]
    truncated: bool
    total: int  # the nodes there were to show (at least len(rows))


def _walk(
    start: int,
    *,
    direction: Direction,
    depth: int,
    max_nodes: int,
    count_all: bool = False,
    visible: set[int] | None = None,
) -> tuple[list[int], bool, int]:
    """Task ids within `depth` steps of `start`, nearest first, at most `max_nodes`; whether some were
    left out; and how many there were (with `count_all` the walk goes on to count them, else a lower bound).

    `both` is the union of the two walks: the task's blockers and theirs, and the
    tasks waiting for it and for them (not a blocker's other dependents). With `visible` (project ids),
    a task of another project is reached but the walk goes no further from it: it is a stub (SPEC §22),
    and what its own project holds beyond it is not the caller's to see.
    """
    chosen = [start]
    seen = {start}
    up = {start} if direction in ("up", "both") else set()
    down = {start} if direction in ("down", "both") else set()
    truncated = False
    for _level in range(depth):
        if not up and not down:
            break
        pairs = TaskDependency.objects.filter(
            Q(task_id__in=up) | Q(blocked_by_id__in=down), removed_at__isnull=True
        ).values_list("task_id", "blocked_by_id", "task__project_id", "blocked_by__project_id")
        reached_up: set[int] = set()
        reached_down: set[int] = set()
        stubs: set[int] = set()
        for task_id, blocked_by_id, task_project, blocker_project in pairs:
            if task_id in up:
                reached_up.add(blocked_by_id)
                if visible is not None and blocker_project not in visible:
                    stubs.add(blocked_by_id)
            if blocked_by_id in down:
                reached_down.add(task_id)
                if visible is not None and task_project not in visible:
                    stubs.add(task_id)
        new = sorted((reached_up | reached_down) - seen)
        room = max_nodes - len(chosen)
        if len(new) > room:
            truncated = True
        chosen.extend(new[: max(room, 0)])
        seen.update(new)
        if truncated and not count_all:
            break
        up = (reached_up & set(new)) - stubs
        down = (reached_down & set(new)) - stubs
    return chosen, truncated, len(seen)


def _edges_among(ids: Sequence[int], key_of: dict[int, str]) -> list[tuple[str, str]]:
    pairs = TaskDependency.objects.filter(task_id__in=ids, blocked_by_id__in=ids, removed_at__isnull=True).values_list(
        "blocked_by_id", "task_id"
    )
    return sorted((key_of[blocker], key_of[blocked]) for blocker, blocked in pairs)


# What a stub keeps of a task of a project the caller is not an agent of (SPEC §22).
STUB_KEEPS = frozenset({"id", "key", "status", "effective_status", "blocked_by_count", "project_id"})


def _stub(row: dict[str, Any]) -> dict[str, Any]:
    """Another project's task as its key and effective status: every other field blanked (no title, no text)."""
    blank: dict[str, Any] = {}
    for name, value in row.items():
        if name in STUB_KEEPS:
            blank[name] = value
        elif isinstance(value, bool):
            blank[name] = False
        elif isinstance(value, str):
            blank[name] = ""
        elif isinstance(value, int):
            blank[name] = 0
        elif isinstance(value, list):
            blank[name] = []
        else:
            blank[name] = None
    return blank


def _visible_projects(agent: Agent | None) -> set[int] | None:
    """The projects whose tasks `agent` sees whole; None: every project (staff)."""
    return None if agent is None else set(agent.projects.values_list("pk", flat=True))


def _graph(
    ids: Sequence[int],
    *,
    fields: Iterable[str],
    now: datetime,
    agent: Agent | None,
    truncated: bool,
    total: int,
    visible: set[int] | None,
) -> TaskGraph:
    wanted = {"id", "key", "status", "blocked_by_count", "project_id", *fields}
    rows = {
        row["id"]: row if visible is None or row["project_id"] in visible else _stub(row)
        for row in with_compact_state(Task.objects.filter(pk__in=ids), now=now, agent=agent).values(*wanted)
    }
    ordered = [rows[pk] for pk in ids if pk in rows]
    key_of = {row["id"]: row["key"] for row in ordered}
    entry_points = [
        row["key"] for row in ordered if row["status"] not in RESOLVED_STATUSES and row["blocked_by_count"] == 0
    ]
    return TaskGraph(
        rows=ordered,
        edges=_edges_among(list(key_of), key_of),
        entry_points=entry_points,
        truncated=truncated,
        total=total,
    )


def task_graph(
    task: Task,
    *,
    now: datetime,
    agent: Agent | None,
    fields: Iterable[str],
    direction: Direction = "both",
    depth: int = DEFAULT_GRAPH_DEPTH,
    max_nodes: int = DEFAULT_GRAPH_NODES,
    count_all: bool = False,
) -> TaskGraph:
    """The task, its blockers (`up`), the tasks waiting for it (`down`) or both, `depth` steps out.

    When truncated, `total` is a lower bound (the walk stops at the level that overflowed)
    unless `count_all` walks on to count every node within `depth` (the admin's "of N").
    """
    visible = _visible_projects(agent)
    ids, truncated, total = _walk(
        task.pk, direction=direction, depth=depth, max_nodes=max_nodes, count_all=count_all, visible=visible
    )
    return _graph(ids, fields=fields, now=now, agent=agent, truncated=truncated, total=total, visible=visible)


def project_graph(
    project: Project, *, now: datetime, agent: Agent | None, fields: Iterable[str], max_nodes: int = DEFAULT_GRAPH_NODES
) -> TaskGraph:
    """The project's tasks (unfinished first, then by number; at most `max_nodes`) and the edges among them."""
    tasks = Task.objects.filter(project=project)
    total = tasks.count()
    finished_last = Case(
        When(status__in=RESOLVED_STATUSES, then=Value(1)), default=Value(0), output_field=IntegerField()
    )
    ids = list(tasks.order_by(finished_last, "number").values_list("id", flat=True)[:max_nodes])
    # SPEC §22: the other projects' tasks the shown ones wait for (stubs unless the caller is their agent).
    foreign = (
        TaskDependency.objects.filter(task_id__in=ids, removed_at__isnull=True)
        .exclude(blocked_by__project=project)
        .order_by("blocked_by_id")
        .values_list("blocked_by_id", flat=True)
        .distinct()
    )
    ids += list(foreign[:max_nodes])
    return _graph(
        ids,
        fields=fields,
        now=now,
        agent=agent,
        truncated=total > len(ids),
        total=total,
        visible=_visible_projects(agent),
    )

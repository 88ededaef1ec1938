"""The dependency graph on the task and project pages (SPEC §17): server-rendered SVG, no script, no CDN.

The graph is `leases.graph`'s (the API's walk and bounds), at most
ADMIN_GRAPH_NODES nodes, then "showing 200 of N". The layout is layered:

- longest-path layering: a task with no blocker in the graph is on layer 0
  (top); any other is one layer below its lowest blocker, so every edge
  points down;
- within a layer, tasks are ordered by the mean position of their blockers
  on the layer above (one barycentre pass), then by number; a layer wider
  than NODES_PER_ROW wraps onto further rows.

Each node is a link to its task's admin page, coloured by effective status
(CSS classes in `admin/base_site.html`, so it follows the light and dark
themes), with a `<title>` tooltip. Every text is escaped.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from django.urls import reverse
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from leases.graph import MAX_GRAPH_DEPTH, TaskGraph, project_graph, task_graph
from leases.selectors import EFFECTIVE_STATUSES
from ledger import clock
from ledger.models import Project, Task

ADMIN_GRAPH_NODES = 200
NODE_FIELDS = ("id", "key", "title", "status", "effective_status", "number")
NODE_WIDTH = 150
NODE_HEIGHT = 38
GAP_X = 18
GAP_Y = 34
MARGIN = 12
NODES_PER_ROW = 8
TITLE_CHARS = 22


@dataclass(frozen=True)
class GraphPanel:
    svg: SafeString
    shown: int
    total: int
    truncated: bool
    statuses: list[str]


def layers_of(keys: list[str], edges: list[tuple[str, str]]) -> dict[str, int]:
    """Longest-path layering: 0 without a blocker among `keys`, else one below the lowest blocker.

    Dependencies never form a cycle (`dependency_add`, `plan_check`); were one
    found anyway, its tasks go on the layer below the rest rather than loop.
    """
    blockers: dict[str, list[str]] = defaultdict(list)
    waiting: dict[str, int] = defaultdict(int)
    dependents: dict[str, list[str]] = defaultdict(list)
    for blocker, blocked in edges:
        blockers[blocked].append(blocker)
        dependents[blocker].append(blocked)
        waiting[blocked] += 1
    layer = {key: 0 for key in keys}
    ready = [key for key in keys if waiting[key] == 0]
    placed: set[str] = set()
    while ready:
        key = ready.pop()
        placed.add(key)
        for blocked in dependents[key]:
            layer[blocked] = max(layer[blocked], layer[key] + 1)
            waiting[blocked] -= 1
            if waiting[blocked] == 0:
                ready.append(blocked)
    bottom = max(layer.values(), default=0) + 1
    for key in keys:
        if key not in placed:
            layer[key] = bottom
    return layer


def _positions(rows: list[dict[str, Any]], edges: list[tuple[str, str]]) -> tuple[dict[str, tuple[int, int]], int, int]:
    """Each node's top-left corner, and the drawing's width and height."""
    layer = layers_of([row["key"] for row in rows], edges)
    number = {row["key"]: row["number"] for row in rows}
    blockers: dict[str, list[str]] = defaultdict(list)
    for blocker, blocked in edges:
        blockers[blocked].append(blocker)
    by_layer: dict[int, list[str]] = defaultdict(list)
    for key in sorted(layer, key=lambda k: number[k]):
        by_layer[layer[key]].append(key)
    slot: dict[str, float] = {}
    positions: dict[str, tuple[int, int]] = {}
    row_index = 0
    widest = 1
    for depth in sorted(by_layer):
        members = by_layer[depth]

        def barycentre(key: str) -> tuple[float, int]:
            above = [slot[b] for b in blockers[key] if b in slot]
            return (sum(above) / len(above) if above else float("inf"), number[key])

        members.sort(key=barycentre)
        for index, key in enumerate(members):
            slot[key] = index
            row, column = divmod(index, NODES_PER_ROW)
            positions[key] = (
                MARGIN + column * (NODE_WIDTH + GAP_X),
                MARGIN + (row_index + row) * (NODE_HEIGHT + GAP_Y),
            )
        widest = max(widest, min(len(members), NODES_PER_ROW))
        row_index += -(-len(members) // NODES_PER_ROW)
    width = 2 * MARGIN + widest * NODE_WIDTH + (widest - 1) * GAP_X
    height = 2 * MARGIN + row_index * NODE_HEIGHT + max(row_index - 1, 0) * GAP_Y
    return positions, width, height


def _short(title: str) -> str:
    return title if len(title) <= TITLE_CHARS else title[: TITLE_CHARS - 1] + "…"


def graph_svg(graph: TaskGraph, *, current: str | None = None, label: str) -> SafeString:
    """The graph as one inline `<svg>`: edges as arrows from blocker down to blocked, nodes as links."""
    positions, width, height = _positions(graph.rows, graph.edges)
    parts: list[str] = [
        '<defs><marker id="lh-arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" class="lh-graph-arrow"/></marker></defs>'
    ]
    for blocker, blocked in graph.edges:
        (x1, y1), (x2, y2) = positions[blocker], positions[blocked]
        parts.append(
            f'<line class="lh-graph-edge" x1="{x1 + NODE_WIDTH // 2}" y1="{y1 + NODE_HEIGHT}" '
            f'x2="{x2 + NODE_WIDTH // 2}" y2="{y2}" marker-end="url(#lh-arrow)">'
            f"<title>{escape(blocked)} waits for {escape(blocker)}</title></line>"
        )
    for row in graph.rows:
        x, y = positions[row["key"]]
        status = row["effective_status"] if row["effective_status"] in EFFECTIVE_STATUSES else "open"
        css = f"lh-graph-node lh-g-{status}" + (" lh-graph-current" if row["key"] == current else "")
        url = reverse("admin:ledger_task_change", args=[row["id"]])
        tooltip = f"{row['key']} {row['title']} [{status}]"
        parts.append(
            f'<a href="{escape(url)}" class="{css}"><title>{escape(tooltip)}</title>'
            f'<rect x="{x}" y="{y}" width="{NODE_WIDTH}" height="{NODE_HEIGHT}" rx="6"/>'
            f'<text x="{x + 8}" y="{y + 15}" class="lh-graph-key">{escape(row["key"])}</text>'
            f'<text x="{x + 8}" y="{y + 30}">{escape(_short(row["title"]))}</text></a>'
        )
    svg = (
        f'<svg class="lh-graph" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="group" '
        f'aria-label="{escape(label)}" xmlns="http://www.w3.org/2000/svg"><title>{escape(label)}</title>'
        f"{''.join(parts)}</svg>"
    )
    return mark_safe(svg)  # noqa: S308 - every interpolated text above went through escape()


def _panel(graph: TaskGraph, *, current: str | None, label: str) -> GraphPanel:
    statuses = sorted({row["effective_status"] for row in graph.rows}, key=EFFECTIVE_STATUSES.index)
    return GraphPanel(
        svg=graph_svg(graph, current=current, label=label),
        shown=len(graph.rows),
        total=graph.total,
        truncated=graph.truncated,
        statuses=statuses,
    )


def task_graph_panel(task: Task) -> GraphPanel:
    """The task's blockers and the tasks waiting for it, up to 10 steps out, at most 200 nodes."""
    graph = task_graph(
        task,
        now=clock.now(),
        agent=None,
        fields=NODE_FIELDS,
        direction="both",
        depth=MAX_GRAPH_DEPTH,
        max_nodes=ADMIN_GRAPH_NODES,
        count_all=True,
    )
    return _panel(graph, current=task.key, label=f"Dependency graph around {task.key}")


def project_graph_panel(project: Project) -> GraphPanel:
    """The project's tasks (unfinished first), at most 200, and the dependencies among them."""
    graph = project_graph(project, now=clock.now(), agent=None, fields=NODE_FIELDS, max_nodes=ADMIN_GRAPH_NODES)
    return _panel(graph, current=None, label=f"Dependency graph of {project.slug}")

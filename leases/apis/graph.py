"""Dependency graphs (SPEC §17): `GET /tasks/{key}/graph/` and `GET /projects/{slug}/graph/`.

JSON: `{"nodes": [compact items], "edges": [[blocker, blocked]], "entry_points": [keys],
"truncated": bool}`; nodes are the compact list items (never a description, acceptance
criteria or blocked reason, so the answer stays small however long those are). With
`?format=mermaid` the same graph is a Mermaid flowchart, as text/plain; errors are still
the JSON envelope. The walk and its bounds are `leases.graph`'s.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from api.auth import caller_of
from api.base import ApiView
from api.inputs import JsonRenderer, query_input
from api.schema import READ_ERRORS, error_responses
from leases.apis.projections import COMPACT_TASK_FIELDS, compact_task
from leases.apis.serializers import CompactTaskSerializer
from leases.graph import (
    DEFAULT_GRAPH_DEPTH,
    DEFAULT_GRAPH_NODES,
    MAX_GRAPH_DEPTH,
    MAX_GRAPH_NODES,
    TaskGraph,
    project_graph,
    task_graph,
)
from ledger import clock
from ledger.selectors import project_by_slug, task_by_key

MERMAID_TITLE_CHARS = 60
# Label characters Mermaid reads literally inside a quoted label; any other is an entity `#<code>;`.
MERMAID_PLAIN = re.compile(r"[A-Za-z0-9 _.,:;!?()/+=*'@-]")
MERMAID_COLOURS = {
    "open": "#e5e7eb",
    "ready": "#bfdbfe",
    "blocked": "#fecaca",
    "review": "#fde68a",
    "in_progress": "#93c5fd",
    "in_review": "#fcd34d",
    "done": "#bbf7d0",
    "cancelled": "#d1d5db",
}


def mermaid_label(text: str) -> str:
    """`text` safe inside `["…"]`: letters, digits and plain punctuation as they are, anything else as `#N;`."""
    return "".join(char if MERMAID_PLAIN.fullmatch(char) else f"#{ord(char)};" for char in text)


def mermaid_id(key: str) -> str:
    """A node id from a task key (`WEB-12` → `t_WEB_12`): letters, digits and `_` only, never a keyword."""
    return "t_" + key.replace("-", "_")


def mermaid(graph: TaskGraph) -> str:
    """The graph as a Mermaid flowchart, blockers above the tasks waiting for them."""
    lines = ["flowchart TD"]
    for row in graph.rows:
        title = (
            row["title"] if len(row["title"]) <= MERMAID_TITLE_CHARS else row["title"][: MERMAID_TITLE_CHARS - 1] + "…"
        )
        label = mermaid_label(f"{row['key']} {title} [{row['effective_status']}]")
        lines.append(f'    {mermaid_id(row["key"])}["{label}"]:::{row["effective_status"]}')
    for blocker, blocked in graph.edges:
        lines.append(f"    {mermaid_id(blocker)} --> {mermaid_id(blocked)}")
    for status, colour in MERMAID_COLOURS.items():
        lines.append(f"    classDef {status} fill:{colour},stroke:#374151,color:#111827")
    if graph.truncated:
        lines.append(f"    %% truncated: showing {len(graph.rows)} of {graph.total} or more")
    return "\n".join(lines) + "\n"


class MermaidRenderer(BaseRenderer):
    """`?format=mermaid`: the view's text as it is (its JSON answers stay JSON)."""

    media_type = "text/plain"
    format = "mermaid"
    charset = "utf-8"

    def render(
        self, data: Any, accepted_media_type: str | None = None, renderer_context: Mapping[str, Any] | None = None
    ) -> bytes:
        return data.encode() if isinstance(data, str) else JsonRenderer().render(data)


class GraphSerializer(serializers.Serializer[Any]):
    nodes = CompactTaskSerializer(many=True)
    edges = serializers.ListField(
        child=serializers.ListField(child=serializers.CharField(), min_length=2, max_length=2),
        help_text="[blocker, blocked] key pairs among the nodes.",
    )
    entry_points = serializers.ListField(
        child=serializers.CharField(), help_text="Nodes neither done nor cancelled without an unresolved blocker."
    )
    truncated = serializers.BooleanField(help_text="max_nodes left nodes out.")


class ProjectGraphQuery(serializers.Serializer[Any]):
    max_nodes = serializers.IntegerField(
        required=False, min_value=1, max_value=MAX_GRAPH_NODES, default=DEFAULT_GRAPH_NODES
    )


class TaskGraphQuery(ProjectGraphQuery):
    direction = serializers.ChoiceField(choices=["up", "down", "both"], required=False, default="both")
    depth = serializers.IntegerField(
        required=False, min_value=1, max_value=MAX_GRAPH_DEPTH, default=DEFAULT_GRAPH_DEPTH
    )


FORMAT_PARAMETER = OpenApiParameter(
    "format", str, enum=["json", "mermaid"], description="mermaid: a Mermaid flowchart as text/plain."
)
MAX_NODES_PARAMETER = OpenApiParameter(
    "max_nodes",
    {"type": "integer", "minimum": 1, "maximum": MAX_GRAPH_NODES, "default": DEFAULT_GRAPH_NODES},
    description=f"At most this many nodes (1-{MAX_GRAPH_NODES}).",
)
GRAPH_RESPONSES: dict[Any, Any] = {
    (200, "application/json"): OpenApiResponse(GraphSerializer, description="The graph."),
    (200, "text/plain"): OpenApiResponse(OpenApiTypes.STR, description="With format=mermaid: a Mermaid flowchart."),
    # Errors are always the JSON envelope, also with format=mermaid.
    **{(status, "application/json"): response for status, response in error_responses(*READ_ERRORS).items()},
}


def _answer(request: Request, graph: TaskGraph) -> Response:
    if getattr(request.accepted_renderer, "format", None) == "mermaid":
        return Response(mermaid(graph), content_type="text/plain; charset=utf-8")
    return Response(
        {
            "nodes": [compact_task(row) for row in graph.rows],
            "edges": [list(edge) for edge in graph.edges],
            "entry_points": graph.entry_points,
            "truncated": graph.truncated,
        }
    )


class GraphApi(ApiView):
    # JSON as everywhere, or Mermaid text on request; an error is always the JSON envelope.
    renderer_classes = [JsonRenderer, MermaidRenderer]

    def finalize_response(self, request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        if response.status_code >= 400 and getattr(request, "accepted_renderer", None) is not None:
            request.accepted_renderer = JsonRenderer()
            request.accepted_media_type = JsonRenderer.media_type
        return super().finalize_response(request, response, *args, **kwargs)


class TaskGraphApi(GraphApi):
    """The task's dependency graph: its blockers (`up`), the tasks waiting for it (`down`) or both,
    `depth` steps out (1-10, default 3), at most `max_nodes` nodes (1-500, default 100)."""

    @extend_schema(
        operation_id="tasks_graph",
        parameters=[
            OpenApiParameter("direction", str, enum=["up", "down", "both"], description="Default both."),
            OpenApiParameter(
                "depth",
                {"type": "integer", "minimum": 1, "maximum": MAX_GRAPH_DEPTH, "default": DEFAULT_GRAPH_DEPTH},
                description=f"Steps out from the task (1-{MAX_GRAPH_DEPTH}).",
            ),
            MAX_NODES_PARAMETER,
            FORMAT_PARAMETER,
        ],
        responses=GRAPH_RESPONSES,
    )
    def get(self, request: Request, key: str) -> Response:
        query = query_input(TaskGraphQuery, request)
        agent = caller_of(request).agent
        task = task_by_key(key, agent=agent)
        graph = task_graph(
            task,
            now=clock.now(),
            agent=agent,
            fields=COMPACT_TASK_FIELDS,
            direction=query["direction"],
            depth=query["depth"],
            max_nodes=query["max_nodes"],
        )
        return _answer(request, graph)


class ProjectGraphApi(GraphApi):
    """The project's dependency graph: its tasks (unfinished first, then by number), at most
    `max_nodes` (1-500, default 100), and the edges among them."""

    @extend_schema(
        operation_id="projects_graph", parameters=[MAX_NODES_PARAMETER, FORMAT_PARAMETER], responses=GRAPH_RESPONSES
    )
    def get(self, request: Request, slug: str) -> Response:
        query = query_input(ProjectGraphQuery, request)
        agent = caller_of(request).agent
        project = project_by_slug(slug, agent=agent)
        graph = project_graph(
            project, now=clock.now(), agent=agent, fields=COMPACT_TASK_FIELDS, max_nodes=query["max_nodes"]
        )
        return _answer(request, graph)

"""`GET /api/v1/changes/stream/`: the changes feed as Server-Sent Events (SPEC §18).

Each event is one message: `id:` the event id, `event:` its type, `data:`
the event as `/changes/` shows it (one line of JSON). A client that
reconnects sends `Last-Event-ID` (browsers' EventSource does) and continues
right after that event: no gap, no duplicate. A comment line (`: keepalive`)
every 15 s with nothing to say keeps proxies from closing the connection.
Visibility is `/changes/`' own (`changes_since`), read afresh on every poll,
so an agent that loses a project stops seeing its events; a deactivated
agent's stream ends.

Under `manage.py serve` the open stream is parked in the worker's event loop
between polls (`core.parking`), holding no thread; other servers hold a
thread for as long as the stream is open. Either way an open stream holds
a waiter's slot (`admit_waiter`), given back when it ends.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import Any

from django.db import close_old_connections
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.request import Request

from api.auth import caller_of
from api.base import ApiView
from api.inputs import query_input
from api.schema import READ_ERRORS, error_responses
from core.errors import ValidationFailed
from core.parking import STREAM_KEY
from ledger.apis.changes import BIGINT_MAX, ChangeSerializer, admit_waiter
from ledger.models import Agent, Project
from ledger.selectors import changes_and_position, project_by_slug, visible_project_ids
from push.waiting import event_watcher

HEARTBEAT_SECONDS = 15.0
BATCH = 200
RETRY_MILLISECONDS = 3000


def _encode(rows: list[dict[str, Any]]) -> bytes:
    parts = []
    for row in ChangeSerializer(rows, many=True).data:
        data = json.dumps(row, separators=(",", ":"), default=str)
        parts.append(f"id: {row['id']}\nevent: {row['type']}\ndata: {data}\n\n")
    return "".join(parts).encode()


class ChangeStream:
    """One open stream: its cursor, whose eyes it reads with, and what to wait for next."""

    heartbeat_seconds = HEARTBEAT_SECONDS

    def __init__(self, *, agent: Agent | None, project: Project | None, cursor: int) -> None:
        self.agent = agent
        self.project = project
        self.cursor = cursor
        self.position = cursor
        self.projects = frozenset({project.pk}) if project is not None else visible_project_ids(agent)

    def read(self) -> bytes:
        rows, more, position = changes_and_position(
            agent=self.agent, since=self.cursor, limit=BATCH, project=self.project
        )
        if rows:
            self.cursor = rows[-1]["id"]
        # With more to read, wait for nothing: the next poll comes at once.
        self.position = self.cursor if more else max(self.cursor, position)
        return _encode(rows)

    def poll(self) -> bytes | None:
        """The next messages (b"" for none), or None when the stream must end; run on a pool thread."""
        try:
            if self.agent is not None and not Agent.objects.filter(pk=self.agent.pk, is_active=True).exists():
                return None
            return self.read()
        finally:
            close_old_connections()

    def subscribe(self, wake: Callable[[], None]) -> Callable[[], None]:
        return event_watcher().subscribe(since=self.position, projects=self.projects, wake=wake)

    def messages(self) -> Iterator[bytes]:
        """The whole stream in this thread, for servers that cannot park it."""
        while True:
            woken = event_watcher().wait(since=self.position, projects=self.projects, timeout=self.heartbeat_seconds)
            data = self.poll()
            if data is None:
                return
            yield data or (b"" if woken else b": keepalive\n\n")


class _AnyAccept(DefaultContentNegotiation):
    """EventSource asks for text/event-stream; errors still answer in the JSON envelope, never 406."""

    def select_renderer(self, request: Any, renderers: Any, format_suffix: Any = None) -> Any:
        return renderers[0], renderers[0].media_type


class ChangesStreamApi(ApiView):
    """Server-Sent Events: the events after `since` (or the `Last-Event-ID` header), then each new one as it commits."""

    content_negotiation_class = _AnyAccept

    class FilterSerializer(serializers.Serializer[Any]):
        since = serializers.IntegerField(required=False, min_value=0, max_value=BIGINT_MAX, default=0)
        project = serializers.SlugField(required=False, max_length=50)

    @extend_schema(
        operation_id="changes_stream",
        parameters=[
            FilterSerializer,
            OpenApiParameter(
                "Last-Event-ID",
                OpenApiTypes.INT,
                OpenApiParameter.HEADER,
                description="Resume after this event id (sent by EventSource on reconnecting); overrides `since`.",
            ),
        ],
        responses={
            (200, "text/event-stream"): OpenApiResponse(
                response=OpenApiTypes.STR,
                description="`id:`, `event:` and `data:` (one event as in /changes/) per message.",
            ),
            **error_responses(*READ_ERRORS),
        },
    )
    def get(self, request: Request) -> StreamingHttpResponse:
        params = query_input(self.FilterSerializer, request)
        since = params["since"]
        last_event_id = request.headers.get("Last-Event-ID", "").strip()
        if last_event_id:
            if not last_event_id.isdigit() or int(last_event_id) > BIGINT_MAX:
                raise ValidationFailed(
                    "Last-Event-ID must be an event id.", details={"fields": {"Last-Event-ID": ["invalid"]}}
                )
            since = int(last_event_id)
        agent = caller_of(request).agent
        project = project_by_slug(params["project"], agent=agent) if "project" in params else None
        release = admit_waiter(request)
        try:
            stream = ChangeStream(agent=agent, project=project, cursor=since)
            first = f"retry: {RETRY_MILLISECONDS}\n\n".encode() + stream.read()
        except BaseException:
            release()
            raise
        park = request.META.get(STREAM_KEY)
        if park is not None:
            park(stream, release=release)  # the worker's now: it gives the slot back when the stream ends
            body: Iterable[bytes] = [first]
        else:
            body = _Chain(first, stream.messages(), release)
        response = StreamingHttpResponse(body, content_type="text/event-stream")
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"  # nginx: pass each message on at once
        return response


class _Chain:
    """The first chunk, then the stream's non-empty ones; `close()` (the server's, when the response ends) releases
    the waiter's slot, even if the body was never iterated."""

    def __init__(self, first: bytes, rest: Iterator[bytes], release: Callable[[], None]) -> None:
        self._chunks = _chain(first, rest)
        self._release = release

    def __iter__(self) -> Iterator[bytes]:
        return self._chunks

    def close(self) -> None:
        try:
            self._chunks.close()
        finally:
            self._release()


def _chain(first: bytes, rest: Iterator[bytes]) -> Generator[bytes, None, None]:
    yield first
    yield from (chunk for chunk in rest if chunk)

"""`GET /api/v1/changes/`: the delta feed of events, one sequence for every event type; `wait=S` long-polls.

A waiting request that finds nothing new is parked by the server's worker
(`core.parking`: no thread is held) and read again when the process's
event watcher (`push.waiting`) sees a commit in one of the caller's
projects, or at the deadline. Under a server that cannot park (runserver,
the test client) it waits in its thread instead.

A request that is about to wait first takes a waiter's slot (`admit_waiter`):
at most `LEASEHOLD_WAITERS_PER_AGENT` streams and long-polls per agent and
`LEASEHOLD_WAITERS_PER_ADDRESS` per client address wait at once; past them
the answer is `RATE_LIMITED`, so one token cannot fill the server's
connections (issue 27, H2).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from api.auth import caller_of
from api.base import ApiView
from api.inputs import MAX_PAGE_SIZE, query_input
from api.schema import READ_ERRORS, error_responses
from api.throttles import client_address
from core.errors import ValidationFailed
from core.parking import DEADLINE_KEY, PARK_KEY
from core.waiter_slots import waiter_slots
from ledger.models import Severity
from ledger.selectors import (
    changes_and_position,
    changes_since,
    latest_visible_event_id,
    newest_event_id,
    project_by_slug,
    visible_project_ids,
)
from push.waiting import event_watcher

BIGINT_MAX = 2**63 - 1
MAX_WAIT_SECONDS = 30


class ActorField(serializers.CharField):
    """Who wrote the event, from its row: the agent's handle, `user:<name>`, or `system`."""

    def get_attribute(self, instance: Any) -> str:
        if instance["actor_agent__handle"]:
            return str(instance["actor_agent__handle"])
        return f"user:{instance['actor_user__username']}" if instance["actor_user__username"] else "system"


# Reads a row of `ledger.selectors.changes_since`.
class ChangeSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    type = serializers.CharField()
    severity = serializers.ChoiceField(choices=Severity.values)
    task = serializers.CharField(source="task__key", allow_null=True, help_text="Task key.")
    attempt = serializers.IntegerField(source="attempt_id", allow_null=True)
    actor = ActorField(help_text="Agent handle, `user:<name>`, or `system`.")
    payload = serializers.DictField()
    created_at = serializers.DateTimeField()


class ChangesApi(ApiView):
    """Delta feed: events with id > since, ascending, one sequence for every event type.

    Pass `latest_event_id` back as `since`; it is the last event returned, or
    `since` itself when nothing is new. With `wait` (seconds, at most 30) an
    answer with no event is held back until an event arrives or the time is up.
    A `since` past the newest event (a cursor from another server, or from
    before a restore) is refused with VALIDATION_ERROR naming the newest id.
    """

    class FilterSerializer(serializers.Serializer[Any]):
        since = serializers.IntegerField(required=False, min_value=0, max_value=BIGINT_MAX, default=0)
        project = serializers.SlugField(required=False, max_length=50)
        limit = serializers.IntegerField(required=False, min_value=1, max_value=MAX_PAGE_SIZE, default=100)
        wait = serializers.IntegerField(
            required=False,
            min_value=0,
            max_value=MAX_WAIT_SECONDS,
            default=0,
            help_text="Seconds to wait for an event when there is none yet (0: answer at once).",
        )
        tail = serializers.BooleanField(
            required=False,
            default=False,
            help_text="Start at the newest event you can see instead of `since`: with `wait`, only what comes next.",
        )

    class OutputSerializer(serializers.Serializer[Any]):
        events = ChangeSerializer(many=True)
        latest_event_id = serializers.IntegerField()
        has_more = serializers.BooleanField()

    @extend_schema(
        operation_id="changes_list",
        parameters=[FilterSerializer],
        responses={200: OutputSerializer, **error_responses(*READ_ERRORS)},
    )
    def get(self, request: Request) -> Response:
        params = query_input(self.FilterSerializer, request)
        agent = caller_of(request).agent
        project = project_by_slug(params["project"], agent=agent) if "project" in params else None
        since, wait = params["since"], params["wait"]
        if params["tail"]:
            since = max(since, latest_visible_event_id(agent=agent, project=project))
        resumed = DEADLINE_KEY in request.META  # a parked request run again: the worker holds its slot
        deadline = request.META.get(DEADLINE_KEY) or time.monotonic() + wait
        projects = frozenset({project.pk}) if project is not None else None
        release: Callable[[], None] | None = None
        try:
            while True:
                if wait:
                    rows, more, position = changes_and_position(
                        agent=agent, since=since, limit=params["limit"], project=project
                    )
                else:
                    rows, more = changes_since(agent=agent, since=since, limit=params["limit"], project=project)
                if not rows and not resumed and release is None:
                    _refuse_past_the_head(since)
                remaining = deadline - time.monotonic()
                if rows or not wait or remaining <= 0:
                    break
                if projects is None:  # only a waiter that parks needs them: a woken one with news answers at once
                    projects = visible_project_ids(agent)
                if release is None and not resumed:
                    release = admit_waiter(request)
                park = request.META.get(PARK_KEY)

                def subscribe(wake: Any, position: int = max(since, position), projects: Any = projects) -> Any:
                    return event_watcher().subscribe(since=position, projects=projects, wake=wake)

                if park is not None:
                    park(deadline=deadline, subscribe=subscribe, release=release)
                    release = None  # the worker's now: it gives the slot back when the waiter ends
                    return Response(status=204)  # never sent: the worker runs this request again when woken
                woken = threading_wait(subscribe, remaining)
                if not woken:
                    rows, more = changes_since(agent=agent, since=since, limit=params["limit"], project=project)
                    break
        finally:
            if release is not None:
                release()
        latest_event_id = rows[-1]["id"] if rows else since
        return Response(
            self.OutputSerializer({"events": rows, "latest_event_id": latest_event_id, "has_more": more}).data
        )


def _refuse_past_the_head(since: int) -> None:
    """A cursor past the newest event was never handed out: answering it would skip every event up to it."""
    if since == 0:
        return
    newest = newest_event_id()
    if since > newest:
        raise ValidationFailed(
            f"since={since} is past the newest event, {newest}: pass a latest_event_id this feed answered "
            f"(or {newest}, or tail=true to start from now).",
            details={"fields": {"since": [f"past the newest event {newest}"]}, "newest_event_id": newest},
        )


def admit_waiter(request: Request) -> Callable[[], None]:
    """A waiter's slot for this caller (its agent, or its staff user) and its client address, or `RateLimited`.

    Returns the release; whoever holds the waiter calls it once it ends.
    """
    caller = caller_of(request)
    who = f"agent:{caller.agent.pk}" if caller.agent is not None else f"user:{getattr(caller.user, 'pk', '')}"
    return waiter_slots().admit(
        {
            who: settings.LEASEHOLD_WAITERS_PER_AGENT,
            f"address:{client_address(request)}": settings.LEASEHOLD_WAITERS_PER_ADDRESS,
        }
    )


def threading_wait(subscribe: Any, seconds: float) -> bool:
    """Wait in this thread (no parking server) until woken or `seconds`; returns whether it was woken."""
    woken = threading.Event()
    unsubscribe = subscribe(woken.set)
    try:
        return woken.wait(seconds)
    finally:
        unsubscribe()

"""Event timelines for admin pages: a task's history, an environment's, the dashboard's alerts.

Events are shown newest first, with a compact rendering of their payload
(bounded: the payload is small by contract, and long values are cut here too).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet
from django.urls import reverse
from django.utils.html import format_html_join
from django.utils.safestring import SafeString

from ledger.models import Event, Task

TIMELINE_LIMIT = 100
PAYLOAD_KEYS_SHOWN = 8
PAYLOAD_VALUE_CHARS = 120


@dataclass(frozen=True)
class TimelineItem:
    event: Event
    actor: str
    payload: SafeString
    url: str
    attempt_url: str | None


def payload_summary(payload: Any) -> SafeString:
    """`key: value` pairs, at most eight, each value cut to 120 characters."""
    if not isinstance(payload, dict) or not payload:
        return SafeString("")
    pairs = []
    for key, value in list(payload.items())[:PAYLOAD_KEYS_SHOWN]:
        if value is None or value == "" or value == []:
            continue
        text = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
        if len(text) > PAYLOAD_VALUE_CHARS:
            text = text[: PAYLOAD_VALUE_CHARS - 1] + "…"
        pairs.append((key, text))
    return format_html_join(" · ", "<b>{}</b> {}", pairs)


def with_actors(events: QuerySet[Event]) -> QuerySet[Event]:
    return events.select_related("actor_agent", "actor_user", "task", "project")


def timeline_items(events: QuerySet[Event] | list[Event]) -> list[TimelineItem]:
    return [
        TimelineItem(
            event=event,
            actor=event.actor_label,
            payload=payload_summary(event.payload),
            url=reverse("admin:ledger_event_change", args=[event.pk]),
            attempt_url=reverse("admin:leases_attempt_change", args=[event.attempt_id]) if event.attempt_id else None,
        )
        for event in events
    ]


def timeline_of(task: Task, *, limit: int = TIMELINE_LIMIT) -> list[TimelineItem]:
    """The task's latest events, newest first (served by the `event_task_timeline` index)."""
    return timeline_items(with_actors(Event.objects.filter(task=task)).order_by("-id")[:limit])

"""The cells the runners' list and detail page share: status badges, slot counts, "12 s ago"."""

from __future__ import annotations

from datetime import datetime

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from console.audit.alerts import human_duration, moment_utc
from console.base import EMPTY
from runners.models import BUSY_STATES, Runner, RunnerSlot
from runners.selectors import RunnerStatus, runner_status

STATUS_TITLES = {
    RunnerStatus.ONLINE: "Heartbeats arrive: the runner is up.",
    RunnerStatus.OFFLINE: "Heartbeats missed: not heard from within the lost threshold (not marked lost yet).",
    RunnerStatus.LOST: "Marked lost by the lost-runner job: its heartbeats stopped.",
    RunnerStatus.NEVER: "Created, never registered: no daemon has started with its token yet.",
    RunnerStatus.DEACTIVATED: "Deactivated: its token is refused.",
}


def pill(css: str, label: str, title: str = "") -> SafeString:
    return format_html('<span class="lh-badge lh-runner-{}" title="{}">{}</span>', css, title, label)


def status_badges(runner: Runner, *, now: datetime) -> SafeString:
    """The connection badge, then cordoned / draining when they hold."""
    status = runner_status(runner, now=now)
    parts = [pill(status, status, STATUS_TITLES[status])]
    if runner.cordoned_at is not None:
        parts.append(pill("cordoned", "cordoned", f"Takes no new work since {moment_utc(runner.cordoned_at)}."))
    if runner.draining_at is not None:
        parts.append(
            pill(
                "draining",
                "draining",
                f"Finishes what runs, takes no new work, since {moment_utc(runner.draining_at)}.",
            )
        )
    return format_html_join(" ", "{}", ((part,) for part in parts))


def ago(value: datetime | None, *, now: datetime) -> SafeString:
    """`12 s ago`, with the UTC moment as its title; `never` without one."""
    if value is None:
        return format_html('<span class="lh-muted">{}</span>', "never")
    return format_html(
        '<span title="{}">{} ago</span>', moment_utc(value), human_duration((now - value).total_seconds())
    )


def busy_idle(slots: list[RunnerSlot]) -> tuple[int, int]:
    """Slots busy (working, landing, stopping, as last reported) and the rest."""
    busy = sum(1 for slot in slots if slot.state in BUSY_STATES)
    return busy, len(slots) - busy


def labels_cell(labels: list[str]) -> SafeString | str:
    if not labels:
        return EMPTY
    return format_html_join(" ", '<span class="lh-badge lh-runner-label">{}</span>', ((label,) for label in labels))

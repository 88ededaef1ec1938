"""Check results reported by any CI (SPEC §22), and what a failed required check does.

`check_report` stores the latest result of a check at a commit: one row per (project, commit, name),
written by one INSERT … ON CONFLICT DO UPDATE so concurrent reports leave exactly one row (the last
one to commit wins); every report is a `check.reported` event, the history. The reporter is an agent
of the project (a CI job uses an agent of kind `ci`).

A `failure` of one of the project's `required_checks` at the head of a delivered task sends the task
back to `ready` with the check's summary and URL as a `landing` note on the work attempt that
delivered it (the next work context shows it first). A task a lander holds right now is left to its
landing: it was taken with every required check green.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Exists, OuterRef

from core.db import write_transaction
from core.errors import PermissionDenied, ValidationFailed
from core.prepared import insert
from leases.models import (
    CHECK_NAME_PATTERN,
    CHECK_SUMMARY_MAX_CHARS,
    CHECK_URL_MAX_CHARS,
    COMMIT_PATTERN,
    Attempt,
    AttemptKind,
    AttemptStatus,
    CheckResult,
    CheckState,
    Note,
    NoteKind,
)
from leases.selectors import live_attempts
from ledger import clock
from ledger.actors import Actor
from ledger.models import Agent, EventType, Project, Severity, Task, TaskStatus
from ledger.services import apply_task_update, event_append, lock_task

_COMMIT = re.compile(COMMIT_PATTERN)
_NAME = re.compile(CHECK_NAME_PATTERN)
_URL = re.compile(r"^https?://[^\s\x00-\x1f\x7f]+$")


@dataclass(frozen=True)
class CheckReport:
    commit: str
    name: str
    state: str
    url: str = ""
    summary: str = ""


def validate_check_report(report: CheckReport) -> None:
    problems: dict[str, list[str]] = {}
    if not _COMMIT.fullmatch(report.commit):
        problems["commit"] = ["a full commit id: 40 lowercase hex digits"]
    if not _NAME.fullmatch(report.name):
        problems["name"] = ["a lowercase slug (letters, digits, - _ .), at most 100 characters"]
    if report.state not in CheckState.values:
        problems["state"] = [f"one of {', '.join(CheckState.values)}"]
    if report.url and (len(report.url) > CHECK_URL_MAX_CHARS or not _URL.fullmatch(report.url)):
        problems["url"] = [f"an http(s) URL of at most {CHECK_URL_MAX_CHARS} characters"]
    if len(report.summary) > CHECK_SUMMARY_MAX_CHARS or "\x00" in report.summary:
        problems["summary"] = [f"at most {CHECK_SUMMARY_MAX_CHARS} characters, no NUL"]
    if problems:
        raise ValidationFailed(
            "Invalid check report: " + "; ".join(f"{name}: {messages[0]}" for name, messages in problems.items()),
            details={"fields": problems},
        )


def _failure_note(check: CheckResult) -> str:
    text = f"The required check `{check.name}` failed at {check.commit[:12]} (reported by {check.agent.handle})."
    if check.summary:
        text += f"\n{check.summary}"
    if check.url:
        text += f"\n{check.url}"
    return text + "\nFix it on your (inherited) branch and deliver again."


def _send_back_on_failure(check: CheckResult, *, project: Project, actor: Actor, now: datetime) -> list[str]:
    """Delivered tasks at the failed commit go back to `ready` with a `landing` note; returns their keys."""
    delivered = (
        Task.objects.filter(project=project, status=TaskStatus.DELIVERED, delivered_commit=check.commit)
        .exclude(Exists(live_attempts(now).filter(task=OuterRef("pk"))))
        .order_by("id")
        .values_list("id", flat=True)
    )
    sent_back: list[str] = []
    for task_id in delivered:
        task = lock_task(task_id)
        if task.status != TaskStatus.DELIVERED or task.delivered_commit != check.commit:
            continue
        delivered_by = (
            Attempt.objects.filter(task=task, kind=AttemptKind.WORK)
            .exclude(status=AttemptStatus.ACTIVE)
            .order_by("-id")
            .values_list("id", flat=True)
            .first()
        )
        if delivered_by is not None:
            insert(
                Note(
                    attempt_id=delivered_by,
                    kind=NoteKind.LANDING,
                    content=_failure_note(check),
                    next_steps=[],
                    important=True,
                    created_at=now,
                )
            )
        apply_task_update(locked=task, actor=actor, changes={"status": TaskStatus.READY}, now=now)
        sent_back.append(task.key)
    return sent_back


@write_transaction
def _report(*, project: Project, agent: Agent, report: CheckReport) -> tuple[CheckResult, list[str]]:
    now = clock.now()
    CheckResult.objects.bulk_create(
        [
            CheckResult(
                project=project,
                commit=report.commit,
                name=report.name,
                state=report.state,
                url=report.url,
                summary=report.summary,
                agent=agent,
                reported_at=now,
            )
        ],
        update_conflicts=True,
        unique_fields=["project", "commit", "name"],
        update_fields=["state", "url", "summary", "agent", "reported_at"],
    )
    check = CheckResult.objects.select_related("agent").get(project=project, commit=report.commit, name=report.name)
    actor = Actor(agent=agent)
    sent_back: list[str] = []
    required = report.name in (project.required_checks or [])
    if report.state == CheckState.FAILURE and required and project.landing_on:
        sent_back = _send_back_on_failure(check, project=project, actor=actor, now=now)
    event_append(
        type=EventType.CHECK_REPORTED,
        severity=Severity.WARN if report.state in (CheckState.FAILURE, CheckState.ERROR) else Severity.INFO,
        actor=actor,
        at=now,
        project=project,
        payload={
            "commit": report.commit,
            "name": report.name,
            "state": report.state,
            "url": report.url or None,
            "required": required,
            "sent_back": sent_back,
        },
    )
    return check, sent_back


def check_report(*, project: Project, agent: Agent, report: CheckReport) -> tuple[CheckResult, list[str]]:
    """Store the latest result of a check at a commit; returns it and the keys of tasks it sent back."""
    validate_check_report(report)
    if not agent.is_active:
        raise PermissionDenied(f"Agent {agent.handle} is deactivated.")
    if not agent.projects.filter(pk=project.pk).exists():
        raise PermissionDenied(
            f"Agent {agent.handle} is not an agent of {project.slug}: only its agents report its checks.",
            details={"project": project.slug, "reason": "not_a_member"},
        )
    return _report(project=project, agent=agent, report=report)

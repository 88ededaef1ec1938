"""The parts of the work context SPEC §16 added: review findings, the review a reviewer holds,
active decisions and recent comments; each bounded before `leases.context.bound_context` runs.

- `review_findings`: the latest decided review of the task, when it asked for changes
  (summary and findings, as the reviewer wrote them: at most 20 of at most 500 characters).
- `review`: for a review attempt, the request it decides and the work it pins (the work
  attempt's summary, branch, base and head commit, the pinned task version).
- `decisions`: the active decisions of the task and its project, at most 10, each its
  title and at most 300 characters of its body.
- `comments`: the latest 5 comments, each at most 1,000 characters (cut with a mark and
  named in `truncated`).
"""

from __future__ import annotations

from typing import Any

from django.db.models import Q

from leases.models import Attempt, AttemptKind, AttemptStatus, Note, NoteKind
from leases.selectors import latest_changes_requested, review_in_progress
from leases.selectors.checks import checks_part
from ledger import clock
from ledger.models import Task
from ledger.selectors import active_decisions_for, recent_comments

DECISIONS_SHOWN = 10
DECISION_EXCERPT_CHARS = 300
COMMENTS_SHOWN = 5
COMMENT_SHOWN_CHARS = 1000
SUMMARY_SHOWN_CHARS = 2000
MARK = "[…truncated]"


def _excerpt(text: str, limit: int) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    return text[: limit - len(MARK)] + MARK, True


def review_parts(task: Task, current: Attempt | None) -> dict[str, Any]:
    """`review_findings` and `review`, and which of their texts were cut."""
    cut: list[str] = []
    findings = None
    changes = latest_changes_requested(task)
    if changes is not None:
        summary, was_cut = _excerpt(changes.summary, SUMMARY_SHOWN_CHARS)
        if was_cut:
            cut.append("review_findings.summary")
        findings = {
            "review": changes.pk,
            "reviewer": changes.reviewer_label,
            "decided_at": clock.iso(changes.decided_at),
            "summary": summary,
            "findings": list(changes.findings),
        }
    review = None
    if current is not None and current.kind == AttemptKind.REVIEW:
        request = review_in_progress(current)
        if request is not None:
            work = request.work_attempt
            summary, was_cut = _excerpt(work.result_summary, SUMMARY_SHOWN_CHARS)
            if was_cut:
                cut.append("review.result_summary")
            review = {
                "id": request.pk,
                "task_version": request.task_version,
                "head_commit": request.head_commit,
                "work_attempt": work.pk,
                "worker": work.agent.handle,
                "result_summary": summary,
                "next_steps": work.next_steps,
                "branch": work.branch or None,
                "base_commit": work.base_commit or None,
                # SPEC §22: the checks at the head the review is pinned to.
                "checks": checks_part(task.project_id, request.head_commit),
            }
    return {"review_findings": findings, "review": review, "cut": cut}


def discussion_parts(task: Task, *, known_empty: frozenset[str] = frozenset()) -> dict[str, Any]:
    """`decisions` and `comments`, and which of their texts were cut; a part in `known_empty` (a
    claim's transaction found none) is not read."""
    cut: list[str] = []
    decisions = []
    shown_decisions = [] if "decisions" in known_empty else active_decisions_for(task, limit=DECISIONS_SHOWN)
    shown_comments = [] if "comments" in known_empty else recent_comments(task, limit=COMMENTS_SHOWN)
    for decision in shown_decisions:
        body, was_cut = _excerpt(decision.body, DECISION_EXCERPT_CHARS)
        if was_cut and "decisions.body" not in cut:
            cut.append("decisions.body")
        decisions.append({"id": decision.pk, "title": decision.title, "body": body, "task": bool(decision.task_id)})
    comments = []
    for comment in shown_comments:
        body, was_cut = _excerpt(comment.body, COMMENT_SHOWN_CHARS)
        if was_cut and "comments.body" not in cut:
            cut.append("comments.body")
        comments.append(
            {
                "id": comment.pk,
                "author": comment.author_label,
                "created_at": clock.iso(comment.created_at),
                "body": body,
            }
        )
    return {"decisions": decisions, "comments": comments, "cut": cut}


LANDING_NOTES_SHOWN = 3


def landing_part(task: Task, *, recent: list[Attempt], first_ever: bool) -> dict[str, Any] | None:
    """SPEC §21.2: why the task's last landing(s) sent it back, shown first in the next work context —
    the `landing` notes written since the latest ended work attempt (the one that delivered), newest
    first; None when there are none."""
    if first_ever or task.delivered_at is None:
        return None  # landing notes follow a delivery: a task never delivered has none, and costs no query
    delivered_by = next((run.pk for run in recent if run.kind == AttemptKind.WORK), 0)
    # A landing's notes sit on its `land` attempts; a required check that failed at the delivered head
    # (SPEC §22) notes the work attempt that delivered it.
    notes = list(
        Note.objects.filter(attempt__task=task, kind=NoteKind.LANDING)
        .filter(Q(attempt__kind=AttemptKind.LAND, attempt_id__gt=delivered_by) | Q(attempt_id=delivered_by))
        .exclude(attempt__status=AttemptStatus.ACTIVE)
        .order_by("-id")[:LANDING_NOTES_SHOWN]
    )
    if not notes:
        return None
    return {
        "failed_landings": task.failed_landings,
        "notes": [
            {"attempt": note.attempt_id, "content": note.content, "created_at": clock.iso(note.created_at)}
            for note in notes
        ],
    }

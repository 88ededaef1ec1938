"""The work context (SPEC §8, §15.2) as text for a human at a terminal (`leasehold context`); the Markdown for a
prompt is `agent.workspace.briefing.context_markdown`.

It shows the effective status (a held task is `in_progress`, whatever its
stored status), the attempt this machine holds on it (label, branch, base,
worktree: from its state file), the environment, the latest checkpoint, the
previous attempt, the last failed one when it is another, where the
predecessor's work is (`predecessor_work`), the review findings (why the
work came back) and, for a review attempt, its target, the decisions and
comments, blockers, reserved paths, warnings, and what the server cut. Landing
notes and checks, when the server sends them, come first: they say why the
work is back. Any other part the JSON has is shown as it is, so the text never
says less than `--json`. A part the server did not send is left out; a section
never ends with nothing after its colon.
"""

from __future__ import annotations

from typing import Any

from agent.workspace.state import HeldAttempt


def _attempt_line(title: str, attempt: dict[str, Any]) -> str:
    """`Previous attempt 12 (expired, agent-07, tests_failed): summary`, or `… left no summary.`"""
    facts = [
        attempt.get("status"),
        attempt.get("agent"),
        attempt.get("failure_reason_code") or attempt.get("interruption_reason_code"),
    ]
    named = ", ".join(str(fact) for fact in facts if fact)
    head = f"{title} {attempt.get('id')}" if attempt.get("id") is not None else title
    head += f" ({named})" if named else ""
    summary = str(attempt.get("result_summary") or "").strip()
    return f"{head}: {summary}" if summary else f"{head} left no summary."


def _work_line(work: dict[str, Any]) -> str:
    """Where the predecessor's work is: branch, head, ahead, pushed, dirty, host and worktree."""
    parts = [f"branch {work.get('branch')}" if work.get("branch") else "no branch"]
    if work.get("head_commit"):
        parts.append(f"at {str(work['head_commit'])[:12]}")
    if work.get("commits_ahead") is not None:
        parts.append(f"{work['commits_ahead']} commit(s) ahead of {str(work.get('base_commit') or 'the base')[:12]}")
    if work.get("pushed") is not None:
        parts.append("pushed" if work["pushed"] else "NOT pushed")
    if work.get("dirty"):
        parts.append("with uncommitted changes")
    where = " ".join(
        part
        for part in (
            f"on {work['host']}" if work.get("host") else "",
            f"in {work['worktree_path']}" if work.get("worktree_path") else "",
        )
        if part
    )
    who = f"attempt {work.get('attempt')} ({work.get('status')}, {work.get('agent')})"
    return f"{who}: {', '.join(parts)}" + (f", {where}" if where else "")


def _environment_line(environment: dict[str, Any]) -> str:
    resources = environment.get("resources") or {}
    shown = ", ".join(f"{name}={value}" for name, value in resources.items() if value not in (None, "", []))
    kind = f" ({environment['kind']})" if environment.get("kind") else ""
    return f"{environment.get('name')}{kind}" + (f": {shown}" if shown else "")


def _held_of(context: dict[str, Any], held: HeldAttempt | None) -> HeldAttempt | None:
    task = context.get("task") or {}
    return held if held is not None and held.task == task.get("key") else None


def _where(context: dict[str, Any], mine: HeldAttempt | None) -> tuple[str | None, str | None, str | None]:
    """Branch, base commit and worktree of the current attempt: its git facts on the server, else its state file."""
    facts = context.get("git") or {}
    return (
        facts.get("branch") or (mine.branch if mine else None),
        facts.get("base_commit") or (mine.base_commit if mine else None),
        facts.get("worktree_path") or (mine.worktree if mine else None),
    )


def _last_failed(context: dict[str, Any]) -> dict[str, Any] | None:
    """The last failed attempt, unless it is the previous attempt already shown."""
    failed = context.get("last_failed_attempt")
    previous = context.get("previous_attempt") or {}
    if not failed or failed.get("id") == previous.get("id"):
        return None
    return dict(failed)


# The parts `human` renders by name; any other part of the context is shown generically.
_SHOWN = frozenset(
    {
        "task", "label", "git", "environment", "latest_checkpoint", "previous_attempt", "last_failed_attempt",
        "predecessor_work", "blockers", "blockers_total", "warnings", "truncated", "review_findings", "review",
        "decisions", "comments", "reservation", "landing", "landing_notes", "checks",
    }
)  # fmt: skip
# Parts that say why work came back from landing, shown before everything else.
_FIRST = ("landing_notes", "landing", "checks")


def _text_of(item: Any) -> str:
    """One note, check or comment-like item on one line (its text, else its fields)."""
    if not isinstance(item, dict):
        return str(item)
    text = next((item[name] for name in ("content", "excerpt", "body", "summary", "message") if item.get(name)), None)
    facts = [
        str(item[name])
        for name in ("name", "kind", "status", "result", "conclusion", "created_at", "author", "agent")
        if item.get(name) not in (None, "", [])
    ]
    head = f"[{', '.join(facts)}] " if facts else ""
    if text is None:
        rest = {name: value for name, value in item.items() if value not in (None, "", []) and str(value) not in facts}
        return head + ", ".join(f"{name}={value}" for name, value in rest.items())
    return head + str(text)


def _blocker_text(blocker: dict[str, Any]) -> str:
    """A blocker by key; another project's (a stub, SPEC §22) with its effective status, all it shows."""
    if blocker.get("stub"):
        return f"{blocker.get('key')} (another project, {blocker.get('effective_status')})"
    return str(blocker.get("key"))


def _generic(name: str, value: Any) -> list[str]:
    title = name.replace("_", " ").capitalize()
    if isinstance(value, list):
        return ["", f"{title}:", *(f"  - {_text_of(item)}" for item in value)]
    if isinstance(value, dict):
        return ["", f"{title}:", *(f"  {key}: {item}" for key, item in value.items() if item not in (None, "", []))]
    return ["", f"{title}: {value}"]


def _landing_lines(value: Any) -> list[str]:
    """SPEC §21.2: why the last landing sent the task back, each landing note in full (newest first)."""
    if not isinstance(value, dict) or not isinstance(value.get("notes"), list):
        return _generic("landing", value)
    failed = value.get("failed_landings")
    lines = ["", "Landing sent this task back" + (f" ({failed} failed landings in a row):" if failed else ":")]
    for note in value["notes"]:
        lines += [
            f"  - {line}" if index == 0 else f"    {line}" for index, line in enumerate(_text_of(note).splitlines())
        ]
    return lines


def _review_lines(context: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    findings = context.get("review_findings")
    if findings:
        by = ", ".join(str(part) for part in (findings.get("reviewer"), findings.get("decided_at")) if part)
        lines += ["", f"Review {findings.get('review')}: changes requested" + (f" ({by})" if by else "")]
        if findings.get("summary"):
            lines.append(str(findings["summary"]))
        lines += [f"  - {finding}" for finding in findings.get("findings") or []]
    review = context.get("review")
    if review:
        target = f"task version {review.get('task_version')}"
        if review.get("head_commit"):
            target += f", head {str(review['head_commit'])[:12]}"
        if review.get("branch"):
            target += f" on {review['branch']}"
        lines += ["", f"Reviewing request {review.get('id')}: {target}"]
        work = f"Work: attempt {review.get('work_attempt')} by {review.get('worker')}"
        summary = str(review.get("result_summary") or "").strip()
        lines.append(f"{work}: {summary}" if summary else f"{work} left no summary.")
        lines += [f"  - {step}" for step in review.get("next_steps") or []]
    return lines


def _discussion_lines(context: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    decisions = context.get("decisions") or []
    if decisions:
        lines += ["", "Decisions:"]
        for decision in decisions:
            scope = "task" if decision.get("task") else "project"
            body = str(decision.get("body") or "").strip()
            lines.append(f"  - {decision.get('title')} ({scope})" + (f": {body}" if body else ""))
    comments = context.get("comments") or []
    if comments:
        lines += ["", "Comments:"]
        for comment in comments:
            by = ", ".join(str(part) for part in (comment.get("author"), comment.get("created_at")) if part)
            lines.append(f"  - {by}: {comment.get('body')}" if by else f"  - {comment.get('body')}")
    return lines


def human(context: dict[str, Any], held: HeldAttempt | None = None) -> str:
    """The context for a person at a terminal."""
    task = context.get("task") or {}
    status = task.get("effective_status") or task.get("status")
    lines = [f"{task.get('key')}: {task.get('title')} [{status}]"]
    mine = _held_of(context, held)
    label = context.get("label") or (mine.label if mine else None)
    if mine is not None:
        lines.append(f"Attempt {mine.attempt_id} (epoch {mine.epoch}), lease until {mine.lease_expires_at}")
    if label:
        lines.append(f"Label: {label}")
    branch, base, worktree = _where(context, mine)
    if branch:
        lines.append(f"Branch: {branch}" + (f" (base {base[:12]})" if base else ""))
    if worktree:
        lines.append(f"Worktree: {worktree}")
    if context.get("environment"):
        lines.append(f"Environment: {_environment_line(context['environment'])}")
    reservation = context.get("reservation")
    if reservation and reservation.get("paths"):
        lines.append(f"Reserved paths ({reservation.get('mode')}): {', '.join(map(str, reservation['paths']))}")
    for name in _FIRST:
        if context.get(name):
            lines += _landing_lines(context[name]) if name == "landing" else _generic(name, context[name])
    lines += _review_lines(context)
    for name in ("description", "acceptance_criteria"):
        if task.get(name):
            lines += ["", f"{name.replace('_', ' ').capitalize()}:", str(task[name])]
    checkpoint = context.get("latest_checkpoint")
    if checkpoint:
        by = ", ".join(str(part) for part in (checkpoint.get("agent"), checkpoint.get("created_at")) if part)
        lines += ["", f"Latest checkpoint ({by}):" if by else "Latest checkpoint:", str(checkpoint.get("content", ""))]
        lines += [f"  - {step}" for step in checkpoint.get("next_steps") or []]
    previous = context.get("previous_attempt")
    if previous:
        lines += ["", _attempt_line("Previous attempt", previous)]
        lines += [f"  - {step}" for step in previous.get("next_steps") or []]
    failed = _last_failed(context)
    if failed:
        lines += ["", _attempt_line("Last failed attempt", failed)]
    if context.get("predecessor_work"):
        lines += ["", "Predecessor's work: " + _work_line(context["predecessor_work"])]
    lines += _discussion_lines(context)
    blockers = context.get("blockers") or []
    if blockers:
        total = context.get("blockers_total")
        more = f" (of {total})" if isinstance(total, int) and total > len(blockers) else ""
        lines += ["", f"Unresolved blockers{more}: " + ", ".join(_blocker_text(blocker) for blocker in blockers)]
    for name, value in context.items():
        if name not in _SHOWN and value not in (None, "", [], {}):
            lines += _generic(name, value)
    lines += [f"Warning: {warning}" for warning in context.get("warnings") or []]
    if context.get("truncated"):
        lines.append(f"(truncated: {', '.join(map(str, context['truncated']))})")
    return "\n".join(lines)

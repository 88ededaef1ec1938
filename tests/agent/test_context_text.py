"""The human `leasehold context` (issue 13): effective status, the attempt, label, branch, worktree, environment,
the previous and last failed attempts, where the predecessor's work is; no section ends in nothing."""

from __future__ import annotations

from agent.cli.context_text import human
from agent.workspace.state import HeldAttempt

HELD = HeldAttempt(
    server="http://127.0.0.1:1",
    agent="agent-07",
    task="WEB-3",
    attempt_id=12,
    epoch=2,
    lease_token="lh_secret",
    lease_expires_at="2999-01-01T00:00:00Z",
    renew_every_seconds=100,
    label="owner=agent-07;branch=feature/web-3;env=preview-a;task=WEB-3;epoch=2",
    branch="feature/web-3",
    worktree="/src/web.worktrees/WEB-3",
)
CONTEXT = {
    "task": {"key": "WEB-3", "title": "Multiply", "status": "ready", "effective_status": "in_progress"},
    "label": HELD.label,
    "environment": {"name": "preview-a", "kind": "preview",
                    "resources": {"database_url": "postgres://x", "ports": [8001]}},
    "previous_attempt": {"id": 11, "status": "expired", "agent": "agent-05", "result_summary": "", "next_steps": []},
    "last_failed_attempt": {"id": 10, "status": "failed", "agent": "agent-02", "failure_reason_code": "tests_failed",
                            "result_summary": "3 tests fail"},
    "predecessor_work": {"attempt": 11, "status": "expired", "agent": "agent-05", "branch": "feature/web-3",
                         "head_commit": "a" * 40, "commits_ahead": 2, "pushed": False, "host": "box-2",
                         "worktree_path": "/src/web.worktrees/WEB-3"},
}  # fmt: skip


def test_the_human_context_shows_what_the_holder_needs():
    text = human(CONTEXT, HELD)
    lines = text.splitlines()
    assert lines[0] == "WEB-3: Multiply [in_progress]"
    assert "Attempt 12 (epoch 2), lease until 2999-01-01T00:00:00Z" in lines
    assert f"Label: {HELD.label}" in lines
    assert "Branch: feature/web-3" in lines
    assert "Worktree: /src/web.worktrees/WEB-3" in lines
    assert "Environment: preview-a (preview): database_url=postgres://x, ports=[8001]" in lines
    assert "Previous attempt 11 (expired, agent-05) left no summary." in lines
    assert "Last failed attempt 10 (failed, agent-02, tests_failed): 3 tests fail" in lines
    work = next(line for line in lines if line.startswith("Predecessor's work: "))
    assert "NOT pushed" in work
    assert "on box-2" in work
    assert not any(line.rstrip().endswith(":") and not line.endswith("criteria:") for line in lines[1:] if line)


def test_a_context_of_a_task_not_held_here_shows_no_attempt():
    text = human({"task": {"key": "WEB-9", "title": "x", "status": "ready"}, "previous_attempt": None}, HELD)
    assert text == "WEB-9: x [ready]"


def test_the_human_context_shows_why_the_work_came_back_and_what_was_decided():
    context = {
        **CONTEXT,
        "landing_notes": [{"id": 7, "kind": "landing", "created_at": "2030-01-02T03:04:05Z",
                           "content": "merge conflict in api/urls.py"}],
        "review_findings": {"review": 8, "reviewer": "agent-09", "decided_at": "2030-01-01T00:00:00Z",
                            "summary": "Two things", "findings": ["add a test", "rename it"]},
        "review": {"id": 9, "task_version": 4, "head_commit": "b" * 40, "work_attempt": 11, "worker": "agent-05",
                   "result_summary": "ready for a look", "next_steps": ["check the docs"], "branch": "feature/web-3"},
        "decisions": [{"id": 3, "title": "Use UTC everywhere", "body": "Always.", "task": False}],
        "comments": [{"id": 5, "author": "alice", "created_at": "2030-01-01T00:00:00Z", "body": "mind the footer"}],
        "reservation": {"paths": ["api/"], "mode": "exclusive"},
        "something_new": {"answer": 42},
    }  # fmt: skip
    text = human(context, HELD)
    lines = text.splitlines()
    assert "Review 8: changes requested (agent-09, 2030-01-01T00:00:00Z)" in lines
    assert "  - add a test" in lines
    assert "  - rename it" in lines
    assert f"Reviewing request 9: task version 4, head {'b' * 12} on feature/web-3" in lines
    assert "Work: attempt 11 by agent-05: ready for a look" in lines
    assert "  - Use UTC everywhere (project): Always." in lines
    assert "  - alice, 2030-01-01T00:00:00Z: mind the footer" in lines
    assert "Reserved paths (exclusive): api/" in lines
    assert "  answer: 42" in lines  # a part this version does not know is still shown
    landing = next(index for index, line in enumerate(lines) if "merge conflict in api/urls.py" in line)
    review = lines.index("Review 8: changes requested (agent-09, 2030-01-01T00:00:00Z)")
    assert landing < review  # landing notes first

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

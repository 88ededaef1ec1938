"""What the command gets (SPEC §15.2): the context as Markdown, the variables, the placeholders, the outcome file."""

from __future__ import annotations

import pytest

from agent.workspace.briefing import command_environment, context_markdown, expand_placeholders
from agent.workspace.outcome import InvalidOutcome, parse_outcome

CONTEXT = {
    "task": {
        "key": "WEB-7",
        "title": "Multiply",
        "status": "ready",
        "effective_status": "in_progress",
        "priority": 2,
        "task_class": "feature",
        "epoch": 3,
        "version": 4,
        "description": "Add multiply().",
        "acceptance_criteria": "multiply(2, 3) == 6",
    },
    "blockers": [{"key": "WEB-2", "title": "The parser"}],
    "blockers_total": 1,
    "latest_checkpoint": {
        "attempt": 11,
        "agent": "agent-a",
        "created_at": "2026-01-01T00:00:00Z",
        "content": "Parser done",
        "next_steps": ["wire the CLI"],
    },
    "previous_attempt": {"id": 11, "status": "expired", "agent": "agent-a", "result_summary": "", "next_steps": []},
    "predecessor_work": {
        "attempt": 11,
        "status": "expired",
        "agent": "agent-a",
        "branch": "feature/web-7",
        "head_commit": "a" * 40,
        "commits_ahead": 2,
        "pushed": False,
        "dirty": True,
        "host": "box-1",
        "worktree_path": "/src/web.worktrees/WEB-7",
    },
    "git": {"branch": "feature/web-7", "base_commit": "b" * 40, "worktree_path": None},
    "review_findings": [{"severity": "major", "text": "No test for zero"}],
    "decisions": [{"title": "Use integers only", "status": "active"}],
    "label": "owner=agent-b;branch=feature/web-7;env=preview-a;task=WEB-7;epoch=3",
    "environment": {"name": "preview-a", "kind": "preview", "resources": {"database_url": "postgres://p/a"}},
    "warnings": ["Reserved for one agent."],
    "truncated": ["task.description"],
}


def test_the_context_markdown_has_every_part_and_what_it_does_not_know():
    text = context_markdown(CONTEXT, where={"worktree": "/src/web.worktrees/WEB-7"})
    for expected in (
        "# WEB-7: Multiply",
        "Task: status in_progress, priority 2, class feature, epoch 3.",
        "Label: `owner=agent-b;branch=feature/web-7;env=preview-a;task=WEB-7;epoch=3`",
        "Leasehold-Label: owner=agent-b",
        "Branch: `feature/web-7`",
        "Worktree: `/src/web.worktrees/WEB-7`",
        f"Base commit: `{'b' * 40}`",
        "## Description\n\nAdd multiply().",
        "## Acceptance criteria\n\nmultiply(2, 3) == 6",
        "## Unresolved blockers (1 of 1)\n\n- WEB-2: The parser",
        "## Latest checkpoint (attempt 11 by agent-a, 2026-01-01T00:00:00Z)\n\nParser done",
        "- wire the CLI",
        "## Previous attempt 11 (expired, agent-a)\n\n(no summary was written)",
        "## Where the predecessor's work is (attempt 11, expired)",
        f"- Head: `{'a' * 40}`",
        "- Commits ahead of the base: 2",
        "- Pushed: no (only on its machine)",
        "- Uncommitted changes left: yes",
        "- Host: box-1",
        "- Worktree: /src/web.worktrees/WEB-7",
        "## Review findings\n\n- Severity: major\n  - Text: No test for zero",
        "## Decisions\n\n- Title: Use integers only",
        "## Environment preview-a",
        "- Database url: postgres://p/a",
        "## Warnings\n\n- Reserved for one agent.",
        "These parts were shortened: `task.description`",
        "leasehold task show WEB-7 --field description --offset N",
    ):
        assert expected in text, expected
    assert "## Git" not in text  # the attempt's own facts are the lines at the top


def test_the_variables_are_the_ones_with_a_value_and_never_a_token():
    variables = command_environment(
        task="WEB-7",
        attempt_id=12,
        epoch=3,
        label="owner=a;branch=-;env=-;task=WEB-7;epoch=3",
        branch=None,
        base_commit=None,
        worktree=None,
        environment={
            "name": "preview-a",
            "resources": {"database_url": "postgres://p/a", "ports": [8001, 8002], "container_name": "", "x": 1},
        },
    )
    assert variables == {
        "LEASEHOLD_TASK": "WEB-7",
        "LEASEHOLD_ATTEMPT_ID": "12",
        "LEASEHOLD_EPOCH": "3",
        "LEASEHOLD_LABEL": "owner=a;branch=-;env=-;task=WEB-7;epoch=3",
        "LEASEHOLD_ENV_NAME": "preview-a",
        "LEASEHOLD_ENV_DATABASE_URL": "postgres://p/a",
        "LEASEHOLD_ENV_PORTS": "8001,8002",
        "LEASEHOLD_ENV_PORT": "8001",
    }


def test_only_the_four_placeholders_are_replaced():
    values = {"context_file": "/run/leasehold/c.md", "task": "WEB-7", "branch": "feature/x", "worktree": None}
    assert expand_placeholders(
        ["{task}:{branch}", "read {context_file}", "{worktree}", '{"a": 1}', "{other}"], values
    ) == [
        "WEB-7:feature/x",
        "read /run/leasehold/c.md",
        "",
        '{"a": 1}',
        "{other}",
    ]


def test_the_outcome_file_defaults_its_reason_codes():
    assert parse_outcome({"outcome": "failed"}).failure_reason_code == "implementation_error"
    assert parse_outcome({"outcome": "handoff"}).interruption_reason_code == "handoff"
    chosen = parse_outcome({"outcome": "done", "result_summary": "x" * 5000, "next_steps": ["a"]})
    assert (len(chosen.result_summary or ""), chosen.next_steps) == (4000, ["a"])


@pytest.mark.parametrize(
    "data",
    [
        [],
        {"outcome": "done", "next_steps": "one"},
        {"outcome": "done", "result_summary": 3},
        {"outcome": "handoff", "interruption_reason_code": "bored"},
        {"outcome": "failed", "interruption_reason_code": "handoff"},
    ],
)
def test_an_outcome_that_breaks_the_rules_is_refused_in_one_line(data):
    with pytest.raises(InvalidOutcome) as refused:
        parse_outcome(data)
    assert "\n" not in str(refused.value)

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.errors import InvalidBranchName
from leases.branches import (
    AGENT_PREFIXES,
    BRANCH_TYPES,
    MAX_BRANCH_LENGTH,
    suggest_branch_name,
    validate_branch_name,
)

# The grammar SPEC §5 describes, written independently of the rule-by-rule validator.
GRAMMAR = re.compile(rf"(?:{'|'.join(BRANCH_TYPES + AGENT_PREFIXES)})/[a-z0-9]+(?:[.-][a-z0-9]+)*")

ACCEPTED = [
    "release/v1.2.0",
    "claude/web-412-search-copy",
    "feature/login-page",
    "fix/a1",
    "feat/x",
    "bugfix/0",
    "hotfix/v2.0.1-patch",
    "chore/bump-deps",
    "ai/web-1",
    "codex/web-1",
    "copilot/web-1",
    "cursor/web-1",
    "feature/" + "a" * (MAX_BRANCH_LENGTH - len("feature/")),
]

REFUSED = [
    ("release/v1.-2.0", "dot_not_between_alphanumerics"),
    ("release/v1.2-.0", "dot_not_between_alphanumerics"),
    ("feature/Foo", "uppercase"),
    ("Feature/foo", "uppercase"),
    ("feature/a--b", "double_hyphen"),
    ("feature/a/b", "extra_slash"),
    ("main", "trunk"),
    ("master", "trunk"),
    ("develop", "trunk"),
    ("feature/", "empty_description"),
    ("feature/-a", "edge_hyphen"),
    ("feature/a-", "edge_hyphen"),
    ("feature/a_b", "underscore"),
    ("feature/a b", "whitespace"),
    ("feature/a\tb", "whitespace"),
    ("feature/a..b", "double_dot"),
    ("feature/.a", "edge_dot"),
    ("feature/a.", "edge_dot"),
    ("wip/thing", "unknown_type"),
    ("/thing", "unknown_type"),
    ("thing", "missing_type"),
    ("", "missing_type"),
    ("feature/caf\u00e9", "invalid_character"),
    ("feature/a@b", "invalid_character"),
    ("feature/a~1", "invalid_character"),
    ("feature/v1.lock", "lock_suffix"),
    ("feature/" + "a" * (MAX_BRANCH_LENGTH + 1 - len("feature/")), "too_long"),
]


@pytest.mark.parametrize("name", ACCEPTED)
def test_conventional_branch_names_are_accepted_unchanged(name: str) -> None:
    assert validate_branch_name(name) == name


@pytest.mark.parametrize(("name", "rule"), REFUSED)
def test_refused_branch_names_report_the_rule_that_failed(name: str, rule: str) -> None:
    with pytest.raises(InvalidBranchName) as refused:
        validate_branch_name(name)

    assert refused.value.code == "INVALID_BRANCH_NAME"
    assert refused.value.details == {"branch": name, "rule": rule}
    assert repr(name) in refused.value.message


def test_the_too_long_case_is_exactly_one_character_over() -> None:
    assert len(REFUSED[-1][0]) == MAX_BRANCH_LENGTH + 1
    assert len(ACCEPTED[-1]) == MAX_BRANCH_LENGTH


@given(st.text(alphabet=st.sampled_from("abz09.-/_ AF\u00e9") | st.characters(), max_size=24))
def test_the_validator_accepts_exactly_the_grammar(description: str) -> None:
    name = f"feature/{description}"
    try:
        validate_branch_name(name)
    except InvalidBranchName:
        accepted = False
    else:
        accepted = True

    assert accepted == (GRAMMAR.fullmatch(name) is not None and not name.endswith(".lock"))


@pytest.mark.parametrize(
    ("agent_kind", "task_key", "title", "expected"),
    [
        ("claude", "WEB-412", "Search copy", "claude/web-412-search-copy"),
        ("codex", "WEB-7", "Fix: the  login_page!", "codex/web-7-fix-the-login-page"),
        ("cursor", "API-1", "Caf\u00e9 cr\u00e8me", "cursor/api-1-cafe-creme"),
        ("ai", "API-1", "x", "ai/api-1-x"),
        ("human", "OPS-9", "Rotate keys", "feature/ops-9-rotate-keys"),
        ("script", "OPS-9", "Rotate keys", "ai/ops-9-rotate-keys"),
        ("claude", "WEB-412", "\u6f22\u5b57 ???", "claude/web-412"),
    ],
)
def test_suggest_branch_name_prefixes_the_agent_kind_and_slugs_key_and_title(
    agent_kind: str, task_key: str, title: str, expected: str
) -> None:
    assert suggest_branch_name(agent_kind=agent_kind, task_key=task_key, title=title) == expected


def test_suggest_branch_name_cuts_a_long_title_at_a_word_boundary() -> None:
    name = suggest_branch_name(agent_kind="claude", task_key="WEB-412", title="search copy " * 20)

    assert len(name) <= MAX_BRANCH_LENGTH
    assert name.startswith("claude/web-412-search-copy-search-copy")
    assert name.endswith(("-search", "-copy"))


def test_suggest_branch_name_cuts_an_unbroken_title_hard() -> None:
    name = suggest_branch_name(agent_kind="claude", task_key="WEB-412", title="a" * 200)

    assert len(name) == MAX_BRANCH_LENGTH
    assert name.startswith("claude/web-412-aaaa")


@given(
    agent_kind=st.sampled_from((*AGENT_PREFIXES, "human", "script")) | st.text(max_size=10),
    task_key=st.from_regex(r"[A-Z]{1,10}-[0-9]{1,6}", fullmatch=True),
    title=st.text(max_size=300),
)
def test_suggested_branch_names_always_pass_validation(agent_kind: str, task_key: str, title: str) -> None:
    name = suggest_branch_name(agent_kind=agent_kind, task_key=task_key, title=title)

    assert validate_branch_name(name) == name
    assert len(name) <= MAX_BRANCH_LENGTH
    assert name.split("/", 1)[1].startswith(task_key.lower())

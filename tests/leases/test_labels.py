from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.errors import ValidationFailed
from leases.branches import AGENT_PREFIXES, BRANCH_TYPES
from leases.labels import Label, parse_label, render_label

SPEC_EXAMPLE = "owner=agent-07;branch=feature/web-412-search-copy;env=preview-b;task=WEB-412;epoch=3"
VALID = "owner=agent-07;branch=-;env=-;task=WEB-412;epoch=3"

handles = st.from_regex(r"[a-z0-9][a-z0-9._-]{0,63}", fullmatch=True)
branches = st.builds(
    lambda branch_type, description: f"{branch_type}/{description}",
    st.sampled_from(BRANCH_TYPES + AGENT_PREFIXES),
    st.from_regex(r"[a-z0-9]{1,8}(?:[.-][a-z0-9]{1,8}){0,5}", fullmatch=True).filter(
        lambda description: not description.endswith(".lock")
    ),
)
environments = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,30}", fullmatch=True)
task_keys = st.from_regex(r"[A-Z][A-Z0-9]{0,9}-[1-9][0-9]{0,6}", fullmatch=True)
labels = st.builds(
    Label,
    owner=handles,
    branch=st.none() | branches,
    env=st.none() | environments,
    task=task_keys,
    epoch=st.integers(min_value=0, max_value=10**12),
)


def test_render_label_writes_the_spec_example() -> None:
    label = Label(owner="agent-07", branch="feature/web-412-search-copy", env="preview-b", task="WEB-412", epoch=3)

    assert render_label(label) == SPEC_EXAMPLE


def test_absent_branch_and_environment_render_and_parse_as_dash() -> None:
    label = parse_label(VALID)

    assert label == Label(owner="agent-07", branch=None, env=None, task="WEB-412", epoch=3)
    assert render_label(label) == VALID


@given(labels)
def test_every_valid_label_round_trips_exactly(label: Label) -> None:
    text = render_label(label)

    assert parse_label(text) == label
    assert render_label(parse_label(text)) == text


@given(labels, st.data())
def test_whatever_the_parser_accepts_renders_back_to_the_same_text(label: Label, data: st.DataObject) -> None:
    # One-character edits of a valid label probe the parser's strictness: it
    # must either refuse the edit or accept a label that renders identically.
    text = render_label(label)
    position = data.draw(st.integers(min_value=0, max_value=len(text)))
    edit = data.draw(st.sampled_from(["insert", "delete", "replace"]))
    character = data.draw(st.characters(codec="utf-8") | st.sampled_from(list("0+-;= \n_.A")))
    if edit == "insert":
        edited = text[:position] + character + text[position:]
    elif edit == "delete":
        edited = text[:position] + text[position + 1 :]
    else:
        edited = text[:position] + character + text[position + 1 :]

    try:
        parsed = parse_label(edited)
    except ValidationFailed:
        return
    assert render_label(parsed) == edited


REFUSED = [
    pytest.param(VALID + ";colour=blue", "colour", "unknown", id="unknown-field"),
    pytest.param("owner=agent-07;branch=-;env=-;task=WEB-412", "epoch", "missing", id="missing-field"),
    pytest.param("owner=agent-07;branch=-;env=-;env=-;task=WEB-412;epoch=3", "env", "repeated", id="repeated-field"),
    pytest.param("owner=agent-07;env=-;branch=-;task=WEB-412;epoch=3", "env", "out of order", id="out-of-order"),
    pytest.param("owner=agent-07;branch=-;env=-;task=WEB-412;epoch=-1", "epoch", "negative", id="negative-epoch"),
    pytest.param("owner=agent-07;branch=-;env=-;task=WEB-412;epoch=three", "epoch", "integer", id="word-epoch"),
    pytest.param("owner=agent-07;branch=-;env=-;task=WEB-412;epoch=03", "epoch", "leading zeros", id="padded-epoch"),
    pytest.param("owner=agent-07;branch=-;env=-;task=WEB-412;epoch=+3", "epoch", "integer", id="signed-epoch"),
    pytest.param("owner=agent-07;branch=-;env=-;task=WEB-412;epoch=1.5", "epoch", "integer", id="fractional-epoch"),
    pytest.param("owner=;branch=-;env=-;task=WEB-412;epoch=3", "owner", "empty", id="empty-owner"),
    pytest.param("owner=agent-07;branch=;env=-;task=WEB-412;epoch=3", "branch", "empty", id="empty-branch"),
    pytest.param("owner=agent-07;branch=-;env=-;task=WEB-412;epoch=", "epoch", "empty", id="empty-epoch"),
    pytest.param("owner=agent-07;branch=-;env=a=b;task=WEB-412;epoch=3", "env", "'='", id="equals-in-value"),
    pytest.param("owner=agent 07;branch=-;env=-;task=WEB-412;epoch=3", "owner", "whitespace", id="space-in-value"),
    pytest.param(VALID + "\n", "epoch", "whitespace", id="trailing-newline"),
    pytest.param("owner=Agent-07;branch=-;env=-;task=WEB-412;epoch=3", "owner", "agent handle", id="uppercase-owner"),
    pytest.param("owner=agent-07;branch=main;env=-;task=WEB-412;epoch=3", "branch", "trunk", id="trunk-branch"),
    pytest.param("owner=agent-07;branch=-;env=-preview;task=WEB-412;epoch=3", "env", "environment", id="bad-env"),
    pytest.param("owner=agent-07;branch=-;env=-;task=web-412;epoch=3", "task", "task key", id="lowercase-task"),
    pytest.param(VALID + ";", None, "field=value", id="trailing-separator"),
    pytest.param("", None, "field=value", id="empty-text"),
]


@pytest.mark.parametrize(("text", "field", "problem"), REFUSED)
def test_parse_label_refuses_and_names_the_field_and_problem(text: str, field: str | None, problem: str) -> None:
    with pytest.raises(ValidationFailed) as refused:
        parse_label(text)

    assert refused.value.code == "VALIDATION_ERROR"
    assert refused.value.details == {"label": text, "field": field}
    assert problem in refused.value.message
    if field is not None:
        assert repr(field) in refused.value.message


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"owner": "Agent"}, "owner"),
        ({"branch": "feature/a;b"}, "branch"),
        ({"branch": ""}, "branch"),
        ({"env": "a b"}, "env"),
        ({"task": "WEB-0"}, "task"),
        ({"epoch": -1}, "epoch"),
        ({"epoch": True}, "epoch"),
        ({"epoch": "3"}, "epoch"),
        ({"owner": 7}, "owner"),
    ],
)
def test_a_label_that_could_not_be_parsed_cannot_be_built(changes: dict[str, object], field: str) -> None:
    values: dict[str, object] = {"owner": "agent-07", "branch": None, "env": None, "task": "WEB-412", "epoch": 3}

    with pytest.raises(ValidationFailed) as refused:
        Label(**{**values, **changes})

    assert refused.value.details["field"] == field

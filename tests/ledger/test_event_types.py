"""Event types are declared once, in `ledger.models.EventType` (STYLE: names the code shares).

Code, tests and benchmarks name an event type as `EventType.X`, never as a free string: a typo in a
string filter (`type="attempt.expird"`) matches nothing and a negative assert on it passes forever.
The check reads every module's syntax tree. The agent (`agent/`, and its tests in `tests/agent/`)
imports no server package and speaks the wire's strings, so it is not read; migrations are history.

Besides these, `tests/conftest.py` checks after every database test that each
event type in the table is declared, so a type emitted anywhere (the raw
sweep SQL included) but missing from the enum fails the suite.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

from ledger.models import EventType

ROOT = Path(__file__).resolve().parents[2]
NOT_READ = (
    ROOT / ".venv",
    ROOT / "agent",
    ROOT / "tests" / "agent",
    ROOT / "ledger" / "models" / "events.py",  # the declaration itself
)

# What an event type looks like: subject, dot, verb (`task.status_changed`).
EVENT_TYPE_SHAPE = re.compile(r"[a-z]+\.[a-z_]+")
# Lookups whose value is a whole event type or a list of them; `type__startswith="review."` names a
# family by its prefix, which no member spells.
WHOLE_TYPE_LOOKUPS = frozenset({"type", "type__in", "type__exact", "type__iexact"})


def free_event_type_strings(source: str) -> list[tuple[int, str]]:
    """(line, string) for each event type that `source` spells as a string literal.

    A string is flagged when it is passed to a `type=` / `type__in=` lookup and looks like an event
    type (declared or not: a misspelt one is the worst case), or when it is anywhere else (a dict
    key or value, a comparison, a list, an argument) and equals a declared type. Strings that do not
    look like event types in a `type=` lookup (`"forged"`) are a test's probes of undeclared types.
    """
    declared = set(EventType.values)
    found: set[tuple[int, str]] = set()
    tree = ast.parse(source)
    in_lookup: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg in WHOLE_TYPE_LOOKUPS:
            for inner in ast.walk(node.value):
                if isinstance(inner, ast.Constant) and isinstance(inner.value, str):
                    in_lookup.add(id(inner))
                    if EVENT_TYPE_SHAPE.fullmatch(inner.value) or inner.value in declared:
                        found.add((inner.lineno, inner.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value in declared and id(node) not in in_lookup:
            found.add((node.lineno, node.value))
    return sorted(found)


def _read_modules() -> list[Path]:
    return [
        path
        for path in sorted(ROOT.rglob("*.py"))
        if "migrations" not in path.parts and not any(path.is_relative_to(skipped) for skipped in NOT_READ)
    ]


def test_no_module_spells_an_event_type_as_a_free_string() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {value!r}"
        for path in _read_modules()
        for line, value in free_event_type_strings(path.read_text())
    ]
    assert offenders == [], "use ledger.models.EventType, not a string:\n" + "\n".join(offenders)


def test_the_check_reads_the_rooms_the_doors_the_tests_and_the_benchmarks() -> None:
    read = {path.relative_to(ROOT).parts[0] for path in _read_modules()}
    rooms = {"ledger", "environments", "leases", "reconciliation", "insight", "push", "operations"}
    assert rooms | {"api", "console", "tests", "bench"} <= read
    assert "agent" not in read


PROBE = textwrap.dedent(
    '''
    """A docstring that mentions attempt.expired is prose, not a filter."""
    Event.objects.filter(type="attempt.expired")
    Event.objects.filter(type__in=["task.created", EventType.NOTE_ADDED])
    Event.objects.filter(type="attempt.expird")
    Event.objects.filter(type="forged")
    Event.objects.filter(type__startswith="review.")
    LABELS = {"finding.opened": "opened", "key": "task.contested"}
    if kind == "attempt.finished":
        pass
    assert "budget.set" not in types
    record(type=EventType.ATTEMPT_CLAIMED, note="task.description")
    '''
)


def test_the_check_finds_free_strings_in_lookups_dicts_and_comparisons() -> None:
    assert free_event_type_strings(PROBE) == [
        (3, EventType.ATTEMPT_EXPIRED),
        (4, EventType.TASK_CREATED),
        (5, "attempt.expird"),
        (8, EventType.FINDING_OPENED),
        (8, EventType.TASK_CONTESTED),
        (9, EventType.ATTEMPT_FINISHED),
        (11, EventType.BUDGET_SET),
    ]


def test_event_type_values_are_dotted_subject_and_verb() -> None:
    for value in EventType.values:
        assert EVENT_TYPE_SHAPE.fullmatch(value)
        subject, _, verb = value.partition(".")
        assert subject
        assert verb
        assert value == value.lower()


def _event_types_doc() -> ModuleType:
    """scripts/event_types_doc.py, which writes docs/api.md's list (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location("event_types_doc", ROOT / "scripts" / "event_types_doc.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_docs_list_every_event_type_as_generated() -> None:
    doc = _event_types_doc()
    written = doc.API_DOC.read_text()
    assert written == doc.with_current_list(written), (
        "docs/api.md's list of event types is not current: run `.venv/bin/python scripts/event_types_doc.py`"
    )


def test_the_generated_list_has_each_type_with_its_label_and_replaces_a_stale_one() -> None:
    doc = _event_types_doc()
    lines = doc.event_types_list().splitlines()
    assert len(lines) == len(EventType.values)
    assert f"- `{EventType.TASK_QUEUE_WAIT_EXCEEDED}`: Task Queue Wait Exceeded" in lines
    stale = f"# API\n\n{doc.START}\n- `task.renamed`: Task Renamed\n{doc.END}\n\n## Headers\n"
    current = doc.with_current_list(stale)
    assert current != stale
    assert "task.renamed" not in current
    assert current.startswith(f"# API\n\n{doc.START}\n- `agent.created`: Agent Created\n")
    assert current.endswith(f"{doc.END}\n\n## Headers\n")
    with pytest.raises(ValueError, match="markers"):
        doc.with_current_list("# API without the markers\n")

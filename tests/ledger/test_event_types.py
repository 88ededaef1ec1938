"""Event types are declared once, in `ledger.models.EventType` (STYLE: names the code shares).

Besides these, `tests/conftest.py` checks after every database test that each
event type in the table is declared, so a type emitted anywhere (the raw
sweep SQL included) but missing from the enum fails the suite.
"""

from __future__ import annotations

import ast
from pathlib import Path

from ledger.models import EventType

ROOT = Path(__file__).resolve().parents[2]
DOMAIN_AND_DOORS = ("ledger", "environments", "leases", "console", "api")


def _emitted_type_literals() -> set[str]:
    """Every string literal passed as `type=` to a call, outside migrations and tests."""
    found: set[str] = set()
    for room in DOMAIN_AND_DOORS:
        for path in (ROOT / room).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.Call):
                    for keyword in node.keywords:
                        value = keyword.value
                        if keyword.arg == "type" and isinstance(value, ast.Constant) and isinstance(value.value, str):
                            found.add(value.value)
    return found


def test_no_call_emits_an_event_type_as_a_free_string() -> None:
    assert _emitted_type_literals() == set()


def test_event_type_values_are_dotted_subject_and_verb() -> None:
    for value in EventType.values:
        subject, _, verb = value.partition(".")
        assert subject
        assert verb
        assert value == value.lower()

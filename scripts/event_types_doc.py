"""Writes docs/api.md's list of event types from `ledger.models.EventType`, the one declaration.

Run after adding or renaming an event type: `.venv/bin/python scripts/event_types_doc.py`.
`tests/ledger/test_event_types.py` regenerates the list and fails while docs/api.md differs, so
the docs never name a type the ledger does not write, nor miss one it does.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
API_DOC = ROOT / "docs" / "api.md"
START = "<!-- event types: generated from ledger.models.EventType by scripts/event_types_doc.py -->"
END = "<!-- end of the event types -->"


def event_types_list() -> str:
    """One line per event type, by value: the value and `EventType`'s label."""
    from ledger.models import EventType

    return "\n".join(f"- `{member.value}`: {member.label}" for member in sorted(EventType, key=str))


def with_current_list(text: str) -> str:
    """`text` (docs/api.md) with the lines between its two markers replaced by the current list."""
    before, start, rest = text.partition(START)
    _, end, after = rest.partition(END)
    if not start or not end:
        raise ValueError(f"docs/api.md lacks the markers {START!r} and {END!r} around the event types")
    return f"{before}{START}\n{event_types_list()}\n{END}{after}"


def main() -> None:
    sys.path.insert(0, str(ROOT))
    # The test settings need no secret nor database: reading the enum needs only the app registry.
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.test")
    import django

    django.setup()
    API_DOC.write_text(with_current_list(API_DOC.read_text()))
    print(f"wrote the event types into {API_DOC.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

"""Each condition's remedy shown on the findings pages is the remedy column of docs/operations.md."""

from __future__ import annotations

import re
from pathlib import Path

from reconciliation.models import Condition
from reconciliation.remedies import REMEDIES

DOCS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def test_every_condition_has_the_remedy_the_operations_guide_gives():
    documented = {}
    for line in DOCS.read_text().splitlines():
        match = re.match(r"\| `(\w+)` \| .* \| ([^|]+) \|$", line)
        if match and match.group(1) in Condition.values:
            documented[match.group(1)] = match.group(2).strip()
    assert set(documented) == set(Condition.values)
    assert {str(key): value for key, value in REMEDIES.items()} == documented

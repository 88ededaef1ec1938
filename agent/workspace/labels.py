"""The git trailer line that names an attempt in a commit message (SPEC §5).

The server renders the label (`owner=…;branch=…;env=…;task=…;epoch=…`) and
sends it with the claim; the toolkit only writes it behind the trailer key.
"""

from __future__ import annotations

TRAILER_KEY = "Leasehold-Label"


def git_trailer(label: str) -> str:
    """The line an agent appends to a commit message so git history names its attempt."""
    return f"{TRAILER_KEY}: {label}"

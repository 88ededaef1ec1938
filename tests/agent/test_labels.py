from __future__ import annotations

from agent.workspace.labels import git_trailer

SPEC_EXAMPLE = "owner=agent-07;branch=feature/web-412-search-copy;env=preview-b;task=WEB-412;epoch=3"


def test_git_trailer_carries_the_rendered_label() -> None:
    assert git_trailer(SPEC_EXAMPLE) == f"Leasehold-Label: {SPEC_EXAMPLE}"

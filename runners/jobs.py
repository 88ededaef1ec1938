"""django-q2 entry points of the runners room: thin wrappers over its services, safe to run twice at once."""

from __future__ import annotations

from runners.services import runners_mark_lost


def mark_lost_runners_job() -> dict[str, list[str]]:
    """Mark lost the runners whose heartbeats stopped (`runner.lost`, once each); hands nothing off."""
    return {"lost": runners_mark_lost()}

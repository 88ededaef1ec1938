"""An answer or an error of the API as text: what the CLI prints and what the MCP tools answer a model."""

from __future__ import annotations

import json
from typing import Any

from agent.client.errors import LeaseholdError


def compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def error_text(error: LeaseholdError) -> str:
    """The message to show for `error`; a STALE_EPOCH whose two epochs read the same is said plainly.

    The server names the task's epoch and the one the write presented; when
    the attempt itself is from an older epoch those two can be equal, which
    reads as a contradiction, so the toolkit says what it means instead.
    """
    details = error.details
    presented, current = details.get("presented_epoch"), details.get("current_epoch")
    if error.code == "STALE_EPOCH" and presented is not None and presented == current:
        task = error.message.split(" is at epoch", 1)[0] if " is at epoch" in error.message else "The task"
        attempt = details.get("attempt")
        return (
            f"{task} is at epoch {current}; attempt {attempt} belongs to an earlier epoch "
            "(another holder has the task now): stop working on it."
        )
    path = details.get("path")
    if error.code == "DEPENDENCY_CYCLE" and isinstance(path, list) and path:
        cycle = " → ".join(str(key) for key in path)
        return error.message if cycle in error.message else f"{error.message.rstrip('.')}: {cycle}."
    problems = details.get("errors")
    if isinstance(problems, list) and len(problems) > 1:
        # A plan's problems (SPEC §17): every one, by path and ref, not just the first.
        lines = [
            f"  {item.get('path')}" + (f" (ref {item['ref']})" if item.get("ref") else "") + f": {item.get('message')}"
            for item in problems
            if isinstance(item, dict)
        ]
        return "\n".join([error.message, *lines])
    return error.message

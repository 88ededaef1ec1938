"""`$LEASEHOLD_OUTCOME_FILE`: how a command run by `leasehold run` chooses its attempt's end (SPEC §15.2).

The command may write one JSON object there:
`{"outcome": "done"|"review"|"failed"|"handoff", "result_summary": str,
"next_steps": [str], "failure_reason_code": …, "interruption_reason_code": …}`.
Only `outcome` is required; the reason codes are the API's choices and belong
to `failed` and `handoff` respectively. Anything else (not JSON, another key,
a wrong type or choice) makes the file invalid: `run` says why on one line and
the exit code decides, as without a file.

Under `run --review` (SPEC §16.1) the outcomes are a reviewer's: `approved`,
`changes_requested`, `blocked` (with `findings`: at most 20 strings of at most
500 characters), or `failed` / `handoff` (no decision: the review stays open).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.client.models import FAILURE_REASONS, INTERRUPTION_REASONS, Outcome

OUTCOMES: tuple[Outcome, ...] = ("done", "review", "failed", "handoff")
REVIEW_OUTCOMES: tuple[Outcome, ...] = ("approved", "changes_requested", "blocked", "failed", "handoff")
FINDINGS_MAX_ITEMS = 20
FINDING_MAX_CHARS = 500
MAX_BYTES = 64_000
SUMMARY_MAX_CHARS = 4000


class InvalidOutcome(Exception):
    """The outcome file cannot be used; the message is one line."""


@dataclass(frozen=True)
class ChosenOutcome:
    outcome: Outcome
    result_summary: str | None = None
    next_steps: list[str] = field(default_factory=list)
    failure_reason_code: str | None = None
    interruption_reason_code: str | None = None
    findings: list[str] | None = None


def read_outcome(path: Path, *, review: bool = False) -> ChosenOutcome | None:
    """The outcome the command wrote, None when it wrote nothing; `InvalidOutcome` when the file is unusable."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise InvalidOutcome(f"cannot be read: {exc}") from None
    if not raw.strip():
        return None
    if len(raw) > MAX_BYTES:
        raise InvalidOutcome(f"is {len(raw)} bytes; at most {MAX_BYTES}")
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidOutcome(f"is not JSON ({exc})") from None
    return parse_outcome(data, review=review)


def _text(data: dict[str, Any], name: str) -> str | None:
    value = data.get(name)
    if value is not None and not isinstance(value, str):
        raise InvalidOutcome(f"{name} must be a string")
    return value


def parse_outcome(data: Any, *, review: bool = False) -> ChosenOutcome:
    if not isinstance(data, dict):
        raise InvalidOutcome("must be a JSON object")
    allowed = {"outcome", "result_summary", "next_steps", "failure_reason_code", "interruption_reason_code"}
    if review:
        allowed.add("findings")
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise InvalidOutcome(f"has unknown keys {', '.join(unknown)} (allowed: {', '.join(sorted(allowed))})")
    outcome = data.get("outcome")
    choices = REVIEW_OUTCOMES if review else OUTCOMES
    if outcome not in choices:
        raise InvalidOutcome(f"outcome must be one of {', '.join(choices)}; got {outcome!r}")
    findings = data.get("findings")
    if findings is not None and (
        outcome not in ("approved", "changes_requested", "blocked")
        or not isinstance(findings, list)
        or len(findings) > FINDINGS_MAX_ITEMS
        or not all(isinstance(item, str) and len(item) <= FINDING_MAX_CHARS for item in findings)
    ):
        raise InvalidOutcome(
            f"findings go with a decision: at most {FINDINGS_MAX_ITEMS} strings "
            f"of at most {FINDING_MAX_CHARS} characters"
        )
    steps = data.get("next_steps") or []
    if not isinstance(steps, list) or not all(isinstance(step, str) for step in steps):
        raise InvalidOutcome("next_steps must be a list of strings")
    failure, interruption = _text(data, "failure_reason_code"), _text(data, "interruption_reason_code")
    if failure is not None and (outcome != "failed" or failure not in FAILURE_REASONS):
        raise InvalidOutcome(f"failure_reason_code goes with outcome failed and is one of {', '.join(FAILURE_REASONS)}")
    if interruption is not None and (outcome != "handoff" or interruption not in INTERRUPTION_REASONS):
        raise InvalidOutcome(
            f"interruption_reason_code goes with outcome handoff and is one of {', '.join(INTERRUPTION_REASONS)}"
        )
    summary = _text(data, "result_summary")
    return ChosenOutcome(
        outcome=outcome,
        result_summary=summary[:SUMMARY_MAX_CHARS] if summary else None,
        next_steps=steps,
        failure_reason_code=failure or ("implementation_error" if outcome == "failed" else None),
        interruption_reason_code=interruption or ("handoff" if outcome == "handoff" else None),
        findings=findings,
    )

"""Usage reports (SPEC §19): what a holder spent, as the API takes it, and the file `leasehold run` reads.

A usage report is `{"input_tokens": int, "output_tokens": int, "cost_usd":
"decimal"}`, every key optional, each an increment since the last report.
`UsageTally` adds reports up until a holder call carries them;
`UsageFile` reads the lines COMMAND appends to `$LEASEHOLD_USAGE_FILE` —
one JSON object per line, in that shape — as they arrive.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

Usage = Mapping[str, Any]
USAGE_KEYS = ("input_tokens", "output_tokens", "cost_usd")
COST_PLACES = 6


class InvalidUsage(ValueError):
    """A usage report that is not `{"input_tokens"?, "output_tokens"?, "cost_usd"?}` with valid values."""


def parse_usage(value: Any) -> dict[str, Any]:
    """A report as the API takes it (tokens as ints, cost as a decimal string); InvalidUsage otherwise."""
    if not isinstance(value, Mapping):
        raise InvalidUsage("a usage report is a JSON object")
    unknown = sorted(str(name) for name in value if name not in USAGE_KEYS)
    if unknown:
        raise InvalidUsage(f"unknown keys {', '.join(unknown)} (known: {', '.join(USAGE_KEYS)})")
    report: dict[str, Any] = {}
    for name in ("input_tokens", "output_tokens"):
        if name in value:
            count = value[name]
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise InvalidUsage(f"{name} must be a non-negative integer")
            report[name] = count
    if "cost_usd" in value:
        cost = value["cost_usd"]
        if isinstance(cost, bool) or not isinstance(cost, str | int | float | Decimal):
            raise InvalidUsage("cost_usd must be a decimal string or number")
        try:
            amount = Decimal(str(cost).strip())
        except InvalidOperation:
            raise InvalidUsage("cost_usd must be a decimal string or number") from None
        exponent = amount.normalize().as_tuple().exponent if amount.is_finite() else 0
        if not amount.is_finite() or amount < 0 or (isinstance(exponent, int) and exponent < -COST_PLACES):
            raise InvalidUsage(f"cost_usd must be a non-negative amount with at most {COST_PLACES} decimal places")
        report["cost_usd"] = amount
    return report


def usage_body(usage: Usage | None) -> dict[str, Any] | None:
    """The `usage` object of a request, or None when there is nothing to report."""
    if not usage:
        return None
    report = parse_usage(usage)
    body: dict[str, Any] = {name: report[name] for name in ("input_tokens", "output_tokens") if report.get(name)}
    if report.get("cost_usd"):
        body["cost_usd"] = format(report["cost_usd"].quantize(Decimal(1).scaleb(-COST_PLACES)), "f")
    return body or None


class UsageTally:
    """Reports added up until a holder call takes them; thread-safe (the keeper renews from its own thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._input = 0
        self._output = 0
        self._cost = Decimal(0)

    def add(self, usage: Usage) -> None:
        report = parse_usage(usage)
        with self._lock:
            self._input += report.get("input_tokens", 0)
            self._output += report.get("output_tokens", 0)
            self._cost += report.get("cost_usd", Decimal(0))

    def take(self) -> dict[str, Any] | None:
        """Everything added so far (cleared), or None when nothing was."""
        with self._lock:
            taken = {"input_tokens": self._input, "output_tokens": self._output, "cost_usd": self._cost}
            self._input, self._output, self._cost = 0, 0, Decimal(0)
        return usage_body(taken)

    def put_back(self, usage: Usage | None) -> None:
        """A report whose call failed without an answer: it is sent with the next one."""
        if usage:
            self.add(usage)


class UsageFile:
    """The lines a command appends to `$LEASEHOLD_USAGE_FILE`, read as they arrive (a partial last line waits)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""
        self.line_number = 0

    def read_new(self) -> tuple[list[dict[str, Any]], list[str]]:
        """(the new valid reports, a problem per invalid line)."""
        try:
            with self.path.open("rb") as handle:
                handle.seek(self._offset)
                chunk = handle.read()
        except FileNotFoundError:
            return [], []
        self._offset += len(chunk)
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        reports: list[dict[str, Any]] = []
        problems: list[str] = []
        for raw in lines:
            self.line_number += 1
            if not raw.strip():
                continue
            try:
                reports.append(parse_usage(json.loads(raw)))
            except (ValueError, InvalidUsage) as problem:
                problems.append(f"line {self.line_number}: {problem}")
        return reports, problems

    def read_rest(self) -> tuple[list[dict[str, Any]], list[str]]:
        """Everything new, including a last line without its newline (the command has exited)."""
        reports, problems = self.read_new()
        partial, self._partial = self._partial, b""
        if partial.strip():
            self.line_number += 1
            try:
                reports.append(parse_usage(json.loads(partial)))
            except (ValueError, InvalidUsage) as problem:
                problems.append(f"line {self.line_number}: {problem}")
        return reports, problems

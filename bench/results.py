"""Result rows, the stdout table and the JSON file."""

from __future__ import annotations

import json
import platform
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.harness import RunResult, percentile

RESULTS_DIR = Path(__file__).resolve().parent / "results"


@dataclass
class Row:
    database: str
    workload: str
    mode: str  # service | raw | http | reference
    concurrency: int
    ops: int
    seconds: float
    throughput: float | None
    p50_ms: float | None
    p99_ms: float | None
    ratio: float | None = None  # this row's throughput (or time) relative to its raw reference
    outcomes: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def row_from_run(
    database: str, workload: str, mode: str, run: RunResult, *, kind: str, count_kind: str | None = None, **extra: Any
) -> Row:
    samples = run.latencies.get(kind, [])
    ops = run.count(count_kind or kind)
    p50, p99 = percentile(samples, 0.50), percentile(samples, 0.99)
    return Row(
        database=database,
        workload=workload,
        mode=mode,
        concurrency=run.threads,
        ops=ops,
        seconds=round(run.seconds, 3),
        throughput=round(ops / run.seconds, 1) if run.seconds > 0 else None,
        p50_ms=None if p50 is None else round(p50 * 1000, 2),
        p99_ms=None if p99 is None else round(p99 * 1000, 2),
        outcomes=dict(run.outcomes),
        errors=_distinct(run.errors),
        extra=extra,
    )


def _distinct(errors: list[str], limit: int = 5) -> list[str]:
    counts: dict[str, int] = {}
    for error in errors:
        counts[error] = counts.get(error, 0) + 1
    return [f"{count}x {error}" for error, count in list(counts.items())[:limit]]


def set_ratio(row: Row, reference: Row, *, by: str = "throughput") -> None:
    """Service or HTTP throughput as a fraction of the raw reference (or, `by="time"`, time over time)."""
    if by == "throughput" and row.throughput and reference.throughput:
        row.ratio = round(row.throughput / reference.throughput, 3)
    elif by == "time" and row.seconds and reference.seconds:
        row.ratio = round(row.seconds / reference.seconds, 3)


def _fmt(value: Any, width: int) -> str:
    text = "-" if value is None else (f"{value:,.1f}" if isinstance(value, float) else str(value))
    return text.rjust(width)


def table(rows: list[Row]) -> str:
    header = (
        f"{'db':<8} {'workload':<28} {'mode':<9} {'conc':>4} {'ops':>7} {'ops/s':>9} "
        f"{'p50 ms':>8} {'p99 ms':>8} {'ratio':>6}  notes"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        notes = []
        interesting = {k: v for k, v in row.outcomes.items() if k not in ("ok", "cycles", "claimed")}
        if interesting:
            notes.append(", ".join(f"{k}={v}" for k, v in sorted(interesting.items())))
        if row.errors:
            notes.append(f"ERRORS: {row.errors[0]}")
        for key, value in row.extra.items():
            if key.startswith("_"):
                continue
            notes.append(f"{key}={value}")
        ratio = "-" if row.ratio is None else f"{row.ratio:.2f}"
        lines.append(
            f"{row.database[:8]:<8} {row.workload[:28]:<28} {row.mode:<9} {row.concurrency:>4} {row.ops:>7} "
            f"{_fmt(row.throughput, 9)} {_fmt(row.p50_ms, 8)} {_fmt(row.p99_ms, 8)} {ratio:>6}  {'; '.join(notes)}"
        )
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    import os

    info: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    try:
        info["memory_gib"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
        info["load_average"] = os.getloadavg()
    except (ValueError, OSError):
        pass
    try:
        version = subprocess.run(
            ["psql", "-h", "127.0.0.1", "-U", "postgres", "-Atc", "show server_version"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
        info["postgresql"] = version.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        info["postgresql"] = None
    return info


def write_json(payload: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")


def markdown_table(rows: list[Row]) -> str:
    """The same table as `table`, as Markdown (for docs/performance.md)."""
    lines = [
        "| db | workload | mode | agents | ops | ops/s | p50 ms | p99 ms | ratio | notes |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in rows:
        notes = [f"{k}={v}" for k, v in sorted(row.outcomes.items()) if k not in ("ok", "cycles", "claimed")]
        notes += [f"{k}={v}" for k, v in row.extra.items() if not k.startswith("_")]
        if row.errors:
            notes.append("ERRORS: " + "; ".join(row.errors[:2]))
        cells = [
            row.database,
            row.workload,
            row.mode,
            str(row.concurrency),
            str(row.ops),
            _fmt(row.throughput, 0).strip(),
            _fmt(row.p50_ms, 0).strip(),
            _fmt(row.p99_ms, 0).strip(),
            "-" if row.ratio is None else f"{row.ratio:.2f}",
            ", ".join(notes).replace("|", "/"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)

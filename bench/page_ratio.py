"""Each console page's time at a larger scale against its time at scale 1 (issue 32: within 2x at 4x).

Pure functions (and the one-run table) over the payloads `bench.pages` writes (one per database and scale),
so the check is tested without seeding a ledger (tests/bench/test_page_ratio.py).
The ratio is of the medians; the ratio of the fastest requests is shown beside it,
as the less noisy reading on a shared machine.
"""

from __future__ import annotations

import argparse
from typing import Any

LIMIT = 2.0


def parse_scales(text: str) -> tuple[int, int]:
    """`--scales SMALL,LARGE`: two positive whole numbers, the first smaller."""
    parts = text.split(",")
    try:
        small, large = (int(part) for part in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected SMALL,LARGE (e.g. 1,4), not {text!r}") from None
    if not 0 < small < large:
        raise argparse.ArgumentTypeError(f"expected 0 < SMALL < LARGE, not {text!r}")
    return small, large


def ratio(small_ms: float, large_ms: float) -> float | None:
    """`large / small`, or None when the small time is not positive (nothing to divide by)."""
    if small_ms <= 0:
        return None
    return round(large_ms / small_ms, 2)


def compare(small: dict[str, Any], large: dict[str, Any], *, limit: float = LIMIT) -> list[dict[str, Any]]:
    """One row per page measured at both scales, in the larger run's order.

    `within` is whether the median ratio is at most `limit`; a page without a ratio is not within.
    """
    earlier = {row["page"]: row for row in small["pages"]}
    rows = []
    for row in large["pages"]:
        base = earlier.get(row["page"])
        if base is None:
            continue
        median = ratio(base["median_ms"], row["median_ms"])
        fastest = ratio(base.get("min_ms", base["median_ms"]), row.get("min_ms", row["median_ms"]))
        rows.append(
            {
                "page": row["page"],
                "url": row["url"],
                "small_ms": base["median_ms"],
                "large_ms": row["median_ms"],
                "ratio": median,
                "min_ratio": fastest,
                # The bench process's CPU per request (SQLite's engine included, PostgreSQL's backend not).
                "cpu_ratio": ratio(base.get("cpu_median_ms", 0.0), row.get("cpu_median_ms", 0.0)),
                "queries": (base["queries"], row["queries"]),
                "within": median is not None and median <= limit,
            }
        )
    return rows


def over(rows: list[dict[str, Any]]) -> list[str]:
    """The pages whose median ratio is over the limit (or has none)."""
    return [row["page"] for row in rows if not row["within"]]


def render(payload: dict[str, Any]) -> str:
    """One run's table (one database, one scale)."""
    sizes = payload["sizes"]
    lines = [
        f"### {payload['database']}, {sizes['tasks']:,} tasks / {sizes['attempts']:,} attempts / "
        f"{sizes['events']:,} events (seeded in {payload['seed_seconds']} s)",
        "",
        "| page | median ms | worst ms | queries | slowest query ms |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for row in payload["pages"]:
        lines.append(
            f"| {row['page']} | {row['median_ms']} | {row['max_ms']} | {row['queries']} | {row['slowest_query_ms']} |"
        )
    return "\n".join(lines)


def render_comparison(
    small: dict[str, Any], large: dict[str, Any], rows: list[dict[str, Any]], *, limit: float = LIMIT
) -> str:
    def size(payload: dict[str, Any]) -> str:
        sizes = payload["sizes"]
        return f"{sizes['tasks'] // 1000}k tasks / {sizes['events'] // 1000}k events"

    lines = [
        f"### {large['database']}: {size(small)} (scale {small['scale']}) against "
        f"{size(large)} (scale {large['scale']})",
        "",
        f"| page | x{small['scale']} median ms | x{large['scale']} median ms | ratio | ratio of fastest "
        f"| queries | within {limit:g}x | CPU ratio |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    for row in rows:
        shown = "-" if row["ratio"] is None else f"{row['ratio']:.2f}"
        fastest = "-" if row["min_ratio"] is None else f"{row['min_ratio']:.2f}"
        queries = "{} → {}".format(*row["queries"]) if row["queries"][0] != row["queries"][1] else row["queries"][0]
        verdict = "yes" if row["within"] else "**no**"
        cpu = "-" if row.get("cpu_ratio") is None else f"{row['cpu_ratio']:.2f}"
        lines.append(
            f"| {row['page']} | {row['small_ms']} | {row['large_ms']} | {shown} | {fastest} | {queries} | {verdict} "
            f"| {cpu} |"
        )
    missing = over(rows)
    lines += ["", f"Over {limit:g}x: {', '.join(missing)}." if missing else f"Every page within {limit:g}x."]
    return "\n".join(lines)

"""`python -m bench.pages --scales 1,4`'s check (issue 32): each page's median at the larger scale within 2x."""

from __future__ import annotations

import argparse

import pytest

from bench.page_ratio import compare, over, parse_scales, ratio, render_comparison


def payload(scale: int, pages: dict[str, tuple[float, float, int]]) -> dict:
    return {
        "database": "postgresql",
        "scale": scale,
        "sizes": {"tasks": 10_000 * scale, "attempts": 30_000 * scale, "events": 100_000 * scale},
        "pages": [
            {"page": name, "url": f"/{name}/", "median_ms": median, "min_ms": fastest, "queries": queries}
            for name, (median, fastest, queries) in pages.items()
        ],
    }


def test_a_page_is_within_at_exactly_the_limit_and_over_past_it():
    small = payload(1, {"board": (50.0, 40.0, 9), "list": (50.0, 45.0, 8), "report": (30.0, 28.0, 7)})
    large = payload(4, {"board": (100.0, 90.0, 9), "list": (100.5, 80.0, 8), "report": (150.0, 140.0, 9)})

    rows = compare(small, large)

    assert [(row["page"], row["ratio"], row["min_ratio"], row["within"]) for row in rows] == [
        ("board", 2.0, 2.25, True),
        ("list", 2.01, 1.78, False),
        ("report", 5.0, 5.0, False),
    ]
    assert over(rows) == ["list", "report"]
    assert rows[2]["queries"] == (7, 9)
    table = render_comparison(small, large, rows)
    assert "| report | 30.0 | 150.0 | 5.00 | 5.00 | 7 → 9 | **no** |" in table
    assert "| board | 50.0 | 100.0 | 2.00 | 2.25 | 9 | yes |" in table
    assert table.endswith("Over 2x: list, report.")
    assert rows[0]["cpu_ratio"] is None  # runs before the CPU column: no ratio, shown as "-"


def test_the_cpu_ratio_is_shown_beside_the_wall_time_ratio():
    small = payload(1, {"board": (50.0, 40.0, 9)})
    large = payload(4, {"board": (300.0, 250.0, 9)})
    small["pages"][0]["cpu_median_ms"], large["pages"][0]["cpu_median_ms"] = 20.0, 26.0
    rows = compare(small, large)
    assert rows[0]["cpu_ratio"] == 1.3
    assert "| board | 50.0 | 300.0 | 6.00 | 6.25 | 9 | **no** | 1.30 |" in render_comparison(small, large, rows)


def test_a_page_measured_at_one_scale_only_is_left_out_and_a_zero_time_has_no_ratio():
    small = payload(1, {"jobs": (0.0, 0.0, 4), "gone": (10.0, 10.0, 1)})
    large = payload(4, {"jobs": (3.0, 2.0, 4), "new": (10.0, 10.0, 1)})

    rows = compare(small, large, limit=3.0)

    assert [row["page"] for row in rows] == ["jobs"]
    assert rows[0]["ratio"] is None
    assert rows[0]["within"] is False
    assert ratio(0.0, 5.0) is None
    assert "Over 3x: jobs." in render_comparison(small, large, rows, limit=3.0)


def test_every_page_within_says_so():
    small = payload(1, {"board": (50.0, 40.0, 9)})
    large = payload(4, {"board": (60.0, 50.0, 9)})

    assert render_comparison(small, large, compare(small, large)).endswith("Every page within 2x.")


def test_scales_are_two_increasing_positive_numbers():
    assert parse_scales("1,4") == (1, 4)
    for text in ("4,1", "1", "1,2,3", "0,4", "a,b", "2,2"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_scales(text)

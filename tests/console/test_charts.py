"""The dashboard's SVG charts are computed on the server, escape their text and scale to their data."""

from __future__ import annotations

from datetime import date, timedelta

from console.fleet.charts import Stack, bar_chart, nice_step, rate_chart

DAYS = [date(2026, 1, 1) + timedelta(days=n) for n in range(30)]


def test_nice_steps():
    assert nice_step(0, integer=True) == 1
    assert nice_step(0.75, integer=True) == 1
    assert nice_step(3, integer=True) == 5
    assert nice_step(12, integer=True) == 20
    assert nice_step(22, integer=True) == 25
    assert nice_step(0.03, integer=False) == 0.05


def test_bars_have_one_rect_per_nonzero_day_and_exact_titles():
    values = [{"claims": n % 3} for n in range(30)]
    svg = bar_chart(DAYS, values, stacks=[Stack("claims", "lh-bar-claims", "Claims")], label="Claims <x>")
    assert svg.count("<rect") == sum(1 for value in values if value["claims"])
    assert "2026-01-02: 1 claims" in svg
    assert "Claims &lt;x&gt;" in svg
    assert "<x>" not in svg


def test_the_rate_line_has_a_point_per_day():
    rates = [0.0] * 29 + [0.5]
    svg = rate_chart(DAYS, rates, details=["d"] * 30, label="Orphan rate")
    assert svg.count("<circle") == 30
    assert "2026-01-30: 50%" in svg

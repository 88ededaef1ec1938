"""Server-rendered SVG charts for the dashboard: no JavaScript, no CDN.

Each chart is one inline `<svg>` whose every number was computed here; every
bar and point carries a `<title>` so hovering shows the exact value, and the
whole chart has an `aria-label` summary for screen readers. Colors come from
CSS classes in `admin/base_site.html`, so the charts follow the admin's light
and dark themes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

WIDTH = 480
HEIGHT = 180
LEFT = 38
RIGHT = 10
TOP = 12
BOTTOM = 24
GRIDLINES = 4


@dataclass(frozen=True)
class Stack:
    """One stacked part of a bar: its key in each day's values, CSS class and legend label."""

    key: str
    css_class: str
    label: str


def nice_step(raw: float, *, integer: bool) -> float:
    """The gridline step: 1, 2, 2.5 or 5 times a power of ten, at least `raw`."""
    if raw <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(raw))
    for multiple in (1, 2, 2.5, 5, 10):
        step = multiple * power
        if step >= raw and (not integer or float(step).is_integer()):
            return step
    return 10 * power


def _plot_height() -> int:
    return HEIGHT - TOP - BOTTOM


def _axes(top_value: float, *, days: Sequence[date], formatter: Callable[[float], str]) -> list[str]:
    """Gridlines with y labels, the baseline, and an x label every 5 days and on the last day."""
    parts: list[str] = []
    plot_h = _plot_height()
    for index in range(GRIDLINES + 1):
        value = top_value * index / GRIDLINES
        y = TOP + plot_h - plot_h * index / GRIDLINES
        css = "lh-axis" if index == 0 else "lh-gridline"
        parts.append(f'<line class="{css}" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{y + 3:.1f}" text-anchor="end">{escape(formatter(value))}</text>')
    slot = (WIDTH - LEFT - RIGHT) / max(1, len(days))
    for index, day in enumerate(days):
        if index % 5 == 0 or index == len(days) - 1:
            x = LEFT + slot * (index + 0.5)
            label = day.strftime("%b %-d")
            parts.append(f'<text x="{x:.1f}" y="{HEIGHT - 6}" text-anchor="middle">{escape(label)}</text>')
    return parts


def _svg(parts: list[str], *, label: str) -> SafeString:
    body = "".join(parts)
    svg = (
        f'<svg class="lh-chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(label)}" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{escape(label)}</title>{body}</svg>'
    )
    return mark_safe(svg)  # noqa: S308 - every interpolated text above went through escape()


def _count(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() else f"{value:,.1f}"


def bar_chart(
    days: Sequence[date],
    values: Sequence[dict[str, float]],
    *,
    stacks: Sequence[Stack],
    label: str,
) -> SafeString:
    """Stacked bars, one per day, with a `<title>` per part of a bar."""
    totals = [sum(day_values.get(stack.key, 0) for stack in stacks) for day_values in values]
    step = nice_step(max(totals, default=0) / GRIDLINES, integer=True)
    top_value = step * GRIDLINES
    parts = _axes(top_value, days=days, formatter=_count)
    plot_h = _plot_height()
    slot = (WIDTH - LEFT - RIGHT) / max(1, len(days))
    bar_w = max(2.0, slot * 0.7)
    for index, (day, day_values) in enumerate(zip(days, values, strict=True)):
        x = LEFT + slot * index + (slot - bar_w) / 2
        base: float = TOP + plot_h
        for stack in stacks:
            amount = day_values.get(stack.key, 0)
            if amount <= 0:
                continue
            h = plot_h * amount / top_value
            base -= h
            title = f"{day.isoformat()}: {_count(amount)} {stack.label.lower()}"
            parts.append(
                f'<rect class="{stack.css_class}" x="{x:.1f}" y="{base:.1f}" width="{bar_w:.1f}" height="{h:.1f}" '
                f'rx="1"><title>{escape(title)}</title></rect>'
            )
    total = sum(totals)
    return _svg(parts, label=f"{label}: {_count(total)} over {len(days)} days")


def _percent(value: float) -> str:
    text = f"{value * 100:.1f}".rstrip("0").rstrip(".")
    return f"{text}%"


def rate_chart(
    days: Sequence[date],
    rates: Sequence[float | None],
    *,
    details: Sequence[str],
    label: str,
    headline: float | None = None,
) -> SafeString:
    """A line of daily rates (0..1) with a point per day; `details` explain each point.

    A day without a rate (`None`: nothing to divide by) is not drawn: no point, and the line
    breaks there, so an empty day never reads as 0 %. `headline` is the figure the label
    states (the pooled rate over the window); without it the label gives no average.
    """
    known = [rate for rate in rates if rate is not None]
    step = nice_step(max(known, default=0) / GRIDLINES, integer=False) if any(known) else 0.25
    top_value = step * GRIDLINES
    parts = _axes(top_value, days=days, formatter=_percent)
    plot_h = _plot_height()
    slot = (WIDTH - LEFT - RIGHT) / max(1, len(days))
    points: list[tuple[float, float] | None] = []
    for index, rate in enumerate(rates):
        if rate is None:
            points.append(None)
            continue
        x = LEFT + slot * (index + 0.5)
        y = TOP + plot_h - plot_h * rate / top_value
        points.append((x, y))
    path, pen_down = [], False
    for point in points:
        if point is None:
            pen_down = False
            continue
        path.append(f"{'L' if pen_down else 'M'}{point[0]:.1f},{point[1]:.1f}")
        pen_down = True
    if path:
        parts.append(f'<path class="lh-line" d="{" ".join(path)}"/>')
    for point, day, rate, detail in zip(points, days, rates, details, strict=True):
        if point is None or rate is None:
            continue
        title = f"{day.isoformat()}: {_percent(rate)} ({detail})"
        x, y = point
        dot = f'<circle class="lh-dot" cx="{x:.1f}" cy="{y:.1f}" r="2.5">'
        parts.append(f"{dot}<title>{escape(title)}</title></circle>")
    empty = len(rates) - len(known)
    summary = f"{label}: {_percent(headline)} pooled over {len(days)} days" if headline is not None else label
    if empty:
        summary += f" ({empty} days without finished attempts not drawn)"
    return _svg(parts, label=summary)

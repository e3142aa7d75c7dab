"""Small inline SVG charts: the report is one self-contained page (no script, no request)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

__all__ = ["Series", "bar_chart", "line_chart"]

WIDTH, HEIGHT = 560, 220
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 16, 40
PALETTE = ("#1f6feb", "#d1242f", "#1a7f37", "#9a6700", "#8250df")


@dataclass(frozen=True)
class Series:
    """One line (or set of bars) of a chart: its name and a value per x (``None``: none)."""

    name: str
    values: Sequence[float | None]
    dashed: bool = False


def _scale(top: float, whole: bool = False) -> float:
    """A round upper end of the y axis at or above ``top`` (``whole``: counts, whose four
    grid steps stay whole numbers)."""
    if whole:
        top = max(top, 4.0)
        return float(4 * math.ceil((_scale(top) if top > 20 else top) / 4))
    if top <= 0 or not math.isfinite(top):
        return 1.0
    step = 10.0 ** math.floor(math.log10(top))
    for multiple in (1, 2, 2.5, 5, 10):
        if top <= multiple * step:
            return multiple * step
    return 10 * step


def _frame(title: str, labels: Sequence[str], top: float, fmt: str) -> list[str]:
    inner_w, inner_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'role="img" aria-label="{escape(title)}">'
    ]
    for i in range(5):  # horizontal grid and y labels
        value = top * i / 4
        y = TOP + inner_h - inner_h * i / 4
        out.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
        )
        out.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" class="ylabel">{value:{fmt}}</text>')
    step = max(1, math.ceil(len(labels) / 12))
    for i, label in enumerate(labels):
        if i % step == 0:
            x = _x(i, len(labels), inner_w)
            y = HEIGHT - BOTTOM + 16
            out.append(f'<text x="{x:.1f}" y="{y}" class="xlabel">{escape(label)}</text>')
    return out


def _x(i: int, n: int, inner_w: float) -> float:
    return LEFT + (inner_w * (i + 0.5) / n if n else 0)


def _legend(series: Sequence[Series]) -> list[str]:
    out = []
    x = LEFT
    for k, s in enumerate(series):
        colour = PALETTE[k % len(PALETTE)]
        dash = ' stroke-dasharray="5 4"' if s.dashed else ""
        y = HEIGHT - 8
        out.append(
            f'<line x1="{x}" x2="{x + 18}" y1="{y - 4}" y2="{y - 4}" stroke="{colour}" '
            f'stroke-width="2.5"{dash}/>'
        )
        out.append(f'<text x="{x + 22}" y="{y}" class="legend">{escape(s.name)}</text>')
        x += 30 + 7 * len(s.name)
    return out


def line_chart(
    title: str, labels: Sequence[str], series: Sequence[Series], *, fmt: str = ".3g"
) -> str:
    """Lines over the releases ``labels``, one per ``series``, with markers and a legend."""
    values = [v for s in series for v in s.values if v is not None and math.isfinite(v)]
    top = _scale(max(values, default=0.0))
    inner_w, inner_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    out = _frame(title, labels, top, fmt)
    for k, s in enumerate(series):
        colour = PALETTE[k % len(PALETTE)]
        points = [
            (_x(i, len(labels), inner_w), TOP + inner_h - inner_h * min(v, top) / top)
            for i, v in enumerate(s.values)
            if v is not None and math.isfinite(v)
        ]
        if not points:
            continue
        dash = ' stroke-dasharray="5 4"' if s.dashed else ""
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        out.append(
            f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2.5"{dash}/>'
        )
        out.extend(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>' for x, y in points)
    return "".join([*out, *_legend(series), "</svg>"])


def bar_chart(
    title: str, labels: Sequence[str], series: Sequence[Series], *, fmt: str = ".0f"
) -> str:
    """Grouped bars over ``labels``, one bar per ``series`` in each group, with a legend."""
    values = [v for s in series for v in s.values if v is not None and math.isfinite(v)]
    top = _scale(max(values, default=0.0), whole=fmt.endswith("0f"))
    inner_w, inner_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    out = _frame(title, labels, top, fmt)
    slot = inner_w / max(len(labels), 1)
    width = slot * 0.7 / max(len(series), 1)
    for k, s in enumerate(series):
        colour = PALETTE[k % len(PALETTE)]
        for i, v in enumerate(s.values):
            if v is None or not math.isfinite(v):
                continue
            h = inner_h * min(v, top) / top
            x = LEFT + slot * i + slot * 0.15 + width * k
            tip = f"<title>{escape(s.name)}: {v:{fmt}}</title>"
            out.append(
                f'<rect x="{x:.1f}" y="{TOP + inner_h - h:.1f}" width="{width:.1f}" '
                f'height="{h:.1f}" fill="{colour}">{tip}</rect>'
            )
    return "".join([*out, *_legend(series), "</svg>"])

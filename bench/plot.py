"""``python -m bench --plot``: the figures of a run as pictures, one plain SVG file.

Two charts, read from ``bench/results.json`` (``--json``), written by hand as SVG (no
plotting library: the picture is a few dozen lines and circles):

- the fan-out's rate against the audience (``N watchers``), one line per database, and
  beside it every ceiling its figures were measured against, whatever the ceilings are
  called: each figure's ``limit_name`` up to its first colon names a line (``ceiling
  (a)``, ``SQLite executemany upsert``...), so a ceiling a benchmark adds appears by
  itself;
- the push's latency (p50 and p99) against the number of open streams, with its target.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from xml.sax.saxutils import escape

#: Colours that stay apart for most eyes (Okabe and Ito), in the order lines take them.
COLOURS = ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000")
WIDTH, HEIGHT = 520, 360
LEFT, RIGHT, TOP, BOTTOM = 70, 16, 40, 120  # the margins; the legend goes below

WATCHERS = re.compile(r"^([\d,]+) watchers, (\w+)")
PUSH = re.compile(r"^push (p\d+), ([\d,]+) of ([\d,]+) open streams")


@dataclass
class Line:
    label: str
    points: dict[float, float] = field(default_factory=dict)
    dashed: bool = False


@dataclass
class Chart:
    title: str
    x_label: str
    y_label: str
    lines: list[Line]
    log_y: bool = False
    #: Horizontal lines: (value, label).
    marks: list[tuple[float, str]] = field(default_factory=list)


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def fanout_chart(figures: Iterable[dict[str, Any]]) -> Chart:
    """The fan-out's rows/s per audience, per database, and each ceiling's."""
    lines: dict[str, Line] = {}
    for figure in figures:
        found = WATCHERS.match(figure["name"])
        if figure["benchmark"] != "fanout" or figure["unit"] != "rows/s" or not found:
            continue
        watchers, database = _number(found.group(1)), found.group(2)
        ours = lines.setdefault(f"fan-out, {database}", Line(f"fan-out, {database}"))
        ours.points[watchers] = figure["value"]
        if figure["limit"] is None:
            continue
        name = str(figure["limit_name"]).split(":", 1)[0].strip()
        if database not in name:
            name = f"{name}, {database}"
        lines.setdefault(name, Line(name, dashed=True)).points[watchers] = figure["limit"]
    # The fan-outs first, then their ceilings, each database's together.
    ordered = sorted(lines.values(), key=lambda line: (line.dashed, line.label))
    return Chart("The fan-out against its ceilings", "watchers", "rows per second",
                 ordered, log_y=True)


def push_chart(figures: Iterable[dict[str, Any]]) -> Chart:
    """The push's p50 and p99 per number of open streams, and its target."""
    lines: dict[str, Line] = {}
    marks: dict[float, str] = {}
    reached = set()
    for figure in figures:
        found = PUSH.match(figure["name"])
        if figure["benchmark"] != "live" or not found:
            continue
        which, readers, streams = found.group(1), found.group(2), _number(found.group(3))
        reached.add(readers)
        lines.setdefault(which, Line(f"{which}, commit to event")).points[streams] = (
            figure["value"])
        if figure["limit"] is not None:
            marks[figure["limit"]] = str(figure["limit_name"])
    title = "The push against open streams"
    if len(reached) == 1:
        title += f" ({reached.pop()} readers a round)"
    return Chart(title, "open streams", "milliseconds",
                 sorted(lines.values(), key=lambda line: line.label), marks=sorted(
                     marks.items()))


def _ticks(low: float, high: float, log: bool) -> list[float]:
    if log:
        return [10.0 ** n for n in range(math.floor(math.log10(low)),
                                         math.ceil(math.log10(high)) + 1)]
    step = 10 ** math.floor(math.log10(max(high - low, 1e-9)))
    while (high - low) / step > 6:
        step *= 2
    start = math.floor(low / step) * step
    return [start + n * step for n in range(int((high - start) / step) + 2)]


def _label(value: float) -> str:
    if value >= 1_000_000 and value % 1_000_000 == 0:
        return f"{value / 1_000_000:.0f}M"
    if value >= 1000 and value % 1000 == 0:
        return f"{value / 1000:.0f}k"
    return f"{value:,.0f}"


def _chart_svg(chart: Chart, x0: float, y0: float) -> list[str]:
    """One chart's elements, its top left corner at (x0, y0)."""
    out = [f'<text x="{x0 + WIDTH / 2}" y="{y0 + 22}" text-anchor="middle" '
           f'font-weight="bold">{escape(chart.title)}</text>']
    xs = [x for line in chart.lines for x in line.points]
    ys = [y for line in chart.lines for y in line.points.values()] + [m for m, _ in chart.marks]
    if not xs:
        out.append(f'<text x="{x0 + WIDTH / 2}" y="{y0 + HEIGHT / 2}" text-anchor="middle">'
                   "no figures in this run</text>")
        return out
    x_ticks = _ticks(min(xs), max(xs), log=True)
    y_ticks = _ticks(min(ys), max(ys), log=True) if chart.log_y else _ticks(0, max(ys), False)
    x_low, x_high = math.log10(x_ticks[0]), math.log10(x_ticks[-1])
    if x_high == x_low:
        x_low, x_high = x_low - 1, x_high + 1
    y_low, y_high = y_ticks[0], y_ticks[-1]

    def fy(value: float) -> float:
        if chart.log_y:
            share = (math.log10(value) - math.log10(y_low)) / (
                math.log10(y_high) - math.log10(y_low) or 1)
        else:
            share = (value - y_low) / ((y_high - y_low) or 1)
        return y0 + TOP + (1 - share) * (HEIGHT - TOP - BOTTOM)

    def fx(value: float) -> float:
        share = (math.log10(value) - x_low) / (x_high - x_low)
        return x0 + LEFT + share * (WIDTH - LEFT - RIGHT)

    left, right = x0 + LEFT, x0 + WIDTH - RIGHT
    top, bottom = y0 + TOP, y0 + HEIGHT - BOTTOM
    out.append(f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" '
               'fill="none" stroke="#999"/>')
    for tick in y_ticks:
        y = fy(tick)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{_label(tick)}</text>')
    for tick in x_ticks:
        x = fx(tick)
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{bottom}" stroke="#eee"/>')
        out.append(f'<text x="{x:.1f}" y="{bottom + 16}" text-anchor="middle">'
                   f"{_label(tick)}</text>")
    out.append(f'<text x="{(left + right) / 2}" y="{bottom + 34}" text-anchor="middle">'
               f"{escape(chart.x_label)} (log scale)</text>")
    out.append(f'<text transform="translate({x0 + 16},{(top + bottom) / 2}) rotate(-90)" '
               f'text-anchor="middle">{escape(chart.y_label)}'
               f'{" (log scale)" if chart.log_y else ""}</text>')
    for value, label in chart.marks:
        y = fy(value)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" stroke="#c00" '
                   'stroke-dasharray="2,3"/>')
        out.append(f'<text x="{right - 4}" y="{y - 4:.1f}" text-anchor="end" fill="#c00">'
                   f"{escape(label)} {_label(value)}</text>")
    for n, line in enumerate(chart.lines):
        colour = COLOURS[n % len(COLOURS)]
        points = sorted(line.points.items())
        path = " ".join(f"{fx(x):.1f},{fy(y):.1f}" for x, y in points)
        dash = ' stroke-dasharray="6,4"' if line.dashed else ""
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" '
                   f'stroke-width="2"{dash}/>')
        out += [f'<circle cx="{fx(x):.1f}" cy="{fy(y):.1f}" r="3" fill="{colour}">'
                f"<title>{escape(line.label)}: {_label(x)}, {y:,.0f}</title></circle>"
                for x, y in points]
        legend_y = bottom + 52 + (n // 2) * 16
        legend_x = left + (n % 2) * (WIDTH - LEFT - RIGHT) / 2
        out.append(f'<line x1="{legend_x}" y1="{legend_y - 4}" x2="{legend_x + 24}" '
                   f'y2="{legend_y - 4}" stroke="{colour}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{legend_x + 30}" y="{legend_y}">{escape(line.label)}</text>')
    return out


def svg(charts: Sequence[Chart], caption: str) -> str:
    width, height = WIDTH * len(charts), HEIGHT + 24
    body = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
            f'<rect width="{width}" height="{height}" fill="white"/>']
    for n, chart in enumerate(charts):
        body += _chart_svg(chart, n * WIDTH, 0)
    body.append(f'<text x="8" y="{height - 8}" fill="#555">{escape(caption)}</text>')
    body.append("</svg>")
    return "\n".join(body) + "\n"


def write(json_path: str, svg_path: str) -> None:
    """The pictures of the run kept in ``json_path``, into ``svg_path``."""
    with open(json_path) as file:
        run = json.load(file)
    machine = run.get("machine", {})
    mode = "tiny" if run.get("tiny") else "quick" if run.get("quick") else "full"
    caption = (f"python -m bench ({mode}), {run.get('date', '')[:10]}, {machine.get('cpu')}, "
               f"{machine.get('cores')} cores")
    if machine.get("load_average") is not None:
        caption += f", load average {machine['load_average']:.1f} at the start"
    with open(svg_path, "w") as file:
        file.write(svg([fanout_chart(run["figures"]), push_chart(run["figures"])], caption))

"""Charts of the HTML report, drawn with plotly: one offline page, plotly.js embedded once.

Every chart has real axes with ticks and titles, hover values, a legend outside the plot area
(so it never covers a line) and a colour-blind-safe palette: the eight colours of Okabe and Ito
(https://jfly.uni-koeln.de/color/), each series also told apart by its line dash and marker, so
no two series of one chart look alike even past eight or in grey print.

Examples
--------
>>> [style(i)[0] for i in (0, 8)] == [OKABE_ITO[0], OKABE_ITO[0]]
True
>>> len({style(i) for i in range(48)})          # 48 series, 48 different looks
48
>>> fig = lines({"a": [(1, 2.0), (2, 3.0)]}, Axis("x", log=True), Axis("y"))
>>> fig.layout.xaxis.type, fig.data[0].name
('log', 'a')
>>> "<script" in figure_div(fig), "plotly.min.js" in figure_div(fig)
(True, False)
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: Okabe & Ito's colour-blind-safe palette (black last: it reads as an axis next to others)
OKABE_ITO = ("#E69F00", "#56B4E9", "#009E73", "#0072B2", "#D55E00", "#CC79A7", "#F0E442",
             "#000000")
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
MARKERS = ("circle", "square", "diamond", "triangle-up", "cross", "x", "star", "hexagon")

_FONT = "system-ui, sans-serif"


def style(i: int) -> tuple[str, str, str]:
    """(colour, dash, marker) of the ``i``-th series: all three differ between neighbours and
    the triple repeats only after len(OKABE_ITO) * len(DASHES) series."""
    n = len(OKABE_ITO)
    return OKABE_ITO[i % n], DASHES[(i // n) % len(DASHES)], MARKERS[(i + i // n) % len(MARKERS)]


def log_ticks(values: Sequence[float]) -> list[tuple[float, str]]:
    """Tick positions and labels of a log axis over ``values`` (positive): 1-2-3-5 or 1-2-5
    steps per decade, or one tick a decade over a wide range, every label a plain number.

    Examples
    --------
    >>> [t for _, t in log_ticks([6.2, 5800])]
    ['10', '100', '1,000']
    >>> [t for _, t in log_ticks([6.2, 58])]
    ['10', '20', '30', '50']
    """
    vals = [v for v in values if v > 0]
    if not vals:
        return []
    lo, hi = math.floor(math.log10(min(vals))), math.ceil(math.log10(max(vals)))
    for mults in ((1, 2, 3, 5), (1, 2, 5), (1,)):
        ticks = [m * 10.0 ** e for e in range(lo, hi + 1) for m in mults
                 if min(vals) <= m * 10.0 ** e <= max(vals)]
        if len(ticks) <= 8 and len(ticks) >= 2 or mults == (1,):
            break
    if len(ticks) < 2:      # within one decade: the ends
        ticks = [min(vals), max(vals)]
    return [(t, f"{t:,.0f}" if t >= 1 else f"{t:.3g}") for t in ticks]


def _axis(title: str, log: bool, fmt: str | None) -> dict[str, Any]:
    ax: dict[str, Any] = {"title": {"text": title}, "showline": True, "linecolor": "#444",
                          "ticks": "outside", "showgrid": True, "gridcolor": "#e5e5e5",
                          "zeroline": False, "mirror": False}
    if log:
        ax["type"] = "log"
    if fmt:
        ax["tickformat"] = fmt
    return ax


def _layout(title: str, x: dict[str, Any], y: dict[str, Any], height: int) -> dict[str, Any]:
    return {"title": {"text": title, "x": 0, "xanchor": "left", "font": {"size": 14}},
            "xaxis": x, "yaxis": y, "height": height, "template": "plotly_white",
            "font": {"family": _FONT, "size": 12}, "hovermode": "closest",
            # the legend sits right of the plot area, never over a line
            "legend": {"x": 1.02, "xanchor": "left", "y": 1, "yanchor": "top",
                       "font": {"size": 11}},
            "margin": {"l": 70, "r": 20, "t": 40, "b": 60}}


@dataclass(frozen=True)
class Axis:
    """One axis of a chart: its title, logarithmic or not, a d3 tick format (``".0%"``), and
    named tick positions ((value, label), ...) where the default ticks would not do."""

    title: str
    log: bool = False
    fmt: str | None = None
    ticks: tuple[tuple[float, str], ...] = ()


def lines(series: dict[str, Sequence[tuple[float, float]]], x: Axis, y: Axis, *,
          title: str = "", hover: str | None = None, height: int = 420) -> Any:
    """A line chart, one trace per series (points are (x, y); non-positive values are left out
    of a log axis, never clipped to its edge); a series with no point drawn keeps its place in
    the palette, so charts given the same series colour them alike. ``hover`` is a plotly
    hover template for the points (default: the series, x and y).
    A log axis without named ticks gets :func:`log_ticks` over the values drawn."""
    import plotly.graph_objects as go
    fig = go.Figure()
    for i, (name, pts) in enumerate(series.items()):
        keep = [(a, b) for a, b in pts if (a > 0 or not x.log) and (b > 0 or not y.log)]
        if not keep:
            continue
        color, dash, marker = style(i)
        fig.add_trace(go.Scatter(
            x=[p[0] for p in keep], y=[p[1] for p in keep], name=name, mode="lines+markers",
            line={"color": color, "dash": dash, "width": 2},
            marker={"symbol": marker, "size": 7, "color": color},
            hovertemplate=hover or (f"<b>{html.escape(name)}</b><br>{x.title}: %{{x}}<br>"
                                    f"{y.title}: %{{y:.4g}}<extra></extra>")))
    fig.update_layout(**layout_of(title, fig, x, y, height))
    return fig


def layout_of(title: str, fig: Any, x: Axis, y: Axis, height: int = 420) -> dict[str, Any]:
    """The layout of a chart of ``fig``'s traces on axes ``x`` and ``y`` (a log axis without
    named ticks gets :func:`log_ticks` over the values drawn)."""
    axes = []
    for ax, values in ((x, [float(v) for tr in fig.data for v in tr.x]),
                       (y, [float(v) for tr in fig.data for v in tr.y])):
        spec = _axis(ax.title, ax.log, ax.fmt)
        ticks = ax.ticks or (tuple(log_ticks(values)) if ax.log else ())
        if ticks:
            spec["tickvals"] = [v for v, _ in ticks]
            spec["ticktext"] = [t for _, t in ticks]
        axes.append(spec)
    return _layout(title, axes[0], axes[1], height)


def stacked_bars(rows: Sequence[str], parts: dict[str, Sequence[float]], x_title: str, *,
                 title: str = "", x_fmt: str | None = None, hover_unit: str = "") -> Any:
    """Horizontal stacked bars: one bar per row, one colour per part (values per row). A part
    that is zero on every row is left out of the chart but keeps its place in the palette, so
    charts given the same parts colour them alike."""
    import plotly.graph_objects as go
    fig = go.Figure()
    for i, (name, vals) in enumerate(parts.items()):
        if not any(vals):
            continue
        color = style(i)[0]
        fig.add_trace(go.Bar(
            y=list(rows), x=list(vals), name=name, orientation="h",
            marker={"color": color, "pattern": {"shape": ("", "/", "x", ".", "\\", "+")[
                (i // len(OKABE_ITO)) % 6]}},
            hovertemplate=f"%{{y}}<br>{html.escape(name)}: %{{x:.3g}}{hover_unit}"
                          "<extra></extra>"))
    fig.update_layout(barmode="stack",
                      **_layout(title, _axis(x_title, False, x_fmt),
                                {"automargin": True, "ticks": "outside", "showline": True,
                                 "linecolor": "#444", "autorange": "reversed"},
                                max(240, 60 + 28 * len(rows))))
    return fig


def figure_div(fig: Any) -> str:
    """One figure as a ``<div>`` and its script, without plotly.js (the page embeds it once)."""
    return str(fig.to_html(full_html=False, include_plotlyjs=False,
                           config={"displaylogo": False, "responsive": True}))


def plotly_js() -> str:
    """plotly.js itself, to embed once in a page (so the report stays one offline file)."""
    from plotly.offline import get_plotlyjs
    return str(get_plotlyjs())


def page(title: str, css: str, body: str) -> str:
    """A whole HTML page: ``body`` with plotly.js embedded once in the head."""
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'>"
            f"<title>{html.escape(title)}</title><style>{css}</style>"
            f"<script type='text/javascript'>{plotly_js()}</script></head>"
            f"<body>{body}</body></html>")

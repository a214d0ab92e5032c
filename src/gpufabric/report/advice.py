"""The advisor's answer as one offline HTML page: a Pareto scatter ($/hour against tokens/s; a
point's tooltip names its design), a sortable table of the ranked designs, and the drawing of
the chosen design's server and fabric. Inline SVG, CSS and a few lines of script; no files or
network fetched.

Examples
--------
>>> page = render({"scenario": "x", "objective": "lowest-cost", "designs": [
...     {"design": "1x 8-GPU H100", "system": "gpu=H100-SXM", "objective": {"value": 1.0},
...      "cost": {"hourly_usd": 6.7, "capex_usd": 1.0}, "power_kW": 10.2, "metrics": {},
...      "tokens_per_s": 100.0, "bottleneck": "compute"}], "points": [], "pareto": []})
>>> "1x 8-GPU H100" in page and "<script>" in page
True
"""

from __future__ import annotations

import html
import json
import math
from typing import Any

from gpufabric.topology.model import Topology


def _e(x: Any) -> str:
    return html.escape(str(x))


def _num(v: Any, fmt: str = ",.2f") -> str:
    return "-" if v is None else format(v, fmt)


def scatter(points: list[dict[str, Any]], pareto: set[str], width: int = 720,
            height: int = 360) -> str:
    """SVG: each design at ($/hour, tokens/s), log scales; Pareto designs filled."""
    pts = [p for p in points if p.get("hourly_usd") and p.get("tokens_per_s")]
    if not pts:
        return "<p>No priced design with a throughput to plot.</p>"
    xs = [math.log10(p["hourly_usd"]) for p in pts]
    ys = [math.log10(p["tokens_per_s"]) for p in pts]
    x0, x1 = min(xs) - 0.1, max(xs) + 0.1
    y0, y1 = min(ys) - 0.1, max(ys) + 0.1
    m = 50

    def sx(v: float) -> float:
        return m + (v - x0) / (x1 - x0) * (width - 2 * m)

    def sy(v: float) -> float:
        return height - m - (v - y0) / (y1 - y0) * (height - 2 * m)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           'class="scatter">',
           f'<line x1="{m}" y1="{height - m}" x2="{width - m}" y2="{height - m}" '
           'stroke="#444"/>',
           f'<line x1="{m}" y1="{m}" x2="{m}" y2="{height - m}" stroke="#444"/>',
           f'<text x="{width / 2}" y="{height - 12}" text-anchor="middle">$/hour (log)</text>',
           f'<text x="14" y="{height / 2}" transform="rotate(-90 14 {height / 2})" '
           'text-anchor="middle">tokens/s (log)</text>']
    for p, x, y in zip(pts, xs, ys, strict=True):
        front = p["design"] in pareto
        out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="{6 if front else 4}" '
                   f'fill="{"#d62728" if front else "#9ecae1"}" stroke="#333">'
                   f'<title>{_e(p["design"])}: ${p["hourly_usd"]:,.2f}/h, '
                   f'{p["tokens_per_s"]:,.0f} tok/s</title></circle>')
    out.append("</svg>")
    return "".join(out)


_SORT = """
document.querySelectorAll('table.sortable th').forEach(function (th, col) {
  th.addEventListener('click', function () {
    var body = th.closest('table').tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var up = th.dataset.up !== '1';
    th.dataset.up = up ? '1' : '0';
    rows.sort(function (a, b) {
      var x = a.cells[col].dataset.v || a.cells[col].textContent;
      var y = b.cells[col].dataset.v || b.cells[col].textContent;
      var nx = parseFloat(x), ny = parseFloat(y);
      var c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);
      return up ? c : -c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  });
});
"""


def render(data: dict[str, Any], topo: Topology | None = None) -> str:
    """The page for ``data`` (the ``advise --json`` object with ``points``: every feasible
    design's ``design``, ``hourly_usd`` and ``tokens_per_s``) and the winner's topology."""
    designs = data.get("designs", [])
    pareto = {p["design"] for p in data.get("pareto", [])}
    rows = []
    for i, d in enumerate(designs, 1):
        cost = d.get("cost", {})
        val = d.get("objective", {}).get("value")
        rows.append(
            f"<tr><td data-v='{i}'>{i}</td><td>{_e(d['design'])}</td>"
            f"<td data-v='{val if val is not None else ''}'>{_num(val, ',.4g')}</td>"
            f"<td data-v='{cost.get('capex_usd') or ''}'>{_num(cost.get('capex_usd'), ',.0f')}</td>"
            f"<td data-v='{cost.get('hourly_usd') or ''}'>{_num(cost.get('hourly_usd'))}</td>"
            f"<td data-v='{d.get('power_kW') or ''}'>{_num(d.get('power_kW'), ',.1f')}</td>"
            f"<td data-v='{d.get('tokens_per_s') or ''}'>{_num(d.get('tokens_per_s'), ',.0f')}"
            f"</td><td>{_e(d.get('bottleneck', ''))}</td></tr>")
    head = "".join(f"<th>{h}</th>" for h in ("#", "design", "objective", "capex $", "$/hour",
                                               "kW", "tokens/s", "bottleneck"))
    drawing = ""
    if topo is not None:
        from gpufabric.report.fabric import fabric_section
        from gpufabric.report.html import draw
        drawing = f"<h2>Chosen design</h2><p><code>{_e(designs[0]['system'])}</code></p>" \
            f"<h3>Server</h3>{draw(topo)}{fabric_section(topo, heat=None)}" if designs else ""
    top = designs[0]["design"] if designs else "no design"
    changes = "".join(f"<li>{_e(c)}</li>" for c in data.get("what_would_change", []))
    name = _e(data.get("scenario"))
    counts = _e(json.dumps({k: data.get(k) for k in (
        "candidates_generated", "refused_by_rules", "not_priced", "pruned_by_bounds",
        "candidates_evaluated")}))
    best = f'<span class="top" id="top-design">{_e(top)}</span>'
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>gpufabric advise: {name}</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #ccc; padding: 3px 6px; }}
th {{ cursor: pointer; background: #eee; }} .top {{ font-weight: bold; }}
</style></head><body>
<h1>gpufabric advise: {name}</h1>
<p>Objective: {_e(data.get('objective'))}. Best design: {best}</p>
<ul>{changes}</ul>
<h2>Cost against throughput</h2>
<p>Every feasible design evaluated; the Pareto front in red. Hover a point for its design.</p>
{scatter(data.get('points', []), pareto)}
<h2>Ranked designs</h2>
<table class="sortable"><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>
{drawing}
<p>{counts}</p>
<script>{_SORT}</script>
</body></html>
"""


__all__ = ["render", "scatter"]

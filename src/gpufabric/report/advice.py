"""The advisor's answer as one offline HTML page: a Pareto scatter ($/hour against tokens/s; a
point's tooltip names its design), a sortable table of the ranked designs, and the drawing of
the chosen design's server and fabric. The scatter is plotly's (plotly.js embedded once), the
drawings our own SVG; no files or network fetched.

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
from typing import Any

from gpufabric.report import charts

from gpufabric.topology.model import Topology


def _e(x: Any) -> str:
    return html.escape(str(x))


def _num(v: Any, fmt: str = ",.2f") -> str:
    return "-" if v is None else format(v, fmt)


def scatter(points: list[dict[str, Any]], pareto: set[str]) -> Any:
    """Each priced design at ($/hour, tokens/s) on log axes, the Pareto front as its own
    series (plotly, :mod:`gpufabric.report.charts`); ``None`` when nothing can be drawn."""
    import plotly.graph_objects as go
    pts = [p for p in points if p.get("hourly_usd") and p.get("tokens_per_s")]
    if not pts:
        return None
    fig = go.Figure()
    for i, (name, keep) in enumerate((("other designs", False), ("Pareto front", True))):
        sel = [p for p in pts if (p["design"] in pareto) == keep]
        if not sel:
            continue
        color, _, marker = charts.style(i)
        fig.add_trace(go.Scatter(
            x=[p["hourly_usd"] for p in sel], y=[p["tokens_per_s"] for p in sel],
            mode="markers", name=name, text=[p["design"] for p in sel],
            marker={"color": color, "symbol": marker, "size": 10 if keep else 7,
                    "line": {"width": 1, "color": "#333"}},
            hovertemplate="<b>%{text}</b><br>$%{x:,.2f}/hour<br>%{y:,.0f} tokens/s"
                          "<extra></extra>"))
    x = charts.Axis("$/hour (log)", log=True)
    y = charts.Axis("tokens/s (log)", log=True)
    fig.update_layout(**charts.layout_of("Cost against throughput", fig, x, y))
    return fig


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


#: What the page's closing line counts, as the CLI words it.
COUNTS = ("candidates_generated", "refused_by_rules", "not_priced", "pruned_by_bounds",
          "network_dominated", "evaluated_with_models")


def _training(data: dict[str, Any]) -> bool:
    if "train" in data:
        return bool(data["train"])
    return any("train_hours" in d.get("metrics", {}) for d in data.get("designs", []))


def render(data: dict[str, Any], topo: Topology | None = None) -> str:
    """The page for ``data`` (the ``advise --json`` object with ``points``: every feasible
    design's ``design``, ``hourly_usd`` and ``tokens_per_s``) and the winner's topology.

    The objective column gives the objective's figure with its unit (a throughput to
    maximize as the positive figure, though the advisor ranks it negated); the caveats of the
    best design's cost and power (``cost.notes``) and the GPUs the constraints left out
    (``left_out``) are printed under it, as the CLI prints them."""
    from gpufabric.advise.scenario import objective_shown
    designs = data.get("designs", [])
    pareto = {p["design"] for p in data.get("pareto", [])}
    train = _training(data)
    unit = objective_shown(str(data.get("objective")), None, train)[1]
    rows = []
    for i, d in enumerate(designs, 1):
        cost = d.get("cost", {})
        val = objective_shown(str(data.get("objective")), d.get("objective", {}).get("value"),
                              train)[0]
        rows.append(
            f"<tr><td data-v='{i}'>{i}</td><td>{_e(d['design'])}</td>"
            f"<td data-v='{val if val is not None else ''}'>{_num(val, ',.4g')}</td>"
            f"<td data-v='{cost.get('capex_usd') or ''}'>{_num(cost.get('capex_usd'), ',.0f')}</td>"
            f"<td data-v='{cost.get('hourly_usd') or ''}'>{_num(cost.get('hourly_usd'))}</td>"
            f"<td data-v='{d.get('power_kW') or ''}'>{_num(d.get('power_kW'), ',.1f')}</td>"
            f"<td data-v='{d.get('tokens_per_s') or ''}'>{_num(d.get('tokens_per_s'), ',.0f')}"
            f"</td><td>{_e(d.get('bottleneck', ''))}</td></tr>")
    head = "".join(f"<th>{_e(h)}</th>" for h in ("#", "design", f"objective ({unit})",
                                                   "capex $", "$/hour", "kW", "tokens/s",
                                                   "bottleneck"))
    drawing = ""
    if topo is not None:
        from gpufabric.report.fabric import fabric_section
        from gpufabric.report.html import draw
        drawing = f"<h2>Chosen design</h2><p><code>{_e(designs[0]['system'])}</code></p>" \
            f"<h3>Server</h3>{draw(topo)}{fabric_section(topo, heat=None)}" if designs else ""
    top = designs[0]["design"] if designs else "no design"
    changes = "".join(f"<li>{_e(c)}</li>" for c in data.get("what_would_change", []))
    name = _e(data.get("scenario"))
    counts = _e(", ".join(f"{k.replace('_', ' ')} {data[k]:,}" for k in COUNTS
                          if isinstance(data.get(k), int)))
    notes = "".join(f"<li>note: {_e(n)}</li>"
                    for n in dict.fromkeys((designs[0].get("cost", {}).get("notes", [])
                                            if designs else []) + data.get("left_out", [])))
    best = f'<span class="top" id="top-design">{_e(top)}</span>'
    fig = scatter(data.get("points", []), pareto)
    chart = (charts.figure_div(fig) if fig is not None
             else "<p>No priced design with a throughput to plot.</p>")
    css = ("body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}"
           "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 6px}"
           "th{cursor:pointer;background:#eee}.top{font-weight:bold}")
    body = (f"<h1>gpufabric advise: {name}</h1>"
            f"<p>Objective: {_e(data.get('objective'))} ({_e(unit)}). Best design: {best}</p>"
            f"<ul class='notes'>{notes}</ul><ul>{changes}</ul>"
            "<h2>Cost against throughput</h2>"
            "<p>Every feasible design evaluated; the Pareto front apart. Hover a point for "
            f"its design.</p>{chart}<h2>Ranked designs</h2>"
            f"<table class='sortable'><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>{drawing}"
            + (f"<p class='counts'>{counts}</p>" if counts else "") +
            f"<script>{_SORT}</script>")
    return charts.page(f"gpufabric advise: {data.get('scenario')}", css, body)


def sweep_page(res: dict[str, Any]) -> str:
    """The page of an interactivity sweep (``advise SCENARIO --interactivity X,Y,... -o``): per
    system kind, the cost per million output tokens and the throughput per GPU at capacity
    against tokens/s per user (the axes of published cost-per-token charts), the crossovers in
    words and the table the CLI prints."""
    kinds = list(dict.fromkeys(r["kind"] for r in res["rows"]))
    per = {k: [r for r in res["rows"] if r["kind"] == k] for k in kinds}
    x = charts.Axis("interactivity (output tokens/s per user)", log=True,
                    ticks=tuple((t, f"{t:g}") for t in res["targets"]))
    figs = [charts.lines({k: [(r["interactivity"], r[key]) for r in rs] for k, rs in per.items()},
                         x, charts.Axis(y_title, log=True), title=title,
                         hover="<b>%{fullData.name}</b><br>%{x:g} tokens/s per user: "
                               f"{y_fmt}<extra></extra>")
            for key, y_title, title, y_fmt in (
                ("usd_per_mtok", "$ per million output tokens (log)",
                 "Cost per million output tokens at capacity", "$%{y:.3f} per million tokens"),
                ("tokens_per_s_per_gpu", "output tokens/s per GPU (log)",
                 "Throughput per GPU at capacity", "%{y:,.0f} tokens/s per GPU"))]
    rows = "".join(
        f"<tr><td>{r['interactivity']:g}</td><td>{r['tpot_ms']:.1f}</td><td>{_e(r['kind'])}"
        f"</td><td>{r['gpus']}</td><td>{_num(r['tokens_per_s_per_gpu'], ',.0f')}</td>"
        f"<td>{_num(r['usd_per_mtok'], ',.3f')}</td><td>{_e(r['design'])}</td></tr>"
        for r in res["rows"])
    head = "".join(f"<th>{h}</th>" for h in ("tokens/s per user", "TPOT (ms)", "system kind",
                                              "GPUs", "tokens/s per GPU", "$ per Mtok",
                                              "design"))
    missing = "".join(f"<li>at {c['interactivity']:g} tokens/s per user: {_e(c['reason'])}</li>"
                      for c in res["cheapest"] if c["kind"] is None)
    cross = "".join(f"<li>{_e(c)}</li>" for c in res["crossovers"]
                    or ["the same system kind is cheapest at every target"])
    css = ("body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}"
           "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 6px}"
           "th{background:#eee}")
    body = (f"<h1>gpufabric advise: {_e(res['scenario'])}, interactivity sweep</h1>"
            "<p>Each system kind's cheapest design that meets the scenario's load at each "
            "target (time per output token = 1000 / target ms), costed at its capacity.</p>"
            f"<h2>Crossovers</h2><ul>{cross}{missing}</ul>"
            + "".join(charts.figure_div(f) for f in figs) +
            f"<h2>Designs</h2><table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody>"
            "</table>")
    return charts.page(f"gpufabric advise: {res['scenario']} (interactivity)", css, body)


__all__ = ["render", "scatter", "sweep_page"]

"""A self-contained HTML report: the comparison table, a drawing of each topology, and busbw
against message size. Plain SVG and inline CSS, no scripts or external files."""

from __future__ import annotations

import html
import math
from typing import Any

from gpufabric.report.fabric import fabric_section
from gpufabric.topology import paths
from gpufabric.topology.model import CPU, GPU, NET_SWITCH, NIC, NVSWITCH, PCIE_SWITCH, Topology

KIND_COLOR = {"nvlink": "#76b900", "xgmi": "#d4351c", "pcie": "#1f77b4", "cpu": "#7f7f7f",
              "c2c": "#9467bd", "net": "#ff7f0e", "sli": "#8c564b", "crossfire": "#e377c2"}
DEV_COLOR = {GPU: "#d9f2b3", CPU: "#dddddd", PCIE_SWITCH: "#c6dbef", NVSWITCH: "#a1d99b",
             NIC: "#fdd0a2", NET_SWITCH: "#fdae6b"}
LINE_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
               "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39",
               "#7b4173", "#3182bd", "#e6550d", "#31a354", "#756bb1"]


def _e(x: Any) -> str:
    return html.escape(str(x))


def layout(t: Topology, node: int = 0) -> dict[str, tuple[float, float]]:
    """Tiered positions (x, y in [0, 1]) of one node's devices: CPUs on top, PCIe switches,
    then GPUs and NICs (children under their parents), NVSwitch at the bottom."""
    devs = [d for d in t.devices.values() if d.node == node]
    tier: dict[str, int] = {}
    for d in devs:
        if d.kind in (GPU, NIC):
            chain = paths.upstream(t, d.id)
            for depth, (dev_id, _) in enumerate(reversed(chain)):
                tier[dev_id] = max(tier.get(dev_id, 0), depth)
    leaf_tier = max([tier[d.id] for d in devs if d.kind in (GPU, NIC)] + [1])
    for d in devs:
        if d.kind in (GPU, NIC):
            tier[d.id] = leaf_tier
        elif d.kind == CPU:
            tier[d.id] = 0
        elif d.kind == NVSWITCH:
            tier[d.id] = leaf_tier + 1
        else:
            tier.setdefault(d.id, 1)

    def sort_key(d):
        chain = [c for c, _ in reversed(paths.upstream(t, d.id))]
        return (chain, d.kind != GPU, d.index)

    leaves = sorted([d for d in devs if d.kind in (GPU, NIC)], key=sort_key)
    pos: dict[str, tuple[float, float]] = {}
    n = max(1, len(leaves))
    ymax = leaf_tier + 1
    for i, d in enumerate(leaves):
        pos[d.id] = ((i + 0.5) / n, tier[d.id] / ymax)
    for level in range(leaf_tier - 1, -1, -1):       # parents above the mean of their children
        for d in devs:
            if tier.get(d.id) != level or d.id in pos:
                continue
            kids = [pos[nb] for nb, ln in t.neighbors(d.id) if ln.kind == "pcie" and ln.a == d.id
                    and nb in pos]
            pos[d.id] = (sum(x for x, _ in kids) / len(kids) if kids else 0.5, level / ymax)
    cpus = sorted([d for d in devs if d.kind == CPU], key=lambda d: d.index)
    for k, c in enumerate(cpus):                      # keep sockets apart
        x = pos.get(c.id, (0.5, 0))[0]
        if not any(ln.kind == "pcie" for _, ln in t.neighbors(c.id)):
            x = (k + 0.5) / len(cpus)
        pos[c.id] = (x, 0.0)
    for d in devs:
        pos.setdefault(d.id, (0.5, tier.get(d.id, leaf_tier + 1) / ymax))
    return pos


def draw(t: Topology, node: int = 0, width: int = 900) -> str:
    """An SVG drawing of one node: devices as boxes, links coloured by kind, width by rate."""
    pos = layout(t, node)
    n_leaves = sum(1 for d in t.devices.values() if d.node == node and d.kind in (GPU, NIC))
    width = max(width, 46 * n_leaves)
    box_w = max(18, min(70, width / max(1, n_leaves) - 8))
    levels = len({round(y, 6) for _, y in pos.values()})
    row_links = any(abs(pos[ln.a][1] - pos[ln.b][1]) < 1e-9 for ln in t.links
                    if ln.a in pos and ln.b in pos)
    height = 70 + 62 * max(2, levels) + (60 if row_links else 0)
    X = lambda x: 20 + x * (width - 40)          # noqa: E731
    Y = lambda y: 30 + y * (height - 70)         # noqa: E731
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="{_e(t.name)} topology">']
    for ln in t.links:
        if ln.a not in pos or ln.b not in pos:
            continue
        (x1, y1), (x2, y2) = pos[ln.a], pos[ln.b]
        sw = 1 + math.log2(1 + ln.bw_GBps / 16) if ln.bw_GBps else 1
        dash = ' stroke-dasharray="4 3"' if ln.kind in ("sli", "crossfire") else ""
        label = f"{ln.a} - {ln.b}: {ln.kind}"
        label += f" x{ln.lanes}" if ln.lanes else ""
        label += f" x{ln.count}" if ln.count > 1 else ""
        # links within one row (GPU-GPU meshes, bridges) bow below it so they do not overlap
        bow = (abs(X(x2) - X(x1)) * 0.18 if abs(y1 - y2) < 1e-9 and ln.kind != "cpu" else 0.0)
        mx, my = (X(x1) + X(x2)) / 2, (Y(y1) + Y(y2)) / 2 + bow
        parts.append(f'<path d="M{X(x1):.1f},{Y(y1):.1f} Q{mx:.1f},{my + bow:.1f} {X(x2):.1f},'
                     f'{Y(y2):.1f}" fill="none" stroke="{KIND_COLOR.get(ln.kind, "#000")}" '
                     f'stroke-width="{sw:.1f}" stroke-opacity="0.7"{dash}><title>{_e(label)}, '
                     f'{ln.bw_GBps:g} GB/s</title></path>')
    for dev_id, (x, y) in pos.items():
        d = t.devices[dev_id]
        w = box_w if d.kind in (GPU, NIC) else max(box_w, 60)
        label = d.id.split(".", 1)[-1]
        parts.append(f'<g><rect x="{X(x) - w / 2:.1f}" y="{Y(y) - 11:.1f}" width="{w:.1f}" '
                     f'height="22" rx="4" fill="{DEV_COLOR.get(d.kind, "#fff")}" stroke="#333">'
                     f'<title>{_e(d.id)} {_e(d.kind)} {_e(d.model)}</title></rect>'
                     f'<text x="{X(x):.1f}" y="{Y(y) + 4:.1f}" font-size="{9 if w < 40 else 11}" '
                     f'text-anchor="middle">{_e(label)}</text></g>')
    legend = " ".join(f'<tspan fill="{c}">&#9644; {k}</tspan>' for k, c in KIND_COLOR.items())
    parts.append(f'<text x="20" y="{height - 8}" font-size="11">{legend}</text>')
    parts.append("</svg>")
    return "".join(parts)


def busbw_chart(series: dict[str, list[dict[str, Any]]], op: str, width: int = 900,
                height: int = 420) -> str:
    """SVG line chart: busbw (GB/s) against message size, both on log scales (so PCIe boxes
    and NVLink domains show on one chart), one line per system."""
    pts = [p for s in series.values() for p in s if p["busbw"] > 0]
    if not pts:
        return ""
    xmin, xmax = math.log2(min(p["size"] for p in pts)), math.log2(max(p["size"] for p in pts))
    lo = math.floor(math.log10(max(min(p["busbw"] for p in pts), 1e-4)))
    hi = math.ceil(math.log10(max(p["busbw"] for p in pts)))
    hi = max(hi, lo + 1)
    L, R, T, B = 60, 220, 24, 50
    X = lambda s: L + (math.log2(s) - xmin) / max(1e-9, xmax - xmin) * (width - L - R)  # noqa
    Y = lambda v: T + (hi - math.log10(max(v, 10.0 ** lo))) / (hi - lo) * (height - T - B)  # noqa
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'role="img" aria-label="{_e(op)} busbw against size">']
    for e in range(lo, hi + 1):
        v = 10.0 ** e
        parts.append(f'<line x1="{L}" x2="{width - R}" y1="{Y(v):.1f}" y2="{Y(v):.1f}" '
                     f'stroke="#eee"/><text x="{L - 6}" y="{Y(v) + 4:.1f}" font-size="11" '
                     f'text-anchor="end">{v:g}</text>')
    for e in range(int(xmin), int(xmax) + 1, 4):
        s = 2 ** e
        lab = (f"{s >> 30}G" if s >= 1 << 30 else f"{s >> 20}M" if s >= 1 << 20
               else f"{s >> 10}K" if s >= 1 << 10 else f"{s}")
        parts.append(f'<text x="{X(s):.1f}" y="{height - B + 16}" font-size="11" '
                     f'text-anchor="middle">{lab}</text>')
    parts.append(f'<text x="{(L + width - R) / 2}" y="{height - 8}" font-size="12" '
                 'text-anchor="middle">message size (bytes)</text>'
                 f'<text x="{L}" y="12" font-size="12">busbw GB/s (log)</text>')
    for i, (name, s) in enumerate(series.items()):
        color = LINE_COLORS[i % len(LINE_COLORS)]
        d = " ".join(f"{'M' if j == 0 else 'L'}{X(p['size']):.1f},{Y(p['busbw']):.1f}"
                     for j, p in enumerate(s))
        parts.append(f'<path d="{d}" fill="none" stroke="{color}" stroke-width="2">'
                     f'<title>{_e(name)}</title></path>')
        parts.append(f'<text x="{width - R + 8}" y="{T + 14 * i + 10}" font-size="11" '
                     f'fill="{color}">&#9644; {_e(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _table_html(rows: list[dict[str, Any]]) -> str:
    head = ("system", "GPUs", "GPU-pair GB/s (min / median / max)", "P2P pairs",
            "PCIe lanes used / left", "path mix", "PCIe switches", "NVSwitch",
            "all_reduce busbw 1 GB (GB/s)", "all_reduce 8 B (us)", "all_to_all busbw 1 GB (GB/s)")
    out = ["<table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    for r in rows:
        bw, c = r["pair_bw_GBps"], r.get("collectives") or {}
        f = lambda v: "-" if v is None else f"{v:,.1f}"   # noqa: E731
        gpus = f"{r['nodes']}x{r['gpus_per_node']}" if r["nodes"] > 1 else r["gpus_per_node"]
        cells = (r["name"], gpus, f"{f(bw['min'])} / {f(bw['median'])} / {f(bw['max'])}",
                 f"{r['p2p_pairs']} / {r['pairs']}", f"{r['lanes_used']} / {r['lanes_free']}",
                 ", ".join(f"{k} {v}" for k, v in r["path_mix"].items()), r["pcie_switches"],
                 r["nvswitches"], f(c.get("allreduce_busbw_1GB")),
                 f(c.get("allreduce_8B_lat_us")), f(c.get("alltoall_busbw_1GB")))
        out.append("<tr>" + "".join(f"<td>{_e(x)}</td>" for x in cells) + "</tr>")
    out.append("</table>")
    return "".join(out)


CSS = """body{font-family:system-ui,sans-serif;margin:24px;color:#222}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:4px 8px}
th{background:#f4f4f4}section{margin:28px 0}h2{margin-bottom:4px}.d{color:#555;margin:0 0 8px}
.warn{color:#a15c00;font-size:13px}svg{max-width:100%;height:auto}"""


def render_report(topos: list[Topology], rows: list[dict[str, Any]],
                  curves: dict[str, dict[str, list[dict[str, Any]]]] | None = None,
                  heat: tuple[str, int] | None = ("all_reduce", 2**30),
                  training: dict[str, Any] | None = None,
                  inference: dict[str, Any] | None = None) -> str:
    """The whole report as one HTML string.

    ``curves`` maps an op name to {system: [{size, busbw}, ...]}; by default all_reduce and
    all_to_all are swept with the collective model.
    """
    if curves is None:
        from gpufabric import collectives
        from gpufabric.report.compare import SWEEP_SIZES
        curves = {op: {t.name: collectives.sweep(t, op, SWEEP_SIZES) for t in topos}
                  for op in ("all_reduce", "all_to_all")}
    body = ["<h1>gpufabric: what each way of connecting GPUs buys</h1>",
            "<p class='d'>GPU-pair bandwidth is the bottleneck link of the path, per direction. "
            "Collective figures are the model's predictions (nccl-tests busbw definitions).</p>",
            _table_html(rows)]
    for op, series in curves.items():
        body.append(f"<section><h2>{_e(op)}: busbw against message size</h2>"
                    f"{busbw_chart(series, op)}</section>")
    if training:
        from gpufabric.report.training import section_html
        body.append(section_html(training))
    if inference:   # gpufabric compare --inference (report/inference.py)
        from gpufabric.report.inference import section_html as inference_html
        body.append(inference_html(inference))
    for t, r in zip(topos, rows, strict=True):
        fab = t.meta.get("fabric")
        extra = (f". {t.meta['nodes']} nodes over {t.meta['nics_per_node']}x {t.meta['nic']} per "
                 f"node, {fab['topology']} fabric, {fab['oversubscription']:g}:1 "
                 f"({fab['leaves']} leaf switches); node 0 shown." if fab else "")
        warns = "".join(f"<div class='warn'>warning: {_e(w)}</div>" for w in r["warnings"])
        desc = _e(t.meta.get('description', ''))
        body.append(f"<section><h2>{_e(t.name)}</h2><p class='d'>{desc}"
                    f"{_e(extra)}</p>{draw(t)}{fabric_section(t, heat)}{warns}</section>")
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>gpufabric report</title>"
            f"<style>{CSS}</style></head><body>{''.join(body)}</body></html>")

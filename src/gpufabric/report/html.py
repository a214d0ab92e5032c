"""A self-contained HTML report: the comparison table, a drawing of each topology (our own
SVG), and the charts (plotly, :mod:`gpufabric.report.charts`): busbw against message size,
training scaling and serving. One offline file: plotly.js is embedded once, nothing is fetched."""

from __future__ import annotations

import html
import math
from typing import Any

from gpufabric.report import charts
from gpufabric.report.fabric import fabric_section
from gpufabric.topology import paths
from gpufabric.topology.model import CPU, GPU, NET_SWITCH, NIC, NVSWITCH, PCIE_SWITCH, Topology

KIND_COLOR = {"nvlink": "#76b900", "xgmi": "#d4351c", "pcie": "#1f77b4", "cpu": "#7f7f7f",
              "c2c": "#9467bd", "net": "#ff7f0e", "sli": "#8c564b", "crossfire": "#e377c2"}
DEV_COLOR = {GPU: "#d9f2b3", CPU: "#dddddd", PCIE_SWITCH: "#c6dbef", NVSWITCH: "#a1d99b",
             NIC: "#fdd0a2", NET_SWITCH: "#fdae6b"}

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


def _off_node_switches(t: Topology, node: int) -> dict[str, int]:
    """NVLink switches outside the node that its GPUs link to (a rack-scale domain's switch
    trays, e.g. a GB200 tray's 18 NVLink ports per GPU), with how many GPUs of the node reach
    each."""
    ids = {d.id for d in t.devices.values() if d.node == node}
    out: dict[str, int] = {}
    for ln in t.links:
        for a, b in ((ln.a, ln.b), (ln.b, ln.a)):
            if a in ids and b not in ids and t.devices[b].kind == NVSWITCH:
                out[b] = out.get(b, 0) + 1
    return out


def draw(t: Topology, node: int = 0, width: int = 900) -> str:
    """An SVG drawing of one node: devices as boxes, links coloured by kind, width by rate.
    NVLink switches outside the node (a rack-scale domain's) are drawn below it, with the
    GPUs' NVLink ports to them; the legend names only the link kinds drawn."""
    pos = layout(t, node)
    off = _off_node_switches(t, node)
    if off:
        ymax = max(y for _, y in pos.values())
        step = 1.0 / max(2, len({round(y, 6) for _, y in pos.values()}))
        for k, switch in enumerate(sorted(off)):
            pos[switch] = ((k + 0.5) / len(off), ymax + step)
        scale = max(y for _, y in pos.values()) or 1.0
        pos = {k: (x, y / scale) for k, (x, y) in pos.items()}
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
    drawn: set[str] = set()
    for ln in t.links:
        if ln.a not in pos or ln.b not in pos:
            continue
        drawn.add(ln.kind)
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
        if (ln.a in off) != (ln.b in off) and ln.kind == "nvlink":   # the GPU's port count
            gx, gy = pos[ln.b] if ln.a in off else pos[ln.a]
            parts.append(f'<text x="{X(gx) + 4:.1f}" y="{Y(gy) + 26:.1f}" font-size="10" '
                         f'fill="{KIND_COLOR["nvlink"]}">{ln.count} ports</text>')
    for dev_id, (x, y) in pos.items():
        d = t.devices[dev_id]
        w = box_w if d.kind in (GPU, NIC) else max(box_w, 60)
        label = d.id.split(".", 1)[-1]
        if dev_id in off:
            w = max(w, 220)
            label = f"NVLink domain switches ({t.meta.get('nvlink_domain', '?')} GPUs)"
        parts.append(f'<g><rect x="{X(x) - w / 2:.1f}" y="{Y(y) - 11:.1f}" width="{w:.1f}" '
                     f'height="22" rx="4" fill="{DEV_COLOR.get(d.kind, "#fff")}" stroke="#333">'
                     f'<title>{_e(d.id)} {_e(d.kind)} {_e(d.model)}</title></rect>'
                     f'<text x="{X(x):.1f}" y="{Y(y) + 4:.1f}" font-size="{9 if w < 40 else 11}" '
                     f'text-anchor="middle">{_e(label)}</text></g>')
    legend = " ".join(f'<tspan fill="{c}">&#9644; {k}</tspan>' for k, c in KIND_COLOR.items()
                      if k in drawn)
    parts.append(f'<text x="20" y="{height - 8}" font-size="11">{legend}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _size_label(s: int) -> str:
    return (f"{s >> 30}G" if s >= 1 << 30 else f"{s >> 20}M" if s >= 1 << 20
            else f"{s >> 10}K" if s >= 1 << 10 else f"{s}")


def busbw_figure(series: dict[str, list[dict[str, Any]]], op: str) -> Any:
    """busbw (GB/s) against message size, both on log axes (so PCIe boxes and NVLink domains
    show on one chart), one line per system; ``None`` when no point has a positive busbw."""
    pts = [p for s in series.values() for p in s if p["busbw"] > 0]
    if not pts:
        return None
    lo = min(p["size"] for p in pts).bit_length() - 1
    hi = max(p["size"] for p in pts).bit_length() - 1
    ticks = [(2 ** e, _size_label(2 ** e)) for e in range(lo, hi + 1, 3)]
    return charts.lines({name: [(p["size"], p["busbw"]) for p in s]
                         for name, s in series.items()},
                        charts.Axis("message size (bytes)", log=True, ticks=tuple(ticks)),
                        charts.Axis("busbw (GB/s)", log=True),
                        title=f"{op}: predicted bus bandwidth",
                        hover="<b>%{fullData.name}</b><br>size: %{x:,} B<br>"
                              "busbw: %{y:.4g} GB/s<extra></extra>")


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
        fig = busbw_figure(series, op)
        body.append(f"<section><h2>{_e(op)}: busbw against message size</h2>"
                    f"{charts.figure_div(fig) if fig is not None else ''}</section>")
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
    return charts.page("gpufabric report", CSS, "".join(body))

"""The report's fabric drawing: tiers, rails, pods, oversubscription, the supernode's compute
trays and NVLink switch trays, and the per-link utilisation of one collective as a heat map.

Large clusters are drawn grouped (a box per pod, per rail group of leaves, per block of nodes),
never one box per GPU; a rack-scale NVLink domain (72 or 128 GPUs) is drawn tray by tray.
Utilisation is what ``gpufabric collective --explain`` computes: each link direction's bytes
over its usable rate, as a share of the operation's time; it is shown on the links the model
built (the sampled nodes of a large cluster), the busiest direction of each drawn link.

Examples
--------
>>> from gpufabric.topology import presets
>>> from gpufabric.topology.build import load as load_system
>>> svg = fabric_svg(load_system("gb200-nvl72"), ("all_reduce", 2**30))
>>> svg.count("<title>compute tray"), svg.count("<title>NVLink switch tray")
(18, 9)
"""

from __future__ import annotations

import colorsys
import html
import math
from typing import Any

from gpufabric.topology.model import GPU, NET_SWITCH, NIC, NVSWITCH, Topology

#: Most pods (and node blocks) drawn one by one; the rest are one "more" box.
MAX_GROUPS = 6
#: Most trays or nodes drawn one by one in a row.
MAX_ROW = 36


def _e(x: Any) -> str:
    return html.escape(str(x))


def heat_color(u: float | None) -> str:
    """Grey for an idle (or unmodelled) link; green (idle) to red (saturated) otherwise.

    >>> heat_color(None), heat_color(0.0), heat_color(0.5), heat_color(1.0)
    ('#bbbbbb', '#1fad1f', '#adad1f', '#ad1f1f')
    """
    if u is None:
        return "#bbbbbb"
    hue = (1 - min(1.0, max(0.0, u))) / 3          # 1/3 = green, 0 = red
    r, g, b = colorsys.hls_to_rgb(hue, 0.40, 0.70)
    return "#{:02x}{:02x}{:02x}".format(*(round(c * 255) for c in (r, g, b)))


def link_utilisation(t: Topology, op: str = "all_reduce", size: int = 2**30,
                     ranks: int | None = None) -> dict[tuple[str, str], float]:
    """Share of the operation's time each link direction (``(src, dst)``) is busy moving data.

    The same figures as ``gpufabric collective --explain``: the bottleneck direction's share
    is the prediction's ``bottleneck_busy`` and every other direction scales by its bytes over
    its usable rate.
    """
    from gpufabric import collectives
    m = collectives.model(t)
    pred = m.predict(op, size, ranks)
    if pred.ranks < 2:
        return {}
    plan = m.plan(op, pred.algo, m.layout(ranks))
    edges = [e for e in plan.sim_edges if e.usable_GBps > 0 and e.kind != "dram"]
    top = max(edges, key=lambda e: e.bytes / e.usable_GBps, default=None)
    if top is None or top.bytes <= 0:
        return {}
    ref = top.bytes / top.usable_GBps
    return {(e.src, e.dst): pred.bottleneck_busy * (e.bytes / e.usable_GBps) / ref
            for e in edges}


class _Svg:
    def __init__(self, width: int):
        self.width = width
        self.parts: list[str] = []
        self.bottom = 0.0

    def box(self, x: float, y: float, w: float, h: float, fill: str, label: str,
            title: str = "", size: int = 11) -> None:
        self.bottom = max(self.bottom, y + h)
        self.parts.append(
            f'<g><rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" rx="4" '
            f'fill="{fill}" stroke="#333"><title>{_e(title or label)}</title></rect>'
            f'<text x="{x + w / 2:.1f}" y="{y + h / 2 + size / 3:.1f}" font-size="{size}" '
            f'text-anchor="middle">{_e(label)}</text></g>')

    def line(self, x1: float, y1: float, x2: float, y2: float, color: str, width: float,
             title: str) -> None:
        self.parts.insert(0, f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
                             f'stroke="{color}" stroke-width="{width:.1f}"><title>{_e(title)}'
                             '</title></line>')

    def text(self, x: float, y: float, s: str, size: int = 11, anchor: str = "start") -> None:
        self.bottom = max(self.bottom, y + 4)
        self.parts.append(f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" '
                          f'text-anchor="{anchor}">{_e(s)}</text>')

    def render(self, label: str) -> str:
        h = int(self.bottom + 16)
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}" height="{h}" '
                f'viewBox="0 0 {self.width} {h}" role="img" aria-label="{_e(label)}">'
                + "".join(self.parts) + "</svg>")


def _busiest(util: dict[tuple[str, str], float], a: str, b: str) -> float | None:
    vals = [util[k] for k in ((a, b), (b, a)) if k in util]
    return max(vals) if vals else None


def _group_util(t: Topology, util: dict[tuple[str, str], float], ids_a: set[str],
                ids_b: set[str]) -> float | None:
    """Busiest direction over the built links between two groups of devices."""
    vals = [u for (s, d), u in util.items()
            if (s in ids_a and d in ids_b) or (s in ids_b and d in ids_a)]
    return max(vals) if vals else None


def _pct(u: float | None) -> str:
    return "not modelled here" if u is None else f"{u:.0%} busy"


def _slots(n: int, limit: int) -> list[int | None]:
    """Indices to draw out of ``n``: all, or the first ``limit - 1``, a gap, the last."""
    if n <= limit:
        return list(range(n))
    return [*range(limit - 2), None, n - 1]


def fabric_svg(t: Topology, heat: tuple[str, int] | None = ("all_reduce", 2**30),
               width: int = 1000) -> str:
    """An SVG drawing of the scale-out tiers and the scale-up domain of ``t``.

    ``heat``: ``(op, size_bytes)`` of the collective whose per-link utilisation colours the
    links, or None for link kinds only.
    """
    util = link_utilisation(t, *heat) if heat else {}
    svg = _Svg(width)
    y = 28.0
    title = f"{t.name}: fabric"
    if heat:
        title += f", link utilisation of {heat[0]} at {heat[1]:,} B over all GPUs"
    svg.text(10, 16, title, 13)
    fab = t.meta.get("fabric")
    if fab and fab.get("tiers"):
        y = _draw_tiers(svg, t, fab, util, y)
    if t.meta.get("supernode"):
        y = _draw_domain(svg, t, util, y + 10)
    elif not fab:
        svg.text(10, y + 14, f"one server, {len(t.gpus())} GPUs: see the drawing above", 11)
        y += 24
    # legend
    y = svg.bottom + 18
    for i, (lab, u) in enumerate((("idle", 0.0), ("50%", 0.5), ("saturated", 1.0),
                                  ("no traffic modelled", None))):
        svg.line(10 + 150 * i, y, 40 + 150 * i, y, heat_color(u), 4, lab)
        svg.text(46 + 150 * i, y + 4, lab, 10)
    return svg.render(title)


def _draw_tiers(svg: _Svg, t: Topology, fab: dict[str, Any], util: dict[tuple[str, str], float],
                y: float) -> float:
    tiers = {tr["name"]: tr for tr in fab["tiers"]}
    levels = fab["levels"]
    pods = fab["pods"] if levels == 3 else 1
    per_pod = fab["nodes_per_pod"] if levels == 3 else fab["nodes"]
    w = svg.width - 20
    slots = _slots(pods, MAX_GROUPS)
    col_w = w / len(slots)
    if "core" in tiers:
        c = tiers["core"]
        svg.box(10 + w / 2 - 160, y, 320, 26, "#fdae6b",
                f"core: {c['switches']:,} x {c['switch']} ({c['radix']}p)")
        core_y = y + 26
        y += 60
    else:
        core_y = None
    spine = tiers.get("spine")
    for i, p in enumerate(slots):
        x0 = 10 + i * col_w
        if p is None:
            svg.box(x0 + 6, y, col_w - 12, 26 + (60 if spine else 0) + 80, "#f4f4f4",
                    f"... {pods - len(slots) + 1} more pods")
            continue
        nodes_here = min(per_pod, fab["nodes"] - p * per_pod)
        sy = y
        if spine:
            spines = spine["switches"] // max(1, pods)
            sp_id = f"fabric.pod{p}.spine" if levels == 3 else "fabric.spine"
            label = (f"pod {p}: {spines} spines" if levels == 3
                     else f"spine: {spine['switches']} x {spine['switch']}")
            svg.box(x0 + 6, sy, col_w - 12, 26, "#fdd49e", label,
                    f"{label} ({spine['switch']}, {spine['down']} down / {spine['up']} up)")
            if core_y is not None:
                u = _busiest(util, sp_id, "fabric.core")
                svg.line(x0 + col_w / 2, sy, 10 + w / 2, core_y, heat_color(u),
                         2 + 2 * (u or 0), f"pod {p} to core, {spine['oversubscription']:g}:1, "
                         f"{spine['up'] * spines} uplinks, {_pct(u)}")
            sy += 60
        _draw_leaves(svg, t, fab, util, (x0, col_w, sy), p, nodes_here)
        dom = t.meta.get("nvlink_domain") or t.meta.get("gpus_per_node", 1)
        gpn = t.meta.get("gpus_per_node", 1)
        gpus = nodes_here * gpn
        n_dom = gpus // dom
        label = (f"{nodes_here} nodes, {gpus:,} GPUs" + (
            f" ({n_dom} NVLink domain{'s' if n_dom > 1 else ''})" if dom > gpn else ""))
        svg.box(x0 + 6, sy + 80, col_w - 12, 30, "#d9f2b3", label if col_w > 150
                else f"{nodes_here} nodes", label, 10)
    over = ", ".join(f"{tr['name']} {tr['oversubscription']:g}:1" for tr in fab["tiers"]
                     if tr["name"] != "core")
    svg.text(10, svg.bottom + 16, f"{levels} tier(s), {fab['topology']}; oversubscription: "
             f"{over}; {fab['nodes_per_leaf']} nodes per leaf; bisection "
             f"{fab['bisection_GBps']:,.0f} GB/s", 11)
    return svg.bottom + 10


def _draw_leaves(svg: _Svg, t: Topology, fab: dict[str, Any], util: dict[tuple[str, str], float],
                 at: tuple[float, float, float], p: int, nodes_here: int) -> None:
    """One pod's leaves at ``at`` (x, column width, y): one box per rail group (rail-optimized)
    or one for all, with their links to the spines and to the NICs coloured by load."""
    x0, col_w, sy = at
    tiers = {tr["name"]: tr for tr in fab["tiers"]}
    spine = tiers.get("spine")
    leaves = {d.id for d in t.devices.values() if d.kind == NET_SWITCH
              and d.attrs.get("tier") == "leaf"}
    nics = {d.id for d in t.devices.values() if d.kind == NIC}
    rails = fab["nics_per_node"] if fab["topology"] == "rail-optimized" else 0
    rpl = max(1, fab.get("rails_per_leaf") or 1)
    groups = math.ceil(rails / rpl) if rails else 1
    leaf_t = tiers["leaf"]
    pod_leaves = math.ceil(nodes_here / fab["nodes_per_leaf"]) * (groups if rails else 1) \
        if rails else math.ceil(nodes_here * fab["nics_per_node"] / leaf_t["down"])
    n_box = groups if rails else 1
    bw_ = (col_w - 12) / n_box
    for g in range(n_box):
        bx = x0 + 6 + g * bw_
        if rails:
            first = g * rpl
            lab = (f"rail {first}" if rpl == 1 else f"rails {first}-{first + rpl - 1}")
            n_l = pod_leaves // groups
            sub = f"{n_l} lea{'ves' if n_l > 1 else 'f'}"
        else:
            lab, sub = "leaves", f"{pod_leaves}"
        ids = {d for d in leaves if _leaf_in(t, d, p, g if rails else None)}
        if spine:
            sp_id = f"fabric.pod{p}.spine" if fab["levels"] == 3 else "fabric.spine"
            u = _group_util(t, util, ids, {sp_id})
            svg.line(bx + bw_ / 2, sy, x0 + col_w / 2, sy - 34, heat_color(u),
                     1 + 2 * (u or 0), f"{lab} leaves to spines, "
                     f"{leaf_t['oversubscription']:g}:1, {leaf_t['up']} uplinks per leaf, "
                     f"{_pct(u)}")
        svg.box(bx + 1, sy, bw_ - 2, 34, "#fee6ce", lab if bw_ > 44 else lab.split()[-1],
                f"{lab}: {sub} ({leaf_t['switch']}, {leaf_t['down']} down / "
                f"{leaf_t['up']} up)", 10 if bw_ > 44 else 8)
        svg.text(bx + bw_ / 2, sy + 46, sub if bw_ > 30 else "", 9, "middle")
        u = _group_util(t, util, ids, nics)
        svg.line(bx + bw_ / 2, sy + 34, x0 + col_w / 2, sy + 80, heat_color(u),
                 1 + 2 * (u or 0), f"{lab}: NIC links, {_pct(u)}")


def _leaf_in(t: Topology, leaf: str, pod: int, group: int | None) -> bool:
    d = t.devices[leaf]
    if d.attrs.get("pod", 0) != pod:
        return False
    if group is None:
        return True
    rails = d.attrs.get("rails") or []
    rpl = max(1, len(rails))
    return bool(rails) and rails[0] // rpl == group


def _draw_domain(svg: _Svg, t: Topology, util: dict[tuple[str, str], float], y: float) -> float:
    """One NVLink domain tray by tray: switch trays on top, compute trays below."""
    sup = t.meta["supernode"]
    hub = next((d for d in t.devices.values() if d.kind == NVSWITCH
                and d.attrs.get("domain") == 0), None)
    w = svg.width - 20
    svg.text(10, y + 12, f"NVLink domain 0 of {t.meta.get('domains', 1)}: "
             f"{t.meta['nvlink_domain']} GPUs in {sup['trays']} compute trays"
             + (f" of a {sup['domain_gpus']}-GPU domain"
                if sup.get("domain_gpus", t.meta["nvlink_domain"]) > t.meta["nvlink_domain"]
                else "") + ", "
             f"{sup['switch_trays']} NVLink switch trays x {sup['chips_per_tray']} "
             f"{sup['switch']} ({sup['ports_used']} of {sup['chips'] * sup['ports_per_chip']} "
             f"ports), {sup['racks']} rack(s)", 11)
    y += 22
    st_slots = _slots(sup["switch_trays"], MAX_ROW)
    sw_w = w / len(st_slots)
    for i, k in enumerate(st_slots):
        if k is None:
            svg.box(10 + i * sw_w + 1, y, sw_w - 2, 24, "#f4f4f4", "...")
            continue
        svg.box(10 + i * sw_w + 1, y, sw_w - 2, 24, "#a1d99b", f"S{k}",
                f"NVLink switch tray {k}: {sup['chips_per_tray']} x {sup['switch']}",
                9 if sw_w > 22 else 7)
    bus_y = y + 40
    svg.line(10, bus_y, 10 + w, bus_y, "#76b900", 3, "NVLink switch fabric (every GPU to every "
             "switch chip)")
    for i in range(len(st_slots)):
        svg.line(10 + (i + 0.5) * sw_w, y + 24, 10 + (i + 0.5) * sw_w, bus_y, "#76b900", 1,
                 "switch tray ports")
    y = bus_y + 30
    tr_slots = _slots(sup["trays"], MAX_ROW)
    tw = w / len(tr_slots)
    gpn = sup["gpus_per_tray"]
    for i, k in enumerate(tr_slots):
        x = 10 + i * tw
        if k is None:
            svg.box(x + 1, y, tw - 2, 58, "#f4f4f4", "...")
            continue
        gpus = [g.id for g in t.gpus(k)]
        u = max((v for g in gpus if hub is not None
                 for v in [_busiest(util, g, hub.id)] if v is not None), default=None)
        svg.line(x + tw / 2, y, x + tw / 2, bus_y, heat_color(u), 1 + 3 * (u or 0),
                 f"tray {k}: {gpn} GPUs x {sup['links_per_gpu']} NVLink links, {_pct(u)}")
        svg.box(x + 1, y, tw - 2, 58, "#f7fcf0", "", f"compute tray {k}: {gpn} GPUs, "
                f"{len(t.nics(k))} NICs, {len(t.of_kind('cpu', k))} CPUs")
        cell = (tw - 6) / max(1, gpn)
        for j in range(gpn):
            svg.box(x + 3 + j * cell, y + 4, cell - 1, 22, "#d9f2b3", "G" if cell > 9 else "",
                    f"n{k}.gpu{j}", 8)
        svg.box(x + 3, y + 30, tw - 6, 12, "#dddddd", "CPU" if tw > 24 else "",
                f"{len(t.of_kind('cpu', k))} CPUs", 7)
        svg.box(x + 3, y + 44, tw - 6, 12, "#fdd0a2", "NIC" if tw > 24 else "",
                f"{len(t.nics(k))} NICs", 7)
        svg.text(x + tw / 2, y + 70, str(k) if tw > 12 else "", 8, "middle")
    return y + 80


def fabric_section(t: Topology, heat: tuple[str, int] | None = ("all_reduce", 2**30)) -> str:
    """The report's HTML for one system's fabric (empty for a single server)."""
    if not (t.meta.get("fabric") or t.meta.get("supernode")):
        return ""
    return f"<h3>Fabric</h3>{fabric_svg(t, heat)}"


__all__ = ["fabric_svg", "fabric_section", "link_utilisation", "heat_color", "GPU"]

"""The training section of ``gpufabric compare``: data-parallel scaling on the archetypes.

The seed's question -- does this job need NVLink / NVSwitch / 8 NICs, or is PCIe with RoCE
enough? -- answered with the training-step model: BERT-Large and a 7B and a 70B LLM trained
data-parallel (ZeRO-1; FSDP for 70B) from 8 to 256 GPUs on each archetype, as scaling
efficiency (throughput per GPU against the same archetype's 8-GPU figure) and as the step-time
breakdown at the largest size.

Examples
--------
>>> d = scaling(archetypes={"NVSwitch, 8x IB NDR": ARCHETYPES["NVSwitch, 8x IB NDR"]},
...             models=("bert-large",), gpus=(8, 16))
>>> row = d["rows"][0]
>>> row["model"], row["gpus"], row["scaling_efficiency"] == 1.0
('bert-large', 8, True)
"""

from __future__ import annotations

import html
from typing import Any

from gpufabric.errors import InputError

#: node archetypes (8 GPUs a node); the fabric is what differs
ARCHETYPES: dict[str, str] = {
    "PCIe box, 2x RoCE 100": "gpu=H100-PCIe,gpus_per_node=8,scale_up=pcie,nic=roce-100,"
                             "nics_per_node=2",
    "NVLink pairs, 2x RoCE 200": "gpu=H100-PCIe,gpus_per_node=8,scale_up=nvlink-bridge,"
                                 "nic=roce-200,nics_per_node=2",
    "NVSwitch, 4x RoCE 200": "gpu=H100-SXM,gpus_per_node=8,nic=roce-200,nics_per_node=4",
    "NVSwitch, 8x RoCE 400": "gpu=H100-SXM,gpus_per_node=8,nic=roce-400,nics_per_node=8",
    "NVSwitch, 4x IB NDR": "gpu=H100-SXM,gpus_per_node=8,nic=ib-ndr,nics_per_node=4",
    "NVSwitch, 8x IB NDR": "gpu=H100-SXM,gpus_per_node=8,nic=ib-ndr,nics_per_node=8",
    "NVSwitch, 8x IB NDR, 2:1 oversubscribed": "gpu=H100-SXM,gpus_per_node=8,nic=ib-ndr,"
                                               "nics_per_node=8,fabric={oversubscription: 2}",
}
#: model -> (micro-batch, sequence length, precision, recompute, zero stage)
MODELS: dict[str, tuple[int, int, str, str, int]] = {
    "bert-large": (32, 512, "fp16", "none", 0),
    "llama2-7b": (1, 4096, "bf16", "selective", 1),
    "llama2-70b": (1, 4096, "bf16", "full", 3),
}
GPUS = (8, 16, 32, 64, 128, 256)


def _system(spec: str, nodes: int) -> str:
    if "fabric=" in spec:
        head, fab = spec.split(",fabric=")
        return f"{head},nodes={nodes},fabric={fab}"
    return f"{spec},nodes={nodes}"


def _load(spec: str, nodes: int) -> Any:
    from gpufabric.collectives import Model
    from gpufabric.topology.build import from_spec, parse_inline
    d = parse_inline(_system(spec, nodes).replace(",fabric={oversubscription: 2}", ""))
    if "oversubscription" in spec:
        d["fabric"] = {"oversubscription": 2.0}
    return from_spec(d, materialize_nodes=Model.SAMPLE_NODES)


def scaling(archetypes: dict[str, str] | None = None,
            models: tuple[str, ...] = tuple(MODELS), gpus: tuple[int, ...] = GPUS
            ) -> dict[str, Any]:
    """Rows of {archetype, model, gpus, tokens_per_s_per_gpu, scaling_efficiency,
    step_time_s, breakdown_s, fits, bottleneck} (plain data for JSON, tables and charts)."""
    from gpufabric.workloads.parallel import Parallel
    from gpufabric.workloads.training import predict_step
    arch = ARCHETYPES if archetypes is None else archetypes
    rows: list[dict[str, Any]] = []
    topos: dict[tuple[str, int], Any] = {}
    for name, spec in arch.items():
        for model in models:
            mb, seq, prec, rc, zero = MODELS[model]
            base = None
            for n in gpus:
                key = (spec, max(1, n // 8))
                if key not in topos:
                    topos[key] = _load(*key)
                topo = topos[key]
                par = Parallel(dp=n, micro_batch=mb, global_batch=n * mb, recompute=rc,
                               zero=zero)
                try:
                    r = predict_step(model, topo, par, seq, precision=prec)
                except InputError as exc:
                    rows.append({"archetype": name, "model": model, "gpus": n, "fits": False,
                                 "note": str(exc)})
                    continue
                row = {"archetype": name, "model": model, "gpus": n, "fits": r.fits,
                       "tokens_per_s_per_gpu": round(r.tokens_per_s_per_gpu, 2),
                       "step_time_s": round(r.step_time_s, 5),
                       "breakdown_s": {k: round(v, 5) for k, v in r.breakdown_s.items()},
                       "bottleneck": r.bottleneck, "memory_GiB_per_gpu": r.memory_GiB_per_gpu}
                if r.fits and base is None:
                    base = r.tokens_per_s_per_gpu
                row["scaling_efficiency"] = (round(r.tokens_per_s_per_gpu / base, 4)
                                             if r.fits and base else None)
                rows.append(row)
    return {"models": {m: dict(zip(("micro_batch", "seq_len", "precision", "recompute",
                                    "zero"), MODELS[m], strict=True)) for m in models},
            "gpus": list(gpus), "archetypes": dict(arch), "rows": rows}


def table_rows(data: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(archetype, model, efficiency at the largest size, bottleneck) for the terminal."""
    out = []
    big = max(data["gpus"])
    for r in data["rows"]:
        if r["gpus"] == big:
            eff = r.get("scaling_efficiency")
            out.append((r["archetype"], r["model"],
                        "does not fit" if not r.get("fits") else f"{eff:.0%}",
                        r.get("bottleneck", r.get("note", ""))))
    return out


def table(data: dict[str, Any]) -> Any:
    """A rich table of :func:`table_rows`."""
    from rich.table import Table
    tb = Table(title=f"Data-parallel training at {max(data['gpus'])} GPUs: scaling efficiency "
               f"against 8 GPUs", box=None)
    for col in ("archetype", "model", "efficiency", "bottleneck"):
        tb.add_column(col, no_wrap=col != "bottleneck")
    for r in table_rows(data):
        tb.add_row(*r)
    return tb


_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2"]
_PARTS = {"compute": "#76b900", "dp_comm": "#d62728", "zero3_gather": "#ff7f0e",
          "optimizer": "#7f7f7f", "tp_comm": "#1f77b4", "pp_comm": "#9467bd",
          "pipeline_bubble": "#bbbbbb", "cp_comm": "#17becf", "ep_comm": "#e377c2"}


def _e(x: Any) -> str:
    return html.escape(str(x))


def efficiency_chart(data: dict[str, Any], model: str, width: int = 900,
                     height: int = 320) -> str:
    """SVG: scaling efficiency (0..1) against GPUs (log2), one line per archetype."""
    gpus = data["gpus"]
    L, R, T, B = 50, 300, 20, 40
    lo, hi = min(gpus), max(gpus)
    import math
    X = lambda g: L + (math.log2(g) - math.log2(lo)) / max(1e-9, math.log2(hi / lo)) \
        * (width - L - R)  # noqa: E731
    Y = lambda v: T + (1 - v) * (height - T - B)  # noqa: E731
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'role="img" aria-label="{_e(model)} scaling efficiency">']
    for v in (0, 0.25, 0.5, 0.75, 1.0):
        parts.append(f'<line x1="{L}" x2="{width - R}" y1="{Y(v):.1f}" y2="{Y(v):.1f}" '
                     f'stroke="#eee"/><text x="{L - 6}" y="{Y(v) + 4:.1f}" font-size="11" '
                     f'text-anchor="end">{v:.0%}</text>')
    for g in gpus:
        parts.append(f'<text x="{X(g):.1f}" y="{height - B + 16}" font-size="11" '
                     f'text-anchor="middle">{g}</text>')
    parts.append(f'<text x="{(L + width - R) / 2}" y="{height - 6}" font-size="12" '
                 'text-anchor="middle">GPUs (data parallel)</text>')
    for i, arch in enumerate(data["archetypes"]):
        pts = [r for r in data["rows"] if r["archetype"] == arch and r["model"] == model
               and r.get("scaling_efficiency") is not None]
        if not pts:
            continue
        c = _COLORS[i % len(_COLORS)]
        d = " ".join(f"{'M' if j == 0 else 'L'}{X(p['gpus']):.1f},"
                     f"{Y(min(p['scaling_efficiency'], 1.05)):.1f}" for j, p in enumerate(pts))
        parts.append(f'<path d="{d}" fill="none" stroke="{c}" stroke-width="2">'
                     f'<title>{_e(arch)}</title></path>')
        parts.append(f'<text x="{width - R + 8}" y="{T + 14 * i + 10}" font-size="11" '
                     f'fill="{c}">&#9644; {_e(arch)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def breakdown_bars(data: dict[str, Any], model: str, width: int = 900) -> str:
    """SVG: stacked bars of the step-time breakdown (fractions) at the largest size."""
    big = max(data["gpus"])
    rows = [r for r in data["rows"] if r["model"] == model and r["gpus"] == big
            and r.get("breakdown_s")]
    bar_h, L = 18, 300
    height = 30 + len(rows) * (bar_h + 6) + 24
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'role="img" aria-label="{_e(model)} step breakdown at {big} GPUs">']
    for i, r in enumerate(rows):
        y = 10 + i * (bar_h + 6)
        tot = sum(r["breakdown_s"].values()) or 1.0
        x = float(L)
        parts.append(f'<text x="{L - 6}" y="{y + 13}" font-size="11" text-anchor="end">'
                     f'{_e(r["archetype"])}</text>')
        for k, v in r["breakdown_s"].items():
            w = v / tot * (width - L - 20)
            if w <= 0:
                continue
            parts.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{bar_h}" '
                         f'fill="{_PARTS.get(k, "#999")}"><title>{_e(k)}: {v:.4g} s '
                         f'({v / tot:.0%})</title></rect>')
            x += w
    ly = 14 + len(rows) * (bar_h + 6)
    for j, (k, c) in enumerate(_PARTS.items()):
        parts.append(f'<text x="{L + j * 95}" y="{ly + 12}" font-size="11" fill="{c}">'
                     f'&#9632; {_e(k)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def section_html(data: dict[str, Any]) -> str:
    """The report's training section: per model, the efficiency curves and breakdown bars."""
    out = ["<section><h2>Training: data-parallel scaling on each archetype</h2>",
           "<p class='d'>Throughput per GPU against the same archetype's 8-GPU figure (weak "
           "scaling, one micro-batch per GPU per step), predicted by the training-step model; "
           "bars: where the step goes at the largest size.</p>"]
    for model, cfg in data["models"].items():
        out.append(f"<h3>{_e(model)} (micro-batch {cfg['micro_batch']}, seq {cfg['seq_len']}, "
                   f"{_e(cfg['precision'])}, ZeRO {cfg['zero']})</h3>")
        out.append(efficiency_chart(data, model))
        out.append(breakdown_bars(data, model))
    out.append("</section>")
    return "".join(out)


__all__ = ["ARCHETYPES", "MODELS", "GPUS", "scaling", "table_rows", "section_html",
           "efficiency_chart", "breakdown_bars"]

"""The inference section of ``gpufabric compare --inference``: serving a model on one system.

Four figures from the serving model: latency CDFs (TTFT, TPOT) at one load, output throughput
and p90 latencies against the request rate, KV cache use over time, and the supernode against
8-GPU servers at equal GPU count (tokens per second per GPU within one SLO, with the reason).

Examples
--------
>>> d = section(rates=(2.0, 4.0), requests=60, versus=False)
>>> [round(p["rate"]) for p in d["sweep"]], len(d["cdf"]["ttft_ms"]) > 10
([2, 4], True)
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

import numpy as np

from gpufabric.topology.build import from_spec, load
from gpufabric.workloads.inference.serve import (ServeConfig, build_requests, scheduler_config,
                                                 step_model)
from gpufabric.workloads.inference.simulator import simulate, summarize
from gpufabric.workloads.inference.supernode import supernode_vs_servers, versus_layouts

SYSTEM = "gpu=H100-SXM,gpus_per_node=8"
MODEL = "llama3-8b"
#: The models, GPU count and systems of the supernode-against-servers table.
VERSUS_MODELS = ("llama3-70b", "deepseek-v3")
VERSUS_GPUS = 16


def section(model: str = MODEL, system: str = SYSTEM, rates=(4.0, 8.0, 16.0, 24.0, 32.0),
            requests: int = 600, isl: int = 1000, osl: int = 200, versus: bool = True,
            progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """The section's data (plain, JSON-ready).

    ``progress(n, total)`` is told as each request rate, then each layout of the supernode
    comparison, is done (see :func:`gpufabric.sweep.run`).
    """
    topo = load(system)
    total = len(rates)
    if versus:
        sup = load("gb200-nvl72")
        srv = from_spec({"gpu": "B200", "gpus_per_node": 8, "nodes": 2, "nic": "ib-ndr"})
        total += sum(len(a) + len(b) for a, b in
                     (versus_layouts(m, srv, VERSUS_GPUS) for m in VERSUS_MODELS))

    def tell(n: int, _: int) -> None:
        if progress:
            progress(n, total)
    cfg = ServeConfig(tp=1, replicas=1, precision="fp8", isl=isl, osl=osl, requests=requests,
                      slo_ttft_ms=500, slo_tpot_ms=25)
    sm = step_model(model, topo, cfg)
    sched = scheduler_config(sm, cfg)
    sweep, cdf, kv = [], {}, {}
    for i, rate in enumerate(rates):
        cfg.rate = rate
        res = simulate(build_requests(cfg, 1), sm, sched)
        s = summarize(res, slo_ttft_ms=cfg.slo_ttft_ms, slo_tpot_ms=cfg.slo_tpot_ms)
        sweep.append({"rate": rate, "tokens_per_s": s["throughput_tokens_per_s"],
                      "ttft_ms_p90": s["ttft_ms"]["p90"], "tpot_ms_p90": s["tpot_ms"]["p90"],
                      "slo_attainment": s["slo_attainment"]})
        if i == len(rates) // 2:
            ttft = np.sort((res.first_token - res.arrival) * 1e3)
            tpot = np.sort((res.finish - res.first_token) / np.maximum(res.osl - 1, 1) * 1e3)
            q = np.linspace(0, 1, min(100, ttft.size))
            cdf = {"rate": rate, "q": q.round(3).tolist(),
                   "ttft_ms": np.quantile(ttft, q).round(2).tolist(),
                   "tpot_ms": np.quantile(tpot, q).round(3).tolist()}
            kv = {"rate": rate, "t_s": s["kv_cache"]["t_s"], "use": s["kv_cache"]["use"]}
        tell(1, total)
    out: dict[str, Any] = {"model": model, "system": topo.name, "precision": "fp8",
                           "isl": isl, "osl": osl, "sweep": sweep, "cdf": cdf, "kv": kv}
    if versus:
        vcfg = ServeConfig(precision="fp8", requests=200, isl=1000, osl=200,
                           slo_ttft_ms=2000, slo_tpot_ms=60)
        out["versus"] = [supernode_vs_servers(m, sup, srv, vcfg, VERSUS_GPUS, duration_s=4.0,
                                              progress=tell)
                         for m in VERSUS_MODELS]
    return out


def _chart(series: dict[str, list[tuple[float, float]]], xlabel: str, ylabel: str,
           w: int = 520, h: int = 260) -> str:
    pts = [p for s in series.values() for p in s]
    if not pts:
        return ""
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y0, y1 = 0.0, max(p[1] for p in pts) or 1.0
    x1 = x1 if x1 > x0 else x0 + 1

    def sx(x):
        return 50 + (x - x0) / (x1 - x0) * (w - 70)

    def sy(y):
        return h - 35 - (y - y0) / (y1 - y0) * (h - 55)
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}'>",
             f"<line x1='50' y1='{h - 35}' x2='{w - 20}' y2='{h - 35}' stroke='#444'/>",
             f"<line x1='50' y1='20' x2='50' y2='{h - 35}' stroke='#444'/>",
             f"<text x='{w / 2}' y='{h - 8}' font-size='12' text-anchor='middle'>"
             f"{html.escape(xlabel)}</text>",
             f"<text x='12' y='{h / 2}' font-size='12' transform='rotate(-90 12 {h / 2})' "
             f"text-anchor='middle'>{html.escape(ylabel)}</text>",
             f"<text x='46' y='24' font-size='10' text-anchor='end'>{y1:.3g}</text>",
             f"<text x='{w - 20}' y='{h - 22}' font-size='10' text-anchor='end'>{x1:.3g}</text>"]
    for i, (name, s) in enumerate(series.items()):
        c = colors[i % len(colors)]
        d = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in s)
        parts.append(f"<polyline fill='none' stroke='{c}' stroke-width='2' points='{d}'/>")
        parts.append(f"<text x='{w - 130}' y='{30 + 14 * i}' font-size='11' fill='{c}'>"
                     f"{html.escape(name)}</text>")
    parts.append("</svg>")
    return "".join(parts)


def section_html(d: dict[str, Any]) -> str:
    """The section as HTML (inline SVG charts and a table)."""
    e = html.escape
    head = (f"<section><h2>Inference serving: {e(d['model'])} ({d['precision']}) on "
            f"{e(d['system'])}</h2><p class='d'>Continuous batching over a paged KV cache, "
            f"{d['isl']} input / {d['osl']} output tokens per request, one tensor-parallel-1 "
            "instance (gpufabric serve).</p>")
    c = d["cdf"]
    cdfs = _chart({"TTFT (ms)": list(zip(c["ttft_ms"], c["q"], strict=True))},
                  "TTFT (ms)", "fraction of requests") + \
        _chart({"TPOT (ms)": list(zip(c["tpot_ms"], c["q"], strict=True))},
               "TPOT (ms)", "fraction of requests")
    sw = d["sweep"]
    thr = _chart({"output tokens/s": [(p["rate"], p["tokens_per_s"]) for p in sw]},
                 "requests/s", "output tokens/s")
    lat = _chart({"TTFT p90 (ms)": [(p["rate"], p["ttft_ms_p90"]) for p in sw],
                  "TPOT p90 x10 (ms)": [(p["rate"], 10 * p["tpot_ms_p90"]) for p in sw]},
                 "requests/s", "ms")
    kv = _chart({"KV cache use": list(zip(d["kv"]["t_s"], d["kv"]["use"], strict=True))},
                "time (s)", "fraction of blocks")
    body = [head, f"<h3>Latency CDFs at {c['rate']:g} requests/s</h3>{cdfs}",
            f"<h3>Throughput and latency against the request rate</h3>{thr}{lat}",
            f"<h3>KV cache use over time at {d['kv']['rate']:g} requests/s</h3>{kv}"]
    if d.get("versus"):
        rows = "".join(
            f"<tr><td>{e(v['model'])}</td><td>{e(v['supernode']['system'])}: "
            f"{e(v['supernode']['layout'])}</td><td>{v['supernode']['tokens_per_s_per_gpu']:.0f}"
            f"</td><td>{e(v['servers']['system'])}: {e(v['servers']['layout'])}</td>"
            f"<td>{v['servers']['tokens_per_s_per_gpu']:.0f}</td><td>{v['ratio']:.2f}</td>"
            f"<td>{e(v['reason'])}</td></tr>" for v in d["versus"])
        v0 = d["versus"][0]
        body.append(f"<h3>Supernode against 8-GPU servers, {v0['gpus']} GPUs each, SLO TTFT "
                    f"{v0['slo']['ttft_ms']:g} ms / TPOT {v0['slo']['tpot_ms']:g} ms</h3>"
                    "<table><tr><th>model</th><th>supernode (best layout)</th>"
                    "<th>tok/s/GPU</th><th>servers (best layout)</th><th>tok/s/GPU</th>"
                    f"<th>ratio</th><th>why</th></tr>{rows}</table>")
    body.append("</section>")
    return "".join(body)

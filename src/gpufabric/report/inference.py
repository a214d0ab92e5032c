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

from gpufabric import catalog
from gpufabric.report import charts
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
    g = catalog.gpu(topo.gpus()[0].model)
    precision = "fp8" if g.fp8_tflops else "bf16" if g.bf16_tflops else "fp16"
    cfg = ServeConfig(tp=1, replicas=1, precision=precision, isl=isl, osl=osl, requests=requests,
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
    out: dict[str, Any] = {"model": model, "system": topo.name, "precision": precision,
                           "isl": isl, "osl": osl, "sweep": sweep, "cdf": cdf, "kv": kv}
    if versus:
        vcfg = ServeConfig(precision="fp8", requests=200, isl=1000, osl=200,
                           slo_ttft_ms=2000, slo_tpot_ms=60)
        out["versus"] = [supernode_vs_servers(m, sup, srv, vcfg, VERSUS_GPUS, duration_s=4.0,
                                              progress=tell)
                         for m in VERSUS_MODELS]
    return out


def section_html(d: dict[str, Any]) -> str:
    """The section as HTML (plotly charts and a table)."""
    e = html.escape
    head = (f"<section><h2>Inference serving: {e(d['model'])} ({d['precision']}) on "
            f"{e(d['system'])}</h2><p class='d'>Continuous batching over a paged KV cache, "
            f"{d['isl']} input / {d['osl']} output tokens per request, one tensor-parallel-1 "
            "instance (gpufabric serve).</p>")
    c = d["cdf"]
    A = charts.Axis
    cdf = charts.figure_div(charts.lines(
        {"TTFT": list(zip(c["ttft_ms"], c["q"], strict=True)),
         "TPOT": list(zip(c["tpot_ms"], c["q"], strict=True))},
        A("latency (ms, log)", log=True), A("fraction of requests", fmt=".0%"),
        title=f"Latency CDFs at {c['rate']:g} requests/s",
        hover="<b>%{fullData.name}</b><br>%{x:.3g} ms: %{y:.0%} of requests<extra></extra>"))
    sw = d["sweep"]
    thr = charts.figure_div(charts.lines(
        {"output tokens/s": [(p["rate"], p["tokens_per_s"]) for p in sw]},
        A("requests/s"), A("output tokens/s"),
        title="Output throughput against the request rate"))
    lat = charts.figure_div(charts.lines(
        {"TTFT p90": [(p["rate"], p["ttft_ms_p90"]) for p in sw],
         "TPOT p90": [(p["rate"], p["tpot_ms_p90"]) for p in sw]},
        A("requests/s"), A("latency (ms, log)", log=True),
        title="p90 latencies against the request rate"))
    kv = charts.figure_div(charts.lines(
        {"KV cache use": list(zip(d["kv"]["t_s"], d["kv"]["use"], strict=True))},
        A("time (s)"), A("share of KV blocks in use", fmt=".0%"),
        title=f"KV cache use over time at {d['kv']['rate']:g} requests/s"))
    body = [head, cdf, thr, lat, kv]
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

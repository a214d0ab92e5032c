"""The seeds' comparison: inference throughput per GPU of a supernode against 8-GPU servers.

At an equal GPU count and the same SLO, each system gets its best layout: for every candidate
layout the highest request rate whose requests meet the TTFT and TPOT targets (at least
``attainment`` of them) is found by doubling then bisection, and the layout with the most
output tokens per second per GPU at that rate wins. The ratio of the two winners, with the
step-time breakdown of each, says how much the NVLink domain buys and why.

Examples
--------
>>> from gpufabric.topology.build import from_spec
>>> one = from_spec({"gpu": "H100-SXM", "gpus_per_node": 8})
>>> r = best_under_slo("llama3-8b", one, ServeConfig(requests=120, isl=1000, osl=100,
...                    slo_ttft_ms=500, slo_tpot_ms=30), [{"tp": 1}], gpus=1)
>>> r["layout"], r["rate"] > 1
('tp1', True)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, replace
from typing import Any

from gpufabric.errors import InputError
from gpufabric.topology.model import Topology
from gpufabric.workloads.inference.itertime import ServeLayout, StepModel
from gpufabric.workloads.inference.serve import (ServeConfig, check_config, serve, step_model,
                                                 with_client)
from gpufabric.workloads.models import load_model


def _name(lay: dict) -> str:
    parts = [f"tp{lay['tp']}"]
    if lay.get("ep", 1) > 1:
        parts.append(f"ep{lay['ep']}")
    if lay.get("dp_attention", 1) > 1:
        parts.append(f"dpa{lay['dp_attention']}")
    return " ".join(parts)


def highest_passing(ok: Callable[[float], tuple[bool, Any]], start: float, steps: int = 5
                    ) -> tuple[float, Any]:
    """The highest rate at which ``ok(rate) -> (passes, run)`` passes, and that run: the rate
    doubles from ``start`` until it fails (or passes 1e5), then ``steps`` bisections."""
    lo, best, hi = 0.0, None, start
    while hi <= 1e5:
        good, r = ok(hi)
        if not good:
            break
        lo, best, hi = hi, r, hi * 2
    for _ in range(steps):
        mid = (lo + hi) / 2
        good, r = ok(mid)
        if good:
            lo, best = mid, r
        else:
            hi = mid
    return lo, best


def highest_rate(model: Any, topo: Topology, cfg: ServeConfig,
                 passes: Callable[[dict], bool], requests: Callable[[float], int | None], *,
                 start: float, steps: int = 5, sm: StepModel | None = None,
                 stop_below: float | None = None) -> tuple[float, dict | None]:
    """The highest rate at which a run of ``cfg`` (``requests(rate)`` requests) ``passes``
    and stays below the deployment's capacity, and that run (:func:`highest_passing` from
    ``start``). The step model is built once (``sm`` where the caller built it): the rate and
    the request count do not enter it. ``stop_below``: as :func:`serve` takes it."""
    sm_: list[StepModel] = [] if sm is None else [sm]     # built once

    def ok(rate: float) -> tuple[bool, dict]:
        c = replace(cfg, rate=rate, requests=requests(rate))
        if not sm_:
            check_config(c)
            sm_.append(step_model(model, topo, with_client(c, 1, model, topo)))
        r = serve(model, topo, c, sm=sm_[0], stop_below=stop_below)
        return passes(r) and not r.get("overloaded"), r
    return highest_passing(ok, start, steps)


def max_rate(model: str, topo: Topology, cfg: ServeConfig, *, attainment: float = 0.9,
             steps: int = 5, duration_s: float = 30.0, sm: StepModel | None = None
             ) -> tuple[float, dict | None]:
    """The highest deployment rate (requests/s) at which ``attainment`` of the requests meet
    the SLO, below the deployment's capacity, and the run at that rate. Each run offers at
    least ``duration_s`` seconds of arrivals (and ``cfg.requests`` requests), so queues have
    time to build; a rate above capacity fails however its short run went (its queue grows
    without bound). ``sm``: :func:`step_model` of ``cfg`` on ``topo`` where the caller built
    it (the rate does not enter it). A run that falls short is stopped once it must (its
    figures are not kept)."""
    return highest_rate(model, topo, cfg, lambda r: r["slo_attainment"] >= attainment,
                        lambda rate: max(cfg.requests or 0, int(rate * duration_s)),
                        start=max(0.05, 0.02 * len(topo.gpus())), steps=steps, sm=sm,
                        stop_below=attainment)


def _layout_row(model: str, topo: Topology, cfg: ServeConfig, lay: dict, gpus: int,
                duration_s: float) -> dict[str, Any] | None:
    """One layout's best rate within the SLO and its figures, the reason it has none, or
    None for a layout wider than ``gpus``."""
    full = {"tp": 1, "ep": 1, "dp_attention": 1, **lay}
    if full["tp"] > gpus:
        return None
    # as many instances as fit; per-GPU figures count all ``gpus``, idle ones included
    c = replace(cfg, tp=full["tp"], ep=full["ep"], dp_attention=full["dp_attention"],
                replicas=gpus // full["tp"])
    try:
        rate, r = max_rate(model, topo, c, duration_s=duration_s)
    except InputError as exc:
        return {"layout": _name(full), "error": str(exc)}
    if r is None:
        return {"layout": _name(full), "error": "the SLO is not met at any rate"}
    return {"layout": _name(full), "rate": rate, "gpus_used": r["gpus"],
            "tokens_per_s_per_gpu": r["throughput_tokens_per_s"] / gpus,
            "ttft_ms_p90": r["ttft_ms"]["p90"], "tpot_ms_p90": r["tpot_ms"]["p90"],
            "breakdown_ms": r["breakdown_ms"], "bottleneck": r["bottleneck"]}


def best_under_slo(model: str, topo: Topology, cfg: ServeConfig, layouts: list[dict],
                   gpus: int, duration_s: float = 30.0,
                   progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """The layout of ``gpus`` GPUs with the most output tokens/s per GPU within the SLO.

    ``progress(n, total)`` is told as each layout is done (see :func:`gpufabric.sweep.run`).
    """
    rows: list[dict[str, Any]] = []
    for lay in layouts:
        row = _layout_row(model, topo, cfg, lay, gpus, duration_s)
        if row is not None:
            rows.append(row)
        if progress:
            progress(1, len(layouts))
    ok = [x for x in rows if "error" not in x]
    if not ok:
        if rows and all("does not fit" in x["error"] for x in rows):
            raise InputError(f"{model} in {cfg.precision} fits no layout of {gpus} GPUs of "
                             f"{topo.name} ({', '.join(x['layout'] for x in rows)}); "
                             + fit_hint(model, topo, cfg, gpus), field="--precision")
        raise InputError(f"no layout of {model} on {gpus} GPUs of {topo.name} meets the SLO: "
                         + "; ".join(f"{x['layout']}: {x['error']}" for x in rows),
                         field="--slo-ttft/--slo-tpot")
    best = max(ok, key=lambda x: x["tokens_per_s_per_gpu"])
    return {**best, "system": topo.name, "gpus": gpus, "tried": rows}


def fit_hint(model: str, topo: Topology, cfg: ServeConfig, gpus: int) -> str:
    """Which precision, or which expert/tensor-parallel width, would fit ``model``: the
    narrowest width of each smaller precision whose weights leave room for a KV cache."""
    from gpufabric.workloads.inference.itertime import DTYPES, StepModel
    m = load_model(model)
    out = []
    for prec in [cfg.precision] + [p for p in DTYPES if p not in ("fp16", "bf16", cfg.precision)]:
        for w in (1, 2, 4, 8, 16, 32, 64, 128):
            if w > gpus or (m.is_moe and (w < 8 or m.experts % w)) or m.heads % w:
                continue
            lay = ServeLayout(tp=w, ep=w if m.is_moe else 1, dp_attention=w if m.is_moe else 1)
            try:
                StepModel(m, topo, lay, precision=prec, kv_dtype=cfg.kv_dtype,
                          engine=cfg.engine, max_tokens=256)
            except InputError:
                continue
            out.append(f"{prec} from {_name(asdict(lay))}")
            break
    if not out:
        return "no precision fits it on these GPUs"
    return "it would fit in " + ", ".join(out) + " (--precision, or more GPUs)"


def default_layouts(model: str, per_node_servers: int, gpus: int) -> tuple[list, list]:
    """Candidate layouts: TP for dense models (inside a server; across the supernode too), and
    attention-DP with expert parallelism for MoE models (inside a server, or wider, up to the
    GPU count: a layout that does not divide it runs as many instances as fit)."""
    m = load_model(model)
    widths = [w for w in (1, 2, 4, 8, 16, 32, 64, 128) if w <= gpus]
    if m.is_moe:
        eps = [w for w in widths if w >= 8 and m.experts % w == 0]
        lay = [{"tp": w, "ep": w, "dp_attention": w} for w in eps]
        return lay, lay
    tps = [w for w in widths if m.heads % w == 0]
    return [{"tp": w} for w in tps], [{"tp": w} for w in tps if w <= per_node_servers]


def versus_layouts(model: str, servers: Topology, gpus: int) -> tuple[list, list]:
    """The candidate layouts :func:`supernode_vs_servers` tries on the supernode and on the
    servers (:func:`default_layouts` for the servers' GPUs per node)."""
    per_node = len([g for g in servers.gpus() if g.node == servers.gpus()[0].node])
    return default_layouts(model, per_node, gpus)


def supernode_vs_servers(model: str, supernode: Topology, servers: Topology, cfg: ServeConfig,
                         gpus: int, duration_s: float = 30.0,
                         progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Throughput per GPU within the SLO, supernode against servers, with the reason.

    ``progress(n, total)`` is told as each layout of either system is done: one count over
    both systems' layouts."""
    lay_sup, lay_srv = versus_layouts(model, servers, gpus)
    total = len(lay_sup) + len(lay_srv)

    def tell(n: int, _: int) -> None:
        if progress:
            progress(n, total)
    a = best_under_slo(model, supernode, cfg, lay_sup, gpus, duration_s, tell)
    b = best_under_slo(model, servers, cfg, lay_srv, gpus, duration_s, tell)
    ratio = a["tokens_per_s_per_gpu"] / b["tokens_per_s_per_gpu"]
    return {"model": model, "gpus": gpus, "slo": {"ttft_ms": cfg.slo_ttft_ms,
                                                  "tpot_ms": cfg.slo_tpot_ms},
            "isl": cfg.isl, "osl": cfg.osl, "supernode": a, "servers": b, "ratio": ratio,
            "reason": reason(a | {"domain": domain(supernode)}, b | {"domain": domain(servers)},
                             ratio) + _gpu_note(supernode, servers, cfg.precision)}


def domain(topo: Topology) -> int:
    """GPUs in one NVLink domain of ``topo`` (a server's GPUs where it has no larger one)."""
    d = topo.meta.get("nvlink_domain")
    if d:
        return int(d)
    gpus = topo.gpus()
    return len([g for g in gpus if g.node == gpus[0].node])


def _named(r: dict) -> str:
    """A system as the comparison names it: ``gb200-nvl72 (72-GPU NVLink domains)``."""
    d = r.get("domain")
    return f"{r['system']} ({d}-GPU NVLink domains)" if d else str(r["system"])


def _gpu_note(a: Topology, b: Topology, precision: str) -> str:
    ga, gb = a.gpus()[0].model, b.gpus()[0].model
    if ga == gb:
        return ""
    from gpufabric.workloads.compute import gpu_spec
    sa, sb = gpu_spec(ga), gpu_spec(gb)
    p = "fp8" if sa.tflops.get("fp8") and sb.tflops.get("fp8") else "bf16"
    return (f" (the GPUs differ: {ga} has {sa.tflops[p] / sb.tflops[p]:.2f}x the {p} FLOPs and "
            f"{sa.hbm_GBps / sb.hbm_GBps:.2f}x the HBM bandwidth of {gb})")


def reason(a: dict, b: dict, ratio: float) -> str:
    """Why the two differ, from their step-time breakdowns, each system named by its name
    and NVLink domain (``domain`` in ``a`` and ``b``, where known).

    When the first system's best layout is wider than the second's best, the second's own
    run of that wide layout shows what the network costs it."""
    ba, bb = a["breakdown_ms"], b["breakdown_ms"]
    na, nb = _named(a), _named(b)
    if abs(ratio - 1) < 0.08:
        inside = (f"one {b['domain']}-GPU NVLink domain" if b.get("domain")
                  else "one NVLink domain")
        return (f"about equal ({ratio:.2f}x): the best layout on {nb} ({b['layout']}) "
                f"keeps its communication inside {inside}, so the larger NVLink domain of "
                f"{a['system']} has nothing to speed up; both are bound by "
                f"{b['bottleneck'].split(':')[0]}")
    if ratio < 1:
        return (f"{nb} serves {1 / ratio:.2f}x the tokens per GPU: the best layout of {na} "
                f"({a['layout']}) gains nothing from its NVLink domain here")

    def parts(bd: dict) -> str:
        return (f"{bd['gemm_compute']:.1f} ms GEMM compute, {bd['weight_read']:.1f} ms weight "
                f"reads, {bd['attention']:.1f} ms attention, "
                f"{bd['tp_comm'] + bd['ep_comm']:.1f} ms communication")
    text = (f"{na} serves {ratio:.2f}x the tokens per GPU of {nb} within the SLO. Per step, "
            f"its best layout ({a['layout']}) spends {parts(ba)} (over NVLink); the best of "
            f"{b['system']} ({b['layout']}) spends {parts(bb)}")
    wide = next((x for x in b["tried"] if x.get("layout") == a["layout"] and "error" not in x),
                None)
    if wide is not None and a["layout"] != b["layout"]:
        bw = wide["breakdown_ms"]
        text += (f". {b['system']} cannot go as wide: {a['layout']} on it spends "
                 f"{bw['tp_comm'] + bw['ep_comm']:.1f} ms per step communicating over the "
                 f"network and reaches {wide['tokens_per_s_per_gpu']:.0f} tokens/s per GPU. A "
                 "wider NVLink domain spreads the experts over more GPUs, so each reads and "
                 "computes less per token and batches more requests within the TPOT target")
    return text

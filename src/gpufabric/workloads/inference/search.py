"""Search the serving configurations of a GPU budget for the most goodput per GPU.

Candidates: co-located deployments (tensor parallelism ``tp`` x ``replicas``) and disaggregated
``xPyD`` ones (``tp`` per instance), each using at most the system's GPUs. Each is simulated at
the offered request rate and scored by goodput per GPU (requests per second within the TTFT and
TPOT targets, divided by the GPUs it uses): the configuration that serves the load within the
SLO on the fewest GPUs ranks first. Candidates run through :func:`gpufabric.sweep.run`, in this
process or on Ray.

Examples
--------
>>> from gpufabric.topology.build import from_spec
>>> topo = from_spec({"gpu": "H100-SXM", "gpus_per_node": 8})
>>> res = search("llama3-8b", topo, ServeConfig(rate=4.0, requests=80, isl=1000, osl=100,
...              slo_ttft_ms=300, slo_tpot_ms=20), tps=(1, 2), max_pd=2)
>>> res["best"]["gpus"] <= 2, res["candidates"] > 4
(True, True)
"""

from __future__ import annotations

from dataclasses import asdict, replace
from collections.abc import Callable
from typing import Any

from gpufabric import sweep
from gpufabric.errors import InputError
from gpufabric.topology.build import load
from gpufabric.workloads.inference.pd import gpu_count, serve_pd
from gpufabric.workloads.inference.serve import ServeConfig, serve


def _powers(limit: int) -> list[int]:
    out, v = [], 1
    while v <= limit:
        out.append(v)
        v *= 2
    return out


def candidates(total: int, per_node: int, tps=(1, 2, 4, 8), max_pd: int = 8
               ) -> list[dict[str, Any]]:
    """Layouts to try on ``total`` GPUs: co-located ``tp x replicas`` and ``xPyD``.

    >>> [c["name"] for c in candidates(4, 4, tps=(2,), max_pd=2)]
    ['tp2 x1', 'tp2 x2', 'tp2 1P1D']
    """
    out: list[dict[str, Any]] = []
    for tp in tps:
        if tp > per_node or tp > total:
            continue
        n = total // tp
        for r in _powers(n):
            out.append({"name": f"tp{tp} x{r}", "tp": tp, "replicas": r, "pd": None})
        ks = [k for k in _powers(max_pd) if k < n]
        for x in ks:
            for y in ks:
                if x + y <= n:
                    out.append({"name": f"tp{tp} {x}P{y}D", "tp": tp, "replicas": None,
                                "pd": (x, y)})
    return out


def _evaluate(item: tuple[str, str, dict, dict, str | None]) -> dict[str, Any]:
    model, system, cfg_d, cand, decode_system = item
    cfg = ServeConfig(**cfg_d)
    cfg = replace(cfg, tp=cand["tp"], replicas=cand["replicas"])
    row: dict[str, Any] = {"name": cand["name"], "tp": cand["tp"], "pd": cand["pd"]}
    try:
        topo = load(system)
        if cand["pd"]:
            dt = load(decode_system) if decode_system else None
            r = serve_pd(model, topo, cfg, cand["pd"], dt)
        else:
            r = serve(model, topo, cfg)
    except InputError as exc:
        row.update({"error": str(exc), "goodput_per_gpu": 0.0})
        return row
    row.update({"gpus": r["gpus"], "goodput_requests_per_s": r["goodput_requests_per_s"],
                "goodput_per_gpu": r["goodput_requests_per_s"] / r["gpus"],
                "slo_attainment": r["slo_attainment"],
                "throughput_tokens_per_s_per_gpu": r["throughput_tokens_per_s_per_gpu"],
                "ttft_ms_p90": r["ttft_ms"]["p90"], "tpot_ms_p90": r["tpot_ms"]["p90"],
                "bottleneck": r["bottleneck"], "note": r["workload"].get("note", "")})
    return row


def search(model: str, topo_or_name, cfg: ServeConfig, *, tps=(1, 2, 4, 8), max_pd: int = 8,
           decode_system: str | None = None, ray: bool = False,
           progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Rank co-located and disaggregated layouts by goodput per GPU at ``cfg``'s rate and SLO.

    ``progress(n, total)`` is told as layouts are simulated (see :func:`gpufabric.sweep.run`).

    ``topo_or_name``: a system name / spec string (needed to rebuild it in Ray workers) or a
    topology built from a spec.
    """
    if cfg.rate is None and not cfg.trace:
        raise InputError("the search needs an offered load: --rate or --trace", field="--rate")
    if cfg.slo_ttft_ms is None and cfg.slo_tpot_ms is None:
        raise InputError("the search needs an SLO: --slo-ttft and/or --slo-tpot",
                         field="--slo-ttft")
    if isinstance(topo_or_name, str):
        system = topo_or_name
        topo = load(system)
    else:
        topo = topo_or_name
        spec = topo.meta.get("spec")
        if not isinstance(spec, dict):
            raise InputError("search needs a system name or spec", field="SYSTEM")
        system = ",".join(f"{k}={v}" for k, v in spec.items()
                          if v is not None and not isinstance(v, dict))
    total, per_node = gpu_count(topo)
    cands = candidates(total, per_node, tps, max_pd)
    base = asdict(cfg)
    items = [(model, system, base, c, decode_system) for c in cands]
    rows = sweep.run(_evaluate, items, ray=ray, progress=progress)
    ok = [r for r in rows if "error" not in r]
    ok.sort(key=lambda r: (-r["goodput_per_gpu"], r["gpus"]))
    if not ok:
        raise InputError("no configuration fits: " + rows[0].get("error", ""), field="MODEL")
    best_co = next((r for r in ok if not r["pd"]), None)
    best_pd = next((r for r in ok if r["pd"]), None)
    return {"model": model, "system": topo.name, "candidates": len(rows), "ranked": ok,
            "refused": [r for r in rows if "error" in r], "best": ok[0],
            "best_colocated": best_co, "best_disaggregated": best_pd,
            "note": ok[0]["note"]}       # what a trace run used of the trace ("" if all)

"""AIConfigurator side by side: gpufabric and NVIDIA AIConfigurator on the public serving
points both express, each tool's median error per metric and its time per estimate.

The points are those of tests/data/calibration/inference.yaml that AIConfigurator 0.12 can
state: a model it ships a config for (Llama 3.1 8B / 70B / 405B and Llama 3.3 70B, which has
3.1 70B's shape; Mixtral 8x7B; Qwen3-235B-A22B; Llama 4 Maverick; DeepSeek-R1), a system its
database measured, a backend it models (TensorRT-LLM, vLLM, SGLang), one aggregated instance
layout (tp, pp, ep, attention DP) and a load it takes: a fixed concurrency or batch (closed
loop, single stream, static batch) or an offline run, given to it as the engine's batch
limit (the point's, else the engine profile's max_num_seqs) or, where that does not fit its
memory estimate, the largest halving of it that does. Its token budget per iteration
(ctx_tokens) is the point's max_num_tokens, else the engine profile's default for the GPU,
the budget gpufabric's simulator uses too.
Online points (Poisson arrivals), disaggregated ones and MTP are left out: its single-point
estimate does not take them. gpufabric runs each point as `gpufabric validate` does (the
same function), once with its own roofline (the default) and once with ``--kernel-times aic``
(the dense GEMMs and MoE experts read from the same measured kernel database AIConfigurator
reads, column ``gf+kernels``); AIConfigurator runs in this process through its Python API
(aiconfigurator.cli.api.cli_estimate), with its defaults for all that the point does not
state. Neither tool is fitted here, and none of the project's reserved independent-check results is
used.

Run in an environment with the extra (``pip install -e '.[aic]'``)::

    .venv/bin/python benchmarks/bench_aic_side_by_side.py [--quick] [--json FILE]

``--quick``: the first point of each entry. Without the package it says so and exits.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import math
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "calibration" / "inference.yaml"

#: gpufabric's model names and the AIConfigurator model config of the same shape
MODELS = {"llama3-8b": "meta-llama/Meta-Llama-3.1-8B",
          "llama3-70b": "meta-llama/Meta-Llama-3.1-70B",
          "llama3-405b": "meta-llama/Meta-Llama-3.1-405B",
          "mixtral-8x7b": "mistralai/Mixtral-8x7B-v0.1",
          "qwen3-235b-a22b": "Qwen/Qwen3-235B-A22B",
          "llama4-maverick": "meta-llama/Llama-4-Maverick-17B-128E-Instruct",
          "deepseek-v3": "deepseek-ai/DeepSeek-R1"}
#: gpufabric's engine profiles and AIConfigurator's backends
BACKENDS = {"tensorrt-llm": "trtllm", "tensorrt-llm-tensorrt": "trtllm", "vllm": "vllm",
            "sglang": "sglang"}
#: weight precision -> AIConfigurator's GEMM and MoE quantisation modes
QUANT = {"fp8": ("fp8", "fp8"), "fp4": ("nvfp4", "nvfp4"), "bf16": ("bfloat16", "bfloat16"),
         "fp16": ("bfloat16", "bfloat16")}
#: metrics compared: the file's key -> AIConfigurator's figure, and how it scales with the
#: instances of the point (per instance -> whole system)
METRICS = {"output_tokens_per_s": ("tokens/s", True), "total_tokens_per_s": ("total", True),
           "output_tokens_per_s_per_gpu": ("tokens/s/gpu", False),
           "output_tokens_per_s_per_user": ("tokens/s/user", False),
           "ttft_ms": ("ttft", False), "tpot_ms": ("tpot", False), "itl_ms": ("tpot", False),
           "latency_ms": ("request_latency", False), "requests_per_s": ("seq/s", True)}
LOADS = ("closed-loop", "single-stream", "static-batch", "offline")


def _quiet(fn, *a, **kw):
    """AIConfigurator's call with its banners and warnings kept off the output."""
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        return fn(*a, **kw)


def aic_point(kw: dict, offline: bool) -> tuple[dict | None, str, float, int]:
    """(figures, why none, seconds, estimates) of one AIConfigurator estimate; offline: at
    the batch limit or the largest halving of it that it finds fits."""
    from aiconfigurator.cli.api import cli_estimate
    t0 = time.perf_counter()
    b0 = kw.pop("batch_size")
    batches = [b0 >> i for i in range(b0.bit_length())] if offline else [b0]
    why, n = "", 0
    for b in batches:
        n += 1
        try:
            r = _quiet(cli_estimate, batch_size=b, **kw)
        except Exception as exc:      # noqa: BLE001  (its refusals: OOM, no data, ...)
            why = str(exc).splitlines()[0][:160]
            continue
        if offline and r.kv_cache_warning:
            why = "KV cache warning"
            continue
        g = r.get()
        g.update({"ttft": r.ttft, "tpot": r.tpot, "request_latency": r.request_latency,
                  "batch": b})
        return g, "", time.perf_counter() - t0, n
    return None, why, time.perf_counter() - t0, n


def aic_args(info: dict, e: dict, engine: str) -> tuple[dict | None, str]:
    """cli_estimate's arguments for a point gpufabric ran (None and why when it has none)."""
    from gpufabric.kerneldb.db import SYSTEMS
    system = {v: k for k, v in SYSTEMS.items()}.get(info["gpu"])
    model = MODELS.get(info["model"])
    backend = BACKENDS.get(engine)
    quant = QUANT.get(info["precision"])
    for what, v in (("system", system), ("model", model), ("backend", backend),
                    ("precision", quant)):
        if v is None:
            return None, f"no AIConfigurator {what} for {info.get(what, engine)}"
    assert quant is not None
    par = e.get("parallelism") or {}
    tp, ep = info["tp"], info["ep"]
    adp = tp if par.get("attention_dp") else 1
    kv = str((e.get("model") or {}).get("kv_cache_dtype") or
             ("fp8" if info["precision"] in ("fp8", "fp4") else "bf16")).lower()
    gemm, moe = quant
    if info["model"] == "deepseek-v3" and gemm == "fp8":
        gemm = moe = "fp8_block"         # DeepSeek-R1's FP8 checkpoint is block-scaled
    kw = {"model_path": model, "system_name": system, "backend_name": backend,
          "isl": max(1, round(info["isl"])), "osl": max(1, round(info["osl"])),
          "tp_size": tp // adp, "pp_size": info["pp"], "attention_dp_size": adp,
          "gemm_quant_mode": gemm, "moe_quant_mode": moe,
          "kvcache_quant_mode": "fp8" if kv.startswith("fp8") else "bfloat16"}
    if ep > 1 or adp > 1:
        kw.update(moe_ep_size=ep, moe_tp_size=tp // ep)
    from gpufabric.workloads.inference import engines as E
    prof = E.profile(engine)
    wl = e.get("workload") or {}
    kw["ctx_tokens"] = int(wl.get("max_num_tokens") or prof.batched_tokens(info["gpu"])[0])
    instances = max(1, info["gpus"] // (tp * info["pp"]))
    # AIConfigurator's batch is per attention-DP rank
    if info["mode"] in ("closed-loop", "single-stream"):
        c = info["concurrency"] or info["batch"] or 1
        kw["batch_size"] = max(1, round(c / instances / adp))
    elif info["mode"] == "static-batch":
        kw["batch_size"] = max(1, round(info["batch"] or 1))
    else:
        kw["batch_size"] = int(wl.get("max_batch_per_rank") or info["batch"]
                               or prof.max_num_seqs)
    return kw, ""


def points(quick: bool):
    """(entry, point index, point) of every serving point AIConfigurator might express."""
    from gpufabric.workloads.inference import validate as V
    for e in V.load_entries(str(DATA)):
        par, wl = e.get("parallelism") or {}, e.get("workload") or {}
        if par.get("pd") == "disaggregated" or par.get("mtp"):
            continue
        pts = e.get("points") or [{}]
        for j, pt in enumerate(pts[:1] if quick else pts):
            if {**wl, **pt}.get("mode") in LOADS and not pt.get("mtp"):
                yield e, j, pt


def run(quick: bool) -> dict:
    from gpufabric.kerneldb import timing
    from gpufabric.workloads.inference import validate as V
    rows, left = [], []
    for e, j, pt in points(quick):
        meas = {**(e.get("result") or {}), **pt}
        keys = [k for k in METRICS if k in V.METRICS and V._num(meas.get(k))]
        if not keys:
            continue
        t0 = time.perf_counter()
        try:
            r, info = V._run_point(e, pt)
        except Exception as exc:      # noqa: BLE001  (a Skip or a refused point)
            left.append((e["id"], j, f"gpufabric: {exc}"))
            continue
        gf_s = time.perf_counter() - t0
        with timing.use("aic"):
            r_k, _ = V._run_point(e, pt)
        engine = V.engine_key(V.entry_engine(e))
        kw, why = aic_args(info, e, engine)
        if kw is None:
            left.append((e["id"], j, why))
            continue
        aic, why, aic_s, n = aic_point(kw, info["mode"] == "offline")
        if aic is None:
            left.append((e["id"], j, f"AIConfigurator: {why}"))
            continue
        inst = max(1, info["gpus"] // (info["tp"] * info["pp"]))
        aic["total"] = aic["tokens/s"] * (kw["isl"] + kw["osl"]) / kw["osl"]
        for k in keys:
            gp = V._predicted(r, k, info["gpus"])
            gk = V._predicted(r_k, k, info["gpus"])
            key, whole = METRICS[k]
            ap = aic.get(key)
            if gp is None or gk is None or ap is None:
                continue
            ap = float(ap) * (inst if whole else 1)
            m = float(meas[k])
            rows.append({"id": e["id"], "point": j, "metric": k, "measured": m,
                         "gpufabric": gp, "gpufabric_kernels": gk, "aic": ap,
                         "gpufabric_err": gp / m - 1, "gpufabric_kernels_err": gk / m - 1,
                         "aic_err": ap / m - 1, "gpufabric_s": gf_s, "aic_s": aic_s,
                         "aic_estimates": n, "aic_batch": aic["batch"], "engine": engine,
                         "gpu": info["gpu"], "model": info["model"], "mode": info["mode"]})
    return {"rows": rows, "left_out": left}


def _med(v: list[float]) -> str:
    return f"{median(abs(x) for x in v) * 100:.1f}%" if v else "-"


def report(res: dict) -> None:
    rows = res["rows"]
    pts = {(r["id"], r["point"]): r for r in rows}
    print(f"{len(pts)} points both tools express ({len(rows)} figures) from "
          f"{len({r['id'] for r in rows})} entries of {DATA.relative_to(ROOT)}; "
          f"{len(res['left_out'])} points left out")
    print(f"{'metric':<30} {'figures':>7} {'gpufabric':>10} {'gf+kernels':>10} {'AIC':>8}   "
          "(median |error|)")
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(r["metric"], []).append(r)
    for k, g in [*sorted(groups.items()), ("all", rows)]:
        print(f"{k:<30} {len(g):>7} {_med([r['gpufabric_err'] for r in g]):>10} "
              f"{_med([r['gpufabric_kernels_err'] for r in g]):>10} "
              f"{_med([r['aic_err'] for r in g]):>8}")
    by: dict[tuple, list[dict]] = {}
    for r in rows:
        by.setdefault((r["mode"], r["engine"], r["gpu"]), []).append(r)
    print("by load, engine and GPU:")
    for (mode, eng, gpu), g in sorted(by.items()):
        gf_e, ai_e = _med([r["gpufabric_err"] for r in g]), _med([r["aic_err"] for r in g])
        gk_e = _med([r["gpufabric_kernels_err"] for r in g])
        print(f"  {mode:<13} {eng:<22} {gpu:<15} {len(g):>3} figures  gpufabric {gf_e:>6}  "
              f"gf+kernels {gk_e:>6}  AIC {ai_e:>6}")
    gf = [p["gpufabric_s"] for p in pts.values()]
    ai = [p["aic_s"] for p in pts.values()]
    ne = [p["aic_estimates"] for p in pts.values()]
    print(f"time per point (median): gpufabric {median(gf):.2f} s, AIConfigurator "
          f"{median(ai):.2f} s ({median(ne):.0f} estimate(s); offline points search the batch)")
    why: dict[str, int] = {}
    for _, _, w in res["left_out"]:
        why[w[:90]] = why.get(w[:90], 0) + 1
    for w, n in sorted(why.items(), key=lambda x: -x[1])[:8]:
        print(f"  left out {n:>3}: {w}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the first point of each entry")
    ap.add_argument("--json", default=None, help="also write every figure to this file")
    args = ap.parse_args(argv)
    try:
        import aiconfigurator.cli.api  # noqa: F401
    except ImportError:
        print("AIConfigurator is not installed in this interpreter: pip install "
              "'gpufabric[aic]' and run it there")
        return
    logging.disable(logging.WARNING)
    t0 = time.perf_counter()
    res = run(args.quick)
    report(res)
    print(f"whole run {time.perf_counter() - t0:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1, default=str))
    if not res["rows"] or any(math.isnan(r["aic_err"]) for r in res["rows"]):
        sys.exit(1)


if __name__ == "__main__":
    main()

"""Inference benchmarks: simulator speed, the 64-GPU search, and the supernode comparison.

Run by hand (not a test): ``python benchmarks/bench_inference.py [--quick]``. Prints the
figures recorded in docs/benchmarks.md.
"""

from __future__ import annotations

import sys
import time

from gpufabric.topology.build import from_spec, load
from gpufabric.workloads.inference.requests import poisson
from gpufabric.workloads.inference.search import search
from gpufabric.workloads.inference.serve import ServeConfig, scheduler_config, step_model
from gpufabric.workloads.inference.simulator import simulate, summarize
from gpufabric.workloads.inference.supernode import supernode_vs_servers


def sim_speed() -> None:
    topo = from_spec({"gpu": "H100-SXM", "gpus_per_node": 8})
    cfg = ServeConfig(tp=1, precision="fp8", isl=1000, osl=200)
    sm = step_model("llama3-8b", topo, cfg)
    sched = scheduler_config(sm, cfg)
    for rate in (20.0, 40.0):
        reqs = poisson(rate, 100_000, isl=1000, osl=200, seed=0)
        t0, c0 = time.perf_counter(), time.process_time()
        res = simulate(reqs, sm, sched)
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        s = summarize(res)
        print(f"simulate 100,000 requests (llama3-8b fp8, 1x H100, Poisson {rate:g}/s, "
              f"1000/200 tokens): {dt:.2f} s wall, {cpu:.2f} s CPU; {res.iterations:,} "
              "iterations in "
              f"{res.stats['loop_passes']:,} passes; TTFT p50 {s['ttft_ms']['p50']:.0f} ms, "
              f"TPOT p50 {s['tpot_ms']['p50']:.1f} ms, mean batch {s['mean_batch']:.0f}")


def search_speed() -> None:
    system = "gpu=H100-SXM,gpus_per_node=8,nodes=8,nic=ib-ndr"
    cfg = ServeConfig(precision="fp8", rate=40.0, requests=1000, isl=2000, osl=300,
                      slo_ttft_ms=1000, slo_tpot_ms=50)
    t0, c0 = time.perf_counter(), time.process_time()
    res = search("llama3-70b", system, cfg)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    b, co, dis = res["best"], res["best_colocated"], res["best_disaggregated"]
    print(f"search llama3-70b fp8 on 64 H100 (8 nodes), 40 requests/s, 2000/300 tokens, SLO "
          f"TTFT 1 s / TPOT 50 ms: {res['candidates']} layouts in {dt:.1f} s wall, "
          f"{cpu:.1f} s CPU; best {b['name']} on {b['gpus']} GPUs "
          f"({b['goodput_per_gpu']:.3f} req/s per GPU); best co-located "
          f"{co['name']} ({co['goodput_per_gpu']:.3f}); best disaggregated {dis['name']} "
          f"({dis['goodput_per_gpu']:.3f})")


def supernode() -> None:
    nvl72 = load("gb200-nvl72")
    al128 = load("al128-class")
    srv8 = from_spec({"gpu": "B200", "gpus_per_node": 8, "nodes": 8, "nic": "ib-ndr"})
    srv16 = from_spec({"gpu": "B200", "gpus_per_node": 8, "nodes": 16, "nic": "ib-ndr"})
    runs = [("gb200-nvl72", nvl72, "8x HGX B200 (NDR)", srv8, 64, "llama3-70b", "fp8", False),
            ("gb200-nvl72", nvl72, "8x HGX B200 (NDR)", srv8, 64, "deepseek-v3", "fp8", True),
            ("al128-class", al128, "16x HGX B200 (NDR)", srv16, 128, "llama3-70b", "fp8", False),
            ("al128-class", al128, "16x HGX B200 (NDR)", srv16, 128, "deepseek-v3", "fp8", False),
            ("al128-class", al128, "16x HGX B200 (NDR)", srv16, 128, "deepseek-v3", "fp8", True),
            ("al128-class", al128, "16x HGX B200 (NDR)", srv16, 128, "deepseek-v3", "bf16", True)]
    for sup_name, sup, srv_name, srv, gpus, model, prec, eplb in runs:
        cfg = ServeConfig(precision=prec, requests=800, isl=2000, osl=500, slo_ttft_ms=2000,
                          slo_tpot_ms=50, eplb=eplb)
        t0 = time.perf_counter()
        r = supernode_vs_servers(model, sup, srv, cfg, gpus)
        dt = time.perf_counter() - t0
        a, b = r["supernode"], r["servers"]
        print(f"{model} {prec}{' eplb' if eplb else ''}, {gpus} GPUs, 2000/500 tokens, SLO "
              f"TTFT 2 s / TPOT 50 ms: {sup_name} {a['layout']} {a['tokens_per_s_per_gpu']:.0f} "
              f"tok/s/GPU vs {srv_name} {b['layout']} {b['tokens_per_s_per_gpu']:.0f}: "
              f"{r['ratio']:.2f}x ({dt:.0f} s)", flush=True)
        print(f"  {r['reason']}", flush=True)


if __name__ == "__main__":
    sim_speed()
    search_speed()
    if "--quick" not in sys.argv:
        supernode()

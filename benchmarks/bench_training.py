"""Speed of the training-step model (issue 7 goals), run by hand on two cores:

    taskset -c 0,1 .venv/bin/python benchmarks/bench_training.py

1. The 1,024-GPU GPT-3 175B layout search of the issue (goal: < 10 s), as the CLI runs it
   (topology build included).
2. One prediction for a 16,384-GPU configuration, Llama 3 405B with tp 8, pp 16, dp 128 on
   2,048 HGX H100 nodes over RoCE (goal: < 50 ms): first call on a freshly built topology
   (collective plans built), then a second layout on the same topology (plans cached).
"""

from __future__ import annotations

import time

from gpufabric.topology.build import load
from gpufabric.workloads.parallel import Parallel
from gpufabric.workloads.search import search
from gpufabric.workloads.training import predict_step

GPT3 = "gpu=H100-SXM,gpus_per_node=8,nodes=128,scale_up=nvswitch,nics_per_node=8,nic=ib-ndr"
BIG = "gpu=H100-SXM,gpus_per_node=8,nodes=2048,scale_up=nvswitch,nics_per_node=8,nic=roce-400"


def main() -> None:
    # the 16,384-GPU prediction first, in a fresh process: nothing cached yet
    predict_step("llama3-8b", load("gpu=H100-SXM,gpus_per_node=8,nodes=1", materialize_nodes=1),
                 Parallel(dp=8), 2048)                      # imports and model files, once
    t0 = time.perf_counter()
    topo = load(BIG, materialize_nodes=4)
    t1 = time.perf_counter()
    par = Parallel(tp=8, pp=16, dp=128, vpp=2, micro_batch=1, global_batch=2048, zero=2)
    r = predict_step("llama3-405b", topo, par, 8192)
    t2 = time.perf_counter()
    r2 = predict_step("llama3-405b", topo, par.with_(vpp=1), 8192)
    t3 = time.perf_counter()
    print(f"build the 16,384-GPU topology: {(t1 - t0) * 1e3:.1f} ms")
    print(f"one 16,384-GPU prediction (Llama 3 405B tp8 pp16 dp128), first: "
          f"{(t2 - t1) * 1e3:.1f} ms, next layout on the same topology: "
          f"{(t3 - t2) * 1e3:.1f} ms (goal < 50 ms)")
    print(f"  step {r.step_time_s:.2f} s, MFU {r.mfu:.1%}; vpp 1: {r2.step_time_s:.2f} s")
    t0 = time.perf_counter()
    rs = search("gpt3-175b", GPT3, global_batch=1536, top=5)
    t1 = time.perf_counter()
    best = rs[0].parallel
    print(f"1,024-GPU GPT-3 175B search: {t1 - t0:.2f} s (goal < 10 s); best tp {best['tp']} "
          f"pp {best['pp']} dp {best['dp']} vpp {best['vpp']} mb {best['micro_batch']}: "
          f"{rs[0].step_time_s:.2f} s/step, MFU {rs[0].mfu:.1%}")


if __name__ == "__main__":
    main()

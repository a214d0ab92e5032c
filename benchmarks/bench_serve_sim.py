"""Serving-simulator speed: 100,000 requests at light, medium and heavy load.

Run by hand (not a test): ``python benchmarks/bench_serve_sim.py [--requests N]``. Prints one
line per run: requests, load, wall and CPU seconds, iterations and loop passes.
"""

from __future__ import annotations

import argparse
import time

from gpufabric.topology.build import from_spec
from gpufabric.workloads.inference.requests import closed_loop, poisson
from gpufabric.workloads.inference.serve import ServeConfig, scheduler_config, step_model
from gpufabric.workloads.inference.simulator import simulate

RUNS = [  # (model, precision, load, isl, osl)
    ("llama2-7b", "bf16", 2.0, 1024, 256),
    ("llama2-7b", "bf16", 20.0, 1024, 256),
    ("llama3-8b", "fp8", 40.0, 1000, 200),
    ("llama2-7b", "bf16", "closed 64", 1024, 256),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=100_000)
    n = ap.parse_args().requests
    topo = from_spec({"gpu": "H100-SXM", "gpus_per_node": 1})
    print(f"{'requests':>9} {'model':<10} {'load':<13} {'wall s':>7} {'CPU s':>7} "
          f"{'iterations':>11} {'passes':>8}")
    for model, prec, load, isl, osl in RUNS:
        cfg = ServeConfig(precision=prec, isl=isl, osl=osl)
        sm = step_model(model, topo, cfg)
        sched = scheduler_config(sm, cfg)
        if isinstance(load, str):
            reqs = closed_loop(int(load.split()[1]), n, isl, osl)
            what = f"{load} users"
        else:
            reqs = poisson(load, n, isl, osl, seed=0)
            what = f"Poisson {load:g}/s"
        t0, c0 = time.perf_counter(), time.process_time()
        res = simulate(reqs, sm, sched)
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        print(f"{n:>9,} {model:<10} {what:<13} {dt:>7.2f} {cpu:>7.2f} {res.iterations:>11,} "
              f"{res.stats['loop_passes']:>8,}")


if __name__ == "__main__":
    main()

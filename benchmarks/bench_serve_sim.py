"""Serving-simulator speed: 100,000 requests at light, medium and heavy load, and on two
workload datasets (lengths drawn from Azure's conversation trace and ShareGPT).

Run by hand (not a test): ``python benchmarks/bench_serve_sim.py [--requests N]``. Prints one
line per run: requests, load, wall and CPU seconds, iterations and loop passes.
"""

from __future__ import annotations

import argparse
import time

from gpufabric.topology.build import from_spec
from gpufabric.workloads.inference.requests import closed_loop, poisson
from gpufabric.workloads.inference.serve import (ServeConfig, build_requests, scheduler_config,
                                                 step_model)
from gpufabric.workloads.inference.simulator import simulate

#: on a dataset (docs/inference.md, "Datasets"): (model, precision, rate, dataset, tp)
DATASET_RUNS = [
    ("llama3-70b", "fp8", 4.0, "azure-conv-2023", 4),
    ("llama3-8b", "fp8", 10.0, "sharegpt", 1),
]
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
    server = from_spec({"gpu": "H100-SXM", "gpus_per_node": 8})
    print(f"{'requests':>9} {'model':<10} {'load':<22} {'wall s':>7} {'CPU s':>7} "
          f"{'iterations':>11} {'passes':>8}")
    for model, prec, load, isl, osl in RUNS + DATASET_RUNS:
        if isinstance(isl, str):      # a dataset: lengths drawn from it, tp from osl's place
            cfg = ServeConfig(precision=prec, dataset=isl, rate=float(load), requests=n,
                              tp=int(osl))
        else:
            cfg = ServeConfig(precision=prec, isl=isl, osl=osl)
        sm = step_model(model, topo if cfg.tp == 1 else server, cfg)
        sched = scheduler_config(sm, cfg)
        if isinstance(isl, str):
            reqs = build_requests(cfg, 1)
            what = f"{isl} {load:g}/s"
        elif isinstance(load, str):
            reqs = closed_loop(int(load.split()[1]), n, isl, osl)
            what = f"{load} users"
        else:
            reqs = poisson(load, n, isl, osl, seed=0)
            what = f"Poisson {load:g}/s"
        t0, c0 = time.perf_counter(), time.process_time()
        res = simulate(reqs, sm, sched)
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        print(f"{n:>9,} {model:<10} {what:<22} {dt:>7.2f} {cpu:>7.2f} {res.iterations:>11,} "
              f"{res.stats['loop_passes']:>8,}")


if __name__ == "__main__":
    main()

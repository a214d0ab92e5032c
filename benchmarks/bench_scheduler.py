"""Scheduler benchmark: the FGD paper's arrival protocol on openb, and the time one run takes.

Prints, for each trace and policy, the mean GPU allocation % over seeds 42..51 when 100% and
130% of the cluster's GPU capacity has arrived, next to the FGD paper's published figures, the
wall and CPU time per arrival run, and the time of one replay of the default trace. CPU time
(user + sys of this process, ``time.process_time``) is the figure to compare on a shared,
loaded machine; compare two versions by running them back to back.

Usage::

    python benchmarks/bench_scheduler.py                 # all traces, random/best-fit/fgd
    python benchmarks/bench_scheduler.py --traces default --policies all --runs 3
    python benchmarks/bench_scheduler.py --data-dir ../shared/traces/openb
    python benchmarks/bench_scheduler.py --traces default --policies fgd --no-replay

The openb files are found as ``gpufabric schedule`` finds them: ``--data-dir``, then
``$GPUFABRIC_DATA_DIR``, then the cache ``gpufabric data fetch openb`` fills; without them the
benchmark stops and says how to get them (the synthetic stand-in is no benchmark of the paper).
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np

from gpufabric.errors import InputError
from gpufabric.scheduler import REGISTRY, load_jobs, load_nodes
from gpufabric.scheduler.arrival import run_arrivals
from gpufabric.scheduler.replay import run_replay

#: The FGD paper (ATC'23), as quoted in ../shared/traces/openb/README.md: % at 100% arrived.
PAPER = {
    "default": {"random": 86.30, "best-fit": 92.86, "fgd": 95.23},
    "cpu050": {"random": 89.02, "best-fit": 93.56, "fgd": 95.00},
    "gpushare40": {"random": 84.86, "best-fit": 91.44, "fgd": 93.96},
    "multigpu20": {"random": 86.92, "best-fit": 93.73, "fgd": 95.53},
    "gpuspec10": {"random": 86.26, "best-fit": 93.10, "fgd": 94.66},
}
PAPER_130 = {"random": 87.47, "best-fit": 93.08, "fgd": 95.39}  # default trace


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", default="default,cpu050,gpushare40,multigpu20,gpuspec10")
    ap.add_argument("--policies", default="random,best-fit,fgd")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--data-dir", default=None, help="directory with the openb CSV files")
    ap.add_argument("--no-replay", action="store_true", help="arrival runs only")
    args = ap.parse_args()
    policies = (REGISTRY.names("placement") if args.policies == "all"
                else args.policies.split(","))
    try:
        cluster = load_nodes("gpu_node", args.data_dir)
    except InputError as exc:
        raise SystemExit(f"bench_scheduler: {exc}") from None
    seeds = list(range(42, 42 + args.runs))
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"python {platform.python_version()}, numpy {np.__version__}")
    print(f"# arrival on openb gpu_node ({len(cluster)} nodes, {int(cluster.num_gpu.sum())} "
          f"GPUs), seeds {seeds[0]}..{seeds[-1]}")
    print(f"{'trace':<11} {'policy':<12} {'@100%':>7} {'paper':>7} {'diff':>6} {'@130%':>7} "
          f"{'s/run':>6} {'cpu/run':>7}")
    for trace in args.traces.split(","):
        jobs = load_jobs(trace, args.data_dir)
        for p in policies:
            c0 = time.process_time()
            r = run_arrivals(cluster, jobs, p, seeds)
            cpu = (time.process_time() - c0) / len(seeds)
            paper = PAPER.get(trace, {}).get(p)
            ps = f"{paper:7.2f}" if paper else f"{'':>7}"
            ds = f"{r.at(100) - paper:+6.2f}" if paper else f"{'':>6}"
            sec = float(np.mean([x.time_s for x in r.runs]))
            print(f"{trace:<11} {p:<12} {r.at(100):7.2f} {ps} {ds} {r.at(130):7.2f} {sec:6.2f} "
                  f"{cpu:7.2f}", flush=True)
    if args.no_replay:
        return
    jobs = load_jobs("default", args.data_dir)
    for p in ("best-fit", "fgd"):
        t0 = time.perf_counter()
        r = run_replay(cluster, jobs, p)
        t = time.perf_counter() - t0
        s = r.summary
        print(f"replay default {p}: {t:.2f} s; {s['completed']} completed, JCT mean "
              f"{s['jct_mean_s'] / 3600:.2f} h, wait max {s['wait_max_s']:.0f} s", flush=True)
    t0 = time.perf_counter()
    r = run_replay(cluster, jobs, "fgd", queue="priority", load=100000.0,
                   failures=__import__("gpufabric.scheduler.failures", fromlist=["x"])
                   .parse_failures("mtbf=1000h,repair=1h", cluster.names),
                   default_checkpoint_s=1800)
    t = time.perf_counter() - t0
    s = r.summary
    print(f"replay default fgd, priority, load x100000, mtbf 1000h: {t:.2f} s; "
          f"{s['completed']} completed, {s['failed']} failed, {s['unscheduled']} unscheduled, "
          f"wait mean {s['wait_mean_s']:.0f} s p95 {s['wait_p95_s']:.0f} s, GPU util "
          f"{s['gpu_util_mean_pct_while_arriving']:.1f}%, {s['node_failures']} node failures, "
          f"{s['preemptions']} preemptions, {s['gpu_hours_redone']:.1f} GPU-h redone, "
          f"availability min {s['availability_min']:.3f}")


if __name__ == "__main__":
    main()

"""Design advisor speed: candidates per second on a large design space.

One training scenario (Llama 3 70B, 1T tokens within 60 days, lowest cost) over every GPU kind of
the catalog, 1-8 GPUs per server, 1-512 servers, every InfiniBand and RoCE speed at one or two
NICs per GPU pair, rail-optimised and fat-tree fabrics at 1:1 and 2:1: every candidate is
generated, judged by the design rules, priced and bounded; the models (``train --search`` on the
cluster) run on those the bounds cannot rule out, best bound first, until no unevaluated bound
can enter the top 5, on as many worker processes as the machine has cores. Goal: 10,000
candidates in under 60 s on 2 cores.

Run by hand (not a test): ``.venv/bin/python benchmarks/bench_advise.py``
"""

from __future__ import annotations

import resource
import time

from gpufabric import sweep
from gpufabric.advise import core, prices, scenario

SCENARIO = {
    "name": "bench-large-space",
    "workloads": {"train": {"model": "llama3-70b", "tokens": 1.0e12, "global_batch": 1024,
                            "seq_len": 4096, "deadline_hours": 1440}},
    "constraints": {"deployment": "any"},
    "objective": "lowest-cost",
    "space": {"gpus_per_node": [1, 2, 4, 8],
              "nodes": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512],
              "fabrics": ["rail-optimized", "fat-tree"], "oversubscription": [1, 2]},
}


def main() -> None:
    sc = scenario.parse(SCENARIO, "bench")
    p = prices.load()
    jobs = sweep.cores()
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0, c0 = time.perf_counter(), time.process_time()
    adv = core.advise(sc, p, top=5, jobs=jobs)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)     # the workers, gone at the end
    cpu += (after.ru_utime - kids.ru_utime) + (after.ru_stime - kids.ru_stime)
    print(f"candidates generated   {adv.generated:,}")
    print(f"refused by the rules   {adv.refused:,}")
    print(f"not priced             {adv.unpriced:,}")
    print(f"ruled out by bounds    {adv.pruned:,}")
    print(f"network-dominated      {adv.dominated:,}")
    print(f"evaluated with models  {adv.evaluated:,}")
    print(f"elapsed                {dt:.1f} s wall, {cpu:.1f} s CPU on {jobs} worker(s) "
          f"({adv.generated / dt:,.0f} candidates/s wall)")
    if adv.ranked:
        print(f"best                   {core.describe(adv.ranked[0])}: "
              f"${adv.ranked[0].objective:,.0f}")


if __name__ == "__main__":
    main()

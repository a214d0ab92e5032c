"""Speed of the group API for a training step on 16,384 GPUs (goal: < 50 ms for all calls).

A 2,048-node HGX H100 cluster (8 GPUs, 8 NDR NICs per node, rail-optimized fat-tree), built
with 4 materialized nodes, asked what a tp=8 x pp=4 x dp=512 training step asks: the
tensor-parallel all_reduce inside a node, the data-parallel all_reduce / reduce_scatter /
all_gather of 8 concurrent groups (one per local GPU, one GPU per node) and the pipeline's
send_recv between stages. The first pass builds and caches the plans; the second only reads
them. Run it pinned to two cores:

    taskset -c 0,1 .venv/bin/python benchmarks/bench_groups.py
"""

from __future__ import annotations

import time

from gpufabric import collectives as C
from gpufabric.topology.build import from_spec

SPEC = {"gpu": "H100-SXM", "gpus_per_node": 8, "nodes": 2048, "nics_per_node": 8,
        "nic": "ib-ndr", "fabric": {"topology": "rail-optimized"}}
DP = 512


def step(topo) -> list[C.Prediction]:
    return [
        C.predict(topo, "all_reduce", 64 * 2**20, 8, per_node=8),
        C.predict(topo, "all_reduce", 2**29, DP, per_node=1, concurrent=8),
        C.predict(topo, "reduce_scatter", 2**29, DP, per_node=1, concurrent=8),
        C.predict(topo, "all_gather", 2**29, DP, per_node=1, concurrent=8),
        C.predict(topo, "send_recv", 32 * 2**20, 2, per_node=1, concurrent=8),
    ]


def main(repeats: int = 5) -> None:
    import statistics
    builds, firsts, cached = [], [], []
    preds: list[C.Prediction] = []
    for _ in range(repeats):           # a fresh cluster (and model) each time
        t0 = time.perf_counter()
        topo = from_spec(SPEC, materialize_nodes=C.Model.SAMPLE_NODES)
        t1 = time.perf_counter()
        preds = step(topo)
        t2 = time.perf_counter()
        step(topo)
        t3 = time.perf_counter()
        builds.append(t1 - t0)
        firsts.append(t2 - t1)
        cached.append(t3 - t2)

    def ms(x: list[float]) -> str:
        return f"min {min(x) * 1e3:.1f} ms, median {statistics.median(x) * 1e3:.1f} ms"
    print(f"build 16,384-GPU cluster ({repeats} runs): {ms(builds)}")
    print(f"training step, 5 group predictions, first (plans built): {ms(firsts)}")
    print(f"training step, 5 group predictions, cached: {ms(cached)}")
    for p in preds:
        print(f"  {p.op:<14} ranks {p.ranks:>4}  {p.algo}/{p.proto:<6} "
              f"{p.time_us:>10.1f} us  busbw {p.busbw:7.1f} GB/s")


if __name__ == "__main__":
    main()

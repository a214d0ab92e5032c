"""Scale benchmark of the collective model: a 16,384-GPU and a 1,024-GPU all_reduce.

Clusters of HGX H100 nodes (8 GPUs, 8 NDR NICs each) on a rail-optimized fat-tree. The model
exploits the symmetry of the algorithms: it lays the rings / trees on a few sampled nodes
(every ring step and every node alike) instead of simulating each step of each rank. For the
1,024-GPU case it also times the same prediction with every node laid out, and prints the
ratio. Run it pinned to two cores:

    taskset -c 0,1 .venv/bin/python benchmarks/bench_collectives.py
"""

from __future__ import annotations

import os
import time

from gpufabric import collectives as C
from gpufabric.topology.build import from_spec

SIZES = [2**k for k in range(3, 34)]        # 8 B .. 8 GiB, as nccl-tests -b 8 -e 8G -f 2


def spec(nodes: int) -> dict:
    return {"gpu": "H100-SXM", "gpus_per_node": 8, "nodes": nodes, "nics_per_node": 8,
            "nic": "ib-ndr", "fabric": {"topology": "rail-optimized"}}


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def cold_predict(nodes: int, materialize: int | None, sample: int | None):
    """Build the topology and predict one 1 GiB all_reduce from nothing (no caches)."""
    def go():
        t = from_spec(spec(nodes), materialize_nodes=materialize)
        m = C.Model(t, sample_nodes=sample)
        return m, m.predict("all_reduce", 2**30)
    return timed(go)


def main() -> None:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"# bench_collectives: all_reduce on HGX H100 x N, 8x NDR rail-optimized; {cpus} CPU(s)")
    from_spec(spec(2))                      # warm imports and the catalog
    print(f"{'GPUs':>6} {'nodes':>5} {'layout':<22} {'1 GiB predict (s)':>17} "
          f"{'31-size sweep (s)':>17} {'busbw 1G':>9} {'algo':>9} {'8 B (us)':>9}")
    results, results_bus = {}, {}
    for nodes in (128, 2048):
        best = None
        for _ in range(3):
            (m, p), dt = cold_predict(nodes, C.Model.SAMPLE_NODES, None)
            best = dt if best is None else min(best, dt)
        rows, ds = timed(lambda m=m: [m.predict("all_reduce", s) for s in SIZES])
        small = rows[0]
        results[nodes] = best
        results_bus[nodes] = p.busbw
        print(f"{nodes * 8:>6} {nodes:>5} {'sampled (4 nodes)':<22} {best:>17.4f} {ds:>17.4f} "
              f"{p.busbw:>9.1f} {p.algo:>9} {small.time_us:>9.1f}")
    (m_full, p_full), d_full = cold_predict(128, None, 0)
    print(f"{1024:>6} {128:>5} {'every node laid out':<22} {d_full:>17.4f} {'':>17} "
          f"{p_full.busbw:>9.1f} {p_full.algo:>9}")
    print(f"# 16,384 GPUs: {results[2048]:.3f} s (goal < 1 s); 1,024 GPUs: {results[128]:.3f} s "
          f"(goal < 0.1 s); symmetry speed-up at 1,024 GPUs: {d_full / results[128]:.0f}x, "
          f"busbw sampled {results_bus[128]:.2f} vs every node {p_full.busbw:.2f} GB/s")


if __name__ == "__main__":
    main()

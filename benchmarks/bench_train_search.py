"""Time ``gpufabric train gpt3-175b SYSTEM --global-batch 1536 --search`` on 1,024 H100s (goal:
under 10 s on 2 cores), topology build included, and print what the search considered.

Run: ``python benchmarks/bench_train_search.py`` (``taskset -c 0,1`` to hold it to 2 cores).
"""

from __future__ import annotations

import time

GPT3 = "gpu=H100-SXM,gpus_per_node=8,nodes=128,scale_up=nvswitch,nics_per_node=8,nic=ib-ndr"


def main() -> None:
    t0, c0 = time.perf_counter(), time.process_time()
    from gpufabric.workloads.search import search_layouts
    rs, n = search_layouts("gpt3-175b", GPT3, global_batch=1536, top=5)
    t1, c1 = time.perf_counter(), time.process_time()
    b = rs[0].parallel
    print(f"1,024-GPU GPT-3 175B search: {t1 - t0:.2f} s wall, {c1 - c0:.2f} s CPU "
          "(goal < 10 s on 2 cores)")
    print(f"  considered {n.considered:,} layouts ({n.shapes:,} shapes): {n.pruned_bound:,} "
          f"pruned by bound, {n.pruned_memory:,} by memory, {n.timed:,} timed")
    print(f"  best: tp {b['tp']} pp {b['pp']} dp {b['dp']} cp {b['cp']} vpp {b['vpp']} "
          f"mb {b['micro_batch']} zero {b['zero']}{' fsdp ' + b['fsdp'] if b['fsdp'] else ''} "
          f"recompute {b['recompute']} sp {b['sp']} offload {b['offload']} tp_overlap "
          f"{b['tp_overlap']} tp_bwd_overlap {b['tp_bwd_overlap']} dp_overlap "
          f"{b['dp_overlap']} order {b['order']}: {rs[0].step_time_s:.2f} s/step, "
          f"MFU {rs[0].mfu:.1%}")


if __name__ == "__main__":
    main()

"""``arrival`` mode: the FGD paper's packing protocol on an openb-style trace.

1. Start from the empty cluster.
2. Scale the pod list so that its total GPU request (milli-GPU) is ``ratio`` (1.3) times the
   cluster's GPU capacity: when the list asks for less, append copies of pods drawn uniformly at
   random until the next copy would exceed the target; when it asks for more, remove pods drawn
   at random until it does not. Then shuffle. One seed drives all three draws.
3. Schedule the pods one by one in that order; nothing leaves. A pod that fits nowhere is skipped;
   one that would fit no node it may use even on an empty cluster is also counted as
   ``unplaceable`` (larger than any node in GPUs, CPU or memory).
4. Record the GPU allocation ratio (allocated / total milli-GPU, %) each time the arrived GPU
   request crosses another 1% of capacity, 0% to 130% (131 numbers; 0% is 0). A point the last
   pod does not reach (the list stops just short of the target) takes the final ratio.
5. Repeat per seed and average.

Examples
--------
>>> from gpufabric.scheduler.cluster import load_nodes
>>> from gpufabric.scheduler.jobs import load_jobs
>>> r = run_arrival(load_nodes("synthetic-openb"), load_jobs("synthetic-openb"), "best-fit")
>>> len(r.allocation_pct), r.allocation_pct[0]
(131, 0.0)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from gpufabric.errors import InputError
from gpufabric.scheduler.cluster import Cluster
from gpufabric.scheduler.engine import (BaseMasks, check_ratio, check_seed, place_gang,
                                        unplaceable)
from gpufabric.scheduler.jobs import JobSet
from gpufabric.scheduler.policies import make_placement
from gpufabric.scheduler.state import Request, State

POINTS = 131  # 0% .. 130%
#: Most pods one arrival run may schedule (the openb runs need about 10,000).
MAX_PODS = 2_000_000


@dataclass
class ArrivalRun:
    """One seed: the 131-point curve and counts."""

    seed: int
    allocation_pct: list[float]
    pods: int
    scheduled: int
    skipped: int
    time_s: float
    unplaceable: int = 0      # skipped pods that fit no node they may use even when it is empty


@dataclass
class ArrivalResult:
    """Mean over seeds of the allocation curve, plus each run."""

    mode: str
    policy: str
    trace: str
    nodes: str
    ratio: float
    seeds: list[int]
    allocation_pct: list[float]
    runs: list[ArrivalRun] = field(default_factory=list)

    def at(self, pct: int) -> float:
        """Mean allocation % when ``pct`` % of capacity has arrived."""
        return self.allocation_pct[pct]


def scale_to_capacity(jobs: JobSet, capacity_milli: int, ratio: float,
                      rng: np.random.Generator) -> np.ndarray:
    """Indices of the scaled pod list, in trace order (before the shuffle).

    Examples
    --------
    >>> from gpufabric.scheduler.jobs import load_jobs
    >>> js = load_jobs("synthetic-openb")
    >>> idx = scale_to_capacity(js, 6212000, 1.3, np.random.default_rng(42))
    >>> int(js.gpu_request[idx].sum()) <= 1.3 * 6212000, len(idx) > len(js)
    (True, True)
    """
    req = jobs.gpu_request
    target = ratio * capacity_milli
    total = int(req.sum())
    n = len(jobs)
    if total == 0:
        raise InputError("no pod asks for a GPU; arrival mode packs GPU requests up to "
                         "--ratio x the GPU capacity (use --mode replay)",
                         file=jobs.source or None, field="num_gpu")
    if target / (total / n) > MAX_PODS:
        raise InputError(f"packing {ratio:g} x {capacity_milli // 1000:,} GPUs with these pods "
                         f"takes about {target / (total / n):,.0f} pods; at most {MAX_PODS:,}",
                         file=jobs.source or None, field="--ratio")
    if total <= target:
        extra: list[np.ndarray] = []
        while True:
            draw = rng.integers(n, size=4096)
            cum = total + np.cumsum(req[draw])
            over = np.flatnonzero(cum > target)
            if len(over):
                extra.append(draw[:over[0]])
                break
            extra.append(draw)
            total = int(cum[-1])
        return np.concatenate([np.arange(n)] + extra)
    order = rng.permutation(n)
    removed = np.cumsum(req[order])
    k = int(np.searchsorted(removed, total - target, side="left")) + 1
    keep = np.ones(n, dtype=bool)
    keep[order[:k]] = False
    return np.flatnonzero(keep)


def run_arrival(cluster: Cluster, jobs: JobSet, policy: str, seed: int = 42,
                ratio: float = 1.3, routing: str = "kind",
                tick: Callable[[int], None] | None = None) -> ArrivalRun:
    """One arrival run (see the module doc). ``tick(k)`` is called at each 1% recorded."""
    check_seed(seed)
    check_ratio(ratio)
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    cap = cluster.gpu_capacity_milli
    if cap == 0:
        raise InputError("the cluster has no GPUs; arrival mode measures GPU allocation",
                         file=cluster.source or None, field="--nodes")
    idx = scale_to_capacity(jobs, cap, ratio, rng)
    order = idx[rng.permutation(len(idx))]
    js = jobs.take(order)
    place = make_placement(policy, cluster, jobs, rng)  # FGD's target workload: the trace
    state = State(cluster)
    masks = BaseMasks(cluster, js, routing)
    curve = np.zeros(POINTS)
    req = js.gpu_request
    cpu, mem, ng, gm, gang = (js.cpu.tolist(), js.mem.tolist(), js.num_gpu.tolist(),
                              js.gpu_milli.tolist(), js.gang.tolist())
    arrived = 0
    k = 1
    step = cap / 100.0
    scheduled = 0
    for i in range(len(js)):
        r = Request(cpu[i], mem[i], ng[i], gm[i])
        got = place_gang(state, place, r, masks.tiers(i), gang[i])
        scheduled += got is not None
        arrived += int(req[i])
        while k < POINTS and arrived >= k * step:
            curve[k] = 100.0 * state.allocated_milli / cap
            if tick:
                tick(k)
            k += 1
    final = 100.0 * state.allocated_milli / cap
    curve[k:] = final
    never = int(unplaceable(cluster, jobs, routing)[order].sum())
    return ArrivalRun(seed, [round(float(x), 4) for x in curve], len(js), scheduled,
                      len(js) - scheduled, time.perf_counter() - t0, never)


def run_arrivals(cluster: Cluster, jobs: JobSet, policy: str, seeds: list[int],
            ratio: float = 1.3, routing: str = "kind",
            tick: Callable[[int], None] | None = None,
            on_run: Callable[[ArrivalRun], None] | None = None) -> ArrivalResult:
    """Runs for each seed and their mean curve; ``on_run(run)`` is called as each one ends."""
    runs = []
    for s in seeds:
        runs.append(run_arrival(cluster, jobs, policy, s, ratio, routing, tick))
        if on_run:
            on_run(runs[-1])
    mean = np.mean([r.allocation_pct for r in runs], axis=0)
    return ArrivalResult("arrival", policy, jobs.source, cluster.source, ratio, list(seeds),
                         [round(float(x), 4) for x in mean], runs)

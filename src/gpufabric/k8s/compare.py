"""gpufabric's preferred allocation next to NVIDIA's best-effort allocator, same requests.

For each system, the same ``GetPreferredAllocation`` requests go to both: every GPU free, and
two fragmented free sets (the free GPUs of the kubelet example in tests/fixtures/k8s, 0, 2, 4,
5, 6, and 1, 2, 3, 5, 6, 7), sizes 2, 3 and 4. Each answer is judged by the topology model: the
bottleneck bandwidth (GB/s per direction) between the chosen GPUs, the number that bounds a
collective over them. When the free count is not a multiple of the size, the best-effort walk
pads the list with empty slots and may pick a set holding one (``besteffort_short``): fewer GPUs
than asked, which the kubelet then fills up from its own candidates.

Examples
--------
>>> r = compare_allocators(["nvlink-bridge-pairs"])[0]
>>> r.free, r.size, r.gpufabric, r.gpufabric_bw_GBps
([0, 1, 2, 3, 4, 5, 6, 7], 2, [0, 1], 300.0)
>>> [(r.gpufabric, r.besteffort, r.gpufabric_sum_GBps, r.besteffort_sum_GBps)
...  for r in compare_allocators(["nvlink-bridge-pairs"]) if r.free[0] == 1 and r.size == 4]
[([2, 3, 6, 7], [1, 2, 3, 5], 726.0, 457.5)]
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from gpufabric.scheduler import besteffort
from gpufabric.scheduler.gpuset import preferred_set, set_key
from gpufabric.scheduler.nodetopo import tables
from gpufabric.topology.build import load

DEFAULT_SYSTEMS = ["dgx1-v100", "dgx-a100", "hgx-h100", "hgx-b200", "nvlink-bridge-pairs",
                   "pcie-switch-dual-root", "pcie-switch-single-root", "pcie-switch-cascade",
                   "pcie-direct-8gpu", "t4-cloud-server"]
FREE_SETS = ([0, 2, 4, 5, 6], [1, 2, 3, 5, 6, 7])
SIZES = (2, 3, 4)


@dataclass
class CompareRow:
    """One request and both answers (GPU indices of the node)."""

    system: str
    free: list[int]
    size: int
    gpufabric: list[int]
    gpufabric_bw_GBps: float
    gpufabric_sum_GBps: float   # sum over the chosen pairs (more NVLink pairs: larger)
    besteffort: list[int]
    besteffort_bw_GBps: float
    besteffort_sum_GBps: float
    besteffort_short: bool     # its pick held a padding slot: fewer GPUs than asked


def _num(x: float) -> float:
    """inf (one GPU: no pair) as 0 for JSON."""
    return round(float(x), 2) if x != float("inf") else 0.0


def compare_allocators(systems: list[str], random_requests: int = 0, seed: int = 1
                       ) -> list[CompareRow]:
    """Both allocators on every (free set, size) request of each system.

    ``random_requests`` adds that many requests per system: a free set of 2..n GPUs and a size
    of 2..free, drawn with ``seed``.
    """
    rng = random.Random(seed)
    rows = []
    for name in systems:
        t = load(name)
        bw, hops = tables(t, 0)
        scores = besteffort.pair_scores(t, 0)
        n = len(t.gpus(0))
        frees = [list(range(n))] + [f for f in FREE_SETS if max(f) < n]
        asks = [(f, s) for f in frees for s in SIZES]
        for _ in range(random_requests):
            f = sorted(rng.sample(range(n), rng.randint(2, n)))
            asks.append((f, rng.randint(2, len(f))))
        for free, size in asks:
            if size > len(free):
                continue
            ours = list(preferred_set(free, size, bw, hops))
            theirs = list(besteffort.allocate(scores, free, [], size))
            a, b = set_key(ours, bw, hops), set_key(theirs, bw, hops)
            rows.append(CompareRow(name, free, size, ours, _num(a[0]), _num(a[-1]), theirs,
                                   _num(b[0]), _num(b[-1]), len(theirs) < size))
    return rows


def summarize(rows: list[CompareRow]) -> list[dict]:
    """Per system: requests where each answer is better (bottleneck, then pair sum), and short.

    A short best-effort answer counts as worse than a full one.
    """
    out: dict[str, dict] = {}
    for r in rows:
        d = out.setdefault(r.system, {"system": r.system, "requests": 0, "gpufabric_better": 0,
                                      "besteffort_better": 0, "same": 0, "besteffort_short": 0})
        d["requests"] += 1
        ours = (r.gpufabric_bw_GBps, r.gpufabric_sum_GBps)
        theirs = (r.besteffort_bw_GBps, r.besteffort_sum_GBps)
        if r.besteffort_short:
            d["besteffort_short"] += 1
            d["gpufabric_better"] += 1
        elif ours > theirs:
            d["gpufabric_better"] += 1
        elif ours < theirs:
            d["besteffort_better"] += 1
        else:
            d["same"] += 1
    return list(out.values())

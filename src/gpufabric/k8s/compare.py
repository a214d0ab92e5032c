"""gpufabric's preferred allocation next to NVIDIA's best-effort allocator, same requests.

For each system, the same ``GetPreferredAllocation`` requests go to both: every GPU free, and
two fragmented free sets (the free GPUs the kubelet example of ../shared/k8s has, 0, 2, 4, 5, 6,
and 1, 2, 3, 5, 6, 7), sizes 2, 3 and 4. Each answer is judged by the topology model: the
bottleneck bandwidth (GB/s per direction) between the chosen GPUs, the number that bounds a
collective over them. When the free count is not a multiple of the size, the best-effort walk
pads the list with empty slots and may pick a set holding one (``besteffort_short``): fewer GPUs
than asked, which the kubelet then fills up from its own candidates.

Examples
--------
>>> r = compare_allocators(["nvlink-bridge-pairs"])[0]
>>> r.free, r.size, r.gpufabric, r.gpufabric_bw_GBps
([0, 1, 2, 3, 4, 5, 6, 7], 2, [0, 1], 300.0)
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufabric.scheduler import besteffort
from gpufabric.scheduler.gpuset import preferred_set, set_key
from gpufabric.scheduler.nodetopo import tables
from gpufabric.topology.build import load

DEFAULT_SYSTEMS = ["dgx1-v100", "dgx-a100", "hgx-h100", "hgx-b200", "nvlink-bridge-pairs",
                   "pcie-switch-dual-root", "pcie-direct-8gpu", "t4-cloud-server"]
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
    besteffort: list[int]
    besteffort_bw_GBps: float
    besteffort_short: bool     # its pick held a padding slot: fewer GPUs than asked


def compare_allocators(systems: list[str]) -> list[CompareRow]:
    """Both allocators on every (free set, size) request of each system."""
    rows = []
    for name in systems:
        t = load(name)
        bw, hops = tables(t, 0)
        scores = besteffort.pair_scores(t, 0)
        n = len(t.gpus(0))
        frees = [list(range(n))] + [f for f in FREE_SETS if max(f) < n]
        for free in frees:
            for size in SIZES:
                if size > len(free):
                    continue
                ours = list(preferred_set(free, size, bw, hops))
                theirs = list(besteffort.allocate(scores, free, [], size))
                rows.append(CompareRow(name, free, size, ours, set_key(ours, bw, hops)[0],
                                       theirs, set_key(theirs, bw, hops)[0] if theirs else 0.0,
                                       len(theirs) < size))
    return rows

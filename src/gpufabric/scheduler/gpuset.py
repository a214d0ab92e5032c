"""The best-connected set of GPUs on one node, with devices it must keep, in bounded time.

:func:`preferred_set` answers what a device plugin's ``GetPreferredAllocation`` asks: ``k``
GPUs among the free ones, containing every ``must`` GPU, as well connected as possible. Sets
compare by :func:`set_key`, as :func:`gpufabric.scheduler.nodetopo.best_gpu_set` compares them:
the widest bottleneck bandwidth between any two chosen GPUs first, then the fewest links
crossed on the worst pair, then NIC locality (:func:`nic_counts`: the NICs the set can use by
GPUDirect RDMA, then those on its NUMA nodes, at most one per GPU, from
:func:`gpufabric.topology.paths.gpu_nic_levels`), then the largest sum of pair bandwidths.

The search is exact while the number of candidate sets is at most ``exact_limit``; beyond that
(a 72-GPU NVLink domain) it grows a set greedily from the ``must`` GPUs, or from every free GPU
in turn, adding each time the GPU that keeps the key highest, and keeps the best grown set.
Either way the time is bounded (at most ``n`` greedy runs of ``k`` vectorized steps, and one
when the first run reaches the best key any set could have), because the kubelet waits on this
call without a deadline. One GPU alone goes where it breaks no better-connected group: the free
GPU whose best link to another free GPU is the weakest.

Examples
--------
>>> from gpufabric.scheduler.nodetopo import node_tables
>>> bw, hops = node_tables("V100M32", 8)
>>> preferred_set([0, 1, 2, 3, 4, 5, 6, 7], 2, bw, hops, must=[4])
(0, 4)
>>> bw, hops = node_tables("G2", 8)                  # PCIe: pairs of GPUs per switch
>>> preferred_set([0, 2, 3], 1, bw, hops)            # 2 and 3 share a switch: keep them
(0,)
>>> from gpufabric.scheduler.nodetopo import tables
>>> from gpufabric.topology.paths import gpu_nic_levels
>>> from gpufabric.topology.build import load
>>> t = load("hgx-h100-4node-4nic")                  # NVSwitch, one NIC per GPU pair
>>> bw, hops = tables(t)
>>> preferred_set(range(8), 4, bw, hops)             # every set alike without NICs
(0, 1, 2, 3)
>>> preferred_set(range(8), 4, bw, hops, nics=gpu_nic_levels(t))   # 4 NICs by GPUDirect
(0, 2, 4, 6)
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from gpufabric.topology.paths import NIC_GDR, NIC_LOCAL

#: A set's key: (bottleneck GB/s, -worst hops, NICs by GPUDirect RDMA, NICs on its NUMA nodes,
#: sum of pair GB/s); higher is better.
SetKey = tuple[float, int, int, int, float]


def nic_counts(gpus: Sequence[int], nics: np.ndarray | None) -> tuple[int, int]:
    """(NICs the set can drive by GPUDirect RDMA, NICs it reaches within its NUMA nodes), each
    at most one per GPU of the set.

    ``nics`` is :func:`gpufabric.topology.paths.gpu_nic_levels` of the node (None: no NICs).
    The first count is the NICs the set can use at full rate: NCCL gives each GPU its nearest
    NIC, so a NIC per GPU is all a set can use, and a GPU without a NIC under its PCIe switch
    bounces its network traffic through host memory. The second breaks ties without GPUDirect
    RDMA: NICs reached without crossing sockets.

    Examples
    --------
    >>> lv = np.array([[2, 1, 0, 0], [1, 1, 0, 0], [1, 2, 0, 0], [1, 1, 0, 0]])
    >>> nic_counts([0, 1], lv), nic_counts([0, 2], lv), nic_counts([0], lv)
    ((1, 2), (2, 2), (1, 1))
    """
    g = list(gpus)
    if nics is None or nics.shape[1] == 0 or not g:
        return (0, 0)
    best = nics[np.array(g)].max(axis=0)
    return (min(len(g), int((best >= NIC_GDR).sum())),
            min(len(g), int((best >= NIC_LOCAL).sum())))


def set_key(gpus: Sequence[int], bw: np.ndarray, hops: np.ndarray,
            nics: np.ndarray | None = None) -> SetKey:
    """(bottleneck GB/s, -worst hops, GPUDirect NICs, NUMA-local NICs, sum of pair GB/s).

    Higher is better; the NIC counts are :func:`nic_counts` (0 without ``nics``).

    Examples
    --------
    >>> bw = np.array([[np.inf, 50.0, 10.0], [50.0, np.inf, 10.0], [10.0, 10.0, np.inf]])
    >>> set_key([0, 1], bw, np.ones((3, 3), int))
    (50.0, -1, 0, 0, 50.0)
    """
    g = list(gpus)
    gdr, local = nic_counts(g, nics)
    if len(g) < 2:
        return (math.inf, 0, gdr, local, 0.0)
    idx = np.array(g)
    sub = bw[np.ix_(idx, idx)]
    iu = np.triu_indices(len(g), 1)
    pairs = sub[iu]
    return (float(pairs.min()), -int(hops[np.ix_(idx, idx)][iu].max()), gdr, local,
            float(pairs.sum()))


def preferred_set(free: Sequence[int], k: int, bw: np.ndarray, hops: np.ndarray,
                  must: Sequence[int] = (), exact_limit: int = 1000,
                  nics: np.ndarray | None = None) -> tuple[int, ...]:
    """``k`` GPUs among ``free`` including ``must``, best connected (see the module doc).

    Parameters
    ----------
    free : sequence of int
        GPU indices that may be chosen (``must`` GPUs must be among them).
    k : int
        How many to choose.
    bw, hops : numpy.ndarray
        Pair tables of the node (:func:`gpufabric.scheduler.nodetopo.tables`).
    must : sequence of int
        GPUs the answer must contain.
    nics : numpy.ndarray, optional
        GPU-NIC levels of the node (:func:`gpufabric.topology.paths.gpu_nic_levels`): among
        equally connected sets, the one reaching the most NICs by GPUDirect RDMA wins.

    Returns
    -------
    tuple of int
        Sorted GPU indices.

    Raises
    ------
    ValueError
        ``k`` below 1 or above the free count, more ``must`` GPUs than ``k``, or a ``must``
        GPU that is not free.
    """
    free = sorted(set(int(i) for i in free))
    must = sorted(set(int(i) for i in must))
    if k < 1 or k > len(free):
        raise ValueError(f"cannot choose {k} of {len(free)} free devices")
    if len(must) > k:
        raise ValueError(f"{len(must)} devices must be kept but only {k} are asked for")
    missing = [m for m in must if m not in free]
    if missing:
        raise ValueError(f"devices that must be kept are not available: {missing}")
    rest = [i for i in free if i not in must]
    need = k - len(must)
    if need == 0:
        return tuple(must)
    if k == 1:
        return (_loneliest(free, bw),)
    if math.comb(len(rest), need) <= exact_limit:
        combos = np.array(list(itertools.combinations(rest, need)), dtype=np.int64)
        sets = np.hstack([np.tile(np.array(must, dtype=np.int64), (len(combos), 1)), combos])
        best = sets[_first_best(*_keys(sets, bw, hops, nics))]
        return tuple(sorted(int(g) for g in best))
    bound = _upper_bound(free, k, bw, hops, nics)
    seeds = [must] if must else [[i] for i in free]
    best_set: list[int] | None = None
    best_key: SetKey | None = None
    for seed in seeds:
        chosen = _grow(seed, free, k, bw, hops, nics)
        key = set_key(chosen, bw, hops, nics)
        if best_key is None or key > best_key:
            best_set, best_key = chosen, key
        if best_key == bound:       # nothing can beat it (a uniform NVLink domain: at once)
            break
    assert best_set is not None
    return tuple(sorted(best_set))


def _loneliest(free: list[int], bw: np.ndarray) -> int:
    """The free GPU whose best link to another free GPU is the weakest (first on ties).

    A one-GPU request then leaves well-connected free groups (an NVLink pair) whole
    (NVIDIA/k8s-device-plugin #1193 asks for exactly this).
    """
    if len(free) == 1:
        return free[0]
    idx = np.array(free)
    sub = bw[np.ix_(idx, idx)].copy()
    np.fill_diagonal(sub, -np.inf)
    return int(idx[int(np.argmin(sub.max(axis=1)))])


def _keys(sets: np.ndarray, bw: np.ndarray, hops: np.ndarray, nics: np.ndarray | None
          ) -> tuple[np.ndarray, ...]:
    """(bottleneck, -worst hops, GPUDirect NICs, NUMA-local NICs, sum) of each row of
    ``sets``, vectorized."""
    a, b = np.triu_indices(sets.shape[1], 1)
    pb = bw[sets[:, a], sets[:, b]]
    ph = hops[sets[:, a], sets[:, b]]
    if nics is None or nics.shape[1] == 0:
        gdr = local = np.zeros(len(sets), dtype=np.int64)
    else:
        best = nics[sets].max(axis=1)                 # (sets, NICs)
        k = sets.shape[1]
        gdr = np.minimum(k, (best >= NIC_GDR).sum(axis=1))
        local = np.minimum(k, (best >= NIC_LOCAL).sum(axis=1))
    return pb.min(axis=1), -ph.max(axis=1), gdr, local, pb.sum(axis=1)


def _first_best(*keys: np.ndarray) -> int:
    """Index of the lexicographically largest row of ``keys`` (the first key is primary), the
    first among equals."""
    order = np.lexsort((-np.arange(len(keys[0])),) + tuple(reversed(keys)))
    return int(order[-1])


def _upper_bound(free: list[int], k: int, bw: np.ndarray, hops: np.ndarray,
                 nics: np.ndarray | None) -> SetKey:
    """A key no set of ``k`` free GPUs can exceed."""
    idx = np.array(free)
    sub = bw[np.ix_(idx, idx)]
    iu = np.triu_indices(len(free), 1)
    top = float(sub[iu].max())
    least = int(hops[np.ix_(idx, idx)][iu][sub[iu] == top].min())
    gdr = local = 0
    if nics is not None and nics.shape[1]:
        lv = nics[idx]
        # at most one per GPU, the NICs any free GPU reaches, and what the k GPUs reaching
        # the most of them reach together
        gdr, local = (min(k, int((lv >= lim).any(axis=0).sum()),
                          int(np.sort((lv >= lim).sum(axis=1))[-k:].sum()))
                      for lim in (NIC_GDR, NIC_LOCAL))
    return (top, -least, gdr, local, top * k * (k - 1) / 2)


def _grow(seed: list[int], free: list[int], k: int, bw: np.ndarray, hops: np.ndarray,
          nics: np.ndarray | None = None) -> list[int]:
    """Add to ``seed`` the free GPU that keeps the key (bottleneck, -hops, GPUDirect NICs,
    NUMA-local NICs, sum) highest, to ``k``."""
    chosen = list(seed)
    cand = np.array([i for i in free if i not in chosen])
    cur_min = np.full(len(cand), np.inf)
    cur_hops = np.zeros(len(cand), dtype=np.int64)
    cur_sum = np.zeros(len(cand))
    lv = nics if nics is not None and nics.shape[1] else np.zeros((len(bw), 1), np.int8)
    reach = lv[chosen].max(axis=0) if chosen else np.zeros(lv.shape[1], lv.dtype)
    for c in chosen:
        cur_min = np.minimum(cur_min, bw[cand, c])
        cur_hops = np.maximum(cur_hops, hops[cand, c])
        cur_sum += bw[cand, c]
    alive = np.ones(len(cand), dtype=bool)
    while len(chosen) < k:
        with_c = np.maximum(lv[cand], reach)          # NIC levels the set would reach
        gdr = np.minimum(k, (with_c >= NIC_GDR).sum(axis=1))
        local = np.minimum(k, (with_c >= NIC_LOCAL).sum(axis=1))
        # lexsort: last key is primary; dead candidates sort first, the lowest index wins ties
        order = np.lexsort((-cand, cur_sum, local, gdr, -cur_hops, cur_min, alive))
        pick = int(order[-1])
        g = int(cand[pick])
        chosen.append(g)
        alive[pick] = False
        reach = np.maximum(reach, lv[g])
        cur_min = np.minimum(cur_min, bw[cand, g])
        cur_hops = np.maximum(cur_hops, hops[cand, g])
        cur_sum += bw[cand, g]
    return chosen

"""The best-connected set of GPUs on one node, with devices it must keep, in bounded time.

:func:`preferred_set` answers what a device plugin's ``GetPreferredAllocation`` asks: ``k``
GPUs among the free ones, containing every ``must`` GPU, as well connected as possible. Sets
compare as :func:`gpufabric.scheduler.nodetopo.best_gpu_set` compares them: the widest
bottleneck bandwidth between any two chosen GPUs first, then the fewest links crossed on the
worst pair, then the largest sum of pair bandwidths.

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
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np


def set_key(gpus: Sequence[int], bw: np.ndarray, hops: np.ndarray) -> tuple[float, int, float]:
    """(bottleneck GB/s, -worst hops, sum of pair GB/s) of a set; higher is better.

    Examples
    --------
    >>> bw = np.array([[np.inf, 50.0, 10.0], [50.0, np.inf, 10.0], [10.0, 10.0, np.inf]])
    >>> set_key([0, 1], bw, np.ones((3, 3), int))
    (50.0, -1, 50.0)
    """
    g = list(gpus)
    if len(g) < 2:
        return (math.inf, 0, 0.0)
    idx = np.array(g)
    sub = bw[np.ix_(idx, idx)]
    iu = np.triu_indices(len(g), 1)
    pairs = sub[iu]
    return (float(pairs.min()), -int(hops[np.ix_(idx, idx)][iu].max()), float(pairs.sum()))


def preferred_set(free: Sequence[int], k: int, bw: np.ndarray, hops: np.ndarray,
                  must: Sequence[int] = (), exact_limit: int = 1000) -> tuple[int, ...]:
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
        best = sets[_first_best(*_keys(sets, bw, hops))]
        return tuple(sorted(int(g) for g in best))
    bound = _upper_bound(free, k, bw, hops)
    seeds = [must] if must else [[i] for i in free]
    best_set: list[int] | None = None
    best_key: tuple | None = None
    for seed in seeds:
        chosen = _grow(seed, free, k, bw, hops)
        key = set_key(chosen, bw, hops)
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


def _keys(sets: np.ndarray, bw: np.ndarray, hops: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bottleneck, -worst hops, sum) of each row of ``sets``, vectorized."""
    a, b = np.triu_indices(sets.shape[1], 1)
    pb = bw[sets[:, a], sets[:, b]]
    ph = hops[sets[:, a], sets[:, b]]
    return pb.min(axis=1), -ph.max(axis=1), pb.sum(axis=1)


def _first_best(low: np.ndarray, mid: np.ndarray, high: np.ndarray) -> int:
    """Index of the lexicographically largest (low, mid, high), the first among equals."""
    order = np.lexsort((-np.arange(len(low)), high, mid, low))
    return int(order[-1])


def _upper_bound(free: list[int], k: int, bw: np.ndarray, hops: np.ndarray
                 ) -> tuple[float, int, float]:
    """A key no set of ``k`` free GPUs can exceed."""
    idx = np.array(free)
    sub = bw[np.ix_(idx, idx)]
    iu = np.triu_indices(len(free), 1)
    top = float(sub[iu].max())
    least = int(hops[np.ix_(idx, idx)][iu][sub[iu] == top].min())
    return (top, -least, top * k * (k - 1) / 2)


def _grow(seed: list[int], free: list[int], k: int, bw: np.ndarray, hops: np.ndarray
          ) -> list[int]:
    """Add to ``seed`` the free GPU that keeps (bottleneck, -hops, sum) highest, to ``k``."""
    chosen = list(seed)
    cand = np.array([i for i in free if i not in chosen])
    cur_min = np.full(len(cand), np.inf)
    cur_hops = np.zeros(len(cand), dtype=np.int64)
    cur_sum = np.zeros(len(cand))
    for c in chosen:
        cur_min = np.minimum(cur_min, bw[cand, c])
        cur_hops = np.maximum(cur_hops, hops[cand, c])
        cur_sum += bw[cand, c]
    alive = np.ones(len(cand), dtype=bool)
    while len(chosen) < k:
        # lexsort: last key is primary; dead candidates sort first
        order = np.lexsort((cur_sum, -cur_hops, cur_min, alive))
        pick = int(order[-1])
        g = int(cand[pick])
        chosen.append(g)
        alive[pick] = False
        cur_min = np.minimum(cur_min, bw[cand, g])
        cur_hops = np.maximum(cur_hops, hops[cand, g])
        cur_sum += bw[cand, g]
    return chosen

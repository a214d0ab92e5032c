"""NVIDIA's "best effort" GPU allocator, re-stated from its documented behaviour, for comparison.

NVIDIA's k8s-device-plugin answers the kubelet's ``GetPreferredAllocation`` with the
best-effort policy of NVIDIA/go-gpuallocator (``gpuallocator/besteffort_policy.go``, used by
k8s-device-plugin v0.20.0 ``internal/rm/nvml_manager.go``). What it does, as facts:

- a pair of GPUs scores the sum over the links NVML reports between them: the PCIe level once
  (cross-CPU 10, same CPU 20, host bridge 30, several switches 40, one switch 50, same board 60)
  plus 100 per NVLink that joins the two GPUs directly. On NVSwitch machines an NVLink ends at
  a switch, not at the other GPU, so no NVLink is counted and only PCIe locality is left;
- a set scores the sum of its pairs;
- it does not take the best single set: it walks every partition of the available GPUs into
  sets of ``size`` (padding the list with empty slots to a multiple of ``size``; a set holds
  either no padding or all of it), keeps partitions with a padding-free set containing every
  required GPU, takes the first partition with the highest total, and returns that partition's
  highest-scoring set (the first on ties) that contains the required GPUs; that set may be
  one holding the padding (nothing excludes it), so the answer can be short of ``size``;
- it returns nothing when ``size <= 0``, fewer GPUs are available than ``size``, or more are
  required than ``size``.

The walk is exponential in the number of GPUs (NVIDIA/k8s-device-plugin #774 reports ~30 s),
so :func:`allocate` refuses more than :data:`MAX_GPUS` available GPUs.

Examples
--------
>>> from gpufabric.topology.build import load
>>> t = load("nvlink-bridge-pairs")
>>> allocate(pair_scores(t), [0, 2, 4, 5, 6], [], 2)
(4, 5)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np

from gpufabric.topology.model import GPU, NVSWITCH, Topology
from gpufabric.topology.paths import PEER_KINDS, path

#: PCIe level points (go-gpuallocator ``calculateGPUPairScore``), by nvidia-smi path class.
PCIE_POINTS = {"SYS": 10, "NODE": 20, "PHB": 30, "PXB": 40, "PIX": 50}
#: Points per NVLink joining two GPUs directly.
NVLINK_POINTS = 100
#: The largest GPU count :func:`allocate` walks (the partition count grows factorially).
MAX_GPUS = 12


def _pcie_only(t: Topology) -> Topology:
    """A copy of ``t`` without NVLink / NVSwitch links: what NVML's PCIe level sees."""
    out = Topology(t.name, meta=dict(t.meta))
    for d in t:
        if d.kind != NVSWITCH:
            out.add_device(d)
    for ln in t.links:
        if ln.kind not in PEER_KINDS and ln.a in out.devices and ln.b in out.devices:
            out.add_link(ln)
    return out


def pair_scores(t: Topology, node: int = 0) -> np.ndarray:
    """The best-effort pair score between the GPUs of ``node`` (ordered by index).

    Examples
    --------
    >>> from gpufabric.topology.build import load
    >>> s = pair_scores(load("hgx-h100"))
    >>> int(s[0, 1]), int(s[0, 7])
    (20, 10)
    """
    gpus = sorted(t.gpus(node), key=lambda d: d.index)
    bare = _pcie_only(t)
    n = len(gpus)
    out = np.zeros((n, n), dtype=np.int64)
    for i in range(n):
        for j in range(i + 1, n):
            a, b = gpus[i].id, gpus[j].id
            level = path(bare, a, b).type
            s = PCIE_POINTS.get(level, 10)
            direct = t.link(a, b)
            if direct is not None and direct.kind in PEER_KINDS \
                    and t.devices[b].kind == GPU:
                s += NVLINK_POINTS * direct.count
            out[i, j] = out[j, i] = s
    return out


def set_score(scores: np.ndarray, gpus: Sequence[int | None]) -> int:
    """Sum of the pair scores of a set (padding slots, None, score 0)."""
    real = [g for g in gpus if g is not None]
    return int(sum(scores[a, b] for k, a in enumerate(real) for b in real[k + 1:]))


def _sets(devices: list, size: int) -> Iterator[list]:
    """Sets of ``size`` from ``devices`` in index order (go-gpuallocator ``iterateGPUSets``)."""
    n = len(devices)
    if size <= 0 or size > n:
        return
    idx = list(range(size))
    while True:
        yield [devices[i] for i in idx]
        k = size - 1
        while k >= 0 and idx[k] == n - size + k:
            k -= 1
        if k < 0:
            return
        idx[k] += 1
        for m in range(k + 1, size):
            idx[m] = idx[m - 1] + 1


def _partitions(devices: list, size: int, emit: Callable[[list[list]], None]) -> None:
    if size == 1:
        for d in devices:
            emit([[d]])
        return
    devices = list(devices) + [None] * ((-len(devices)) % size)
    padding = devices.count(None)

    def walk(rest: list, accum: list[list]) -> None:
        if size == len(rest):
            emit(accum + [rest])
            return
        for tail in _sets(rest[1:], size - 1):
            s = [rest[0]] + tail
            p = s.count(None)
            if not (p == 0 or p == padding):
                continue
            # what is left: padding stays only if this set took none of it
            walk([g for g in rest if g not in s], accum + [s])

    walk(devices, [])


def allocate(scores: np.ndarray, available: Sequence[int], required: Sequence[int], size: int
             ) -> tuple[int, ...]:
    """The best-effort answer: GPU indices, or ``()`` where NVIDIA's returns nothing.

    Raises
    ------
    ValueError
        More than :data:`MAX_GPUS` available GPUs (the walk would not finish).
    """
    avail = list(available)
    req = list(required)
    if size <= 0 or len(avail) < size or len(req) > size:
        return ()
    if len(avail) > MAX_GPUS:
        raise ValueError(f"the best-effort walk over {len(avail)} GPUs does not finish "
                         f"(at most {MAX_GPUS})")
    best: list[list] | None = None
    best_score = 0

    def consider(part: list[list]) -> None:
        nonlocal best, best_score
        if not any(all(r in s for r in req) and None not in s for s in part):
            return
        sc = sum(set_score(scores, s) for s in part)
        if best is None or sc > best_score:
            best, best_score = part, sc

    _partitions(avail, size, consider)
    if best is None:
        return ()
    keep = [s for s in best if all(r in s for r in req)]
    if not keep:
        return ()
    pick = keep[0]
    for s in keep[1:]:
        if set_score(scores, s) > set_score(scores, pick):
            pick = s
    return tuple(sorted(g for g in pick if g is not None))

"""The inside of one node: a topology per node model, and the bottleneck bandwidth between GPUs.

The openb trace names GPU models but not how the GPUs of a node are wired. gpufabric maps each
(model, GPU count) to a plausible server (see ``docs/scheduler.md``, "Node topologies"):

======================  ==============================================================
openb node              modelled as
======================  ==============================================================
V100M16/V100M32 x 8     DGX-1V: NVLink2 hybrid cube mesh (6 links per GPU), 4 PCIe Gen3
                        switches (2 GPUs each), 2 sockets
V100M16/V100M32 x 4     4 SXM2 GPUs fully connected by NVLink2 (2 links per pair), 1 socket
G3 x 8                  HGX-like: 8 GPUs on one NVSwitch fabric (undisclosed model, assumed
                        A100-class, NVLink3 12 links)
G2 x 8                  4U 8-GPU PCIe Gen4 server: 4 PCIe switches (2 GPUs each), 2 per socket
T4 x 4                  PCIe Gen3, two GPUs on each socket's root ports
T4 / P100 x 2           PCIe Gen3, one GPU on each socket
x 1                     one GPU on a PCIe Gen3 root port
TPU slice               chips on a 2D/3D ICI torus (each chip linked to its torus neighbours)
anything else with n    PCIe Gen4, GPUs split evenly over 2 sockets
======================  ==============================================================

Bandwidths (GB/s per direction, raw signalling rates): NVLink2 25 per link and NVLink3 25 per
link (V100 / A100 datasheets: 300 / 600 GB/s bidirectional over 6 / 12 links), PCIe Gen3 x16
15.75, Gen4 x16 31.5 (PCI-SIG), inter-socket link 38.4 (two QPI/UPI links at 9.6 GT/s),
TPU v4 ICI 45 per link (Google Cloud TPU v4 system architecture page: 6 links per chip, ~270
GB/s per chip per direction, rounded).

The topology policy asks :func:`pair_bandwidth` for a matrix of bottleneck bandwidth between the
GPUs of a node: the widest path that does not pass through another GPU (peer-to-peer traffic
is not forwarded by GPUs). When :mod:`gpufabric.topology.paths` provides ``gpu_pair_bw`` it is
used instead for topologies from system presets.
"""

from __future__ import annotations

import heapq
import itertools
from functools import lru_cache

import numpy as np

from gpufabric.topology.model import CPU, GPU, NVSWITCH, PCIE_SWITCH, Device, Link, Topology

NVLINK2_GBPS = 25.0
NVLINK3_GBPS = 25.0
PCIE3_X16 = 15.75
PCIE4_X16 = 31.5
INTERSOCKET = 38.4
TPU_ICI = 45.0

#: DGX-1V hybrid cube mesh: (gpu a, gpu b, NVLink count).
DGX1_MESH = ((0, 1, 1), (0, 2, 1), (0, 3, 2), (0, 4, 2), (1, 2, 2), (1, 3, 1), (1, 5, 2),
             (2, 3, 2), (2, 6, 1), (3, 7, 1), (4, 5, 1), (4, 6, 1), (4, 7, 2), (5, 6, 2),
             (5, 7, 1), (6, 7, 2))


def _host(t: Topology, sockets: int) -> None:
    for s in range(sockets):
        t.add_device(Device(f"n0.cpu{s}", CPU, numa=s, index=s))
    if sockets == 2:
        t.add_link(Link("n0.cpu0", "n0.cpu1", "cpu", INTERSOCKET, lat_us=0.2))


def _gpus(t: Topology, n: int, model: str, sockets: int) -> None:
    for i in range(n):
        t.add_device(Device(f"n0.gpu{i}", GPU, model, index=i, numa=i * sockets // n))


def build_node(model: str, gpus: int, *, name: str | None = None) -> Topology:
    """A one-node :class:`Topology` for an openb (or TPU) node model with ``gpus`` devices.

    Examples
    --------
    >>> t = build_node("V100M32", 8)
    >>> t.link("n0.gpu0", "n0.gpu3").count, t.link("n0.gpu0", "n0.gpu5") is None
    (2, True)
    """
    t = Topology(name or f"{model}x{gpus}", meta={"model": model, "gpus": gpus})
    up = model.upper()
    if up.startswith("TPU"):
        _host(t, 1)
        _gpus(t, gpus, model, 1)
        dims = _torus_dims(gpus)
        for i in range(gpus):
            t.add_link(Link("n0.cpu0", f"n0.gpu{i}", "pcie", PCIE4_X16, lat_us=1.0, lanes=16,
                            gen=4))
            for j in _torus_neighbours(i, dims):
                if j > i and t.link(f"n0.gpu{i}", f"n0.gpu{j}") is None:
                    t.add_link(Link(f"n0.gpu{i}", f"n0.gpu{j}", "nvlink", TPU_ICI, lat_us=1.0,
                                    attrs={"ici": True}))
        t.meta["scale_up"] = "ici-torus"
        return t
    if up.startswith("V100") and gpus == 8:
        _host(t, 2)
        _gpus(t, 8, model, 2)
        for s in range(4):
            t.add_device(Device(f"n0.sw{s}", PCIE_SWITCH, index=s, numa=s // 2))
            t.add_link(Link(f"n0.cpu{s // 2}", f"n0.sw{s}", "pcie", PCIE3_X16, 0.5, lanes=16,
                            gen=3, attrs={"host_bridge": s % 2}))
            for g in (2 * s, 2 * s + 1):
                t.add_link(Link(f"n0.sw{s}", f"n0.gpu{g}", "pcie", PCIE3_X16, 0.5, lanes=16,
                                gen=3))
        for a, b, c in DGX1_MESH:
            t.add_link(Link(f"n0.gpu{a}", f"n0.gpu{b}", "nvlink", NVLINK2_GBPS * c, 0.7,
                            count=c, gen=2))
        t.meta["scale_up"] = "nvlink-mesh"
        return t
    if up.startswith("V100") and gpus == 4:
        _host(t, 1)
        _gpus(t, 4, model, 1)
        for g in range(4):
            t.add_link(Link("n0.cpu0", f"n0.gpu{g}", "pcie", PCIE3_X16, 0.5, lanes=16, gen=3,
                            attrs={"host_bridge": g // 2}))
        for a, b in itertools.combinations(range(4), 2):
            t.add_link(Link(f"n0.gpu{a}", f"n0.gpu{b}", "nvlink", NVLINK2_GBPS * 2, 0.7,
                            count=2, gen=2))
        t.meta["scale_up"] = "nvlink-mesh"
        return t
    if up == "G3" and gpus == 8:
        _host(t, 2)
        _gpus(t, 8, model, 2)
        t.add_device(Device("n0.nvsw", NVSWITCH))
        for g in range(8):
            t.add_link(Link("n0.nvsw", f"n0.gpu{g}", "nvlink", NVLINK3_GBPS * 12, 0.7,
                            count=12, gen=3))
            t.add_link(Link(f"n0.cpu{g // 4}", f"n0.gpu{g}", "pcie", PCIE4_X16, 0.5,
                            lanes=16, gen=4, attrs={"host_bridge": g % 4}))
        t.meta["scale_up"] = "nvswitch"
        return t
    if gpus == 8:
        _host(t, 2)
        _gpus(t, 8, model, 2)
        for s in range(4):
            t.add_device(Device(f"n0.sw{s}", PCIE_SWITCH, index=s, numa=s // 2))
            t.add_link(Link(f"n0.cpu{s // 2}", f"n0.sw{s}", "pcie", PCIE4_X16, 0.5, lanes=16,
                            gen=4, attrs={"host_bridge": s % 2}))
            for g in (2 * s, 2 * s + 1):
                t.add_link(Link(f"n0.sw{s}", f"n0.gpu{g}", "pcie", PCIE4_X16, 0.5, lanes=16,
                                gen=4))
        t.meta["scale_up"] = "pcie"
        return t
    sockets = 1 if gpus == 1 else 2
    bw, gen = (PCIE3_X16, 3) if up in ("T4", "P100", "A10") or up.startswith("V100") \
        else (PCIE4_X16, 4)
    _host(t, sockets)
    _gpus(t, gpus, model, sockets)
    for g in range(gpus):
        s = g * sockets // gpus
        t.add_link(Link(f"n0.cpu{s}", f"n0.gpu{g}", "pcie", bw, 0.5, lanes=16, gen=gen,
                        attrs={"host_bridge": g}))
    t.meta["scale_up"] = "pcie"
    return t


def _torus_dims(n: int) -> tuple[int, ...]:
    if n <= 4:
        return (n,) if n < 4 else (2, 2)
    if n == 8:
        return (2, 4)
    side = int(round(n ** (1 / 3)))
    if side ** 3 == n:
        return (side, side, side)
    for a in range(int(n ** 0.5), 0, -1):
        if n % a == 0:
            return (a, n // a)
    return (n,)


def _torus_neighbours(i: int, dims: tuple[int, ...]) -> list[int]:
    coords = list(np.unravel_index(i, dims))
    out = []
    for d, size in enumerate(dims):
        if size == 1:
            continue
        for step in (-1, 1):
            c = coords.copy()
            c[d] = (c[d] + step) % size
            out.append(int(np.ravel_multi_index(c, dims)))
    return out


def widest_paths(topo: Topology, node: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(bottleneck GB/s, hops) between every pair of GPUs of ``node``.

    The widest path may not pass through another GPU. Among equally wide paths the one with
    fewer hops is kept. The diagonal is ``inf`` bandwidth and 0 hops.

    Examples
    --------
    >>> bw, hops = widest_paths(build_node("T4", 2))
    >>> float(bw[0, 1]), int(hops[0, 1])
    (15.75, 3)
    """
    gpus = [d.id for d in topo.gpus(node)]
    n = len(gpus)
    bw = np.full((n, n), np.inf)
    hops = np.zeros((n, n), dtype=np.int64)
    kinds = {d.id: d.kind for d in topo}
    forwards = topo.meta.get("scale_up") == "ici-torus"  # TPU chips route ICI traffic
    for i, src in enumerate(gpus):
        best: dict[str, tuple[float, int]] = {src: (np.inf, 0)}
        heap = [(-np.inf, 0, src)]
        done = set()
        while heap:
            negw, h, u = heapq.heappop(heap)
            if u in done:
                continue
            done.add(u)
            if u != src and kinds[u] == GPU and not forwards:
                continue  # do not forward through a GPU
            for v, link in topo.neighbors(u):
                w = min(-negw, link.bw_GBps)
                cur = best.get(v)
                if cur is None or w > cur[0] or (w == cur[0] and h + 1 < cur[1]):
                    best[v] = (w, h + 1)
                    heapq.heappush(heap, (-w, h + 1, v))
        for j, dst in enumerate(gpus):
            if j != i:
                w, h = best.get(dst, (0.0, 99))
                bw[i, j], hops[i, j] = w, h
    return bw, hops


def pair_bandwidth(topo: Topology, node: int = 0) -> np.ndarray:
    """Bottleneck bandwidth (GB/s) between GPU i and j of a node, order ``topo.gpus(node)``.

    Uses :func:`gpufabric.topology.paths.gpu_pair_bw` when that module exists, else
    :func:`widest_paths`. The diagonal is ``inf``.
    """
    try:
        from gpufabric.topology.paths import gpu_pair_bw  # type: ignore
    except ImportError:
        return widest_paths(topo, node)[0]
    bw = np.array(gpu_pair_bw(topo, node=node), dtype=float)
    np.fill_diagonal(bw, np.inf)  # same convention as widest_paths
    return bw


@lru_cache(maxsize=None)
def node_tables(model: str, gpus: int) -> tuple[np.ndarray, np.ndarray]:
    """Cached (bandwidth, hops) matrices for an openb-style node model."""
    return widest_paths(build_node(model, gpus))


def best_gpu_set(free: list[int], k: int, bw: np.ndarray, hops: np.ndarray
                 ) -> tuple[tuple[int, ...], float, int]:
    """The ``k`` GPUs among ``free`` with the widest bottleneck, then the fewest hops.

    Returns (GPU indices, bottleneck GB/s, worst hop count); ``inf`` bandwidth for one GPU.

    Examples
    --------
    >>> bw, hops = node_tables("V100M32", 8)
    >>> best_gpu_set([0, 1, 2, 3, 4, 5, 6, 7], 2, bw, hops)[:2]
    ((0, 3), 50.0)
    """
    if k <= 1:
        return (tuple(free[:1]), np.inf, 0)
    best = None
    for combo in itertools.combinations(free, k):
        idx = np.array(combo)
        sub = bw[np.ix_(idx, idx)]
        w = float(sub.min())
        h = int(hops[np.ix_(idx, idx)].max())
        s = float(sub[np.isfinite(sub)].sum())
        key = (w, -h, s)
        if best is None or key > best[0]:
            best = (key, combo)
    return best[1], best[0][0], -best[0][1]

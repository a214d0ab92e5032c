"""The inside of one node for scheduling: a topology per node model, and GPU-pair tables.

The openb trace names GPU models but not how the GPUs of a node are wired. Each (model, GPU
count) maps to a spec in the shorthand of docs/systems.md, built by
:mod:`gpufabric.topology.build` with the catalog's rates, like any other system:

======================  ==============================================================
openb node              spec
======================  ==============================================================
V100M16/V100M32 x 8     DGX-1V: V100 SXM2 in the NVLink2 hybrid cube-mesh, 4 PCIe Gen3
                        switches (2 GPUs each), 2x Xeon E5-2698 v4
V100M16/V100M32 x 4     4 V100 SXM2 fully meshed by NVLink2 (2 links per pair), 2 PCIe
                        switches on one Xeon E5-2698 v4
G3 x 8                  HGX-like: 8 GPUs on one NVSwitch fabric (undisclosed model,
                        assumed A100-SXM4-80GB)
G1/G2 x 8               4U 8-GPU PCIe Gen4 server (undisclosed model, assumed A100-PCIe),
                        4 PCIe switches (2 GPUs each), 2 per socket, 2x EPYC Milan
T4 / P100 / A10 x n     the card on PCIe Gen3/Gen4 root ports of a Xeon Gold 6226R host
                        (one socket for one GPU, else two; behind PCIe switches, two cards
                        each, beyond 4 cards)
TPU slice               chips on a 2D/3D ICI torus (each chip linked to its torus
                        neighbours; chips forward traffic, so paths may pass through them)
anything else           an A100-PCIe-class card, wired as above
======================  ==============================================================

The topology policy asks :func:`tables` for the bottleneck bandwidth and the links crossed
between every pair of GPUs: :func:`gpufabric.topology.paths.gpu_pair_tables`, the same paths
``gpufabric show`` prints (a TPU slice is marked ``peer_forwarding``: its chips route ICI
traffic onward, and ``topology.paths`` follows the widest chain of ICI links).
"""

from __future__ import annotations

import itertools
import math
from functools import cache

import numpy as np

from gpufabric.scheduler.gpuset import nic_counts, set_key
from gpufabric.topology.build import from_spec
from gpufabric.topology.model import CPU, GPU, Device, Link, Topology
from gpufabric.topology.paths import gpu_pair_tables

#: PCIe Gen4 x16 host link of a TPU chip and one ICI link, GB/s per direction (Google Cloud
#: TPU v4 system architecture page: 6 ICI links per chip, ~270 GB/s per chip per direction).
PCIE4_X16 = 31.5
TPU_ICI = 45.0


#: GPU models of the openb node lists (G1, G2, G3 are undisclosed codes; README of
#: alibaba/clusterdata cluster-trace-gpu-v2023).
OPENB_MODELS = ("A10", "G1", "G2", "G3", "P100", "T4", "V100M16", "V100M32")


def node_spec(model: str, gpus: int) -> dict:
    """The shorthand spec of an openb GPU node (see the module doc).

    Examples
    --------
    >>> node_spec("T4", 2)["host"]
    {'cpu': 'Xeon-Gold-6226R', 'sockets': 2, 'pcie_switches': 0}
    """
    up = model.upper()
    if up.startswith("V100") and gpus in (4, 8):
        gpu = "V100-SXM2-16GB" if "16" in up else "V100-SXM2-32GB"
        host = {"cpu": "Xeon-E5-2698-v4", "sockets": 2 if gpus == 8 else 1,
                "pcie_switches": gpus // 2, "switch": "PEX8796"}
        return {"gpu": gpu, "gpus_per_node": gpus, "scale_up": "nvlink-mesh",
                "mesh": "hybrid-cube" if gpus == 8 else "full", "host": host}
    if up == "G3" and gpus == 8:
        return {"gpu": "A100-SXM4-80GB", "gpus_per_node": 8, "scale_up": "nvswitch"}
    # PCIe cards: on root ports up to 4, behind PCIe switches (2 cards each) beyond
    host = {"sockets": 1 if gpus == 1 else 2, "pcie_switches": gpus // 2 if gpus > 4 else 0}
    if up in ("T4", "P100", "A10") or up.startswith("V100"):
        gpu = up if not up.startswith("V100") else (
            "V100-SXM2-16GB" if "16" in up else "V100-SXM2-32GB")
        return {"gpu": gpu, "gpus_per_node": gpus, "scale_up": "pcie",
                "host": {"cpu": "Xeon-Gold-6226R", **host}}
    return {"gpu": "A100-PCIe", "gpus_per_node": gpus, "scale_up": "pcie", "host": host}


def _tpu_slice(t: Topology, model: str, chips: int) -> None:
    t.add_device(Device("n0.cpu0", CPU, numa=0))
    dims = _torus_dims(chips)
    for i in range(chips):
        t.add_device(Device(f"n0.gpu{i}", GPU, model, index=i, numa=0))
        t.add_link(Link("n0.cpu0", f"n0.gpu{i}", "pcie", PCIE4_X16, lat_us=1.0, lanes=16,
                        gen=4))
    for i, j in _torus_links(dims):
        t.add_link(Link(f"n0.gpu{i}", f"n0.gpu{j}", "nvlink", TPU_ICI, lat_us=1.0,
                        attrs={"ici": True}))
    t.meta["scale_up"] = "ici-torus"
    t.meta["peer_forwarding"] = True   # chips route ICI traffic onward (topology.paths)


def build_node(model: str, gpus: int, *, name: str | None = None) -> Topology:
    """A one-node :class:`Topology` for an openb (or TPU) node model with ``gpus`` devices.

    Examples
    --------
    >>> t = build_node("V100M32", 8)
    >>> t.link("n0.gpu0", "n0.gpu3").count, t.link("n0.gpu0", "n0.gpu5") is None
    (2, True)
    """
    if model.upper().startswith("TPU"):
        t = Topology(name or f"{model}x{gpus}", meta={"model": model, "gpus": gpus})
        _tpu_slice(t, model, gpus)
        return t
    t = from_spec(node_spec(model, gpus), name=name or f"{model}x{gpus}",
                  file=f"openb node model {model}x{gpus}")
    t.meta["model"] = model
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


def _torus_links(dims: tuple[int, ...]) -> list[tuple[int, int]]:
    """Chip pairs (i < j, row-major chip numbers) a torus of ``dims`` links, via networkx."""
    import networkx as nx
    g = nx.grid_graph(dim=list(reversed(dims)), periodic=True)

    def chip(c) -> int:
        return int(np.ravel_multi_index(c if isinstance(c, tuple) else (c,),
                                        dims))
    return sorted({(min(chip(a), chip(b)), max(chip(a), chip(b))) for a, b in g.edges()
                   if a != b})


def tables(topo: Topology, node: int = 0, domain: bool = False
           ) -> tuple[np.ndarray, np.ndarray]:
    """(bottleneck GB/s, links crossed) between every pair of accelerators; diagonal inf / 0.

    The paths are :func:`gpufabric.topology.paths.gpu_pair_tables`' (what ``gpufabric show``
    prints and the collectives see): NVLink or an NVSwitch fabric, else PCIe through switches
    and CPUs, never forwarded by another GPU; on a TPU torus (chips forward ICI traffic) the
    widest chain of ICI links.

    Examples
    --------
    >>> bw, hops = tables(build_node("T4", 2))
    >>> float(bw[0, 1]), int(hops[0, 1])
    (15.75, 3)
    """
    bw, hops = gpu_pair_tables(topo, node, domain)
    np.fill_diagonal(bw, np.inf)
    return bw, hops


#: The name this function had when the scheduler ran its own widest-path search; kept for
#: callers of the public API.
widest_paths = tables


@cache
def node_tables(model: str, gpus: int) -> tuple[np.ndarray, np.ndarray]:
    """Cached :func:`tables` of an openb-style node model."""
    return tables(build_node(model, gpus))


def best_gpu_set(free: list[int], k: int, bw: np.ndarray, hops: np.ndarray,
                 nics: np.ndarray | None = None) -> tuple[tuple[int, ...], float, int]:
    """The ``k`` GPUs among ``free`` with the widest bottleneck, then the fewest hops, then the
    most NICs by GPUDirect RDMA and on their NUMA nodes (``nics``:
    :func:`gpufabric.topology.paths.gpu_nic_levels`), then the largest sum: the order of
    :func:`gpufabric.scheduler.gpuset.set_key`.

    Returns (GPU indices, bottleneck GB/s, worst hop count); ``inf`` bandwidth for one GPU.

    Examples
    --------
    >>> bw, hops = node_tables("V100M32", 8)
    >>> best_gpu_set([0, 1, 2, 3, 4, 5, 6, 7], 2, bw, hops)[:2]
    ((0, 3), 50.0)
    """
    if k <= 1:
        return (tuple(free[:1]), np.inf, 0)
    if len(free) < k:
        raise ValueError(f"{k} GPUs asked, {len(free)} free")
    if math.comb(len(free), k) > EXHAUSTIVE_SETS:
        return _greedy_gpu_set(free, k, bw, hops, nics)
    best: tuple[tuple, tuple[int, ...]] | None = None
    for combo in itertools.combinations(free, k):
        best = _better(best, combo, bw, hops, nics)
    assert best is not None
    return best[1], best[0][0], -best[0][1]


#: Beyond this many candidate GPU sets (C(free, k)) :func:`best_gpu_set` grows sets greedily:
#: an 8-GPU node has at most 70, a 16-GPU one 12,870; 128 GPUs choose 8 would be 1.4e12.
EXHAUSTIVE_SETS = 20_000


def _better(best, combo: tuple[int, ...], bw: np.ndarray, hops: np.ndarray,
            nics: np.ndarray | None = None):
    key = set_key(combo, bw, hops, nics)
    return (key, combo) if best is None or key > best[0] else best


def _greedy_gpu_set(free: list[int], k: int, bw: np.ndarray, hops: np.ndarray,
                    nics: np.ndarray | None = None) -> tuple[tuple[int, ...], float, int]:
    """From each free GPU, add the GPU that keeps the set widest (then nearest, then reaching
    the most NICs); the best."""
    best = None
    for seed in free:
        chosen = [seed]
        rest = [g for g in free if g != seed]
        while len(chosen) < k:
            sub_bw = bw[np.ix_(rest, chosen)].min(axis=1)
            sub_h = hops[np.ix_(rest, chosen)].max(axis=1)
            reach = [nic_counts(chosen + [g], nics) for g in rest] if nics is not None \
                else [(0, 0)] * len(rest)
            pick = max(range(len(rest)),
                       key=lambda j: (sub_bw[j], -sub_h[j], *reach[j], -rest[j]))
            chosen.append(rest.pop(pick))
        best = _better(best, tuple(sorted(chosen)), bw, hops, nics)
    assert best is not None
    return best[1], best[0][0], -best[0][1]

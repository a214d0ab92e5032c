"""Paths between devices of one server, classified as ``nvidia-smi topo -m`` names them.

For every pair of GPUs (and GPU-NIC, NIC-NIC) :func:`path` gives the path type (``X``,
``NV#``, ``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS``), the links crossed, the bottleneck
bandwidth, the latency and whether peer-to-peer is used. P2P needs GPUs that allow it
(GeForce cards with the stock driver do not) and a path no farther than NCCL uses P2P over on
that host (:func:`p2p_level`: across sockets on AMD, not across sockets on Intel). Without P2P
data bounces through host memory, so the links crossed run up to the CPU and down again even
when the two devices share a PCIe switch. For a GPU and a NIC, ``p2p`` means GPUDirect RDMA,
which NCCL uses by default only below the CPU (PIX/PXB).

Examples
--------
>>> from gpufabric.topology.build import from_spec
>>> t = from_spec({"gpu": "H100-SXM", "gpus_per_node": 8})
>>> p = path(t, "n0.gpu0", "n0.gpu5")
>>> p.type, p.bw_GBps, p.p2p
('NV18', 450.0, True)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpufabric import catalog
from gpufabric.topology.model import CPU, GPU, NVSWITCH, Link, Topology

PEER_KINDS = ("nvlink", "xgmi")


@dataclass
class Path:
    """How data gets from ``a`` to ``b``."""

    a: str
    b: str
    type: str
    links: list[tuple[str, str, str]] = field(default_factory=list)  # (from, to, kind)
    bw_GBps: float = 0.0
    lat_us: float = 0.0
    p2p: bool = True
    via_host: bool = False

    @property
    def hops(self) -> int:
        return len(self.links)


def upstream(t: Topology, dev_id: str) -> list[tuple[str, Link | None]]:
    """The PCIe chain from a device up to its CPU: ``[(dev, None), (sw, link), ..., (cpu, link)]``.

    Each link is the one crossed to reach that element from the previous one.
    """
    chain: list[tuple[str, Link | None]] = [(dev_id, None)]
    cur = dev_id
    seen = {cur}
    while t.devices[cur].kind != CPU:
        ups = [(n, ln) for n, ln in t.neighbors(cur)
               if ln.b == cur and (ln.kind == "pcie" or (ln.kind == "c2c" and cur == dev_id))]
        if not ups:
            break
        nxt, link = ups[0]
        if nxt in seen:
            break
        seen.add(nxt)
        chain.append((nxt, link))
        cur = nxt
    return chain


def _peer(t: Topology, x: str, y: str) -> tuple[int, list[Link]] | None:
    """NVLink / Infinity Fabric: a direct bundle, or both on one NVSwitch fabric; on a fabric
    whose accelerators forward traffic (``meta['peer_forwarding']``, a TPU ICI torus), the
    widest chain of peer links, fewest hops among equally wide ones."""
    direct = t.link(x, y)
    if direct is not None and direct.kind in PEER_KINDS:
        return direct.count, [direct]
    for hub, lx in t.neighbors(x):
        if t.devices[hub].kind == NVSWITCH and lx.kind in PEER_KINDS:
            ly = t.link(y, hub)
            if ly is not None and ly.kind in PEER_KINDS:
                return min(lx.count, ly.count), [lx, ly]
    if t.meta.get("peer_forwarding"):
        return _forwarded_peer(t, x, y)
    return None


def _forwarded_peer(t: Topology, x: str, y: str) -> tuple[int, list[Link]] | None:
    """Widest, then shortest, chain of peer links from ``x`` to ``y`` (networkx)."""
    import networkx as nx
    g = nx.Graph()
    g.add_edges_from((ln.a, ln.b, {"bw": ln.bw_GBps, "link": ln}) for ln in t.links
                     if ln.kind in PEER_KINDS)
    if x not in g or y not in g or not nx.has_path(g, x, y):
        return None
    tree = nx.maximum_spanning_tree(g, weight="bw")
    walk = nx.shortest_path(tree, x, y)      # a widest path lies in the maximum spanning tree
    width = min(tree[u][v]["bw"] for u, v in zip(walk, walk[1:], strict=False))
    wide = nx.subgraph_view(g, filter_edge=lambda u, v: g[u][v]["bw"] >= width)
    walk = nx.shortest_path(wide, x, y)      # fewest hops among the widest
    links = [g[u][v]["link"] for u, v in zip(walk, walk[1:], strict=False)]
    return min(ln.count for ln in links), links


#: nvidia-smi path classes through PCIe, nearest first.
PCIE_PATHS = ("PIX", "PXB", "PHB", "NODE", "SYS")


def _gpu_p2p_capable(t: Topology, dev_id: str) -> bool:
    """The hardware and driver allow PCIe peer-to-peer (the spec's ``p2p`` decides if given)."""
    d = t.devices[dev_id]
    if d.kind != GPU:
        return True
    if t.meta.get("p2p") is not None:   # the spec's (or system's) word on P2P decides
        return bool(t.meta["p2p"])
    if "p2p" in d.attrs:
        return bool(d.attrs["p2p"])
    return catalog.gpu(d.model).p2p_pcie if d.model else True


def p2p_level(t: Topology, dev_id: str) -> str:
    """The farthest path class over which NCCL uses GPU peer-to-peer by default on this host.

    NCCL src/graph/paths.cc (ncclTopoCheckP2p) decides by CPU: AMD up to SYS, Intel up to PHB
    (nvidia-smi PHB and NODE), Broadwell and ARM up to PXB; the catalog keeps it per CPU
    (``CPU.p2p_level``). Newer NCCL releases default to PXB except on 2-GPU AMD hosts.
    """
    d = t.devices[dev_id]
    cpu = next((c for c in t.of_kind(CPU, d.node) if c.model), None)
    return catalog.cpu(cpu.model).p2p_level if cpu else "NODE"


def _cpu_link(t: Topology, a: str, b: str) -> Link | None:
    link = t.link(a, b)
    if link is not None:
        return link
    return next((ln for ln in t.links if ln.kind == "cpu"), None)


def _p2c(t: Topology, cx: list, cy: list) -> bool:
    """A GPU on NVLink-C2C to the CPU whose root port holds the NIC: NCCL's ``PATH_P2C``,
    where GPUDirect RDMA runs through the CPU (``NCCL_NET_GDR_C2C``, on by default since NCCL
    2.27; src/graph/paths.cc)."""
    if cx[-1][0] != cy[-1][0] or t.devices[cx[-1][0]].kind != CPU:
        return False
    return any(len(c) == 2 and c[1][1] is not None and c[1][1].kind == "c2c" for c in (cx, cy))


def path(t: Topology, x: str, y: str) -> Path:
    """Classify and describe the path between two devices of the same server."""
    if x == y:
        return Path(x, y, "X", [], float("inf"), 0.0, True)
    peer = _peer(t, x, y)
    if peer is not None:
        count, links = peer
        return Path(x, y, f"NV{count}", [(ln.a, ln.b, ln.kind) for ln in links],
                    min(ln.bw_GBps for ln in links), sum(ln.lat_us for ln in links), True)
    cx, cy = upstream(t, x), upstream(t, y)
    ids_y = [d for d, _ in cy]
    lca_i = next((i for i, (d, _) in enumerate(cx[1:], 1) if d in ids_y), None)
    if lca_i is not None and t.devices[cx[lca_i][0]].kind != CPU:
        lca_j = ids_y.index(cx[lca_i][0])
        switches = lca_i + lca_j - 1   # switches crossed: those below the LCA on both sides + LCA
        ptype = "PIX" if switches == 1 else "PXB"
    else:
        cpu_x, cpu_y = cx[-1][0], cy[-1][0]
        if t.devices[cpu_x].kind != CPU or t.devices[cpu_y].kind != CPU:
            return Path(x, y, "SYS", [], 0.0, 0.0, False, via_host=True)
        if cpu_x != cpu_y:
            ptype = "SYS"
        else:
            hb_x = cx[-1][1].attrs.get("host_bridge") if cx[-1][1] else None
            hb_y = cy[-1][1].attrs.get("host_bridge") if cy[-1][1] else None
            numa_x, numa_y = t.devices[x].numa, t.devices[y].numa
            if numa_x != numa_y and numa_x >= 0 and numa_y >= 0:
                ptype = "SYS"
            elif hb_x == hb_y:
                ptype = "PHB"
            else:
                ptype = "NODE"
    kinds = {t.devices[x].kind, t.devices[y].kind}
    if kinds == {GPU}:
        p2p = (PCIE_PATHS.index(ptype) <= PCIE_PATHS.index(p2p_level(t, x))
               and _gpu_p2p_capable(t, x) and _gpu_p2p_capable(t, y))
    elif GPU in kinds:   # GPUDirect RDMA: NCCL's netGdrLevel, PXB (P2C on C2C hosts)
        p2p = (ptype in ("PIX", "PXB") or _p2c(t, cx, cy)) and all(
            _gpu_p2p_capable(t, d) for d in (x, y) if t.devices[d].kind == GPU)
    else:
        p2p = ptype in ("PIX", "PXB")
    if p2p and lca_i is not None and ptype in ("PIX", "PXB"):
        up = [ln for _, ln in cx[1:lca_i + 1]]
        down = [ln for _, ln in cy[1:ids_y.index(cx[lca_i][0]) + 1]]
    else:   # through the CPU (and, without P2P, through host memory)
        up = [ln for _, ln in cx[1:]]
        down = [ln for _, ln in cy[1:]]
        if cx[-1][0] != cy[-1][0]:
            cl = _cpu_link(t, cx[-1][0], cy[-1][0])
            up = up + ([cl] if cl else [])
    links = [ln for ln in up + list(reversed(down)) if ln is not None]
    bw = min((ln.bw_GBps for ln in links), default=0.0)
    return Path(x, y, ptype, [(ln.a, ln.b, ln.kind) for ln in links], bw,
                sum(ln.lat_us for ln in links), p2p, via_host=not p2p)


def endpoints(t: Topology, node: int = 0) -> list[tuple[str, str]]:
    """(label, device id) of a node's GPUs then NICs, as nvidia-smi lists them."""
    t.check_node(node)
    gpus = sorted(t.gpus(node), key=lambda d: d.index)
    nics = sorted(t.nics(node), key=lambda d: d.index)
    return [(f"GPU{d.index}", d.id) for d in gpus] + [(f"NIC{d.index}", d.id) for d in nics]


def matrix(t: Topology, node: int = 0) -> tuple[list[str], list[list[Path]]]:
    """Labels and the square matrix of :class:`Path` for a node's GPUs and NICs."""
    ends = endpoints(t, node)
    return [lab for lab, _ in ends], [[path(t, a, b) for _, b in ends] for _, a in ends]


def domain_gpus(t: Topology, node: int = 0, domain: bool = False) -> list:
    """The GPUs of server ``node`` by index, or with ``domain`` those of its whole NVLink
    domain (every tray of a GB200 NVL72 rack), node by node."""
    gpus = sorted(t.gpus(node), key=lambda d: d.index)
    if domain and gpus:
        dom = t.domain_of(gpus[0].id)
        gpus = sorted((g for g in t.gpus() if t.domain_of(g.id) == dom),
                      key=lambda d: (d.node, d.index))
    return gpus


def gpu_pair_tables(t: Topology, node: int = 0, domain: bool = False
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Bottleneck bandwidth (GB/s per direction) and links crossed between GPU i and GPU j.

    Order is :func:`domain_gpus` (``t.gpus(node)`` by index, or with ``domain`` the GPUs of
    the node's whole NVLink domain); the diagonal is 0 in both.

    Examples
    --------
    >>> from gpufabric.topology.build import from_spec
    >>> bw, hops = gpu_pair_tables(from_spec({"gpu": "T4", "gpus_per_node": 2}))
    >>> float(bw[0, 1]), int(hops[0, 1])
    (15.75, 3)
    """
    gpus = [d.id for d in domain_gpus(t, node, domain)]
    bw = np.zeros((len(gpus), len(gpus)))
    hops = np.zeros((len(gpus), len(gpus)), dtype=np.int64)
    for i, a in enumerate(gpus):
        for j in range(i + 1, len(gpus)):
            p = path(t, a, gpus[j])
            bw[i, j] = bw[j, i] = p.bw_GBps
            hops[i, j] = hops[j, i] = p.hops
    return bw, hops


def gpu_pair_bw(t: Topology, node: int = 0) -> np.ndarray:
    """Bottleneck bandwidth (GB/s per direction) between GPU i and GPU j of a node.

    Order is ``t.gpus(node)`` by index; the diagonal is 0.

    Examples
    --------
    >>> from gpufabric.topology.build import from_spec
    >>> float(gpu_pair_bw(from_spec({"gpu": "H100-SXM", "gpus_per_node": 2}))[0, 1])
    450.0
    """
    return gpu_pair_tables(t, node)[0]


#: :func:`gpu_nic_levels` values: GPUDirect RDMA (the NIC reads and writes GPU memory over a
#: PCIe switch, PIX/PXB, or NVLink-C2C to its CPU), through a CPU of the same NUMA node
#: (PHB/NODE: data bounces through host memory), across sockets or servers (SYS).
NIC_GDR, NIC_LOCAL, NIC_REMOTE = 2, 1, 0


def gpu_nic_levels(t: Topology, node: int = 0, domain: bool = False) -> np.ndarray:
    """How each GPU reaches each NIC: :data:`NIC_GDR`, :data:`NIC_LOCAL` or :data:`NIC_REMOTE`.

    Rows are :func:`domain_gpus` (the node's GPUs, or with ``domain`` its whole NVLink
    domain), columns the NICs of the servers those GPUs are in, node by node, by index. The
    level is :func:`path`'s: ``p2p`` (GPUDirect RDMA, NCCL's default GDR level) is
    :data:`NIC_GDR`; PHB or NODE is :data:`NIC_LOCAL`; SYS, or a NIC of another server,
    :data:`NIC_REMOTE`. A server without NICs gives zero columns.

    Examples
    --------
    >>> from gpufabric.topology.build import load
    >>> gpu_nic_levels(load("hgx-h100-4node-4nic"))[:4].tolist()    # one NIC per GPU pair
    [[2, 1, 0, 0], [1, 1, 0, 0], [1, 2, 0, 0], [1, 1, 0, 0]]
    """
    gpus = domain_gpus(t, node, domain)
    servers = sorted({g.node for g in gpus})
    nics = [n for s in servers for n in sorted(t.nics(s), key=lambda d: d.index)]
    out = np.zeros((len(gpus), len(nics)), dtype=np.int8)
    for i, g in enumerate(gpus):
        for j, n in enumerate(nics):
            if n.node != g.node:
                continue
            p = path(t, g.id, n.id)
            out[i, j] = NIC_GDR if p.p2p else NIC_LOCAL if p.type in ("PHB", "NODE") \
                else NIC_REMOTE
    return out

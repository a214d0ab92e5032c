"""Traffic patterns of collective algorithms, built on the symmetry of the algorithms.

Every step of a ring is alike, every node of a tree level is alike: an algorithm's bandwidth
cost is the time the network needs to carry, all at once, what each link carries over the whole
operation. So an algorithm here is one set of concurrent transfers (per-rank bytes for a buffer
of ``S`` bytes), handed to :class:`gpufabric.network.Network`, which shares the links max-min
fairly; plus the list of hops one message crosses in sequence (for the latency term).

When the topology materializes only the first ``m`` of ``N`` nodes (a 2,048-node cluster built
as 2 nodes), the pattern is laid on the materialized nodes with wrap-around: node ``m-1`` sends
to node 0 as node ``N-1`` would. Each link then carries exactly what it carries in the full
cluster, and the hop counts are scaled to ``N`` nodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cache
from itertools import pairwise

import numpy as np

from gpufabric.errors import InputError
from gpufabric.network import Network, Transfer
from gpufabric.topology.model import NVSWITCH, Topology


@dataclass
class Layout:
    """Which GPUs take part: ``per_node`` ranks on each of ``nodes`` nodes.

    ``gpus[k]`` lists the rank GPUs of materialized node ``k`` (``len(gpus) <= nodes``).
    """

    nodes: int
    per_node: int
    gpus: list[list[str]]

    @property
    def ranks(self) -> int:
        return self.nodes * self.per_node

    @property
    def m(self) -> int:
        return len(self.gpus)

    @property
    def scale(self) -> float:
        """True nodes per materialized node (hop counts scale by this)."""
        return self.nodes / self.m


def _btree_links(n: int) -> list[int]:
    """Links (parent and children) of each of ``n`` ranks in NCCL's binary tree (trees.cc
    ncclGetBtree): rank r's parent flips r's lowest set bit and sets the next one (or only
    flips it when that falls outside), rank 0 is the root with one child."""
    links = [0] * n
    for r in range(1, n):
        bit = r & -r
        up = (r ^ bit) | (bit << 1)
        if up >= n:
            up = r ^ bit
        links[r] += 1
        links[up] += 1
    return links


@cache
def dbtree_load(n: int) -> float:
    """Buffer bytes the busiest node sends (and receives) per byte of buffer in NCCL's double
    binary tree all_reduce over ``n`` nodes: each tree takes half the buffer, and a node moves
    that half once per tree link (up and down). The second tree is the first mirrored
    (``n`` even) or shifted by one (``n`` odd), so a node inside one tree is a leaf of the
    other: 1 on 2 nodes, 1.5 on 3, 2 on large trees.

    >>> [dbtree_load(n) for n in (2, 3, 4, 5, 8, 20, 1024)]
    [1.0, 1.5, 2.0, 2.0, 2.0, 2.0, 2.0]
    """
    first = _btree_links(n)
    second = ([first[n - 1 - r] for r in range(n)] if n % 2 == 0
              else [first[(r - 1) % n] for r in range(n)])
    return max(a + b for a, b in zip(first, second, strict=True)) / 2


def layout(topo: Topology, ranks: int | None = None, per_node: int | None = None,
           group: int = 0) -> Layout:
    """Place ``ranks`` ranks, one per GPU: ``per_node`` on each node (default: fill nodes in
    order, as nccl-tests with MPI). ``group`` picks which of the node's GPUs a group uses when
    several groups of the same shape share the nodes: group ``c`` takes local GPUs
    ``c * per_node`` to ``(c + 1) * per_node - 1`` of each node (data-parallel group ``c`` of a
    tensor-parallel job uses local GPU ``c`` on every node).

    Raises
    ------
    InputError
        If there are more ranks than GPUs, ranks span nodes without filling them (no
        ``per_node``), or the groups need more GPUs per node than there are.

    Examples
    --------
    >>> from gpufabric.topology.build import from_spec
    >>> t = from_spec({"gpu": "H100-SXM", "nodes": 64, "nic": "ib-ndr"}, materialize_nodes=2)
    >>> lay = layout(t, 256)
    >>> lay.nodes, lay.per_node, lay.m, lay.gpus[1][0]
    (32, 8, 2, 'n1.gpu0')
    >>> lay = layout(t, 64, per_node=1, group=3)      # one GPU per node: local GPU 3
    >>> lay.nodes, lay.per_node, lay.gpus[1]
    (64, 1, ['n1.gpu3'])
    """
    by_node: dict[int, list[str]] = {}   # a "node" here is an NVLink domain (trays included)
    for g in topo.gpus():
        by_node.setdefault(topo.domain_of(g.id), []).append(g.id)
    if not by_node:
        raise InputError("the system has no GPU", file=topo.name)
    node_ids = sorted(by_node)
    gpn, n_nodes = topo.scale_up()
    total = gpn * n_nodes
    if ranks is None:
        ranks = total if per_node is None else per_node * n_nodes
    if not 1 <= ranks <= total:
        raise InputError(f"must be between 1 and {total} (GPUs in the system), got {ranks}",
                         field="ranks")
    if per_node is None:
        if ranks <= gpn:
            per_node = ranks
        elif ranks % gpn:
            raise InputError(f"ranks across nodes must fill them: a multiple of {gpn}, got "
                             f"{ranks} (or give per_node)", field="ranks")
        else:
            per_node = gpn
    if not 1 <= per_node <= gpn or ranks % per_node:
        raise InputError(f"must divide ranks ({ranks}) and be between 1 and {gpn} (GPUs per "
                         f"node), got {per_node}", field="per_node")
    nodes = ranks // per_node
    if nodes > n_nodes:
        raise InputError(f"{ranks} ranks at {per_node} per node need {nodes} nodes; the system "
                         f"has {n_nodes}", field="per_node")
    lo = group * per_node
    if group < 0 or lo + per_node > gpn:
        raise InputError(f"{group + 1} groups of {per_node} GPUs per node need "
                         f"{(group + 1) * per_node} GPUs per node; nodes have {gpn}",
                         field="concurrent")
    mat = [by_node[k][lo:lo + per_node] for k in node_ids[:nodes]]
    return Layout(nodes, per_node, mat)


@dataclass
class Pattern:
    """An algorithm's traffic for a buffer of ``size`` bytes.

    ``transfers``: concurrent transfers carrying everything; ``hops``: the transports of one
    ring's hops, in order, over the sampled nodes (their mean latency is what one ring step
    costs, whatever the true node count); ``tree_hops``: the hops from a leaf to the root of a
    tree; ``note``: how the work was laid out (for the explanation); ``net_up``: the fabric
    tiers above the leaf switch each network hop climbs.
    """

    transfers: list[Transfer]
    hops: list[str] = field(default_factory=list)
    tree_hops: list[str] = field(default_factory=list)
    note: str = ""
    #: switch tiers above the leaf each network hop of ``hops`` (or ``tree_hops``) climbs, in
    #: order (an expected value over the hops the sampled ones stand for)
    net_up: list[float] = field(default_factory=list)
    #: NVLink hops of ``hops`` (share) or of ``tree_hops`` (count) between racks of a
    #: multi-rack NVLink domain (NVL36x2): each crosses one more switch chip
    chip_hops: float = 0.0
    #: GPU-to-GPU hops through host memory (no P2P) of ``hops`` (share) or of ``tree_hops``
    #: (count) whose bounce crosses the inter-socket link (UPI, xGMI)
    socket_hops: float = 0.0


class Planner:
    """Builds patterns on one topology (rings, chains, trees, NVLS) and caches them."""

    def __init__(self, topo: Topology, net: Network | None = None):
        self.topo = topo
        self.net = net or Network(topo)
        self.router = self.net.router

    # -- ring orders -----------------------------------------------------------------------
    def _peer(self, a: str, b: str) -> bool:
        return self.router.peer_walk(a, b) is not None

    def ring_orders(self, gpus: list[str]) -> list[list[str]]:
        """Intra-node ring orders (see :meth:`weighted_rings`), without their weights."""
        return [o for o, _ in self.weighted_rings(gpus)]

    def weighted_rings(self, gpus: list[str]) -> list[tuple[list[str], float]]:
        """Intra-node rings with the share of the data each carries.

        One ring in index order when every pair meets on an NVSwitch or only PCIe joins them.
        On direct GPU-GPU links (DGX-1's hybrid cube-mesh, an xGMI or NVLink full mesh), rings
        are packed greedily as NCCL's search does: take the Hamiltonian NVLink cycle with the most
        spare capacity, give it that capacity, subtract it from its links, repeat.
        """
        key = tuple(gpus)
        cache = self.__dict__.setdefault("_rings", {})
        if key in cache:
            return cache[key]
        n = len(gpus)
        out: list[tuple[list[str], float]] = [(list(gpus), 1.0)]
        if n > 2:
            peer = {(a, b): self._peer(a, b) for a in gpus for b in gpus if a != b}
            switched = all(len(self.router.peer_walk(a, b) or ()) > 2
                           for (a, b), ok in peer.items() if ok)
            if any(peer.values()) and not (all(peer.values()) and switched):
                packed = self._pack_rings(gpus, peer)
                if packed:
                    out = packed
        cache[key] = out
        return out

    def _pack_rings(self, gpus, peer, max_rings: int = 16):
        """Greedy packing (see :meth:`weighted_rings`), first taking the first of equally
        spare cycles, then with the ties broken at random (seeded) up to
        :data:`RING_PACK_RESTARTS` times while the rings carry less than a GPU's links allow:
        a greedy choice can strand links (on a full mesh of 8, the first-found cycles use
        6 of each GPU's 7 links, where 7 disjoint rings exist)."""
        cycles = self._hamiltonian_cycles(gpus, peer)
        if not cycles:
            return []
        pairs = [ab for ab, ok in peer.items() if ok]
        at = {ab: i for i, ab in enumerate(pairs)}
        cap = np.array([min(self.net.caps_Bps[self.net.edge(u, v)]
                            for u, v in pairwise(self.router.peer_walk(a, b) or ()))
                        for a, b in pairs])
        edges = np.array([[at[ab] for ab in zip(c, c[1:] + c[:1], strict=True)]
                          for c in cycles])
        # no set of rings carries more than the GPU with the least out- or in-capacity
        bound = min(min(sum(cap[at[(a, b)]] for b in gpus if (a, b) in at),
                        sum(cap[at[(b, a)]] for b in gpus if (b, a) in at)) for a in gpus)
        rng = np.random.default_rng(0)
        best: list[tuple[int, float]] = []
        tot = 0.0
        for trial in range(1 + RING_PACK_RESTARTS):
            picked = _greedy_rings(edges, cap.copy(), max_rings, rng if trial else None)
            carried = sum(r for _, r in picked)
            if carried > tot * (1 + 1e-9):
                best, tot = picked, carried
            if tot >= bound * (1 - 1e-9):
                break
        return [(cycles[i], r / tot) for i, r in best]

    @staticmethod
    def _hamiltonian_cycles(gpus, peer, limit: int = 5000):
        """Directed Hamiltonian cycles over NVLink pairs, starting at the first GPU."""
        n = len(gpus)
        if n > 12:
            return []
        found: list[list[str]] = []
        start = gpus[0]

        def dfs(path, seen):
            if len(found) >= limit:
                return
            if len(path) == n:
                if peer[(path[-1], start)]:
                    found.append(list(path))
                return
            for g in gpus:
                if g not in seen and peer[(path[-1], g)]:
                    seen.add(g)
                    path.append(g)
                    dfs(path, seen)
                    path.pop()
                    seen.discard(g)

        dfs([start], {start})
        return found

    # -- rails -----------------------------------------------------------------------------
    def rails(self, lay: Layout) -> list[int]:
        """Indices of the NICs used as rails (every NIC of node 0 that has a fabric port)."""
        if lay.nodes <= 1:
            return []
        nics = self.router.kind_in_domain("nic", self.topo.domain_of(lay.gpus[0][0]))
        rails = [i for i, n in enumerate(nics)
                 if any(ln.kind == "net" for _, ln in self.topo.neighbors(n.id))]
        if not rails:
            raise InputError("ranks span several nodes but the nodes have no NIC on a fabric",
                             file=self.topo.name, field="nics_per_node")
        mine = set(lay.gpus[0])
        node = self.topo.devices[lay.gpus[0][0]].node
        if len(mine) < len(self.router.kind_in_node("gpu", node)):
            # a group on some of the node's GPUs uses the NICs paired with its GPUs (NCCL
            # keeps each GPU on its closest NICs), else the closest NIC of each of its GPUs
            own = [i for i in rails if self.router.home_gpu(nics[i].id) in mine]
            if not own:
                near = {self.router.nearest_nic(g) for g in lay.gpus[0]}
                own = [i for i in rails if nics[i].id in near]
            rails = own or rails
        return rails

    def _nic(self, node_gpus: list[str], rail: int) -> str:
        return self.router.kind_in_domain("nic", self.topo.domain_of(node_gpus[0]))[rail].id

    def _entry(self, node_gpus: list[str], rail: int) -> str:
        """The rank GPU that owns a rail on this node (falls back to rail mod ranks)."""
        home = self.router.home_gpu(self._nic(node_gpus, rail))
        return home if home in node_gpus else node_gpus[rail % len(node_gpus)]

    def _net_transfer(self, lay: Layout, k: int, src: str, dst_of_next, rail: int,
                      size: float, tag: str) -> Transfer:
        """From a GPU of node k to a GPU of node k+1 (wrapping) on one rail."""
        nxt = (k + 1) % lay.m
        nic_a = self._nic(lay.gpus[k], rail)
        nic_b = self._nic(lay.gpus[nxt], rail)
        dst = dst_of_next(lay.gpus[nxt])
        # relay through the NIC's own GPU (PXN) when that GPU is one of the group's ranks
        w1, _, _ = self.router.gpu_nic_walk(
            src, nic_a, prefer_pxn=self.router.home_gpu(nic_a) in lay.gpus[k])
        w3, _, _ = self.router.gpu_nic_walk(
            dst, nic_b, prefer_pxn=self.router.home_gpu(nic_b) in lay.gpus[nxt])
        # one node materialized: leave through the rail and come back as from the next node
        fab = self.router.fabric_walks(nic_a, nic_b if nxt != k else nic_a)[0]
        return Transfer(src, dst, size, walk=w1 + fab[1:-1] + tuple(reversed(w3)), tag=tag)

    # -- patterns --------------------------------------------------------------------------
    def ring(self, lay: Layout, per_rank_bytes: float) -> Pattern:
        """Rings over all ranks; each link of each ring carries ``per_rank_bytes`` in total.
        Cached per layout and size (all_gather, reduce_scatter and PAT ask the same)."""
        key = (lay.nodes, tuple(tuple(g) for g in lay.gpus), per_rank_bytes)
        cache = self.__dict__.setdefault("_ring_cache", {})
        if key not in cache:
            cache[key] = self._ring(lay, per_rank_bytes)
        return cache[key]

    def _ring(self, lay: Layout, per_rank_bytes: float) -> Pattern:
        if lay.nodes == 1:
            rings = self.weighted_rings(lay.gpus[0])
            orders = [o for o, _ in rings]
            ch = len(orders)
            tr: list[Transfer] = []
            hops: list[str] = []
            for c, (order, share) in enumerate(rings):
                for a, b in zip(order, order[1:] + order[:1], strict=True):
                    if a == b:
                        continue
                    tr.append(Transfer(a, b, per_rank_bytes * share, tag=f"ring{c}"))
            for a, b in zip(orders[0], orders[0][1:] + orders[0][:1], strict=True):
                if a != b:
                    hops.append(self.net.route(Transfer(a, b, 0)).transport)
            cross = self.cross_rack(orders[0] + orders[0][:1])
            sockets = self.cross_socket(orders[0] + orders[0][:1])
            return Pattern(tr, hops, chip_hops=cross / max(len(hops), 1),
                           socket_hops=sockets / max(len(hops), 1),
                           note=f"{ch} ring(s) inside the node")
        rails = self.rails(lay)
        ch = len(rails)
        tr = []
        hops = []
        rings = self.weighted_rings(lay.gpus[0])
        idx = {g: i for i, g in enumerate(lay.gpus[0])}
        for c, rail in enumerate(rails):
            for j, (base, share) in enumerate(rings):
                part = per_rank_bytes * share / ch
                for k, node_gpus in enumerate(lay.gpus):
                    order = self._node_order(node_gpus, base, idx, rail)
                    for a, b in pairwise(order):
                        tr.append(Transfer(a, b, part, tag=f"ring{c}.{j}"))
                        if c == 0 and j == 0:
                            hops.append(self.net.route(tr[-1]).transport)
                    tr.append(self._net_transfer(lay, k, order[-1],
                                                 lambda g, r=rail: self._entry(g, r), rail,
                                                 part, f"ring{c}.{j}"))
                    if c == 0 and j == 0:
                        hops.append("net")
                tr.extend(self._uplink_loops(lay, rail, part, f"ring{c}.{j}"))
        up = self.tiers_climbed(lay, 1)
        base0 = self._node_order(lay.gpus[0], rings[0][0], idx, rails[0])
        return Pattern(tr, hops, net_up=[up] * hops.count("net"),
                       chip_hops=self.cross_rack(base0) / max(len(base0), 1),
                       note=f"{ch} ring(s), one per rail NIC, over {lay.nodes} nodes")

    def _node_order(self, node_gpus: list[str], base: list[str], idx: dict, rail: int
                    ) -> list[str]:
        """A node's part of a ring: node 0's ring shape, entered at the rail's GPU, walked in
        the direction whose last GPU reaches the rail's NIC best (as NCCL's search ends a
        ring next to its NIC)."""
        order = [node_gpus[idx[g]] for g in base] if len(base) == len(node_gpus) \
            else list(node_gpus)
        entry = self._entry(node_gpus, rail)
        s = order.index(entry)
        fwd = order[s:] + order[:s]
        if len(fwd) <= 2:
            return fwd
        back = [fwd[0]] + fwd[:0:-1]
        nic = self._nic(node_gpus, rail)

        def cost(o):
            w, transport, staged = self.router.gpu_nic_walk(o[-1], nic, prefer_pxn=True)
            return (staged, transport != "nvlink" and not self.router.gdr(o[-1], nic), len(w))
        return back if cost(back) < cost(fwd) else fwd

    def _hop_kinds(self, tr):
        return [self.net.route(t).transport for t in tr]

    def chain_tree(self, lay: Layout, size: float) -> Pattern:
        """NCCL's tree for all_reduce: a chain inside each node from the rail GPU, a double
        binary tree across nodes (one per rail); reduce goes up while broadcast comes down."""
        g = lay.per_node
        tr: list[Transfer] = []
        if lay.nodes == 1:
            order = self.ring_orders(lay.gpus[0])[0]
            for a, b in pairwise(order):
                tr.append(Transfer(b, a, size, tag="up"))
                tr.append(Transfer(a, b, size, tag="down"))
            kinds = self._hop_kinds(tr[::2])
            return Pattern(tr, tree_hops=kinds, chip_hops=self.cross_rack(order),
                           socket_hops=self.cross_socket(order),
                           note="a chain through the node")
        rails = self.rails(lay)
        ch = len(rails)
        per = size / ch
        f = dbtree_load(lay.nodes)
        intra_kinds: list[str] = []
        for c, rail in enumerate(rails):
            for k, node_gpus in enumerate(lay.gpus):
                head = self._entry(node_gpus, rail)
                order = [head] + [x for x in node_gpus if x != head]
                for a, b in pairwise(order):
                    tr.append(Transfer(b, a, per, tag=f"tree{c}-up"))
                    tr.append(Transfer(a, b, per, tag=f"tree{c}-down"))
                    if c == 0 and k == 0:
                        intra_kinds.append(self.net.route(tr[-1]).transport)
                tr.append(self._net_transfer(lay, k, head, lambda gg, r=rail: self._entry(gg, r),
                                             rail, f * per, f"tree{c}-net"))
            tr.extend(self._uplink_loops(lay, rail, f * per, f"tree{c}-net"))
        depth = max(1, math.ceil(math.log2(lay.nodes)))
        head = self._entry(lay.gpus[0], rails[0])
        chain = [head] + [x for x in lay.gpus[0] if x != head]
        return Pattern(tr, tree_hops=intra_kinds + ["net"] * depth,
                       net_up=self.tree_tiers(lay, depth), chip_hops=self.cross_rack(chain),
                       note=f"{ch} double binary tree(s) across {lay.nodes} nodes, "
                            f"chains of {g} inside")

    def rack_of(self, gpu: str) -> int:
        """Rack of a GPU inside a multi-rack NVLink domain (NVL36x2: trays 0-8 and 9-17 of
        each domain); 0 when the domain is one rack."""
        hub = self._switch_of(gpu)
        racks = int(self.topo.devices[hub].attrs.get("racks") or 1) if hub else 1
        sup = self.topo.meta.get("supernode") or {}
        trays = int(sup.get("trays") or 0)
        # the whole domain's trays set the racks' split (a system on part of a domain holds
        # its first trays)
        whole = int(sup.get("domain_trays") or trays)
        if racks <= 1 or whole < racks or not trays:
            return 0
        return (self.topo.devices[gpu].node % trays) // (whole // racks)

    def cross_rack(self, order: list[str]) -> int:
        """Consecutive GPUs of ``order`` in different racks of one NVLink domain: each such
        hop crosses one more NVLink switch chip (the cable between the racks' switch trays)."""
        return sum(1 for a, b in pairwise(order) if self.rack_of(a) != self.rack_of(b))

    def cross_socket(self, order: list[str]) -> int:
        """Consecutive GPUs of ``order`` whose copy bounces through host memory (no P2P) and
        crosses the inter-socket link on the way: each such hop's reader polls host memory
        of the other socket."""
        out = 0
        for a, b in pairwise(order):
            if a == b:
                continue
            r = self.net.route(Transfer(a, b, 0))
            if r.transport == "shm" and any(
                    self.topo.hop(u, v).kind == "cpu" for w in r.walks for u, v in pairwise(w)):
                out += 1
        return out

    def chip_lat_us(self, gpu: str) -> float:
        """One NVLink switch chip traversal on the domain of ``gpu`` (catalog, an estimate)."""
        from gpufabric import catalog
        hub = self._switch_of(gpu)
        if hub is None:
            return 0.0
        try:
            return float(catalog.nvswitch(self.topo.devices[hub].model).lat_us)
        except InputError:
            return 0.0

    def nvls_ok(self, lay: Layout) -> bool:
        """NVLS needs every rank GPU of a node on one NVSwitch fabric that reduces in-switch."""
        from gpufabric import catalog
        for node_gpus in lay.gpus:
            hub = self._switch_of(node_gpus[0])
            if hub is None or any(self._switch_of(x) != hub for x in node_gpus):
                return False
            model = self.topo.devices[hub].model
            try:
                if not catalog.nvswitch(model).nvls:
                    return False
            except InputError:
                return False
        # NCCL enables NVLS on more than two GPUs (src/transport/nvls.cc: gpuCount <= 2: off)
        return lay.per_node > 2

    def nvls_link(self, lay: Layout) -> str:
        """NVLink generation of the NVSwitch fabric NVLS runs on (``nvlink4``, ``nvlink5``)."""
        from gpufabric import catalog
        hub = self._hub(lay.gpus[0][0])
        return catalog.nvswitch(self.topo.devices[hub].model).peer_link

    def _hub(self, gpu: str) -> str:
        """The NVSwitch of a GPU that NVLS runs on (checked by :meth:`nvls_ok`)."""
        hub = self._switch_of(gpu)
        if hub is None:
            raise ValueError(f"{gpu} has no NVSwitch")
        return hub

    def _switch_of(self, gpu: str) -> str | None:
        for v, ln in self.topo.neighbors(gpu):
            if ln.kind == "nvlink" and self.topo.devices[v].kind == NVSWITCH:
                return v
        return None

    def nvls(self, lay: Layout, size: float, switch_efficiency: float = 1.0) -> Pattern:
        """NVLS all_reduce: each GPU reduces its shard in the switch (multimem ld_reduce of the
        other GPUs' parts) and multicasts the result: S (G-1)/G each way per GPU, so the bus
        bandwidth does not depend on G (NCCL's NVLS cost model: busBw = 2 x NVLink rate x
        efficiency); across nodes (NVLS tree), each GPU's reduced shard also crosses a tree on
        its rail."""
        g = lay.per_node
        tr: list[Transfer] = []
        # multimem traffic gets ``switch_efficiency`` of the NVLink rate: count it as more bytes
        per_dir = size * (g - 1) / g / switch_efficiency
        for node_gpus in lay.gpus:
            hub = self._hub(node_gpus[0])
            for x in node_gpus:
                tr.append(Transfer(x, hub, per_dir, tag="nvls-reduce"))
                tr.append(Transfer(hub, x, per_dir, tag="nvls-multicast"))
        racks = len({self.rack_of(x) for x in lay.gpus[0]})
        if lay.nodes == 1:
            return Pattern(tr, chip_hops=float(racks > 1),
                           note="NVLink SHARP: reduction inside the NVSwitch")
        rails = self.rails(lay)
        f = dbtree_load(lay.nodes)
        shard = size / len(rails)
        for c, rail in enumerate(rails):
            for k, node_gpus in enumerate(lay.gpus):
                head = self._entry(node_gpus, rail)
                tr.append(self._net_transfer(lay, k, head, lambda gg, r=rail: self._entry(gg, r),
                                             rail, f * shard, f"nvls-tree{c}"))
            tr.extend(self._uplink_loops(lay, rail, f * shard, f"nvls-tree{c}"))
        depth = max(1, math.ceil(math.log2(lay.nodes)))
        return Pattern(tr, tree_hops=["net"] * depth, net_up=self.tree_tiers(lay, depth),
                       chip_hops=float(racks > 1),
                       note=f"NVLS inside each node, {len(rails)} trees across {lay.nodes} nodes")

    def hierarchical(self, lay: Layout, size: float) -> list[Pattern]:
        """Three sequential phases: reduce_scatter inside the node, all_reduce of each shard
        across nodes on its rail, all_gather inside the node."""
        g = lay.per_node
        intra = Layout(1, g, [lay.gpus[0]])
        rs = self.ring(intra, size * (g - 1) / g)
        out = [rs]
        if lay.nodes > 1:
            n = lay.nodes
            shard = size / g
            rails = self.rails(lay)
            tr = []
            for k, node_gpus in enumerate(lay.gpus):
                for i, x in enumerate(node_gpus):
                    rail = rails[i % len(rails)]
                    tr.append(self._net_transfer(lay, k, x, lambda gg, j=i: gg[j], rail,
                                                 shard * 2 * (n - 1) / n, "inter"))
            for i in range(g):
                tr.extend(self._uplink_loops(lay, rails[i % len(rails)],
                                             shard * 2 * (n - 1) / n, "inter"))
            out.append(Pattern(tr, hops=["net"] * lay.m,
                               net_up=[self.tiers_climbed(lay, 1)] * lay.m,
                               note=f"a ring per local rank across {n} nodes"))
        out.append(self.ring(intra, size * (g - 1) / g))
        return out

    # -- fabric tiers crossed by rings and trees --------------------------------------------
    def _nodes_per_pod(self, lay: Layout) -> int:
        """Layout nodes in one pod of a three-tier fabric (all of them otherwise)."""
        fab = self.topo.meta.get("fabric") or {}
        if int(fab.get("levels") or 2) < 3:
            return lay.nodes
        npd = int(self.topo.meta.get("nodes_per_domain") or 1)
        return max(1, int(fab.get("nodes_per_pod") or 0) // npd) or lay.nodes

    def tiers_climbed(self, lay: Layout, distance: float) -> float:
        """Switch tiers above the leaf that a hop between nodes ``distance`` apart (in the
        ring's or tree's node order, nodes filled leaf by leaf) climbs, on average: one more
        for the share of such hops that leave their leaf (``min(1, d / nodes per leaf)``
        when the job spans several leaves), one more for the share that leave their pod.

        Examples
        --------
        >>> from gpufabric.topology.build import from_spec
        >>> t = from_spec({"gpu": "H100-SXM", "nodes": 8, "nic": "ib-ndr",
        ...                "fabric": {"nodes_per_leaf": 2, "pod_nodes": 4}})
        >>> pl = Planner(t)
        >>> lay = layout(t, 64)
        >>> pl.tiers_climbed(lay, 1), pl.tiers_climbed(lay, 2), pl.tiers_climbed(lay, 4)
        (0.75, 1.5, 2.0)
        """
        fab = self.topo.meta.get("fabric") or {}
        if not fab.get("core") or lay.nodes <= 1:
            return 0.0
        leaf = self._per_leaf(lay)
        up = min(1.0, distance / leaf) if lay.nodes > leaf else 0.0
        pod = self._nodes_per_pod(lay)
        if lay.nodes > pod:
            up += min(1.0, distance / pod)
        return up

    def tree_tiers(self, lay: Layout, depth: int) -> list[float]:
        """Tiers climbed by each network level of a binary tree over the nodes: level ``i``
        joins nodes ``2**i`` apart, so the top levels leave the leaf and the pod."""
        return [self.tiers_climbed(lay, 2 ** i) for i in range(depth)]

    def _uplink_loops(self, lay: Layout, rail: int, size: float, tag: str) -> list[Transfer]:
        """What one ring or tree on ``rail`` puts on the uplinks the sampled nodes do not
        reach: when the job spans several leaves (pods) and the sampled nodes sit under one,
        each leaf (pod) still sends one hop of it up and takes one in, ``size`` bytes each
        way, through the tier above with that tier's oversubscription."""
        if lay.nodes <= 1:
            return []
        nics = [self._nic(gs, rail) for gs in lay.gpus]
        leaves = [self._up(n, "nic") for n in nics]
        out: list[Transfer] = []
        leaf = leaves[0]
        spine = self._up(leaf, "leaf")
        if leaf is None or spine is None:
            return out
        if lay.nodes > self._per_leaf(lay) and len(set(leaves)) == 1:
            out.append(Transfer(leaf, leaf, size, walk=(leaf, spine, leaf), tag=tag + "-uplink"))
        core = self._up(spine, "spine")
        if core is not None and lay.nodes > self._nodes_per_pod(lay):
            spines = {self._up(x, "leaf") for x in leaves if x}
            if len(spines) == 1:
                out.append(Transfer(spine, spine, size, walk=(spine, core, spine),
                                    tag=tag + "-core"))
        return out

    def _up(self, dev: str | None, tier: str) -> str | None:
        """The switch above ``dev`` (a NIC's leaf, a leaf's spine, a spine's core)."""
        if dev is None:
            return None
        want = {"nic": "leaf", "leaf": "spine", "spine": "core"}[tier]
        for v, ln in self.topo.neighbors(dev):
            if ln.kind != "net":
                continue
            d = self.topo.devices[v]
            if d.kind == "nic":
                continue
            t = d.attrs.get("tier")
            if t == want or (t is None and tier == "nic"):
                return v
        return None

    def pairwise(self, lay: Layout, size: float) -> Pattern:
        """all_to_all: every rank sends ``size / n`` to every other rank. Across nodes the data
        for peer GPU j travels on rail j (PXN: first over NVLink to the local GPU j when there
        is one); traffic to nodes under other leaf switches crosses the core, sampled as a
        loop through it."""
        n = lay.ranks
        piece = size / n
        tr: list[Transfer] = []
        for node_gpus in lay.gpus:
            for a in node_gpus:
                for b in node_gpus:
                    if a != b:
                        tr.append(Transfer(a, b, piece, tag="local"))
        if lay.nodes == 1:
            return Pattern(tr, hops=[self.net.route(tr[0]).transport] if tr else [],
                           note="direct pairs inside the node")
        rails = self.rails(lay)
        g = lay.per_node
        remote_nodes = lay.nodes - 1
        in_leaf, cross = self._leaf_split(lay)
        # peer slot j's rails: rail j when there are as many rails as ranks (or fewer, then
        # shared round-robin); with more, every rail i with i = j mod g (p5: 4 NICs a GPU),
        # as NCCL spreads a peer's channels over the NICs of its GPU
        slots = [[rails[j % len(rails)]] if len(rails) <= g else rails[j::g]
                 for j in range(g)]
        for k, node_gpus in enumerate(lay.gpus):
            for a in node_gpus:
                for j in range(len(node_gpus)):
                    share = piece * remote_nodes / len(slots[j])  # a -> GPU j of each remote
                    for rail in slots[j]:
                        via = self._entry(node_gpus, rail)
                        if via != a:                      # PXN relay to the rail's GPU
                            tr.append(Transfer(a, via, share, tag="pxn"))
                        if in_leaf:
                            tr.append(self._net_transfer(lay, k, via,
                                                         lambda gg, r=rail: self._entry(gg, r),
                                                         rail, share * in_leaf, "a2a-leaf"))
                        if cross:
                            tr.extend(self._core_loop(lay, node_gpus, via, rail,
                                                      share * cross))
        kinds = ["nvlink", "net"]
        return Pattern(tr, hops=kinds,
                       note=f"pairwise exchange over {len(rails)} rails, {g} ranks per node")

    def _per_leaf(self, lay: Layout) -> int:
        """Nodes (NVLink domains) under one leaf switch (one rail's leaf when rail-optimized)."""
        fab = self.topo.meta.get("fabric") or {}
        npd = int(self.topo.meta.get("nodes_per_domain") or 1)   # servers per layout node
        if fab.get("nodes_per_leaf"):
            return max(1, int(fab["nodes_per_leaf"]) // npd)
        down = int(fab.get("leaf_down") or lay.nodes)
        if fab.get("topology") == "rail-optimized":
            return down
        return max(1, down // max(1, int(self.topo.meta.get("nics_per_node") or 1)))

    def _leaf_split(self, lay: Layout) -> tuple[float, float]:
        """Share of a node's remote peers under its own leaf switch, and beyond it."""
        fab = self.topo.meta.get("fabric") or {}
        remote = lay.nodes - 1
        if remote <= 0:
            return 0.0, 0.0
        if not fab.get("core"):
            return 1.0, 0.0
        same = sum(s for up, s, _ in self._tier_shares(lay) if up == 0)
        return same, 1.0 - same

    def _tier_shares(self, lay: Layout) -> list[tuple[int, float, int]]:
        """(tiers climbed above the leaf, share of remote peers, nodes sharing the uplinks)."""
        from gpufabric.topology.fabric import peer_shares
        fab = self.topo.meta.get("fabric") or {}
        npd = int(self.topo.meta.get("nodes_per_domain") or 1)
        pod = int(fab.get("nodes_per_pod") or 0) // npd or lay.nodes
        return peer_shares(int(fab.get("levels") or 2), self._per_leaf(lay), pod, lay.nodes)

    def _core_loop(self, lay: Layout, node_gpus, gpu, rail, size) -> list[Transfer]:
        """Traffic to nodes under other leaves: out of the NIC to its leaf and back (the NIC
        and PCIe load), and up to the core and back down, scaled from the sampled nodes to
        all the nodes that share this leaf's uplinks."""
        nic = self._nic(node_gpus, rail)
        w1, _, _ = self.router.gpu_nic_walk(gpu, nic, prefer_pxn=True)
        leaf = next(v for v, ln in self.topo.neighbors(nic) if ln.kind == "net")
        out = [Transfer(gpu, gpu, size, walk=w1 + (leaf,) + tuple(reversed(w1)),
                        tag="a2a-core")]
        core = next((v for v, ln in self.topo.neighbors(leaf)
                     if ln.kind == "net" and self.topo.devices[v].kind != "nic"), None)
        if core is not None:
            sampled = sum(
                1 for gs in lay.gpus
                if any(v == leaf for v, ln in self.topo.neighbors(self._nic(gs, rail))
                       if ln.kind == "net"))
            scale = min(self._per_leaf(lay), lay.nodes) / max(sampled, 1)
            out.append(Transfer(leaf, leaf, size * scale, walk=(leaf, core, leaf),
                                tag="a2a-uplink"))
            # three tiers: the share for other pods also climbs from the pod's spines to the
            # core, shared by every node of the pod
            top = next((v for v, ln in self.topo.neighbors(core)
                        if ln.kind == "net" and self.topo.devices[v].attrs.get("tier") == "core"),
                       None)
            beyond = sum(sh for up, sh, _ in self._tier_shares(lay) if up == 2)
            _, cross = self._leaf_split(lay)
            if top is not None and beyond > 0 and cross > 0:
                pod = next(n for up, _, n in self._tier_shares(lay) if up == 2)
                in_pod = sum(1 for gs in lay.gpus if core in self._spines_of(gs, rail))
                out.append(Transfer(core, core, size * beyond / cross * pod / max(in_pod, 1),
                                    walk=(core, top, core), tag="a2a-core"))
        return out

    def _spines_of(self, node_gpus, rail) -> set[str]:
        """The switches above the leaf of a node's rail NIC."""
        nic = self._nic(node_gpus, rail)
        leaf = next(v for v, ln in self.topo.neighbors(nic) if ln.kind == "net")
        return {v for v, ln in self.topo.neighbors(leaf)
                if ln.kind == "net" and self.topo.devices[v].kind != "nic"}

    def send_recv(self, lay: Layout, size: float) -> Pattern:
        """Each rank sends ``size`` to the next rank and receives from the previous one."""
        tr = []
        flat = [(k, g) for k, gs in enumerate(lay.gpus) for g in gs]
        crossing = False
        for i, (k, a) in enumerate(flat):
            k2, b = flat[(i + 1) % len(flat)]
            wraps = lay.nodes > 1 and lay.m == 1 and i == len(flat) - 1
            if k2 != k or wraps:
                nics = self.router.kind_in_domain("nic", self.topo.domain_of(a))
                near = self.router.nearest_nic(a)
                rail = next((j for j, x in enumerate(nics) if x.id == near), self.rails(lay)[0])
                tr.append(self._net_transfer(lay, k, a, lambda gg: gg[0], rail, size, "p2p"))
                crossing = True
            else:
                tr.append(Transfer(a, b, size, tag="p2p"))
        if crossing:
            hops = ["net"]
        else:
            hops = [max((self.net.route(t).transport for t in tr), key=_TRANSPORT_ORDER.index)]
        return Pattern(tr, hops=hops, note="each rank to the next")


_TRANSPORT_ORDER = ["nvlink", "pcie", "shm", "net"]


#: Packings of an intra-node mesh's rings tried with their ties broken at random after the
#: first, while the rings carry less than a GPU's links allow (seeded: the same rings each run).
RING_PACK_RESTARTS = 32


def _greedy_rings(edges: np.ndarray, cap: np.ndarray, max_rings: int,
                  rng: np.random.Generator | None) -> list[tuple[int, float]]:
    """Rings as (cycle index, rate): take a cycle (rows of ``edges``, link indices into
    ``cap``) with the most spare capacity, give it that capacity, take it off its links, repeat
    until none is left or the best is under 5% of the first. Ties: the first, or with ``rng``
    one at random."""
    picked: list[tuple[int, float]] = []
    first = 0.0
    for _ in range(max_rings):
        rate = cap[edges].min(axis=1)
        top = float(rate.max())
        if top <= 0 or (first and top < 0.05 * first):
            break
        ties = np.flatnonzero(rate >= top * (1 - 1e-9))
        i = int(ties[0] if rng is None else rng.choice(ties))
        first = first or top
        cap[edges[i]] -= top
        picked.append((i, top))
    return picked

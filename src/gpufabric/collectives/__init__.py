"""Collective operations (NCCL-style) on a topology: time, algbw and busbw per message size.

Operations: ``all_reduce``, ``all_gather``, ``reduce_scatter``, ``all_to_all``, ``broadcast``,
``reduce``, ``send_recv``. Algorithms: ``ring`` (rings over NVLink, PCIe and the rail NICs, as
NCCL builds them), ``tree`` (chains inside nodes, double binary trees across), ``nvls``
(in-switch reduction on NVSwitch gen 3+, with trees across nodes when there are several),
``hierarchical`` (intra-node reduce_scatter, inter-node all_reduce, intra-node all_gather, in
sequence) and ``auto``: the algorithm and protocol (LL / LL128 / Simple) with the least
predicted time, per message size, as NCCL's tuner picks them.

The time of one operation is ``latency + bytes x (network time per byte) / efficiency``:

- the network time per byte comes from :class:`gpufabric.network.Network` simulating, at once,
  everything the algorithm puts on the links (max-min fair sharing per link direction), so
  contention between rings, trees, PXN relays and the fabric core is counted once;
- the latency is the algorithm's fixed cost plus the hops a piece of data crosses in sequence,
  each at its transport's and protocol's latency (:mod:`gpufabric.collectives.params`).

busbw follows nccl-tests (doc/PERFORMANCE.md): algbw = size / time, busbw = algbw x factor with
factor 2(n-1)/n for all_reduce, (n-1)/n for all_gather, reduce_scatter and all_to_all, and 1
for broadcast, reduce and send_recv.

Examples
--------
>>> from gpufabric.topology.build import from_spec
>>> t = from_spec({"gpu": "H100-SXM", "gpus_per_node": 8, "scale_up": "nvswitch"})
>>> p = predict(t, "all_gather", 8 * 2**30)
>>> p.algo, p.proto, round(p.busbw)
('ring', 'Simple', 370)
>>> busbw_factor("all_reduce", 8)
1.75
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from itertools import pairwise

from gpufabric.collectives import params as P
from gpufabric.collectives.patterns import Layout, Planner, layout
from gpufabric.errors import InputError
from gpufabric.network import Network
from gpufabric.topology.model import Topology

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce",
       "send_recv")
ALGOS = ("auto", "ring", "tree", "nvls", "nvls_tree", "hierarchical", "pairwise", "p2p")
DTYPE_BYTES = 4

#: Unit buffer used to measure an algorithm's network time per byte (all costs are linear).
_UNIT = 1e9


def busbw_factor(op: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factor for ``op`` on ``n`` ranks.

    >>> busbw_factor("all_gather", 4), busbw_factor("broadcast", 4)
    (0.75, 1.0)
    """
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if op in ("broadcast", "reduce", "send_recv"):
        return 1.0
    raise InputError(f"unknown operation '{op}'; allowed: {', '.join(OPS)}", field="op")


def check_op(op: str) -> str:
    o = op.strip().lower().replace("-", "_")
    o = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
         "alltoall": "all_to_all", "sendrecv": "send_recv", "bcast": "broadcast"}.get(o, o)
    if o not in OPS:
        raise InputError(f"unknown operation '{op}'; allowed: {', '.join(OPS)}", field="op")
    return o


#: Algorithms NCCL has that this model does not: accepted by name, refused when predicting
#: (``validate`` then falls back to the automatic choice and notes it per point).
NOT_MODELLED = ("collnet_direct", "collnet_chain", "pat")


def check_algo(algo: str | None) -> str:
    """The canonical name of an algorithm (modelled, or one of NCCL's :data:`NOT_MODELLED`).

    Examples
    --------
    >>> check_algo("NVLSTree"), check_algo("CollNet"), check_algo("PAT")
    ('nvls_tree', 'collnet_direct', 'pat')
    """
    if algo is None:
        return "auto"
    a = algo.strip().lower().replace("-", "_")
    a = {"nvlstree": "nvls_tree", "hier": "hierarchical", "collnet": "collnet_direct",
         "collnetdirect": "collnet_direct", "collnetchain": "collnet_chain"}.get(
        a.replace("_", ""), a)
    if a not in ALGOS + NOT_MODELLED:
        raise InputError(f"unknown algorithm '{algo}'; allowed: {', '.join(ALGOS)}",
                         field="algorithm")
    return a


@dataclass
class Prediction:
    """One predicted point, in nccl-tests terms (sizes in bytes, time in microseconds).

    ``size`` is the whole buffer as nccl-tests prints it; ``count`` its float elements, per
    rank for all_gather, reduce_scatter and all_to_all (nccl-tests' count column).
    """

    op: str
    size: int
    count: int
    type: str
    redop: str
    root: int
    ranks: int
    time_us: float
    algbw: float
    busbw: float
    algo: str
    proto: str
    bottleneck: str = ""
    bottleneck_busy: float = 0.0
    note: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class _Plan:
    algo: str
    protos: tuple[str, ...]
    bw_s_per_byte: float
    lat_us: dict[str, float]
    eff: float = 1.0
    sim_edges: list = field(default_factory=list)
    bw_s_parts: list = field(default_factory=list)
    note: str = ""


class Model:
    """The collective model of one topology: plans are built once and reused for every size.

    Parameters
    ----------
    topo : Topology
        The system; may materialize only some nodes of a large cluster (``meta['nodes']``).
    """

    #: Most nodes laid out explicitly; a larger symmetric cluster (built from a spec, so every
    #: node is alike) is sampled and wrapped. ``sample_nodes=0`` lays out every node.
    SAMPLE_NODES = 4

    def __init__(self, topo: Topology, sample_nodes: int | None = None):
        self.topo = topo
        self.sample_nodes = self.SAMPLE_NODES if sample_nodes is None else sample_nodes
        self.net = Network(topo)
        self.planner = Planner(topo, self.net)
        self._plans: dict[tuple, _Plan] = {}

    # -- layout ----------------------------------------------------------------------------
    def layout(self, ranks: int | None) -> Layout:
        lay = layout(self.topo, ranks)
        if self.sample_nodes and lay.m > self.sample_nodes and "spec" in self.topo.meta:
            lay = Layout(lay.nodes, lay.per_node, lay.gpus[: self.sample_nodes])
        return lay

    # -- which algorithms ------------------------------------------------------------------
    def algorithms(self, op: str, lay: Layout) -> list[str]:
        if op == "all_to_all":
            return ["pairwise"]
        if op == "send_recv":
            return ["p2p"]
        if op != "all_reduce":
            return ["ring"]
        out = ["ring", "tree"]
        if self.planner.nvls_ok(lay):
            out.append("nvls_tree" if lay.nodes > 1 else "nvls")
        return out

    def _resolve(self, op: str, algo: str, lay: Layout) -> str:
        if algo == "nvls" and lay.nodes > 1:
            algo = "nvls_tree"
        if algo == "nvls_tree" and lay.nodes == 1:
            algo = "nvls"
        allowed = self.algorithms(op, lay) + (["hierarchical"] if op == "all_reduce" else [])
        if algo in NOT_MODELLED:
            raise InputError(f"algorithm '{algo}' (NCCL's) is not modelled here; allowed: "
                             f"{', '.join(['auto'] + allowed)}", field="algorithm")
        if algo not in allowed:
            raise InputError(f"algorithm '{algo}' cannot run {op} on this system; "
                             f"allowed: {', '.join(['auto'] + allowed)}", field="algorithm")
        return algo

    # -- plans -----------------------------------------------------------------------------
    def plan(self, op: str, algo: str, lay: Layout) -> _Plan:
        key = (op, algo, lay.nodes, lay.per_node)
        if key not in self._plans:
            self._plans[key] = self._make_plan(op, algo, lay)
        return self._plans[key]

    def _intra_ok_ll128(self, kinds: list[str]) -> bool:
        """LL128 runs where NCCL enables it: every intra-node hop on NVLink."""
        intra = [k for k in kinds if k != "net"]
        return (bool(intra) and all(k == "nvlink" for k in intra)) or (not intra and bool(kinds))

    def _hop_lat(self, kinds: list[str], table: dict, proto: str, multinode: bool,
                 exposed: bool = False) -> float:
        """Summed latency of hops. ``exposed``: one rank per node, nothing inside the node to
        overlap a network hop with, which then costs what a tree's network hop costs (NCCL
        does the same)."""
        tot = 0.0
        for k in kinds:
            lat = (P.TREE_HOP_LAT_US if exposed and k == "net" else table)[k][proto]
            if k == "net":
                lat += self._net_wire_extra
            elif multinode and proto == "LL":
                lat *= P.LL_MULTINODE_INTRA
            tot += lat
        return tot

    @property
    def _net_wire_extra(self) -> float:
        """Fabric wire latency of one inter-node hop beyond NCCL's reference (IB NDR, one
        leaf): RoCE NICs and extra switch tiers add to every network hop."""
        if "_wire" not in self.__dict__:
            self.__dict__["_wire"] = 0.0
            nics = [n for n in self.topo.nics() if any(
                ln.kind == "net" for _, ln in self.topo.neighbors(n.id))]
            if nics:
                walk = self.net.router.fabric_walks(nics[0].id, nics[0].id)[0]
                others = [n for n in nics if n.node != nics[0].node
                          and n.index == nics[0].index]
                if others:
                    walk = self.net.router.fabric_walks(nics[0].id, others[0].id)[0]
                wire = sum(self.topo.hop(u, v).lat_us for u, v in pairwise(walk))
                self.__dict__["_wire"] = wire - P.NET_REF_WIRE_US
        return self.__dict__["_wire"]

    def _make_plan(self, op: str, algo: str, lay: Layout) -> _Plan:
        n = lay.ranks
        pl = self.planner
        multinode = lay.nodes > 1
        protos: tuple[str, ...]
        if algo == "hierarchical":
            phases = pl.hierarchical(lay, _UNIT)
            parts = [self.net.simulate(ph.transfers) for ph in phases]
            bw = sum(s.drain_s for s in parts) / _UNIT
            lat = {}
            for p in P.PROTOCOLS:
                lat[p] = P.BASE_LAT_US["ring"][p] * len(phases)
                g = lay.per_node
                for ph in phases:
                    steps = (g - 1) if ph.hops and ph.hops[0] != "net" else 2 * (lay.nodes - 1)
                    hops = ph.hops or ["nvlink"]
                    lat[p] += steps / max(len(hops), 1) * self._hop_lat(
                        hops, P.HOP_LAT_US, p, multinode)
            kinds = [k for ph in phases for k in ph.hops]
            protos = P.PROTOCOLS if self._intra_ok_ll128(kinds) else ("LL", "Simple")
            edges = max((s.edges for s in parts), key=lambda e: max((x.busy for x in e), default=0))
            return _Plan(algo, protos, bw, lat, 1.0, edges, note=" then ".join(
                ph.note for ph in phases))
        if algo == "ring":
            steps = {"all_reduce": 2 * (n - 1), "all_gather": n - 1, "reduce_scatter": n - 1,
                     "broadcast": n - 1, "reduce": n - 1}[op]
            per_rank = {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n,
                        "reduce_scatter": (n - 1) / n}.get(op, 1.0) * _UNIT
            pat = pl.ring(lay, per_rank)
            # each step crosses one hop of the ring: steps x the mean latency of its hops
            lat = {p: P.BASE_LAT_US["ring"][p]
                   + steps * self._hop_lat(pat.hops, P.HOP_LAT_US, p, multinode,
                                           exposed=lay.per_node == 1)
                   / max(len(pat.hops), 1)
                   for p in P.PROTOCOLS}
            kinds = pat.hops
        elif algo == "tree":
            pat = pl.chain_tree(lay, _UNIT)
            lat = {p: P.BASE_LAT_US["tree"][p]
                   + 2 * self._hop_lat(pat.tree_hops, P.TREE_HOP_LAT_US, p, multinode)
                   for p in P.PROTOCOLS}
            kinds = pat.tree_hops
        elif algo in ("nvls", "nvls_tree"):
            pat = pl.nvls(lay, _UNIT, P.NVLS_EFFICIENCY[pl.nvls_link(lay)])
            lat_s = P.BASE_LAT_US["nvls"]["Simple"] + P.NVLS_LAT_US + 2 * \
                self._hop_lat(pat.tree_hops, P.TREE_HOP_LAT_US, "Simple", multinode)
            lat = {"Simple": lat_s}
            kinds = ["nvlink"]
        elif algo == "pairwise":
            pat = pl.pairwise(lay, _UNIT)
            kinds = pat.hops
            lat = {p: P.BASE_LAT_US["p2p"][p] + max(P.HOP_LAT_US[k][p] for k in kinds)
                   + P.P2P_PER_PEER_US * (n - 1) for p in P.PROTOCOLS}
        elif algo == "p2p":
            pat = pl.send_recv(lay, _UNIT)
            kinds = pat.hops
            lat = {p: P.BASE_LAT_US["p2p"][p] + sum(P.HOP_LAT_US[k][p] for k in kinds)
                   for p in P.PROTOCOLS}
        else:  # pragma: no cover - guarded by _resolve
            raise InputError(f"unknown algorithm '{algo}'", field="algorithm")
        sim = self.net.simulate(pat.transfers)
        bw = sim.drain_s / _UNIT
        if algo in ("nvls", "nvls_tree"):
            protos = ("Simple",)
        elif self._intra_ok_ll128(kinds):
            protos = P.PROTOCOLS
        else:
            protos = ("LL", "Simple")
        eff = P.TREE_EFFICIENCY if algo in ("tree", "nvls_tree") else 1.0
        return _Plan(algo, protos, bw, lat, eff, sim.edges, note=pat.note)

    # -- predictions -----------------------------------------------------------------------
    def _proto_eff(self, op: str, proto: str, lay: Layout) -> float:
        if proto == "LL" and not (lay.nodes > 1 or op in ("all_reduce", "reduce")):
            return P.LL_EFFICIENCY_COPY
        return P.PROTO_EFFICIENCY[proto]

    def _time_us(self, op: str, plan: _Plan, proto: str, size: float, lay: Layout) -> float:
        eff = plan.eff * self._proto_eff(op, proto, lay)
        return plan.lat_us[proto] + size * plan.bw_s_per_byte / eff * 1e6

    def predict(self, op: str, size: int, ranks: int | None = None, algo: str | None = None,
                proto: str | None = None) -> Prediction:
        """Predict one operation of ``size`` bytes (nccl-tests' size: the whole buffer)."""
        op = check_op(op)
        algo = check_algo(algo)
        if size < 0 or not math.isfinite(size):
            raise InputError(f"size must be a non-negative number of bytes, got {size}",
                             field="size")
        lay = self.layout(ranks)
        n = lay.ranks
        if proto is not None:
            known = {p.lower(): p for p in P.PROTOCOLS}
            if proto.lower() not in known:
                raise InputError(f"unknown protocol '{proto}'; allowed: "
                                 f"{', '.join(P.PROTOCOLS)}", field="proto")
            proto = known[proto.lower()]
        if n == 1:
            return self._single(op, size, algo)
        algos = self.algorithms(op, lay) if algo == "auto" else [self._resolve(op, algo, lay)]
        best = None
        for a in algos:
            plan = self.plan(op, a, lay)
            for p in plan.protos:
                if proto is not None and p != proto:
                    continue
                t = self._time_us(op, plan, p, size, lay)
                if best is None or t < best[0]:
                    best = (t, plan, p)
        if best is None:
            raise InputError(f"protocol '{proto}' cannot run {op} with algorithm {algo} here",
                             field="proto")
        t, plan, p = best
        algbw = size / (t * 1e-6) / 1e9 if t > 0 else 0.0
        bott, busy = "", 0.0
        top = max(plan.sim_edges, key=lambda e: e.busy, default=None)
        if top is not None and t > 0 and top.usable_GBps > 0:
            # the share of the operation's time this link direction spends moving data
            busy = min(1.0, top.bytes / _UNIT * size / (top.usable_GBps * 1e9) / (t * 1e-6))
            bott = top.label if top.kind == "dram" else f"{top.label} ({top.src} -> {top.dst})"
        # nccl-tests prints the per-rank element count for the sharded operations
        per = n if op in ("all_gather", "reduce_scatter", "all_to_all") else 1
        return Prediction(op, int(size), int(size // DTYPE_BYTES // per), "float",
                          "sum" if op in ("all_reduce", "reduce", "reduce_scatter") else "none",
                          0 if op in ("broadcast", "reduce") else -1, n, t, algbw,
                          algbw * busbw_factor(op, n), plan.algo, p, bott, round(busy, 4),
                          plan.note)

    def _single(self, op: str, size: float, algo: str) -> Prediction:
        from gpufabric import catalog
        g = self.topo.gpus()[0]
        try:
            mem = catalog.gpu(g.model).mem_bw_GBps
        except InputError:
            mem = 1000.0
        t = P.BASE_LAT_US["ring"]["Simple"] + 2 * size / (mem * 1e9) * 1e6
        algbw = size / (t * 1e-6) / 1e9
        return Prediction(op, int(size), int(size // DTYPE_BYTES), "float", "sum", -1, 1, t,
                          algbw, 0.0, "local", "Simple", note="one rank: a local copy")


def _fingerprint(topo: Topology) -> int:
    return hash((len(topo.devices), tuple((ln.a, ln.b, ln.kind, ln.bw_GBps, ln.count)
                                          for ln in topo.links),
                 topo.meta.get("nodes"), topo.meta.get("p2p")))


def model(topo: Topology) -> Model:
    """The :class:`Model` of a topology, cached on it until its devices or links change."""
    fp = _fingerprint(topo)
    hit = topo.__dict__.get("_collectives_model")
    if hit is None or hit[0] != fp:
        hit = (fp, Model(topo))
        topo.__dict__["_collectives_model"] = hit
    return hit[1]


def predict(topo: Topology, op: str, size: int, ranks: int | None = None,
            algo: str | None = None, proto: str | None = None) -> Prediction:
    """Predict one collective on ``topo``; see :meth:`Model.predict`."""
    return model(topo).predict(op, size, ranks, algo, proto)


def sweep(topo: Topology, op: str, sizes, ranks: int | None = None,
          algo: str | None = None) -> list[dict]:
    """Predictions for many sizes: dicts with size, time_us, algbw, busbw, algo, proto.

    Examples
    --------
    >>> from gpufabric.topology.build import from_spec
    >>> t = from_spec({"gpu": "A100-SXM4-80GB", "gpus_per_node": 8})
    >>> rows = sweep(t, "all_reduce", [8, 2**30])
    >>> [r["algo"] for r in rows], rows[0]["time_us"] < rows[1]["time_us"]
    (['ring', 'ring'], True)
    """
    m = model(topo)
    out = []
    for s in sizes:
        p = m.predict(op, int(s), ranks, algo)
        out.append({"size": p.size, "time_us": p.time_us, "algbw": p.algbw, "busbw": p.busbw,
                    "algo": p.algo, "proto": p.proto})
    return out


def summary(topo: Topology) -> dict:
    """Collective figures for ``gpufabric compare``: all_reduce busbw at 1 GB (GB/s), 8-byte
    all_reduce latency (us) and all_to_all busbw at 1 GB (GB/s), over all GPUs.

    Examples
    --------
    >>> from gpufabric.topology.build import from_spec
    >>> s = summary(from_spec({"gpu": "H100-SXM", "gpus_per_node": 8}))
    >>> s["allreduce_algo_1GB"], s["allreduce_8B_lat_us"], s["alltoall_busbw_1GB"]
    ('nvls', 15.0, 368.9)
    """
    m = model(topo)
    ar = m.predict("all_reduce", 2**30)
    lat = m.predict("all_reduce", 8)
    a2a = m.predict("all_to_all", 2**30)
    return {"allreduce_busbw_1GB": round(ar.busbw, 1),
            "allreduce_8B_lat_us": round(lat.time_us, 1),
            "alltoall_busbw_1GB": round(a2a.busbw, 1),
            "allreduce_algo_1GB": ar.algo, "ranks": ar.ranks}


__all__ = ["OPS", "ALGOS", "Prediction", "Model", "model", "predict", "sweep", "summary",
           "busbw_factor", "check_op", "check_algo", "Layout", "layout"]

"""The collective model: which algorithm and protocol NCCL would pick for an operation on a
topology and what it costs (:class:`Model`, cached per topology by :func:`model`), the checks of
operation, algorithm and protocol names, and the figures ``compare`` shows. The package
docstring (:mod:`gpufabric.collectives`) describes the model."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from itertools import pairwise

from gpufabric import params as _params
from gpufabric.cache import BoundedDict
from gpufabric.collectives import params as P
from gpufabric.collectives import versions
from gpufabric.collectives.algorithms import REGISTRY as ALGORITHMS
from gpufabric.collectives.algorithms import Algorithm, Plan, register
from gpufabric.collectives.algorithms.base import UNIT as _UNIT
from gpufabric.collectives.ops import OPS, busbw_factor
from gpufabric.collectives.patterns import Layout, Planner, layout
from gpufabric.errors import InputError
from gpufabric.network import Network
from gpufabric.network.capacity import PARAMS as NETWORK_PARAMS
from gpufabric.topology.model import Topology

#: "auto" and every registered algorithm (collectives/algorithms/, one file each).
ALGOS = ("auto",) + tuple(sorted(ALGORITHMS, key=lambda a: (ALGORITHMS[a].order, a)))
DTYPE_BYTES = 4



def check_op(op: str) -> str:
    o = op.strip().lower().replace("-", "_")
    o = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
         "alltoall": "all_to_all", "sendrecv": "send_recv", "bcast": "broadcast"}.get(o, o)
    if o not in OPS:
        raise InputError(f"unknown operation '{op}'; allowed: {', '.join(OPS)}", field="op")
    return o


#: Algorithms NCCL has that this model does not: accepted by name, refused when predicting
#: (``validate`` then falls back to the automatic choice and notes it per point).
NOT_MODELLED = ("collnet_direct", "collnet_chain")


def check_algo(algo: str | None) -> str:
    """The canonical name of an algorithm (modelled, or one of NCCL's :data:`NOT_MODELLED`),
    or of a list of them in ``NCCL_ALGO``'s syntax: ``ring,tree`` lets the automatic choice
    pick among those only, ``^nvls,nvls_tree`` among all but those.

    Examples
    --------
    >>> check_algo("NVLSTree"), check_algo("CollNet"), check_algo("PAT")
    ('nvls_tree', 'collnet_direct', 'pat')
    >>> check_algo("Tree,Ring"), check_algo("^NVLS")
    ('ring,tree', '^nvls')
    """
    if algo is None:
        return "auto"
    names = ("auto",) + tuple(sorted(ALGORITHMS, key=lambda x: (ALGORITHMS[x].order, x)))
    neg, parts = _nccl_list(algo)
    out = []
    for part in parts:
        a = part.lower().replace("-", "_")
        a = {"nvlstree": "nvls_tree", "hier": "hierarchical", "collnet": "collnet_direct",
             "collnetdirect": "collnet_direct", "collnetchain": "collnet_chain"}.get(
            a.replace("_", ""), a)
        if a not in names + NOT_MODELLED or (a == "auto" and (neg or len(parts) > 1)):
            raise InputError(f"unknown algorithm '{part}'; allowed: {', '.join(names)}, or a "
                             f"list of them as NCCL_ALGO takes it (ring,tree or ^nvls)",
                             field="algorithm")
        out.append(a)
    if len(out) == 1 and not neg:
        return out[0]
    order = names + NOT_MODELLED
    return ("^" if neg else "") + ",".join(sorted(set(out), key=order.index))


def check_proto(proto: str | None) -> tuple[str, ...] | None:
    """The protocols a run may use: one name, or a list in ``NCCL_PROTO``'s syntax
    (``Simple,LL128``, or ``^LL`` for all but LL); ``None``: any.

    >>> check_proto("simple"), check_proto("^LL"), check_proto(None)
    (('Simple',), ('LL128', 'Simple'), None)
    """
    if proto is None:
        return None
    known = {p.lower(): p for p in P.PROTOCOLS}
    neg, parts = _nccl_list(proto)
    for part in parts:
        if part.lower() not in known:
            raise InputError(f"unknown protocol '{part}'; allowed: {', '.join(P.PROTOCOLS)}, "
                             f"or a list of them as NCCL_PROTO takes it (Simple,LL128 or ^LL)",
                             field="proto")
    named = {known[x.lower()] for x in parts}
    out = tuple(p for p in P.PROTOCOLS if (p in named) != neg)
    if not out:
        raise InputError(f"'{proto}' leaves no protocol; allowed: {', '.join(P.PROTOCOLS)}",
                         field="proto")
    return out


def _nccl_list(text: str) -> tuple[bool, list[str]]:
    """NCCL's list syntax for NCCL_ALGO and NCCL_PROTO: names split by commas, all but those
    when it starts with ``^``."""
    s = text.strip()
    neg = s.startswith("^")
    return neg, [x.strip() for x in s.lstrip("^").split(",") if x.strip()] or [s]


@dataclass(frozen=True)
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


class Model:
    """The collective model of one topology: plans are built once and reused for every size.

    Its network (link rates) is that of the parameters current when it is built; its plans
    (latencies, efficiencies) are kept per parameter value (:attr:`gpufabric.params.Params.key`).

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
        self._plans: dict[tuple, Plan] = {}
        self._memo: dict[tuple, Prediction] = {}

    # -- layout ----------------------------------------------------------------------------
    def layout(self, ranks: int | None, per_node: int | None = None, group: int = 0) -> Layout:
        lay = layout(self.topo, ranks, per_node, group)
        if self.sample_nodes and lay.m > self.sample_nodes and "spec" in self.topo.meta:
            lay = Layout(lay.nodes, lay.per_node, lay.gpus[: self.sample_nodes])
        return lay

    def layouts(self, ranks: int | None, per_node: int | None = None, concurrent: int = 1
                ) -> list[Layout]:
        """The layouts of ``concurrent`` groups of one shape on the same nodes (group 0 first).
        """
        if isinstance(concurrent, bool) or not isinstance(concurrent, int) or concurrent < 1:
            raise InputError(f"must be a whole number of groups, at least 1, got {concurrent}",
                             field="concurrent")
        if per_node is not None and (isinstance(per_node, bool)
                                     or not isinstance(per_node, int)):
            raise InputError(f"must be a whole number of ranks per node, got {per_node}",
                             field="per_node")
        first = self.layout(ranks, per_node, 0)
        if concurrent == 1:
            return [first]
        return [first] + [self.layout(first.ranks, first.per_node, c)
                          for c in range(1, concurrent)]

    # -- which algorithms ------------------------------------------------------------------
    def algorithms(self, op: str, lay: Layout) -> list[str]:
        """The algorithms NCCL's tuner chooses among for ``op`` on these ranks (those of the
        NCCL release in use: those it lacks are left out)."""
        return [a.name for a in self._runnable(op, lay) if a.auto]

    def _runnable(self, op: str, lay: Layout) -> list[Algorithm]:
        """The algorithms that can run ``op`` on these ranks with the NCCL release in use,
        in NCCL's order."""
        missing = versions.missing()
        return [a for a in sorted(ALGORITHMS.values(), key=lambda a: a.order)
                if a.name not in missing and a.applies(self, op, lay)]

    def net_protocols(self) -> tuple[str, ...]:
        """NCCL protocols the scale-out network carries: those every network link kind of the
        system allows (catalog ``nccl_protocols``; AWS's first EFA carries Simple only).

        >>> from gpufabric.topology.build import from_spec
        >>> Model(from_spec({"gpu": "A100-SXM4-80GB", "nodes": 2, "nics_per_node": 4,
        ...                  "nic": "efa-v1"})).net_protocols()
        ('Simple',)
        """
        if "_net_protos" not in self.__dict__:
            from gpufabric.network.capacity import net_speed_of
            ok = set(P.PROTOCOLS)
            for ln in self.topo.links:
                speed = net_speed_of(ln, self.topo) if ln.kind == "net" else None
                if speed is not None and speed.nccl_protocols:
                    ok &= set(speed.nccl_protocols)
            self.__dict__["_net_protos"] = tuple(p for p in P.PROTOCOLS if p in ok)
        return self.__dict__["_net_protos"]

    def _candidates(self, op: str, algo: str, lay: Layout) -> list[str]:
        """The algorithms to choose among: NCCL's tuner's (``auto``), the one forced, or those
        of an NCCL_ALGO-style list (:func:`check_algo`) that can run here."""
        if algo == "auto":
            return self.algorithms(op, lay)
        if "," not in algo and not algo.startswith("^"):
            return [self._resolve(op, algo, lay)]
        neg, names = _nccl_list(algo)
        runs = [a.name for a in self._runnable(op, lay)]
        out = [a for a in (self.algorithms(op, lay) if neg else runs) if (a in names) != neg]
        if not out:
            raise InputError(f"no algorithm of '{algo}' can run {op} on this system; "
                             f"allowed: {', '.join(['auto'] + runs)}", field="algorithm")
        return out

    def _resolve(self, op: str, algo: str, lay: Layout) -> str:
        if algo == "nvls" and lay.nodes > 1:
            algo = "nvls_tree"
        if algo == "nvls_tree" and lay.nodes == 1:
            algo = "nvls"
        allowed = [a.name for a in self._runnable(op, lay)]
        if algo in versions.missing():
            rel = ".".join(map(str, versions.release() or ()))
            raise InputError(f"algorithm '{algo}' is not in NCCL {rel} (NVLS from 2.17.1, NVLS "
                             f"tree from 2.18.1, PAT from 2.23.4); allowed: "
                             f"{', '.join(['auto'] + allowed)}", field="algorithm")
        if algo in NOT_MODELLED:
            raise InputError(f"algorithm '{algo}' (NCCL's) is not modelled here; allowed: "
                             f"{', '.join(['auto'] + allowed)}", field="algorithm")
        if algo not in allowed:
            raise InputError(f"algorithm '{algo}' cannot run {op} on this system; "
                             f"allowed: {', '.join(['auto'] + allowed)}", field="algorithm")
        return algo

    # -- plans -----------------------------------------------------------------------------
    def plan(self, op: str, algo: str, lay: Layout | list[Layout]) -> Plan:
        """The plan of ``algo`` for one group (``lay``) or for several groups of one shape
        running at once (a list of layouts, the group whose operation is timed first)."""
        lays = lay if isinstance(lay, list) else [lay]
        key = (_params.current().key, op, algo, lays[0].nodes, lays[0].per_node, len(lays))
        hit = self._plans.get(key)
        if hit is None:
            hit = ALGORITHMS[algo].plan(self, op, lays)
            self._plans[key] = hit
        return hit

    def hop_lat(self, kinds: list[str], table: dict, proto: str, multinode: bool,
                exposed: bool = False, floor: float = 0.0,
                net_up: list[float] | None = None) -> float:
        """Summed latency of hops. ``exposed``: one rank per node, nothing inside the node to
        overlap a network hop with, which then costs what a tree's network hop costs (NCCL
        does the same). ``floor``: least an intra-node hop costs (NCCL's network overhead).
        ``net_up``: the fabric tiers above the leaf each network hop climbs, in order (each
        tier adds two switch hops of wire latency). A network hop received with Simple also
        pays the receiver's flush (``NET_SIMPLE_FLUSH``)."""
        tot = 0.0
        ups = iter(net_up or ())
        for k in kinds:
            lat = (P.TREE_HOP_LAT_US if exposed and k == "net" else table)[k][proto]
            if k == "net":
                lat += self.net_wire_extra(next(ups, 0.0))
                if proto == "Simple":
                    # the receiver's flush through its own NIC (NCCL counts the net's latency
                    # once more for Simple): the NIC's latency, not the fabric's tiers
                    lat += P.NET_SIMPLE_FLUSH * max(0.0, self.net_wire_extra(0.0))
            else:
                if multinode and proto == "LL":
                    lat *= P.LL_MULTINODE_INTRA
                lat = max(lat, floor)
            tot += lat
        return tot

    def net_wire_extra(self, up: float = 0.0) -> float:
        """Fabric wire latency of one inter-node hop beyond NCCL's reference (IB NDR, one
        leaf): the NIC-leaf-NIC wire of this fabric (RoCE and cloud NICs add to every network
        hop), plus two switch hops (up and down) per tier above the leaf the hop climbs."""
        if "_wire" not in self.__dict__:
            wire, sw = 0.0, 0.0
            nics = [n for n in self.topo.nics() if any(
                ln.kind == "net" for _, ln in self.topo.neighbors(n.id))]
            if nics:
                walk = self.net.router.fabric_walks(nics[0].id, nics[0].id)[0]
                wire = sum(self.topo.hop(u, v).lat_us for u, v in pairwise(walk))
                sw = float((self.topo.meta.get("fabric") or {}).get("switch_lat_us") or 0.0)
            self.__dict__["_wire"] = (wire, sw, bool(nics))
        wire, sw, nics = self.__dict__["_wire"]
        return (wire - P.NET_REF_WIRE_US if nics else 0.0) + 2 * up * sw

    # -- predictions -----------------------------------------------------------------------
    def proto_eff(self, op: str, proto: str, lay: Layout) -> float:
        """Share of the link rate a protocol delivers (LL, LL128, Simple)."""
        return P.PROTO_EFFICIENCY[proto]

    def predict(self, op: str, size: int, ranks: int | None = None, algo: str | None = None,
                proto: str | None = None, *, per_node: int | None = None,
                concurrent: int = 1) -> Prediction:
        """Predict one operation of ``size`` bytes (nccl-tests' size: the whole buffer).

        A prediction is kept per arguments and parameter value (a serving model's tables ask
        for the same sizes on every instance of a deployment).

        Parameters
        ----------
        op, size, ranks, algo, proto
            The operation, the buffer in bytes, the ranks of the group (default: every GPU),
            the algorithm and protocol (default: NCCL's choice, ``auto``).
        per_node : int, optional
            Ranks of the group on each node (default: fill nodes); ``ranks / per_node`` nodes.
        concurrent : int
            Groups of this same shape running at once on the same nodes, on the nodes' other
            GPUs (group ``c`` on local GPUs ``c * per_node ...``); they share NICs, PCIe and
            the fabric as the network's max-min sharing says. The result is one group's
            operation while all run.

        Examples
        --------
        >>> from gpufabric.topology.build import load
        >>> m = Model(load("hgx-h100-4node-4nic"))
        >>> alone = m.predict("all_reduce", 2**30, 4, per_node=1)
        >>> shared = m.predict("all_reduce", 2**30, 4, per_node=1, concurrent=8)
        >>> round(shared.busbw / alone.busbw, 2)
        0.5
        """
        tuner = versions.chooser()
        key = (op, size, ranks, algo, proto, per_node, concurrent, _params.current().key,
               versions.release(), tuner.key if tuner is not None else "")
        hit = self._memo.get(key)
        if hit is None:
            hit = self._predict(op, size, ranks, algo, proto, per_node, concurrent)
            if len(self._memo) >= MEMO_PREDICTIONS:
                self._memo.clear()
            self._memo[key] = hit
        return hit

    def _predict(self, op: str, size: int, ranks: int | None, algo: str | None,
                 proto: str | None, per_node: int | None, concurrent: int) -> Prediction:
        op = check_op(op)
        algo = check_algo(algo)
        if size < 0 or not math.isfinite(size):
            raise InputError(f"size must be a non-negative number of bytes, got {size}",
                             field="size")
        lays = self.layouts(ranks, per_node, concurrent)
        lay = lays[0]
        n = lay.ranks
        protos = check_proto(proto)
        if n == 1:
            return self._single(op, size, algo)
        algos = self._candidates(op, algo, lay)
        net_ok = self.net_protocols() if lay.nodes > 1 else P.PROTOCOLS
        best = None
        # an NCCL release in use chooses by its own tables (versions.chooser), the time is
        # the current tables'
        tuner = versions.chooser()
        for a in algos:
            plan = self.plan(op, a, lays)
            impl = ALGORITHMS[a]
            seen = plan
            if tuner is not None:
                with _params.use(tuner):
                    seen = self.plan(op, a, lays)
            for p in plan.protos:
                if (protos is not None and p not in protos) or p not in net_ok:
                    continue
                t = impl.time_us(self, op, plan, p, lay, size)
                # NCCL's tuner does not see a pipeline's fill, nor a bounce across the
                # sockets: choose without them
                chosen = (self._seen_us(impl, op, seen, p, lay, size, tuner)
                          if tuner is not None else t) \
                    - impl.fill_us(self, op, plan, p, lay, size) \
                    - plan.unseen_lat_us.get(p, 0.0)
                if best is None or chosen < best[3]:
                    best = (t, plan, p, chosen)
        if best is None:
            why = (f" (its network carries {', '.join(net_ok)} only)"
                   if net_ok != P.PROTOCOLS else "")
            raise InputError(f"protocol '{proto}' cannot run {op} with algorithm {algo} "
                             f"here{why}", field="proto")
        t, plan, p, _ = best
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
                          plan.note + (f"; {concurrent} such groups at once"
                                       if concurrent > 1 else ""))

    def _seen_us(self, impl: Algorithm, op: str, plan: Plan, proto: str, lay: Layout,
                 size: float, tuner: _params.Params) -> float:
        """The time the NCCL release in use's tuner estimates for a choice (its tables)."""
        with _params.use(tuner):
            return impl.time_us(self, op, plan, proto, lay, size)

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


#: predictions kept by one model (cleared when full)
MEMO_PREDICTIONS = 10_000

#: models kept on one topology, one per value of the network's parameters (most recent last)
KEEP_MODELS = 4


def model(topo: Topology) -> Model:
    """The :class:`Model` of a topology for the current parameters' link rates, cached on it
    until its devices or links change (one per value of the network's parameters,
    :data:`gpufabric.network.capacity.PARAMS`; a model keeps its plans per parameter value).

    A cheap key (device and link counts, the identity of the first and last link, node count,
    P2P) is checked on every call; the full fingerprint of every link only when it changed, so
    a training step's handful of calls on a 16,384-GPU cluster does not rehash its links."""
    links = topo.links
    quick = (len(topo.devices), len(links), id(links[0]) if links else 0,
             id(links[-1]) if links else 0, topo.meta.get("nodes"), topo.meta.get("p2p"))
    kept = topo.__dict__.get("_collectives_models")
    if kept is None:                # (setdefault: threads that race here keep one)
        kept = topo.__dict__.setdefault("_collectives_models",
                                        BoundedDict(KEEP_MODELS, refresh=True))
    net_key = _params.current().key_of(NETWORK_PARAMS)
    hit = kept.get(net_key)
    if hit is not None and hit[0] == quick:
        return hit[2]
    fp = _fingerprint(topo)
    if hit is None or hit[1] != fp:
        hit = (quick, fp, Model(topo))
    else:
        hit = (quick, fp, hit[2])
    kept[net_key] = hit                         # most recently stored last
    return hit[2]


def predict(topo: Topology, op: str, size: int, ranks: int | None = None,
            algo: str | None = None, proto: str | None = None, *, per_node: int | None = None,
            concurrent: int = 1) -> Prediction:
    """Predict one collective on ``topo``; see :meth:`Model.predict`.

    Examples
    --------
    A data-parallel group over 4 nodes, one GPU each, while 7 more such groups (one per other
    local GPU, as with tensor parallelism 8) run on the same nodes:

    >>> from gpufabric.topology.build import load
    >>> p = predict(load("hgx-h100-4node-ndr"), "all_reduce", 2**28, 4, per_node=1,
    ...             concurrent=8)
    >>> p.ranks, p.algo
    (4, 'ring')
    """
    return model(topo).predict(op, size, ranks, algo, proto, per_node=per_node,
                               concurrent=concurrent)


def sweep(topo: Topology, op: str, sizes, ranks: int | None = None,
          algo: str | None = None, *, per_node: int | None = None,
          concurrent: int = 1) -> list[dict]:
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
        p = m.predict(op, int(s), ranks, algo, per_node=per_node, concurrent=concurrent)
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
           "busbw_factor", "check_op", "check_algo", "check_proto", "Layout", "layout",
           "ALGORITHMS", "Algorithm", "Plan", "register"]

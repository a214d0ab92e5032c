"""The plugin interface of collective algorithms and their registry."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from gpufabric.collectives import params as P
from gpufabric.collectives.ops import busbw_factor
from gpufabric.collectives.patterns import Layout, Pattern
from gpufabric.errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    from gpufabric.collectives import Model

#: Unit buffer used to measure an algorithm's network time per byte (all costs are linear).
UNIT = 1e9


@dataclass
class Plan:
    """What an algorithm costs on one topology, for every size: ``bw_s_per_byte`` (the busiest
    link's busy time per byte of buffer), ``lat_us`` per protocol, ``eff`` (the algorithm's
    share of the link rate), the protocols it may run and the link use behind it."""

    algo: str
    protos: tuple[str, ...]
    bw_s_per_byte: float
    lat_us: dict[str, float]
    eff: float = 1.0
    sim_edges: list = field(default_factory=list)
    bw_s_parts: list = field(default_factory=list)
    note: str = ""
    #: latency per protocol inside ``lat_us`` that NCCL's cost model does not see (bounces
    #: across the sockets): paid, but left out when the automatic choice compares algorithms
    unseen_lat_us: dict[str, float] = field(default_factory=dict)


class Algorithm:
    """One collective algorithm. Subclasses set ``name`` and ``ops`` and implement
    :meth:`plan`; ``auto = False`` keeps it out of the automatic choice (selectable by name);
    ``order`` breaks ties between equally fast algorithms (lower first)."""

    name: ClassVar[str] = ""
    ops: ClassVar[tuple[str, ...]] = ()
    auto: ClassVar[bool] = True
    order: ClassVar[int] = 100

    def applies(self, m: Model, op: str, lay: Layout) -> bool:
        """Whether this algorithm can run ``op`` on the ranks of ``lay``."""
        return op in self.ops

    def plan(self, m: Model, op: str, lays: list[Layout]) -> Plan:
        """The schedule on the network (all of ``lays`` at once; the first is timed)."""
        raise NotImplementedError

    # -- shared pieces ---------------------------------------------------------------------
    @staticmethod
    def simulate(m: Model, pats: list[Pattern]):
        """Time every group's traffic together on the network, once per set of pattern
        objects (the planner reuses its ring patterns; the cache keeps the patterns alive, so
        an id is never reused for other traffic)."""
        cache = m.__dict__.setdefault("_sim_cache", {})
        key = tuple(id(p) for p in pats)
        hit = cache.get(key)
        if hit is None or any(a is not b for a, b in zip(hit[0], pats, strict=True)):
            hit = (list(pats), m.net.simulate([t for p in pats for t in p.transfers]))
            cache[key] = hit
        return hit[1]

    @staticmethod
    def protocols(kinds: list[str]) -> tuple[str, ...]:
        """LL128 runs where NCCL enables it: every intra-node hop on NVLink."""
        intra = [k for k in kinds if k != "net"]
        ok = (bool(intra) and all(k == "nvlink" for k in intra)) or (not intra and bool(kinds))
        return P.PROTOCOLS if ok else ("LL", "Simple")

    def efficiency(self, m: Model, op: str, plan: Plan, proto: str, lay: Layout,
                   size: float) -> float:
        """Share of the network's rate this algorithm and protocol deliver at ``size``."""
        return plan.eff * m.proto_eff(op, proto, lay)

    def latency_us(self, m: Model, op: str, plan: Plan, proto: str, lay: Layout,
                   size: float) -> float:
        return plan.lat_us[proto]

    def fill_bytes(self, m: Model, op: str, plan: Plan, proto: str, lay: Layout,
                   size: float) -> float:
        """Bytes of the buffer paid twice while the algorithm's pipeline fills (0: none)."""
        return 0.0

    def fill_us(self, m: Model, op: str, plan: Plan, proto: str, lay: Layout,
                size: float) -> float:
        """The pipeline's fill: :meth:`fill_bytes` once more at the steady rate. NCCL's own
        cost model leaves it out, so the automatic choice compares times without it, as
        NCCL's tuner does."""
        return self.bw_us(m, op, plan, proto, lay, self.fill_bytes(m, op, plan, proto, lay,
                                                                   size))

    def bw_us(self, m: Model, op: str, plan: Plan, proto: str, lay: Layout,
              size: float) -> float:
        """Time to move ``size`` bytes of buffer at the steady rate (network time per byte
        over the efficiency, never faster than the bus-bandwidth ceiling allows)."""
        t = size * plan.bw_s_per_byte / self.efficiency(m, op, plan, proto, lay, size)
        cap = self.busbw_cap_GBps(m, op, lay, proto)
        if cap > 0:
            t = max(t, size * busbw_factor(op, lay.ranks) / (cap * 1e9))
        return t * 1e6

    def busbw_cap_GBps(self, m: Model, op: str, lay: Layout, proto: str) -> float:
        """A ceiling on the bus bandwidth (NCCL's per-channel limits x channels); 0: none.
        LL is capped at NCCL's llMaxBws (by GPU generation in one node, by host CPU vendor
        across nodes)."""
        if proto != "LL":
            return 0.0
        table = P.LL_MAX_BW_GBPS
        if lay.nodes == 1:
            return table[gpu_generation(m.topo)]
        pair = table["amd" if cpu_vendor(m.topo) == "amd" else "intel"]
        return pair[0] if lay.nodes <= 2 else pair[1]

    def time_us(self, m: Model, op: str, plan: Plan, proto: str, lay: Layout,
                size: float) -> float:
        """Latency plus bytes x network time per byte / efficiency, never faster than the
        algorithm's bus-bandwidth ceiling allows, plus the pipeline's fill."""
        return (self.latency_us(m, op, plan, proto, lay, size)
                + self.bw_us(m, op, plan, proto, lay, size)
                + self.fill_us(m, op, plan, proto, lay, size))


def gpu_generation(topo) -> str:
    """NCCL's GPU generation index of a system (volta, ampere, hopper, blackwell): from the
    NVLink generation, else from the PCIe generation of cards without NVLink."""
    from gpufabric import catalog
    cache = topo.__dict__.setdefault("_nccl_gen", {})
    if "gen" not in cache:
        gen = "ampere"
        gpus = topo.gpus()
        try:
            g = catalog.gpu(gpus[0].model) if gpus else None
        except InputError:
            g = None
        if g is not None:
            by_link = {"nvlink2": "volta", "nvlink3": "ampere", "nvlink4": "hopper",
                       "nvlink5": "blackwell"}
            by_pcie = {3: "volta", 4: "ampere", 5: "blackwell", 6: "blackwell"}
            gen = by_link.get(g.peer_link or "", by_pcie.get(g.pcie_gen, "ampere"))
        cache["gen"] = gen
    return cache["gen"]


def ring_channels(m, lay) -> int:
    """Ring channels NCCL runs for a group: 2 per NVLink link of its first GPU (one ring per
    link found by the search, duplicated), at most MAX_CHANNELS; 2 without NVLink.

    >>> from gpufabric.collectives import Model
    >>> from gpufabric.topology.build import load
    >>> m = Model(load("dgx-a100"))
    >>> ring_channels(m, m.layout(8))
    24
    """
    gpu = lay.gpus[0][0]
    links = sum(ln.count for _, ln in m.topo.neighbors(gpu) if ln.kind == "nvlink")
    per = P.RING_CHANNELS_PER_NVLINK
    ch = min(P.MAX_CHANNELS, per * links) if links else per
    if lay.nodes > 1:
        ch = min(ch, per * len(m.planner.rails(lay)))
    return ch


def host_nic_heads(m, lay) -> tuple[int, float]:
    """NCCL's NVLS-tree heads and the inter-node rate of each: the scale-out NICs of the host
    (server or compute tray) of the group's first GPU, and one NIC's usable rate (GB/s).
    NCCL searches the NVLS graph on each host's own topology, one channel head per NIC. Kept
    on the model, whose network is built for one value of the link-rate parameters."""
    from gpufabric.network.capacity import usable_GBps
    topo = m.topo
    cache = m.__dict__.setdefault("_nvls_heads", {})
    gpu = lay.gpus[0][0]
    if gpu not in cache:
        node = topo.devices[gpu].node
        rates = []
        for nic in topo.nics():
            if nic.node != node:
                continue
            net = [ln for _, ln in topo.neighbors(nic.id) if ln.kind == "net"]
            if net:
                rates.append(usable_GBps(net[0], topo) * net[0].count)
        cache[gpu] = (len(rates), min(rates) if rates else 0.0)
    return cache[gpu]


def cpu_vendor(topo) -> str:
    """Vendor of the host CPUs (intel, amd, nvidia, ...); intel when unknown."""
    from gpufabric import catalog
    for d in topo.devices.values():
        if d.kind == "cpu" and d.model:
            try:
                return catalog.cpu(d.model).vendor
            except InputError:
                break
    return "intel"


REGISTRY: dict[str, Algorithm] = {}


def register(cls: type[Algorithm]) -> type[Algorithm]:
    """Class decorator: file ``cls`` under its ``name``; a name already taken is refused."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name")
    if cls.name in REGISTRY:
        raise ValueError(f"algorithm '{cls.name}' is already registered "
                         f"({type(REGISTRY[cls.name]).__name__})")
    REGISTRY[cls.name] = cls()
    return cls


def get(name: str) -> Algorithm:
    """The registered algorithm called ``name``."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise InputError(f"unknown algorithm '{name}'; allowed: {', '.join(sorted(REGISTRY))}",
                         field="algorithm") from None

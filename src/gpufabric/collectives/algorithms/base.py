"""The plugin interface of collective algorithms and their registry."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from gpufabric.collectives import params as P
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
    #: extra bandwidth cap per protocol, GB/s of busbw-equivalent link rate (NCCL per-channel
    #: limits); 0 = none
    cap_GBps: dict[str, float] = field(default_factory=dict)
    #: usable rate of the busiest link direction (what the caps compare with)
    link_GBps: float = 0.0


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
        """Time every group's traffic together on the network."""
        return m.net.simulate([t for p in pats for t in p.transfers])

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

    def time_us(self, m: Model, op: str, plan: Plan, proto: str, lay: Layout,
                size: float) -> float:
        """Latency plus bytes x network time per byte / efficiency; a per-protocol cap on the
        busiest link's rate (NCCL's per-channel limits) lowers the efficiency below it."""
        eff = self.efficiency(m, op, plan, proto, lay, size)
        cap = plan.cap_GBps.get(proto, 0.0)
        if cap > 0 and plan.link_GBps > 0:
            eff = min(eff, cap / plan.link_GBps)
        return (self.latency_us(m, op, plan, proto, lay, size)
                + size * plan.bw_s_per_byte / eff * 1e6)


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

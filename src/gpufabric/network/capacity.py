"""Usable rate of a link per direction: the raw rate the topology carries, turned into what a
collective library actually moves, using the catalog's NCCL-usable rates per link type.

The rule is one per link *type*, never per machine:

- ``nvlink`` / ``xgmi``: ``count`` x the generation's ``PeerLink.nccl_GBps``;
- ``pcie``: the generation's ``PCIeGen.nccl_x16_GBps`` x lanes / 16;
- ``cpu`` (UPI / xGMI between sockets): the raw rate x :data:`INTERSOCKET_EFFICIENCY`, never
  below the CPU's ``nccl_intersocket_GBps``;
- ``net``: the raw rate x the fabric speed's ``NetSpeed.efficiency`` (headers, flow control;
  :data:`NET_FALLBACK` for a speed the catalog lacks);
- ``c2c`` and links with no catalog rate: the raw rate x :data:`OTHER_EFFICIENCY`;
- ``sli`` / ``crossfire``: 0 (graphics bridges carry no compute traffic).

``nvlink`` (and ``xgmi``), ``pcie`` and ``net`` rates are then multiplied by
:data:`USABLE_RATE_SCALE` of their transport (1 unless a calibration profile sets it).

Each constant here is a :class:`~gpufabric.params.Param` record; the rates use its ``.value``,
the current :class:`~gpufabric.params.Params`' (:data:`PARAMS` names them all).
"""

from __future__ import annotations

from typing import Any

from gpufabric import catalog
from gpufabric.errors import InputError
from gpufabric import params as _params
from gpufabric.params import Param
from gpufabric.topology.model import Link, Topology

#: Fraction of an inter-socket link's raw rate that GPU DMA traffic crossing it achieves
#: (coherent-fabric protocol overhead and remote-memory round trips). Fitted on the 8-GPU
#: no-P2P PCIe Gen5 machine of the calibration file, where the ring crosses the sockets.
def record(name: str, value: Any, unit: str, applies_to: str, source: str) -> Param:
    """Record one of the network's constants where it is defined, with the collective model's
    (``gpufabric params --layer collectives``), and return its record; what a fitted one was
    fitted on is in ``data/fits.yaml``."""
    PARAMS.append(name)
    return _params.record("collectives", name, value, unit, applies_to, source)


#: the names of the constants the network's rates depend on (a cache of a network keys on
#: their values: :meth:`gpufabric.params.Params.key_of`)
PARAMS: list[str] = []


INTERSOCKET_EFFICIENCY = record(
    "INTERSOCKET_EFFICIENCY", 0.45, "share of raw rate",
    "GPU DMA across the inter-socket link (UPI, xGMI)", "fitted (data/fits.yaml)")

#: Fraction of the raw rate usable on links with no catalog NCCL rate (xGMI, C2C, unknown).
OTHER_EFFICIENCY = record(
    "OTHER_EFFICIENCY", 0.8, "share of raw rate", "links without a catalog NCCL rate (C2C, ...)",
    "estimate")

#: Used when a link's generation is unknown: usable / raw of the most common generations.
NVLINK_FALLBACK = record(
    "NVLINK_FALLBACK", 0.82, "share of raw rate", "NVLink of unknown generation",
    "estimate: usable / raw of the catalog's NVLink generations")
PCIE_FALLBACK = record(
    "PCIE_FALLBACK", 0.76, "share of raw rate", "PCIe of unknown generation",
    "estimate: usable / raw of the catalog's PCIe generations")

#: Factor on the usable rate of each collective transport (``nvlink``, ``pcie``, ``net``): 1 is
#: the catalog's NCCL-usable rate. A calibration profile sets it for one machine's links
#: (``gpufabric calibrate``); it never brings a link above its raw rate.
USABLE_RATE_SCALE = record(
    "USABLE_RATE_SCALE", {"nvlink": 1.0, "pcie": 1.0, "net": 1.0}, "x catalog NCCL-usable rate",
    "transport (nvlink, pcie, net): factor on the catalog's NCCL-usable rate of its links; a "
    "calibration profile sets it for one machine (never above the link's raw rate)",
    "estimate: 1, the catalog's NCCL-usable rates as they are "
    "(network.capacity.USABLE_RATE_SCALE)")


def _peer_family(link: Link, topo: Topology | None):
    """The catalog link family: the GPU end's own ``peer_link``, else ``{kind}{gen}``."""
    if topo is not None:
        for end in (link.a, link.b):
            d = topo.devices.get(end)
            if d is not None and d.kind == "gpu" and d.model:
                try:
                    name = catalog.gpu(d.model).peer_link
                    if name:
                        return catalog.peer_link(name)
                except InputError:
                    pass
    if link.gen:
        try:
            return catalog.peer_link(f"{link.kind}{link.gen}")
        except InputError:
            return None
    return None


def _nvlink(link: Link, topo: Topology | None = None) -> float:
    pl = _peer_family(link, topo)
    if pl is not None and pl.per_link_GBps:
        per_raw = link.bw_GBps / max(link.count, 1)
        # keep the ratio if the builder gave a non-catalog rate per link
        return pl.nccl_GBps * max(link.count, 1) * per_raw / pl.per_link_GBps
    return link.bw_GBps * NVLINK_FALLBACK.value


def _pcie(link: Link) -> float:
    if link.gen:
        try:
            g = catalog.pcie_gen(link.gen)
            lanes = link.lanes or 16
            raw = g.bw_GBps(lanes)
            # a builder may cap a link below lanes x gen (e.g. a slower end): keep its ratio
            scale = min(1.0, link.bw_GBps / raw) if raw and link.bw_GBps else 1.0
            return g.nccl_x16_GBps * lanes / 16 * scale
        except InputError:
            pass
    return link.bw_GBps * PCIE_FALLBACK.value


def _cpu(link: Link, topo: Topology) -> float:
    floor = 0.0
    for end in (link.a, link.b):
        model = topo.devices[end].model
        if model:
            try:
                floor = max(floor, catalog.cpu(model).nccl_intersocket_GBps)
            except InputError:
                pass
    return max(link.bw_GBps * INTERSOCKET_EFFICIENCY.value, min(floor, link.bw_GBps))


def net_speed_of(link: Link, topo: Topology) -> catalog.NetSpeed | None:
    """The catalog kind of a scale-out link (its own ``speed``, else the system's ``nic``);
    None when it names none the catalog knows."""
    name = link.attrs.get("speed") or topo.meta.get("nic") or ""
    if not name:
        return None
    try:
        return catalog.net_speed(str(name))
    except InputError:
        return None


#: Share of the raw rate of a network port whose speed is not in the catalog.
NET_FALLBACK = record(
    "NET_FALLBACK", 0.95, "share of raw rate", "a network port whose speed is not in the catalog",
    "estimate (network.capacity: net links of unknown speed)")


def _net(link: Link, topo: Topology) -> float:
    speed = net_speed_of(link, topo)
    return link.bw_GBps * (speed.efficiency if speed is not None else NET_FALLBACK.value)


def usable_GBps(link: Link, topo: Topology) -> float:
    """Usable rate of ``link`` per direction, GB/s.

    Examples
    --------
    >>> from gpufabric.topology.model import Topology, Device, Link
    >>> t = Topology("x")
    >>> t.add_device(Device("g0", "gpu")); t.add_device(Device("g1", "gpu", index=1))
    >>> usable_GBps(Link("g0", "g1", "nvlink", 450.0, count=18, gen=4), t)
    370.8
    """
    k = link.kind
    if k in ("nvlink", "xgmi"):
        return _nvlink(link, topo) * USABLE_RATE_SCALE.value["nvlink"]
    if k == "pcie":
        return _pcie(link) * USABLE_RATE_SCALE.value["pcie"]
    if k == "cpu":
        return _cpu(link, topo)
    if k == "net":
        return _net(link, topo) * USABLE_RATE_SCALE.value["net"]
    if k in ("sli", "crossfire"):
        return 0.0
    return link.bw_GBps * OTHER_EFFICIENCY.value


#: Share of peak DRAM bandwidth a stream of DMA writes and reads sustains (STREAM-class
#: efficiency); fitted on the 8x RTX 5090 two-socket machine, where four GPUs per socket bounce
#: their ring traffic through one socket's memory.
DRAM_EFFICIENCY = record(
    "DRAM_EFFICIENCY", 0.73, "share of peak DRAM bandwidth",
    "host memory crossed by copies through it (written, then read)",
    "fitted (data/fits.yaml); peak = channels x rate x 8 B from Intel ARK / AMD product "
    "briefs")


def host_memory_GBps(topo: Topology, cpu_id: str) -> float | None:
    """Usable DRAM bandwidth of one CPU socket, or None when unknown."""
    model = topo.devices[cpu_id].model
    if not model:
        return None
    try:
        c = catalog.cpu(model)
    except InputError:
        return None
    return c.mem_bw_GBps * DRAM_EFFICIENCY.value if c.mem_bw_GBps else None

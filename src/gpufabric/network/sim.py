"""The network model: :class:`Network` routes a set of concurrent :class:`Transfer` s over a
topology, shares the links max-min fairly and adds each hop's latency (the package docstring,
:mod:`gpufabric.network`, describes it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np

from gpufabric.network.capacity import host_memory_GBps, record, usable_GBps
from gpufabric.network.fairshare import fluid, maxmin_rates
from gpufabric.network.routing import Route, Router
from gpufabric.topology.model import Topology

__all__ = ["Transfer", "Network", "SimResult", "EdgeUse", "Route", "Router", "usable_GBps",
           "maxmin_rates", "fluid", "SHM_EFFICIENCY"]

#: A GPU-to-GPU copy bounced through host memory (no P2P) delivers this fraction of the rate of
#: the links it crosses: the sender's posted writes are cheap, but the receiver pulls the data
#: with PCIe reads of host memory, in chunks, with a flag handshake per chunk. (A transfer to a
#: NIC staged through host memory is read by the NIC's DMA engine and keeps the link rate.)
SHM_EFFICIENCY = record(
    "SHM_EFFICIENCY", 0.73, "share of link rate",
    "GPU-to-GPU copy bounced through host memory (receiver reads host memory over PCIe)",
    "fitted (data/fits.yaml)")


@dataclass(frozen=True)
class Transfer:
    """One point-to-point transfer.

    Parameters
    ----------
    src, dst : str
        Device ids (GPUs usually; a GPU to an NVSwitch models NVLS traffic).
    size_bytes : float
        Bytes to move.
    nic_src, nic_dst : str, optional
        Force the NICs (the rail) when the transfer crosses nodes.
    walk : tuple of str, optional
        Force the devices crossed (skips routing), e.g. a loop through the fabric core.
    tag : str
        Free label (the caller's phase or channel).
    """

    src: str
    dst: str
    size_bytes: float
    nic_src: str | None = None
    nic_dst: str | None = None
    walk: tuple[str, ...] | None = None
    tag: str = ""


@dataclass
class EdgeUse:
    """How busy one link direction was: ``busy`` = bytes / (usable rate x makespan)."""

    src: str
    dst: str
    kind: str
    usable_GBps: float
    bytes: float
    busy: float
    label: str = ""

    def describe(self) -> str:
        return f"{self.label} ({self.src} -> {self.dst}), {self.busy:.0%} busy"


@dataclass
class SimResult:
    """Outcome of :meth:`Network.simulate`.

    ``time_s[i]`` is when transfer ``i`` ended (its route's latency plus its fluid finish);
    ``makespan_s`` the last of them; ``bw_time_s`` the fluid part alone (no latency);
    ``drain_s`` the busy time of the busiest link direction (bytes / usable rate), which a
    pipelined collective takes as its bandwidth time.
    """

    time_s: list[float]
    makespan_s: float
    bw_time_s: float
    transports: list[str]
    edges: list[EdgeUse] = field(default_factory=list)
    drain_s: float = 0.0

    def bottleneck(self) -> EdgeUse | None:
        """The busiest link direction (None if nothing moved)."""
        return max(self.edges, key=lambda e: e.busy, default=None)


def describe_edge(topo: Topology, u: str, v: str) -> str:
    """Plain-words name of a link direction, e.g. 'the PCIe root port of socket 0'."""
    du, dv = topo.devices[u], topo.devices[v]
    ln = topo.hop(u, v)
    k = ln.kind
    if k == "pcie":
        up, down = (du, dv) if ln.a == u else (dv, du)
        arrow = "down" if ln.a == u else "up"
        if up.kind == "cpu":
            return (f"the PCIe root port of socket {up.attrs.get('socket', up.index)} to {down.id} "
                    f"({arrow})")
        if up.kind == "pcie_switch":
            return f"the PCIe switch {up.id} port to {down.id} ({arrow})"
        return f"the PCIe link {up.id}-{down.id} ({arrow})"
    if k == "cpu":
        return f"the inter-socket link {u} -> {v}"
    if k in ("nvlink", "xgmi"):
        if dv.kind == "nvswitch":
            return f"the NVLink ports of {u} into the NVSwitch"
        if du.kind == "nvswitch":
            return f"the NVLink ports of the NVSwitch into {v}"
        return f"the {k} bundle {u} -> {v}"
    if k == "net":
        if du.kind == "nic":
            return f"the NIC port {u} -> {v}"
        if dv.kind == "nic":
            return f"the switch port {u} -> NIC {v}"
        return f"the fabric uplinks {u} -> {v}"
    return f"the {k} link {u} -> {v}"


class Network:
    """Routes and times concurrent transfers on one topology.

    Parameters
    ----------
    topo : Topology
        The system. Routes are cached per instance; build one ``Network`` per topology. Its
        link rates are those of the parameters current when it is built
        (:func:`gpufabric.params.current`).
    """

    def __init__(self, topo: Topology):
        self.topo = topo
        # the link rates and the host-memory bounce's share, as the current parameters have
        # them now (a network is built for one parameter value: see capacity.PARAMS)
        self._shm_eff = SHM_EFFICIENCY.value
        self.router = Router(topo)
        n = len(topo.links)
        self._index = {}
        caps = np.zeros(2 * n)
        lat = np.zeros(2 * n)
        for i, ln in enumerate(topo.links):
            self._index[(ln.a, ln.b)] = 2 * i
            self._index[(ln.b, ln.a)] = 2 * i + 1
            c = usable_GBps(ln, topo) * 1e9
            caps[2 * i] = caps[2 * i + 1] = c
            lat[2 * i] = lat[2 * i + 1] = ln.lat_us
        self._kinds = [ln.kind for ln in topo.links for _ in (0, 1)]
        self._ends = [(ln.a, ln.b) if d == 0 else (ln.b, ln.a) for ln in topo.links for d in (0, 1)]
        # one more edge per CPU socket with known memory: its DRAM, which host-memory bounces
        # and staged network copies cross twice (written, then read)
        self._dram: dict[str, int] = {}
        extra_caps: list[float] = []
        extra_lat: list[float] = []
        for d in topo.devices.values():
            if d.kind == "cpu":
                bw = host_memory_GBps(topo, d.id)
                if bw:
                    self._dram[d.id] = 2 * n + len(extra_caps)
                    extra_caps.append(bw * 1e9)
                    extra_lat.append(0.0)
                    self._kinds.append("dram")
                    self._ends.append((d.id, d.id))
        self.caps_Bps = np.concatenate([caps, extra_caps])
        self.lat_us = np.concatenate([lat, extra_lat])

    def edge(self, u: str, v: str) -> int:
        """Index of the directed edge u -> v."""
        try:
            return self._index[(u, v)]
        except KeyError:
            raise ValueError(f"no link {u}-{v}") from None

    def edges_of(self, walk: tuple[str, ...]) -> np.ndarray:
        return np.fromiter((self._index[(u, v)] for u, v in pairwise(walk)),
                           dtype=int, count=max(len(walk) - 1, 0))

    def _is_gpu(self, dev: str) -> bool:
        return self.topo.devices[dev].kind == "gpu"

    def route(self, t: Transfer) -> Route:
        if t.walk is not None:
            kinds = {self._kinds[e] for e in self.edges_of(t.walk)}
            tr = "net" if "net" in kinds else "pcie" if kinds & {"pcie", "cpu", "c2c"} else "nvlink"
            return Route((t.walk,), tr)
        return self.router.route(t.src, t.dst, nic_src=t.nic_src, nic_dst=t.nic_dst)

    def simulate(self, transfers: list[Transfer]) -> SimResult:
        """Time concurrent transfers that all start at once.

        Each transfer is routed, split evenly over its equal-cost walks, shared max-min fairly
        with every other one on each link direction, and pays its route's latency.
        """
        paths: list[np.ndarray] = []
        weights: list[np.ndarray] = []
        sizes: list[float] = []
        fcaps: list[float] = []
        owner: list[int] = []
        lats: list[float] = []
        transports: list[str] = []
        for i, t in enumerate(transfers):
            r = self.route(t)
            transports.append("shm" if r.staged and r.transport != "net" else r.transport)
            lat = 0.0
            k = len(r.walks)
            # a GPU-to-GPU bounce through host memory costs its links 1/SHM_EFFICIENCY
            # bytes per byte delivered (the receiving GPU reads host memory across PCIe);
            # any copy through host memory writes and reads the socket's DRAM
            bounce = r.transport == "shm" and self._is_gpu(t.src) and self._is_gpu(t.dst)
            weight = 1.0 / self._shm_eff if bounce else 1.0
            drams = [self._dram[h] for h in r.hosts if h in self._dram]
            for w in r.walks:
                crossed = self.edges_of(w)
                wt = np.full(len(crossed), weight)
                if drams:
                    crossed = np.concatenate([crossed, drams]).astype(int)
                    wt = np.concatenate([wt, np.full(len(drams), 2.0)])
                paths.append(crossed)
                weights.append(wt)
                sizes.append(t.size_bytes / k)
                fcaps.append(np.inf)
                owner.append(i)
                lat = max(lat, float(self.lat_us[crossed].sum()) if len(crossed) else 0.0)
            lats.append(lat)
        res = fluid(paths, self.caps_Bps, np.array(sizes), np.array(fcaps), weights)
        fin = np.zeros(len(transfers))
        np.maximum.at(fin, np.array(owner, dtype=int), res.finish_s) if owner else None
        times = [float(f + ln * 1e-6) if transfers[i].size_bytes > 0 else float(ln * 1e-6)
                 for i, (f, ln) in enumerate(zip(fin, lats, strict=True))]
        edges: list[EdgeUse] = []
        span = res.makespan_s
        used = np.flatnonzero(res.edge_bytes > 0)
        caps = self.caps_Bps[used]
        with np.errstate(divide="ignore", invalid="ignore"):
            busy = np.where((caps > 0) & (span > 0), res.edge_bytes[used] / (caps * span), 0.0)
        order = np.argsort(-busy, kind="stable")
        for rank, j in enumerate(order):       # busiest first; plain words for the top ones
            e = int(used[j])
            u, v = self._ends[e]
            label = "" if rank >= 8 else (
                f"the host memory (DRAM) of socket {max(self.topo.devices[u].numa, 0)}"
                if self._kinds[e] == "dram" else describe_edge(self.topo, u, v))
            edges.append(EdgeUse(u, v, self._kinds[e], caps[j] / 1e9,
                                 float(res.edge_bytes[e]), round(float(busy[j]), 6), label))
        return SimResult(times, max(times, default=0.0), span, transports, edges, res.drain_s)

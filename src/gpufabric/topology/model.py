"""The topology model: devices and links as a graph.

A :class:`Topology` holds every device of a server or a cluster (GPUs, CPU sockets, PCIe
switches, NVSwitch fabrics, NICs, network switches) and the links between them. Each link has
a kind, a bandwidth per direction and a latency. The model is plain data; builders
(:mod:`gpufabric.topology.build`) make it from a spec, rules check it, and the path and network
layers run algorithms on it.

Device ids are short and stable: ``n0.gpu3`` (node 0, GPU 3), ``n0.cpu1``, ``n0.sw2`` (PCIe
switch), ``n0.nvsw`` (NVSwitch fabric), ``n0.nic1``, ``leaf.r0.0`` / ``spine.0`` (fabric switches).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from gpufabric.errors import InputError

if TYPE_CHECKING:                    # networkx is imported where a graph is asked for
    import networkx as nx

#: Device kinds.
GPU, CPU, PCIE_SWITCH, NVSWITCH, NIC, NET_SWITCH = (
    "gpu", "cpu", "pcie_switch", "nvswitch", "nic", "net_switch")
DEVICE_KINDS = (GPU, CPU, PCIE_SWITCH, NVSWITCH, NIC, NET_SWITCH)

#: Link kinds. ``pcie``: a PCIe link (lanes x generation); ``nvlink``: one or more NVLink links
#: bundled (``count``); ``xgmi``: AMD Infinity Fabric between GPUs; ``cpu``: the inter-socket
#: link (UPI / xGMI / Grace C2C); ``c2c``: NVLink-C2C between a Grace CPU and its GPU;
#: ``sli`` / ``crossfire``: legacy graphics bridges (no compute traffic); ``net``: a NIC or
#: switch port on the scale-out fabric (InfiniBand or RoCE).
LINK_KINDS = ("pcie", "nvlink", "xgmi", "cpu", "c2c", "sli", "crossfire", "net")


@dataclass
class Device:
    """A device in the topology.

    Parameters
    ----------
    id : str
        Unique id, e.g. ``n0.gpu3``.
    kind : str
        One of :data:`DEVICE_KINDS`.
    model : str
        Catalog name of the hardware (``H100-SXM``, ``EPYC-7763``, ``ConnectX-7``...), or ``""``.
    node : int
        Server index (``-1`` for fabric switches that belong to no server).
    index : int
        Index of this device among devices of its kind in its node (GPU 3 -> 3).
    numa : int
        NUMA node / CPU socket this device hangs off (``-1`` if none).
    attrs : dict
        Extra facts (e.g. ``{"tier": "leaf", "rail": 0}`` for switches).
    """

    id: str
    kind: str
    model: str = ""
    node: int = 0
    index: int = 0
    numa: int = -1
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass
class Link:
    """A bidirectional link; bandwidth is per direction.

    Parameters
    ----------
    a, b : str
        Device ids of the two ends. For PCIe, ``a`` is the upstream end (CPU or switch).
    kind : str
        One of :data:`LINK_KINDS`.
    bw_GBps : float
        Bandwidth per direction in GB/s (1e9 B/s), as the hardware signals it (raw rate).
    lat_us : float
        One-way latency of crossing the link, microseconds.
    count : int
        Number of parallel physical links bundled here (NVLink links, ports).
    lanes : int
        PCIe lane width (0 for non-PCIe links).
    gen : int
        PCIe or NVLink generation (0 if not applicable).
    attrs : dict
        Extra facts, e.g. ``{"host_bridge": 2}`` for a link to a CPU root port.
    """

    a: str
    b: str
    kind: str
    bw_GBps: float
    lat_us: float = 0.0
    count: int = 1
    lanes: int = 0
    gen: int = 0
    attrs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.bw_GBps = float(self.bw_GBps)
        self.lat_us = float(self.lat_us)

    def other(self, dev_id: str) -> str:
        """The end of the link that is not ``dev_id``."""
        return self.b if dev_id == self.a else self.a


@dataclass
class Topology:
    """A server or a cluster: devices, links and what the builder knew.

    Parameters
    ----------
    name : str
        System name (preset name or file stem).
    devices : dict[str, Device]
        Devices by id, in build order.
    links : list[Link]
        Links; at most one link per device pair (parallel links are bundled with ``count``).
    meta : dict
        The spec it was built from and derived facts (``nodes``, ``gpus_per_node``,
        ``scale_up``, ``fabric``...). Plain JSON-able data.

    Examples
    --------
    >>> t = Topology("two", {})
    >>> t.add_device(Device("n0.gpu0", GPU, "H100-SXM"))
    >>> t.add_device(Device("n0.gpu1", GPU, "H100-SXM", index=1))
    >>> t.add_link(Link("n0.gpu0", "n0.gpu1", "nvlink", 450.0, count=18))
    >>> [g.id for g in t.gpus()], t.link("n0.gpu1", "n0.gpu0").count
    (['n0.gpu0', 'n0.gpu1'], 18)
    """

    name: str
    devices: dict[str, Device] = field(default_factory=dict)
    links: list[Link] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    # -- construction -------------------------------------------------------------------
    def add_device(self, dev: Device) -> None:
        if dev.id in self.devices:
            raise ValueError(f"duplicate device id {dev.id!r}")
        self.devices[dev.id] = dev
        self._invalidate(links=False)

    def add_link(self, link: Link) -> None:
        for end in (link.a, link.b):
            if end not in self.devices:
                raise ValueError(f"link {link.a}-{link.b}: no device {end!r}")
        pairs = self._pair_index()
        key = frozenset((link.a, link.b))
        if key in pairs:
            raise ValueError(f"duplicate link {link.a}-{link.b}; bundle parallel links with count")
        self.links.append(link)
        pairs[key] = link
        self._invalidate(links=False)

    def _invalidate(self, links: bool = True) -> None:
        for attr in ("graph", "_adjacent") + (("_pairs",) if links else ()):
            self.__dict__.pop(attr, None)

    # -- queries ------------------------------------------------------------------------
    def _pair_index(self) -> dict[frozenset, Link]:
        if "_pairs" not in self.__dict__:
            self.__dict__["_pairs"] = {frozenset((ln.a, ln.b)): ln for ln in self.links}
        return self.__dict__["_pairs"]

    def link(self, a: str, b: str) -> Link | None:
        """The link between ``a`` and ``b``, or None."""
        return self._pair_index().get(frozenset((a, b)))

    def hop(self, a: str, b: str) -> Link:
        """The link a walk crosses from ``a`` to ``b`` (KeyError if they are not linked)."""
        ln = self.link(a, b)
        if ln is None:
            raise KeyError(f"no link between {a} and {b}")
        return ln

    def neighbors(self, dev_id: str) -> list[tuple[str, Link]]:
        """(neighbor id, link) pairs of a device, in link order."""
        if "_adjacent" not in self.__dict__:
            adj: dict[str, list[tuple[str, Link]]] = {d: [] for d in self.devices}
            for ln in self.links:
                adj[ln.a].append((ln.b, ln))
                adj[ln.b].append((ln.a, ln))
            self.__dict__["_adjacent"] = adj
        return self.__dict__["_adjacent"][dev_id]

    def of_kind(self, kind: str, node: int | None = None) -> list[Device]:
        """Devices of one kind (optionally of one node), in build order."""
        return [d for d in self.devices.values()
                if d.kind == kind and (node is None or d.node == node)]

    def gpus(self, node: int | None = None) -> list[Device]:
        return self.of_kind(GPU, node)

    def nics(self, node: int | None = None) -> list[Device]:
        return self.of_kind(NIC, node)

    def domain_of(self, dev_id: str) -> int:
        """The NVLink (scale-up) domain of a device: its server's, unless it says otherwise.

        A domain is one server, or several servers (the compute trays of a GB200 NVL72 rack)
        joined by NVLink switches; ``meta['nodes_per_domain']`` servers each. GPUs of one
        domain reach each other over NVLink, GPUs of different domains over the NICs.

        Examples
        --------
        >>> from gpufabric.topology.build import from_spec
        >>> t = from_spec({"gpu": "GB200", "gpus_per_node": 4, "nodes": 4, "nvlink_domain": 8})
        >>> [t.domain_of(f"n{k}.gpu0") for k in range(4)], t.domain_of("d1.nvsw")
        ([0, 0, 1, 1], 1)
        """
        d = self.devices[dev_id]
        if "domain" in d.attrs:
            return int(d.attrs["domain"])
        if d.node < 0:
            return -1
        return d.node // int(self.meta.get("nodes_per_domain") or 1)

    def scale_up(self) -> tuple[int, int]:
        """(GPUs per NVLink domain, domains): the unit parallel groups are laid out in.

        A domain is a server, or the trays of a rack-scale machine joined by NVLink switches
        (:meth:`domain_of`); the counts are the whole system's, also when only a few nodes
        are built.

        Examples
        --------
        >>> from gpufabric.topology.build import from_spec
        >>> from_spec({"gpu": "GB200", "gpus_per_node": 4, "nodes": 36,
        ...            "nvlink_domain": 72}).scale_up()
        (72, 2)
        """
        gpus = self.gpus()
        first = [g for g in gpus if self.domain_of(g.id) == self.domain_of(gpus[0].id)] \
            if gpus else []
        per = int(self.meta.get("nvlink_domain") or self.meta.get("gpus_per_node")
                  or len(first))
        domains = int(self.meta.get("domains") or self.meta.get("nodes")
                      or len({self.domain_of(g.id) for g in gpus}))
        return per, domains

    @property
    def node_count(self) -> int:
        nodes = {d.node for d in self.devices.values() if d.node >= 0}
        return len(nodes)

    def node_ids(self) -> list[int]:
        """The servers that hold devices, in order (fabric switches belong to none)."""
        return sorted({d.node for d in self.devices.values() if d.node >= 0})

    def check_node(self, node: int, field: str = "node", file: str | None = None) -> int:
        """``node`` if this topology has that server, else an :class:`InputError`.

        Examples
        --------
        >>> t = Topology("one", {})
        >>> t.add_device(Device("n0.gpu0", GPU, "H100-SXM"))
        >>> try:
        ...     t.check_node(3, field="--node", file="one.yaml")
        ... except InputError as e:
        ...     print(e)
        one.yaml: --node: the system has 1 node(s); allowed: 0 to 0
        """
        if node < 0:
            raise InputError(f"expected a node index >= 0, got {node}", field=field)
        ids = self.node_ids()
        if node in ids:
            return node
        if ids and ids == list(range(len(ids))):
            n = int(self.meta.get("nodes") or len(ids))
            raise InputError(f"the system has {n} node(s); allowed: 0 to {n - 1}", file=file,
                             field=field)
        raise InputError(f"no node {node}; allowed: {', '.join(map(str, ids)) or 'none'}",
                         file=file, field=field)

    @cached_property
    def graph(self) -> nx.Graph:
        """A networkx view: nodes carry ``device``, edges carry ``link``."""
        import networkx as nx
        g = nx.Graph()
        for d in self.devices.values():
            g.add_node(d.id, device=d)
        for ln in self.links:
            g.add_edge(ln.a, ln.b, link=ln)
        return g

    def __iter__(self) -> Iterator[Device]:
        return iter(self.devices.values())

    # -- export -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data: the whole model."""
        return {
            "name": self.name,
            "meta": self.meta,
            "devices": [asdict(d) for d in self.devices.values()],
            "links": [asdict(ln) for ln in self.links],
        }

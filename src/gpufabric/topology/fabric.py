"""Scale-out fabrics: leaf, spine and core tiers built from a switch's radix and port speed.

A cluster's NICs hang off a fabric of switches. :func:`plan` works out, from the spec alone
(no device is built, so it answers for 131,072 GPUs as fast as for 16), how many switches each
tier needs, the ports they use, the cables and optics by kind, the bisection bandwidth and how
many switches lie between two nodes:

* one tier: every NIC port on one leaf switch (or one leaf per rail);
* two tiers: leaves and spines (a leaf-spine Clos), while the leaves fit the spines' ports;
* three tiers: pods of leaves and spines joined by core switches (a k-ary fat-tree holds
  k^3/4 end ports).

``rail-optimized``: NIC ``r`` of every node of a rail group plugs into the leaf of rail ``r``
(``rails_per_leaf`` rails may share one leaf); ``fat-tree``: all NICs of a node on one leaf.
Each tier has its own oversubscription (downlinks : uplinks of one switch).

:func:`add` then builds the switches that the materialized nodes touch: their leaves, one
device per pod for that pod's spines (ECMP over equal spines is their summed capacity) and one
for the core, each link carrying the uplinks of its tier. Routing over them crosses the tiers a
real flow crosses, with the tier's oversubscription in the link capacities.

Examples
--------
>>> p = plan({"nodes": 2048, "nics_per_node": 8, "nic": "ib-ndr",
...           "fabric": {"topology": "rail-optimized", "oversubscription": 1.0,
...                      "switch": "QM9700"}})
>>> [(t.name, t.switches) for t in p.tiers]
[('leaf', 512), ('spine', 512), ('core', 256)]
>>> p.hops(0, 1), p.hops(0, 40), p.hops(0, 2047)
(1, 3, 5)
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from gpufabric import catalog
from gpufabric.errors import InputError

@dataclass
class Tier:
    """One tier of switches.

    ``down`` / ``up``: ports per switch facing down / up (used); ``oversubscription``:
    downlinks : uplinks of one switch; ``ports_used``: over the whole tier.
    """

    name: str
    switch: str
    radix: int
    switches: int
    down: int
    up: int
    oversubscription: float
    ports_used: int
    ports_total: int


@dataclass
class FabricPlan:
    """A whole scale-out fabric, as numbers (JSON-able through :meth:`to_dict`)."""

    topology: str
    speed: str
    protocol: str
    port_GBps: float
    nodes: int
    nics_per_node: int
    tiers: list[Tier]
    nodes_per_leaf: int
    rails_per_leaf: int
    leaves_per_rail: int
    nodes_per_pod: int
    pods: int
    cables: dict[str, int] = field(default_factory=dict)
    optics: dict[str, int] = field(default_factory=dict)
    bisection_GBps: float = 0.0
    switch_lat_us: float = 0.0

    @property
    def end_ports(self) -> int:
        return self.nodes * self.nics_per_node

    @property
    def levels(self) -> int:
        return len(self.tiers)

    def tier(self, name: str) -> Tier | None:
        return next((t for t in self.tiers if t.name == name), None)

    # -- where a node sits ---------------------------------------------------------------
    def leaf_of(self, node: int, rail: int) -> int:
        """Index of the leaf switch NIC ``rail`` of ``node`` plugs into."""
        if self.topology == "rail-optimized":
            group = rail // self.rails_per_leaf
            return group * self.leaves_per_rail + node // self.nodes_per_leaf
        k = self.nics_per_node
        return (node * k + rail) // self.tier("leaf").down  # type: ignore[union-attr]

    def pod_of(self, node: int) -> int:
        return node // self.nodes_per_pod if self.levels == 3 else 0

    def hops(self, a: int, b: int) -> int:
        """Switches crossed between node ``a`` and node ``b`` on one rail (PXN moves traffic to
        the matching rail first over NVLink): 1 under one leaf, 3 in one pod, 5 across pods."""
        if a == b:
            return 0
        if self.leaf_of(a, 0) == self.leaf_of(b, 0) or self.levels == 1:
            return 1
        if self.levels == 2 or self.pod_of(a) == self.pod_of(b):
            return 3
        return 5

    def peer_shares(self, nodes: int) -> list[tuple[int, float, int]]:
        """For a job on nodes ``0..nodes-1``: for each number of tiers above the leaf a flow
        climbs (0, 1, 2), the share of a node's remote peers reached that way and how many of
        the job's nodes share those uplinks (one leaf's nodes, one pod's nodes).

        Examples
        --------
        >>> p = plan({"nodes": 64, "nics_per_node": 8, "nic": "ib-ndr",
        ...           "fabric": {"nodes_per_leaf": 8, "pod_nodes": 32}})
        >>> [(up, round(s, 3), n) for up, s, n in p.peer_shares(64)]
        [(0, 0.111, 8), (1, 0.381, 8), (2, 0.508, 32)]
        """
        return peer_shares(self.levels, self.nodes_per_leaf, self.nodes_per_pod, nodes)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["end_ports"] = self.end_ports
        d["levels"] = self.levels
        d["switches"] = sum(t.switches for t in self.tiers)
        d["hops"] = {"same_leaf": 1, "same_pod": 3 if self.levels >= 2 else 1,
                     "across_pods": 5 if self.levels == 3 else 3 if self.levels == 2 else 1}
        return d


def peer_shares(levels: int, nodes_per_leaf: int, nodes_per_pod: int,
                nodes: int) -> list[tuple[int, float, int]]:
    """:meth:`FabricPlan.peer_shares` from the numbers ``meta['fabric']`` keeps."""
    remote = nodes - 1
    if remote <= 0:
        return []
    leaf = min(nodes_per_leaf, nodes)
    if levels == 1:
        return [(0, 1.0, leaf)]
    pod = min(nodes_per_pod if levels == 3 else nodes, nodes)
    out = [(0, (leaf - 1) / remote, leaf), (1, (pod - leaf) / remote, leaf)]
    if levels == 3:
        out.append((2, (nodes - pod) / remote, pod))
    return [x for x in out if x[1] > 0]


def _over(value: Any, field_: str, file: str | None) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 1:
        raise InputError(f"expected a number >= 1 (downlinks:uplinks), got {value!r}", file=file,
                         field=field_)
    return float(value)


def _split(radix: int, over: float) -> tuple[int, int]:
    """Down and up ports of a switch at ``over``:1 (down / up <= over, as many down as fit)."""
    down = max(1, math.floor(radix * over / (1 + over)))
    return down, max(1, math.ceil(down / over))


def default_switch(s: dict[str, Any], file: str | None = None) -> str:
    """The leaf switch for a spec that names none: the NIC speed's default switch, or, when
    that cannot reach the cluster in three tiers, the catalog's smallest switch of the same
    protocol that can (2,048 nodes of 8x 400G RoCE are built on 128-port 51.2T switches, not
    32-port 12.8T ones).

    Examples
    --------
    >>> s = {"nodes": 2048, "nics_per_node": 8, "nic": "roce-400", "fabric": {}}
    >>> default_switch(s), default_switch({**s, "nodes": 64})
    ('SN5600', 'SN4700')
    """
    speed = catalog.net_speed(s["nic"])
    first = catalog.net_switch(speed.switch)
    if not s.get("nics_per_node") or s["nodes"] <= 1:
        return first.name
    fab = {k: v for k, v in (s.get("fabric") or {}).items() if k not in ("switch",)}
    # what plan reads of the spec (``file`` only names the errors, which stay here)
    key = (s["nic"], s["nodes"], s["nics_per_node"],
           tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in sorted(fab.items())))
    try:
        return _DEFAULT_SWITCH[key]
    except KeyError:
        name = _DEFAULT_SWITCH[key] = _default_switch(s, fab, speed, first, file)
    except TypeError:       # a value of a malformed spec that is no key (plan names it)
        name = _default_switch(s, fab, speed, first, file)
    return name


#: :func:`default_switch`'s answers by what it reads of the spec (the advisor asks for the
#: fabrics of a hundred thousand designs, far fewer distinct ones).
_DEFAULT_SWITCH: dict[tuple, str] = {}


def _default_switch(s: dict[str, Any], fab: dict[str, Any], speed: Any, first: Any,
                    file: str | None) -> str:
    options = [first] + sorted(
        (sw for sw in (catalog.net_switch(n) for n in catalog.names("net_switch"))
         if sw.protocol == first.protocol
         and sw.ports_at(speed.gbps) > first.ports_at(speed.gbps)),
        key=lambda sw: (sw.ports_at(speed.gbps), sw.name))
    for sw in options:
        try:
            plan({**s, "fabric": {**fab, "switch": sw.name}}, file)
        except InputError as exc:
            if exc.field == "nodes":
                continue
        return sw.name
    return first.name


def plan(s: dict[str, Any], file: str | None = None) -> FabricPlan:
    """The fabric of a normalized spec (``nodes``, ``nics_per_node``, ``nic``, ``fabric``).

    ``fabric`` keys: ``topology``, ``oversubscription`` (a number for the leaf tier, or a list
    ``[leaf, spine]``), ``switch`` (leaf model; ``spine_switch`` / ``core_switch`` default to
    it), ``nodes_per_leaf``, ``rails_per_leaf``, ``pod_nodes`` (nodes per pod; forces three
    tiers when the cluster is larger), ``tiers`` (at least this many).

    Raises
    ------
    InputError
        When the switch has no port at the NIC speed, a rail group does not fit a leaf, or the
        cluster needs more pods than a three-tier fabric of this switch connects.
    """
    fab = s.get("fabric") or {}
    speed = catalog.net_speed(s["nic"])
    nodes, k = s["nodes"], s["nics_per_node"]
    topo = fab.get("topology", "rail-optimized")
    sws = _switches(fab, speed, file)
    radix = (sws[0].ports_at(speed.gbps), sws[1].ports_at(speed.gbps),
             sws[2].ports_at(speed.gbps))
    o1, o2 = _oversubscriptions(fab, file)
    leaf = _leaves(fab, sws[0], radix[0], o1, nodes, k, topo == "rail-optimized", file)
    tiers, levels, pods, per_pod = _tiers(fab, sws, radix, o1, o2, leaf, nodes, file)
    # ports used per tier: every link has an end in each of the two tiers it joins
    links_up = [nodes * k, leaf.leaves * tiers[0].up if levels >= 2 else 0,
                tiers[1].switches * tiers[1].up if levels == 3 else 0]
    for i, t in enumerate(tiers):
        t.ports_used = links_up[i] + (links_up[i + 1] if i + 1 < 3 else 0)
    cables, optics = _cabling(speed, sws[0], tiers, links_up, nodes * k, leaf.rail)
    half = nodes * k / 2 * speed.bw_GBps
    bis = half / (o1 if levels >= 2 else 1.0) / (o2 if levels == 3 and pods > 1 else 1.0)
    if levels == 2:
        bis = min(bis, tiers[1].switches * tiers[1].radix / 2 * speed.bw_GBps)
    return FabricPlan(topo, speed.name, speed.protocol, speed.bw_GBps, nodes, k, tiers, leaf.npl,
                      leaf.rpl, leaf.per_rail, per_pod if levels == 3 else nodes, pods, cables,
                      optics, round(bis, 3), speed.switch_lat_us)


def _switches(fab: dict[str, Any], speed: Any, file: str | None) -> tuple[Any, Any, Any]:
    """(leaf, spine, core) switch models, each with ports at the NIC speed."""
    sw = catalog.net_switch(str(fab.get("switch") or speed.switch), file=file,
                            field="fabric.switch")
    spine_sw = catalog.net_switch(str(fab.get("spine_switch") or sw.name), file=file,
                                  field="fabric.spine_switch")
    core_sw = catalog.net_switch(str(fab.get("core_switch") or spine_sw.name), file=file,
                                 field="fabric.core_switch")
    for name, x in (("switch", sw), ("spine_switch", spine_sw), ("core_switch", core_sw)):
        if not x.ports_at(speed.gbps):
            raise InputError(f"{x.name} has no {speed.gbps:g} Gb/s port ({speed.name}); allowed: "
                             "a switch with ports at that speed", file=file, field=f"fabric.{name}")
    return sw, spine_sw, core_sw


def _oversubscriptions(fab: dict[str, Any], file: str | None) -> tuple[float, float]:
    """(leaf, spine) oversubscription from a number or ``[leaf, spine]``."""
    over = fab.get("oversubscription", 1.0)
    overs = list(over) if isinstance(over, list | tuple) else [over]
    if not 1 <= len(overs) <= 2:
        raise InputError(f"expected a number or [leaf, spine], got {over!r}", file=file,
                         field="fabric.oversubscription")
    o1 = _over(overs[0], "fabric.oversubscription", file)
    return o1, _over(overs[1], "fabric.oversubscription", file) if len(overs) > 1 else 1.0


@dataclass
class _Leaves:
    """The leaf tier's layout: nodes and rails per leaf, leaves, downlinks used per leaf."""

    rail: bool
    npl: int
    rpl: int
    groups: int
    per_rail: int
    leaves: int
    down: int
    block_leaves: int      # leaves of one block of nodes (one leaf per rail group)
    block_nodes: int


def _leaves(fab: dict[str, Any], sw: Any, r1: int, o1: float, nodes: int, k: int, rail: bool,
            file: str | None) -> _Leaves:
    """The leaf tier: rail-optimized (one leaf per rail group, ``nodes_per_leaf`` nodes on
    each) or a fat-tree's top-of-rack leaves (every NIC of a node on one leaf)."""
    down1 = _split(r1, o1)[0]
    rpl = int(fab.get("rails_per_leaf") or 1)
    if rpl < 1 or rpl > max(1, k):
        raise InputError(f"expected 1 to {max(1, k)} rails per leaf, got {rpl}", file=file,
                         field="fabric.rails_per_leaf")
    npl_given = fab.get("nodes_per_leaf")
    if rail:
        npl = int(npl_given or min(down1 // rpl, nodes))   # a leaf's worth, or the cluster
        if npl * rpl > down1 or npl < 1:
            raise InputError(f"{npl} nodes x {rpl} rail(s) need {npl * rpl} leaf ports but a "
                             f"{sw.name} at {o1:g}:1 has {down1} downlinks",
                             file=file, field="fabric.nodes_per_leaf")
        groups = math.ceil(k / rpl)
        per_rail = math.ceil(nodes / npl)
        return _Leaves(True, npl, rpl, groups, per_rail, groups * per_rail, npl * rpl,
                       groups, npl)
    npl = int(npl_given or max(1, down1 // max(1, k)))
    if npl_given and npl * k > down1:
        raise InputError(f"{npl} nodes need {npl * k} leaf ports but a {sw.name} at {o1:g}:1 "
                         f"has {down1} downlinks", file=file, field="fabric.nodes_per_leaf")
    down1 = min(down1, npl * k) if npl_given else down1
    return _Leaves(False, npl, rpl, 1, 0, math.ceil(nodes * k / down1), down1, 1,
                   max(1, down1 // max(1, k)))


def _tiers(fab: dict[str, Any], sws: tuple[Any, Any, Any], radix: tuple[int, int, int],
           o1: float, o2: float, leaf: _Leaves, nodes: int, file: str | None
           ) -> tuple[list[Tier], int, int, int]:
    """(tiers, levels, pods, nodes per pod): one leaf tier, a spine when the leaves need one,
    and pods under a core when one spine tier cannot reach every leaf (or ``pod_nodes`` or
    ``tiers`` ask for it)."""
    sw, spine_sw, core_sw = sws
    r1, r2, r3 = radix
    leaves = leaf.leaves
    up1 = max(1, math.ceil(leaf.down / o1))
    tiers = [Tier("leaf", sw.name, r1, leaves, leaf.down, 0, o1, 0, leaves * r1)]
    pod_nodes = fab.get("pod_nodes")
    want = int(fab.get("tiers") or 1)
    two_fit = leaves <= r2 and not (pod_nodes and nodes > pod_nodes)
    levels = 1 if leaves == 1 and want <= 1 else 2 if two_fit and want <= 2 else 3
    if levels >= 2:
        tiers[0].up = up1
    if levels == 2:
        spines = math.ceil(leaves * up1 / r2)
        tiers.append(Tier("spine", spine_sw.name, r2, spines, math.ceil(leaves * up1 / spines),
                          0, 1.0, 0, spines * r2))
        return tiers, levels, 1, nodes
    if levels == 1:
        return tiers, levels, 1, nodes
    down2 = _split(r2, o2)[0]
    if pod_nodes:
        per_pod = int(pod_nodes)
        pod_leaves = math.ceil(per_pod / leaf.block_nodes) * leaf.block_leaves
        if pod_leaves > down2:
            raise InputError(f"a pod of {per_pod} nodes has {pod_leaves} leaves but a "
                             f"{spine_sw.name} spine at {o2:g}:1 has {down2} downlinks",
                             file=file, field="fabric.pod_nodes")
    else:
        blocks = max(1, down2 // leaf.block_leaves)
        per_pod = blocks * leaf.block_nodes
        pod_leaves = blocks * leaf.block_leaves
    pods = math.ceil(nodes / per_pod)
    spines_pp = math.ceil(pod_leaves * up1 / down2)
    if pods > r3:
        raise InputError(
            f"{nodes:,} nodes need {pods} pods of {per_pod} but a three-tier fabric of "
            f"{core_sw.name} core switches reaches at most {r3}; allowed: at most "
            f"{r3 * per_pod:,} nodes, or a larger-radix switch (fabric.switch)", file=file,
            field="nodes")
    up2 = max(1, math.ceil(pod_leaves * up1 / spines_pp / o2))
    core_ports = pods * spines_pp * up2
    cores = math.ceil(core_ports / r3)
    tiers.append(Tier("spine", spine_sw.name, r2, pods * spines_pp,
                      math.ceil(pod_leaves * up1 / spines_pp), up2, o2, 0,
                      pods * spines_pp * r2))
    tiers.append(Tier("core", core_sw.name, r3, cores, math.ceil(core_ports / cores), 0,
                      1.0, 0, cores * r3))
    return tiers, levels, pods, per_pod


def _cabling(speed: Any, sw: Any, tiers: list[Tier], links_up: list[int], nic_links: int,
             rail: bool) -> tuple[dict[str, int], dict[str, int]]:
    """(cables, transceivers): a node's NICs reach a top-of-rack leaf on copper (fat-tree), an
    end-of-row rail leaf on optics (rail-optimized); every switch-to-switch link is optical."""
    copper = not rail
    cables = {f"{speed.gbps:g}G {'copper (DAC)' if copper else 'optical'} NIC-leaf": nic_links}
    if links_up[1]:
        cables[f"{speed.gbps:g}G optical leaf-spine"] = links_up[1]
    if links_up[2]:
        cables[f"{speed.gbps:g}G optical spine-core"] = links_up[2]
    optics: dict[str, int] = {}
    if not copper:
        optics[f"{speed.gbps:g}G NIC transceiver"] = nic_links
        optics[f"{sw.name} switch transceiver ({sw.ports_per_cage} port/cage)"] = math.ceil(
            nic_links / sw.ports_per_cage)
    for i, n_links in ((1, links_up[1]), (2, links_up[2])):
        if n_links:
            for xname in dict.fromkeys((tiers[i - 1].switch, tiers[i].switch)):
                per = catalog.net_switch(xname).ports_per_cage
                key = f"{xname} switch transceiver ({per} port/cage)"
                ends = n_links * (2 if tiers[i - 1].switch == tiers[i].switch else 1)
                optics[key] = optics.get(key, 0) + math.ceil(ends / per)
    return cables, optics


def add(t: Any, p: FabricPlan, built_nodes: Iterable[int]) -> None:
    """Add the switches and net links the built nodes of ``t`` reach.

    Leaves are devices of their own; the spines of one pod are one device (``fabric.pod0.spine``)
    and the core another (``fabric.core``); a link up carries a whole tier's uplinks of the
    switch below (``count`` ports), so equal-cost paths share it as ECMP would.
    """
    from gpufabric.topology.model import NET_SWITCH, Device, Link
    speed = catalog.net_speed(p.speed)
    half = speed.lat_us / 2
    leaf_t = p.tier("leaf")
    spine_t = p.tier("spine")
    assert leaf_t is not None
    attrs = {"speed": speed.name}
    for n in built_nodes:
        pod = p.pod_of(n)
        for r in range(p.nics_per_node):
            idx = p.leaf_of(n, r)
            leaf = f"fabric.leaf{idx}"
            if leaf not in t.devices:
                rails = (list(range((r // p.rails_per_leaf) * p.rails_per_leaf,
                                    min(p.nics_per_node,
                                        (r // p.rails_per_leaf + 1) * p.rails_per_leaf)))
                         if p.topology == "rail-optimized" else None)
                t.add_device(Device(leaf, NET_SWITCH, leaf_t.switch, -1, idx, -1,
                                    {"tier": "leaf", "rail": rails[0] if rails else None,
                                     "rails": rails, "pod": pod}))
                if spine_t is not None:
                    spine = f"fabric.pod{pod}.spine" if p.levels == 3 else "fabric.spine"
                    if spine not in t.devices:
                        per = spine_t.switches // max(1, p.pods)
                        t.add_device(Device(spine, NET_SWITCH, spine_t.switch, -1, pod, -1, {
                            "tier": "spine", "aggregated": True, "switches": per, "pod": pod}))
                        if p.levels == 3:
                            _core(t, p, spine, per * spine_t.up, attrs)
                    t.add_link(Link(leaf, spine, "net", leaf_t.up * speed.bw_GBps,
                                    speed.switch_lat_us, count=leaf_t.up, attrs=dict(attrs)))
            t.add_link(Link(f"n{n}.nic{r}", leaf, "net", speed.bw_GBps, half,
                            attrs=dict(attrs)))


def _core(t: Any, p: FabricPlan, spine: str, ports: int, attrs: dict[str, Any]) -> None:
    from gpufabric.topology.model import NET_SWITCH, Device, Link
    core_t = p.tier("core")
    assert core_t is not None
    if "fabric.core" not in t.devices:
        t.add_device(Device("fabric.core", NET_SWITCH, core_t.switch, -1, 0, -1, {
            "tier": "core", "aggregated": True, "switches": core_t.switches}))
    t.add_link(Link(spine, "fabric.core", "net", ports * p.port_GBps, p.switch_lat_us,
                    count=ports, attrs=dict(attrs)))


def legacy_meta(p: FabricPlan) -> dict[str, Any]:
    """The fabric facts other layers read from ``meta['fabric']``, plus the whole plan."""
    leaf = p.tiers[0]
    return {"topology": p.topology, "oversubscription": leaf.oversubscription,
            "switch": leaf.switch, "nodes_per_leaf": p.nodes_per_leaf,
            "leaf_radix": leaf.radix, "leaf_down": leaf.down, "leaf_up": leaf.up,
            "leaves_per_rail": p.leaves_per_rail, "leaves": leaf.switches,
            "core": p.levels > 1, "port_GBps": p.port_GBps, "protocol": p.protocol,
            **{k: v for k, v in p.to_dict().items()
               if k not in ("topology", "nodes_per_leaf", "leaves_per_rail", "port_GBps",
                            "protocol")}}

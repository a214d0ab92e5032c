"""Hierarchical all_reduce: reduce_scatter in the node, all_reduce across, all_gather in."""

from __future__ import annotations

from gpufabric.collectives import params as P
from gpufabric.collectives.algorithms.base import UNIT, Algorithm, Plan, register


@register
class Hierarchical(Algorithm):
    """Three phases, pipelined over chunks as NCCL pipelines its own multi-level schedules:
    while one chunk crosses the network another is reduced inside the node, so in steady
    state all three phases load the links at once. The bandwidth term is the busiest link
    with every phase's traffic on the network together (phases on different links overlap,
    phases on the same links share them); the latency is the sum of the phases' (the first
    chunk crosses them in sequence). Selectable by name, never chosen automatically (NCCL
    does not run it)."""

    name = "hierarchical"
    ops = ("all_reduce",)
    auto = False
    order = 10

    def plan(self, m, op, lays):
        lay = lays[0]
        pl = m.planner
        phases = pl.hierarchical(lay, UNIT)
        others = [pl.hierarchical(x, UNIT) for x in lays[1:]]
        sim = m.net.simulate([t for ph in phases for t in ph.transfers]
                             + [t for o in others for ph in o for t in ph.transfers])
        multinode = lay.nodes > 1
        lat = {}
        for p in P.PROTOCOLS:
            lat[p] = P.BASE_LAT_US["ring"][p] * len(phases)
            g = lay.per_node
            for ph in phases:
                steps = (g - 1) if ph.hops and ph.hops[0] != "net" else 2 * (lay.nodes - 1)
                hops = ph.hops or ["nvlink"]
                lat[p] += steps / max(len(hops), 1) * m.hop_lat(hops, P.HOP_LAT_US, p,
                                                                 multinode, net_up=ph.net_up)
        kinds = [k for ph in phases for k in ph.hops]
        return Plan(self.name, self.protocols(kinds), sim.drain_s / UNIT, lat, 1.0, sim.edges,
                    note=" then ".join(ph.note for ph in phases) + ", pipelined over chunks")

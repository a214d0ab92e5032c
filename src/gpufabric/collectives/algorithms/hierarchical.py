"""Hierarchical all_reduce: reduce_scatter in the node, all_reduce across, all_gather in."""

from __future__ import annotations

from gpufabric.collectives import params as P
from gpufabric.collectives.algorithms.base import UNIT, Algorithm, Plan, register


@register
class Hierarchical(Algorithm):
    """Three phases in sequence (selectable, never chosen automatically: NCCL does not run
    it)."""

    name = "hierarchical"
    ops = ("all_reduce",)
    auto = False
    order = 10

    def plan(self, m, op, lays):
        lay = lays[0]
        pl = m.planner
        phases = pl.hierarchical(lay, UNIT)
        others = [pl.hierarchical(x, UNIT) for x in lays[1:]]
        parts = [m.net.simulate(ph.transfers + [t for o in others for t in o[i].transfers])
                 for i, ph in enumerate(phases)]
        bw = sum(s.drain_s for s in parts) / UNIT
        multinode = lay.nodes > 1
        lat = {}
        for p in P.PROTOCOLS:
            lat[p] = P.BASE_LAT_US["ring"][p] * len(phases)
            g = lay.per_node
            for ph in phases:
                steps = (g - 1) if ph.hops and ph.hops[0] != "net" else 2 * (lay.nodes - 1)
                hops = ph.hops or ["nvlink"]
                lat[p] += steps / max(len(hops), 1) * m.hop_lat(hops, P.HOP_LAT_US, p,
                                                                 multinode)
        kinds = [k for ph in phases for k in ph.hops]
        edges = max((s.edges for s in parts), key=lambda e: max((x.busy for x in e), default=0))
        return Plan(self.name, self.protocols(kinds), bw, lat, 1.0, edges,
                    note=" then ".join(ph.note for ph in phases))

"""NVLS: NVLink SHARP, the reduction done in the NVSwitch, inside one NVLink domain."""

from __future__ import annotations

from gpufabric.collectives import params as P
from gpufabric.collectives.algorithms.base import UNIT, Algorithm, Plan, register


@register
class Nvls(Algorithm):
    """Each GPU pushes its buffer into the switch to be reduced (multimem ld_reduce) and takes
    the result back by multicast, on NVSwitch generations that reduce in-switch."""

    name = "nvls"
    ops = ("all_reduce",)
    order = 2

    def applies(self, m, op, lay):
        return op in self.ops and lay.nodes == 1 and m.planner.nvls_ok(lay)

    def plan(self, m, op, lays):
        lay = lays[0]
        pl = m.planner
        pats = [pl.nvls(x, UNIT, P.NVLS_EFFICIENCY[pl.nvls_link(x)]) for x in lays]
        pat = pats[0]
        lat = {"Simple": P.BASE_LAT_US["nvls"]["Simple"] + P.NVLS_LAT_US + 2 * m.hop_lat(
            pat.tree_hops, P.TREE_HOP_LAT_US, "Simple", lay.nodes > 1)}
        sim = self.simulate(m, pats)
        return Plan(self.name, ("Simple",), sim.drain_s / UNIT, lat, self.tree_eff, sim.edges,
                    note=pat.note)

    tree_eff = 1.0

"""Pairwise exchange for all_to_all (PXN across nodes)."""

from __future__ import annotations

from gpufabric.collectives import params as P
from gpufabric.collectives.algorithms.base import UNIT, Algorithm, Plan, register


@register
class Pairwise(Algorithm):
    """Every rank sends a piece to every other; across nodes the data for peer GPU j travels
    on rail j (PXN), or on all of GPU j's rails where a node has more NICs than GPUs, and
    traffic beyond the leaf crosses the core."""

    name = "pairwise"
    ops = ("all_to_all",)
    order = 20

    def plan(self, m, op, lays):
        n = lays[0].ranks
        pats = [m.planner.pairwise(x, UNIT) for x in lays]
        kinds = pats[0].hops
        lat = {p: P.BASE_LAT_US["p2p"][p] + max(P.HOP_LAT_US[k][p] for k in kinds)
               + P.P2P_PER_PEER_US * (n - 1) for p in P.PROTOCOLS}
        sim = self.simulate(m, pats)
        return Plan(self.name, self.protocols(kinds), sim.drain_s / UNIT, lat, 1.0, sim.edges,
                    note=pats[0].note)

"""Point to point: each rank sends to the next (send_recv)."""

from __future__ import annotations

from gpufabric.collectives import params as P
from gpufabric.collectives.algorithms.base import UNIT, Algorithm, Plan, register


@register
class P2p(Algorithm):
    """Each rank sends its buffer to the next rank and receives from the previous one."""

    name = "p2p"
    ops = ("send_recv",)
    order = 30

    def plan(self, m, op, lays):
        pats = [m.planner.send_recv(x, UNIT) for x in lays]
        kinds = pats[0].hops
        lat = {p: P.BASE_LAT_US["p2p"][p] + sum(P.HOP_LAT_US[k][p] for k in kinds)
               for p in P.PROTOCOLS}
        sim = self.simulate(m, pats)
        return Plan(self.name, self.protocols(kinds), sim.drain_s / UNIT, lat, 1.0, sim.edges,
                    note=pats[0].note)

"""Tree: a chain through each node from the rail GPU, double binary trees across nodes."""

from __future__ import annotations

from gpufabric.collectives import params as P
from gpufabric.collectives.algorithms.base import UNIT, Algorithm, Plan, register


@register
class Tree(Algorithm):
    """NCCL's tree all_reduce: reduce up the chains and trees while the result comes down."""

    name = "tree"
    ops = ("all_reduce",)
    order = 1

    def plan(self, m, op, lays):
        lay = lays[0]
        pats = [m.planner.chain_tree(x, UNIT) for x in lays]
        pat = pats[0]
        multinode = lay.nodes > 1
        lat = {p: P.BASE_LAT_US["tree"][p]
               + 2 * m.hop_lat(pat.tree_hops, P.TREE_HOP_LAT_US, p, multinode)
               for p in P.PROTOCOLS}
        sim = self.simulate(m, pats)
        return Plan(self.name, self.protocols(pat.tree_hops), sim.drain_s / UNIT, lat,
                    P.TREE_EFFICIENCY, sim.edges, note=pat.note)

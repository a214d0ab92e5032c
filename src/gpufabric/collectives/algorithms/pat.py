"""PAT (Parallel Aggregated Trees): all_gather and reduce_scatter with one GPU per node."""

from __future__ import annotations

import math

from gpufabric.collectives import params as P
from gpufabric.collectives.algorithms.base import UNIT, Algorithm, Plan, register


@register
class Pat(Algorithm):
    """NCCL's PAT (2.23 and later) for all_gather and reduce_scatter when every node holds one
    rank (a data-parallel group across nodes): the data each rank sends is the ring's, at 3/4
    of its rate, but the latency grows with log2 of the node count plus a small linear part
    instead of one network hop per rank. Simple protocol only."""

    name = "pat"
    ops = ("all_gather", "reduce_scatter")
    order = 4

    def applies(self, m, op, lay):
        return op in self.ops and lay.nodes > 1 and lay.per_node == 1

    def plan(self, m, op, lays):
        lay = lays[0]
        n = lay.ranks
        per_rank = (n - 1) / n * UNIT
        pats = [m.planner.ring(x, per_rank) for x in lays]
        # PAT's log2(nodes) steps join nodes 1, 2, 4, ... apart: their mean fabric tiers
        levels = m.planner.tree_tiers(lay, max(1, math.ceil(math.log2(lay.nodes))))
        inter = m.hop_lat(["net"], P.TREE_HOP_LAT_US, "Simple", True,
                          net_up=[sum(levels) / len(levels)])
        lat = {"Simple": P.BASE_LAT_US["pat"]["Simple"]
               + math.log2(lay.nodes) * inter / P.PAT["log_latency_divisor"]
               + n * P.PAT["per_rank_us"]}
        sim = self.simulate(m, pats)
        return Plan(self.name, ("Simple",), sim.drain_s / UNIT, lat, P.PAT["efficiency"],
                    sim.edges, note=f"PAT over {lay.nodes} nodes, one rank each")

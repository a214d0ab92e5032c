"""Tree: a chain through each node from the rail GPU, double binary trees across nodes."""

from __future__ import annotations

import math

from gpufabric.collectives import params as P
from gpufabric.collectives.algorithms.base import (UNIT, Algorithm, Plan, host_nic_heads,
                                                   register)


@register
class Tree(Algorithm):
    """NCCL's tree all_reduce: reduce up the chains and trees while the result comes down.
    Trees keep less in flight than rings at mid sizes: NCCL scales their bandwidth by its own
    correction per protocol and power-of-two size (treeCorrectionFactor, 64 B to 256 MiB)."""

    name = "tree"
    ops = ("all_reduce",)
    order = 1

    def plan(self, m, op, lays):
        lay = lays[0]
        pats = [m.planner.chain_tree(x, UNIT) for x in lays]
        pat = pats[0]
        multinode = lay.nodes > 1
        lat = {p: P.BASE_LAT_US["tree"][p]
               + 2 * m.hop_lat(pat.tree_hops, P.TREE_HOP_LAT_US, p, multinode,
                             net_up=pat.net_up)
               + 2 * pat.chip_hops * m.planner.chip_lat_us(lay.gpus[0][0])
               + 2 * pat.socket_hops * P.SHM_CROSS_SOCKET_US
               for p in P.PROTOCOLS}
        unseen = {p: 2 * pat.socket_hops * P.SHM_CROSS_SOCKET_US for p in P.PROTOCOLS}
        sim = self.simulate(m, pats)
        return Plan(self.name, self.protocols(pat.tree_hops), sim.drain_s / UNIT, lat,
                    P.TREE_EFFICIENCY, sim.edges, note=pat.note, unseen_lat_us=unseen)

    def busbw_cap_GBps(self, m, op, lay, proto):
        """LL's ceiling (llMaxBws), and beyond two nodes NCCL's tree estimate: one channel per
        NIC of the host at that NIC's rate, x the tree efficiency (busBw = nChannels x bwInter
        x 0.92 when nNodes > 2)."""
        cap = super().busbw_cap_GBps(m, op, lay, proto)
        if lay.nodes > 2:
            heads, nic_GBps = host_nic_heads(m, lay)
            if heads:
                net = heads * nic_GBps * P.TREE_EFFICIENCY
                cap = min(cap, net) if cap > 0 else net
        return cap

    def efficiency(self, m, op, plan, proto, lay, size):
        eff = plan.eff * (P.TREE_LL_EFFICIENCY if proto == "LL"
                          else m.proto_eff(op, proto, lay))
        i = int(math.log2(size / 64)) if size >= 64 else -1
        table = P.TREE_CORRECTION[proto]
        return eff * (table[i] if 0 <= i < len(table) else 1.0)

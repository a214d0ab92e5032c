"""Ring: rings over NVLink, PCIe and the rail NICs, as NCCL builds them."""

from __future__ import annotations

from gpufabric.collectives import params as P
from gpufabric.collectives.algorithms.base import (UNIT, Algorithm, Plan, cpu_vendor,
                                                   gpu_generation, register, ring_channels)

#: Ring steps and bytes each rank sends per byte of buffer, per operation.
_STEPS = {"all_reduce": lambda n: 2 * (n - 1), "all_gather": lambda n: n - 1,
          "reduce_scatter": lambda n: n - 1, "broadcast": lambda n: n - 1,
          "reduce": lambda n: n - 1}
_SHARE = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
          "reduce_scatter": lambda n: (n - 1) / n}


@register
class Ring(Algorithm):
    """Rings over all ranks: one per rail NIC across nodes (times the packed intra-node
    rings on direct meshes); every step crosses one hop."""

    name = "ring"
    ops = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")
    order = 0

    def plan(self, m, op, lays):
        lay = lays[0]
        n = lay.ranks
        steps = _STEPS[op](n)
        per_rank = _SHARE.get(op, lambda n: 1.0)(n) * UNIT
        pats = [m.planner.ring(x, per_rank) for x in lays]
        pat = pats[0]
        multinode = lay.nodes > 1
        # across nodes every step launches network work: NCCL floors an intra-node step at the
        # host's network overhead (x3 for Simple)
        over = P.NET_OVERHEAD_US.get(cpu_vendor(m.topo), P.NET_OVERHEAD_US["other"]) \
            if multinode else 0.0
        # each step crosses one hop of the ring: steps x the mean latency of its hops
        lat = {p: P.BASE_LAT_US["ring"][p]
               + steps * m.hop_lat(pat.hops, P.HOP_LAT_US, p, multinode,
                                   exposed=lay.per_node == 1,
                                   floor=over * (3 if p == "Simple" else 1),
                                   net_up=pat.net_up)
               / max(len(pat.hops), 1)
               # hops between the racks of a multi-rack NVLink domain cross one more chip
               + steps * pat.chip_hops * m.planner.chip_lat_us(lay.gpus[0][0])
               # bounces through host memory across the sockets: the reader polls the other
               # socket's memory (NCCL's cost model does not see it)
               + steps * pat.socket_hops * P.SHM_CROSS_SOCKET_US
               for p in P.PROTOCOLS}
        unseen = {p: steps * pat.socket_hops * P.SHM_CROSS_SOCKET_US for p in P.PROTOCOLS}
        sim = self.simulate(m, pats)
        return Plan(self.name, self.protocols(pat.hops), sim.drain_s / UNIT, lat, 1.0,
                    sim.edges, note=pat.note, unseen_lat_us=unseen)

    def latency_us(self, m, op, plan, proto, lay, size):
        """NCCL's ring all_reduce across nodes with Simple pays 1.4x its latency once each
        channel and rank gets 64 bytes or more (the 'plateau effect of ring')."""
        lat = plan.lat_us[proto]
        if (op == "all_reduce" and proto == "Simple" and lay.nodes > 1
                and size / (P.MAX_CHANNELS * lay.ranks) >= 64):
            lat *= P.RING_PLATEAU_LAT
        return lat

    def efficiency(self, m, op, plan, proto, lay, size):
        """The protocol's share of the link rate; NCCL's LL128 ring across nodes with one rank
        per node gets 0.7 instead of 0.92."""
        if proto == "LL128" and lay.nodes > 1 and lay.per_node < 2:
            return plan.eff * P.RING_LL128_ONE_PER_NODE
        return super().efficiency(m, op, plan, proto, lay, size)

    def busbw_cap_GBps(self, m, op, lay, proto):
        """LL's ceiling (llMaxBws) and LL128's per-channel one: ring channels x NCCL's
        perChMaxRingLL128Bw of the GPU generation.

        >>> from gpufabric.collectives import Model
        >>> from gpufabric.topology.build import load
        >>> m = Model(load("dgx-a100"))
        >>> Ring().busbw_cap_GBps(m, "all_reduce", m.layout(8), "LL128")   # 24 x 20 GB/s
        480.0
        """
        if proto == "LL128":
            return ring_channels(m, lay) * P.PER_CH_MAX_RING_LL128_GBPS[gpu_generation(m.topo)]
        return super().busbw_cap_GBps(m, op, lay, proto)

    def fill_bytes(self, m, op, plan, proto, lay, size):
        """The ring's pipeline fill: each channel's first slice (RING_SLICE_BYTES of the
        protocol; all channels together at most the buffer), paid once more at the steady
        rate."""
        return min(float(size), ring_channels(m, lay) * P.RING_SLICE_BYTES[proto])

"""NVLS: NVLink SHARP, the reduction done in the NVSwitch, inside one NVLink domain."""

from __future__ import annotations

from gpufabric.collectives import params as P
from gpufabric.collectives.algorithms.base import UNIT, Algorithm, Plan, register


@register
class Nvls(Algorithm):
    """Each GPU reduces its shard in the switch (multimem ld_reduce) and multicasts the result,
    on NVSwitch generations that reduce in-switch, with more than two GPUs (as NCCL). Mid sizes
    pay the pipeline's fill (:meth:`fill_bytes`)."""

    name = "nvls"
    ops = ("all_reduce",)
    order = 2
    #: share of the link rate the tree part (across nodes) reaches; 1 inside one domain
    tree_eff = 1.0

    def applies(self, m, op, lay):
        return op in self.ops and lay.nodes == 1 and m.planner.nvls_ok(lay)

    @staticmethod
    def switch_efficiency(m, lay) -> float:
        """NCCL's per-generation NVLS efficiency x the share its kernels sustain."""
        return P.NVLS_EFFICIENCY[m.planner.nvls_link(lay)] * P.NVLS_KERNEL_SHARE

    def fill_bytes(self, m, op, plan, proto, lay, size):
        """The pipeline fill: NVLS moves a loop of channels x ranks x chunk bytes
        (16 x G x 128 KiB) through scatter, in-switch reduce and multicast stages that overlap
        only from the second loop on, so the first loop's bytes (or the whole buffer when
        smaller) are paid once more at the steady rate."""
        return min(float(size), P.NVLS_CHANNELS * lay.per_node * P.NVLS_CHUNK_BYTES)

    def plan(self, m, op, lays):
        lay = lays[0]
        pl = m.planner
        pats = [pl.nvls(x, UNIT, self.switch_efficiency(m, x)) for x in lays]
        pat = pats[0]
        # the tree's hops at NCCL's tree latencies, a network hop at NVLS tree's own
        tree = P.TREE_HOP_LAT_US
        hops = {**tree, "net": {**tree["net"], "Simple": P.NVLS_TREE_NET_LAT_US}}
        lat = {"Simple": P.BASE_LAT_US["nvls"]["Simple"] + P.NVLS_LAT_US + 2 * m.hop_lat(
            pat.tree_hops, hops, "Simple", lay.nodes > 1, net_up=pat.net_up)
            # across the racks of one domain the reduction and the multicast each cross one
            # more switch chip
            + 2 * pat.chip_hops * m.planner.chip_lat_us(lay.gpus[0][0])}
        sim = self.simulate(m, pats)
        return Plan(self.name, ("Simple",), sim.drain_s / UNIT, lat, self.tree_eff, sim.edges,
                    note=pat.note)

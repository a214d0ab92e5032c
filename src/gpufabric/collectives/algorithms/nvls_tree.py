"""NVLS tree: NVLS inside each NVLink domain, trees across the domains on the rails."""

from __future__ import annotations

from gpufabric.collectives import params as P
from gpufabric.collectives.algorithms.base import register
from gpufabric.collectives.algorithms.nvls import Nvls

_GENERATION = {"nvlink4": "hopper", "nvlink5": "blackwell"}


@register
class NvlsTree(Nvls):
    """NVLS inside each node; each GPU's reduced shard crosses a tree on its rail at once. NCCL
    limits each NVLS channel's tree bandwidth (perChMaxNVLSTreeBws, by GPU generation and node
    count): the bus bandwidth is capped at NVLS channels x that limit."""

    name = "nvls_tree"
    order = 3
    tree_eff = P.TREE_EFFICIENCY

    def applies(self, m, op, lay):
        return op in self.ops and lay.nodes > 1 and m.planner.nvls_ok(lay)

    def busbw_cap_GBps(self, m, op, lay, proto):
        gen = _GENERATION.get(m.planner.nvls_link(lay))
        if gen is None:
            return 0.0
        per_ch = P.PER_CH_MAX_NVLS_TREE_GBPS[gen][min(lay.nodes, 3) - 1]
        return P.NVLS_CHANNELS * per_ch

"""NVLS tree: NVLS inside each NVLink domain, trees across the domains on the rails."""

from __future__ import annotations

from gpufabric.collectives import params as P
from gpufabric.collectives.algorithms.base import register
from gpufabric.collectives.algorithms.nvls import Nvls


@register
class NvlsTree(Nvls):
    """NVLS inside each node; each GPU's reduced shard crosses a tree on its rail at once."""

    name = "nvls_tree"
    order = 3
    tree_eff = P.TREE_EFFICIENCY

    def applies(self, m, op, lay):
        return op in self.ops and lay.nodes > 1 and m.planner.nvls_ok(lay)

"""NVLS tree: NVLS inside each NVLink domain, trees across the domains on the rails."""

from __future__ import annotations

import math

from gpufabric.collectives import params as P
from gpufabric.collectives.algorithms.base import UNIT, host_nic_heads, register
from gpufabric.collectives.algorithms.nvls import Nvls

_GENERATION = {"nvlink4": "hopper", "nvlink5": "blackwell"}


@register
class NvlsTree(Nvls):
    """NVLS inside each node; each GPU's reduced shard crosses a tree on its rail at once. NCCL
    limits each NVLS channel's tree bandwidth (perChMaxNVLSTreeBws, by GPU generation and node
    count): the bus bandwidth is capped at NVLS channels x that limit. Beyond two nodes NCCL
    also rates each tree channel at half its head NIC (a tree node sends to its parent and to
    two children), with one head per NIC of the host: the bus bandwidth is capped at
    heads x NIC rate / 2 (NCCL's own estimate, so its tuner passes NVLS tree over there).
    Mid sizes pay a longer pipeline fill than NVLS alone (:meth:`fill_bytes`)."""

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
        cap = P.NVLS_CHANNELS * per_ch
        if lay.nodes > 2:
            heads, nic_GBps = host_nic_heads(m, lay)
            if heads:
                cap = min(cap, heads * nic_GBps * P.NVLS_TREE_INTER_SHARE)
        return cap

    def fill_bytes(self, m, op, plan, proto, lay, size):
        """The pipeline fill. A loop (channels x heads x chunk, NCCL's chunk rule for NVLS
        tree) passes the in-switch reduce, the network legs up and down the tree and the
        multicast, all running at once on different links, so results flow only after the
        first loop (or the whole buffer, when smaller) has crossed every stage: the fill is
        the sum of the stages' times per loop less the slowest (which sets the steady rate),
        paid at the steady rate. Each stage's time is its busiest link's, from the schedule's
        own link use: NVLink for the reduce and the multicast, the network for each of the
        2 x depth tree legs. Inside one node that leaves NVLS's one loop (two NVLink
        stages).

        >>> from gpufabric.collectives import Model
        >>> from gpufabric.topology.build import from_spec
        >>> m = Model(from_spec({"gpu": "H100-SXM", "nodes": 2, "nic": "ib-ndr"}))
        >>> lays = m.layouts(16, None, 1)
        >>> plan, tree = m.plan("all_reduce", "nvls_tree", lays), NvlsTree()
        >>> [round(tree.fill_bytes(m, "all_reduce", plan, "Simple", lays[0], s) / 2**20, 1)
        ...  for s in (2**24, 2**25, 2**26, 2**30)]    # MiB: chunk 64 KiB below 64 MiB
        [19.1, 19.1, 38.1, 38.1]
        """
        heads = len(m.planner.rails(lay))
        loop = P.NVLS_CHANNELS * heads * nvls_tree_chunk(size / P.NVLS_CHANNELS, heads,
                                                         lay.nodes)
        return float(min(size, loop) * self._fill_loops(plan, lay))

    @staticmethod
    def _fill_loops(plan, lay) -> float:
        """Loops of fill: the stages' times per loop less the slowest, in loops at the steady
        rate (once per plan)."""
        cache = plan.__dict__.setdefault("_fill_loops", {})
        if "loops" not in cache:
            steady = plan.bw_s_per_byte
            busy: dict[str, float] = {}
            for e in plan.sim_edges:
                if e.usable_GBps > 0 and steady > 0:
                    t = e.bytes / UNIT / (e.usable_GBps * 1e9) / steady
                    busy[e.kind] = max(busy.get(e.kind, 0.0), t)
            legs = 2 * max(1, math.ceil(math.log2(lay.nodes)))
            cache["loops"] = max(1.0, 2 * busy.get("nvlink", 0.0)
                                 + legs * busy.get("net", 0.0) - 1)
        return cache["loops"]


def nvls_tree_chunk(per_channel: float, heads: int, nodes: int) -> int:
    """NCCL's NVLS-tree chunk for a channel's share of the buffer (``NVLS_TREE_CHUNK``).

    >>> [nvls_tree_chunk(s / 16, 8, 2) // 1024 for s in (2**22, 2**23, 2**25, 2**26)]
    [32, 64, 64, 128]
    """
    rule = P.NVLS_TREE_CHUNK
    chunk = rule["max_4_nodes"] if nodes >= 4 else P.NVLS_CHUNK_BYTES
    for loops, floor in rule["rules"]:
        if per_channel < loops * heads * chunk and chunk > floor:
            chunk = floor
    return chunk

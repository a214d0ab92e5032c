"""Collective operations (NCCL-style) on a topology: time, algbw and busbw per message size.

Operations: ``all_reduce``, ``all_gather``, ``reduce_scatter``, ``all_to_all``, ``broadcast``,
``reduce``, ``send_recv``. Algorithms: ``ring`` (rings over NVLink, PCIe and the rail NICs, as
NCCL builds them), ``tree`` (chains inside nodes, double binary trees across), ``nvls``
(in-switch reduction on NVSwitch gen 3+, with trees across nodes when there are several),
``pat`` (all_gather / reduce_scatter at one rank per node), ``hierarchical`` (intra-node
reduce_scatter, inter-node all_reduce, intra-node all_gather, pipelined), ``pairwise``
(all_to_all), ``p2p`` (send_recv), each a plugin in :mod:`gpufabric.collectives.algorithms`,
and ``auto``: the algorithm and protocol (LL / LL128 / Simple) with the least predicted time,
per message size, as NCCL's tuner picks them (NCCL 2.28.3's cost model).

Groups: ``per_node`` ranks on each node, and ``concurrent`` groups of that shape at once on
the nodes' other GPUs, sharing the links they share (training and inference steps).

The time of one operation is ``latency + bytes x (network time per byte) / efficiency``:

- the network time per byte comes from :class:`gpufabric.network.Network` simulating, at once,
  everything the algorithm puts on the links (max-min fair sharing per link direction), so
  contention between rings, trees, PXN relays and the fabric core is counted once;
- the latency is the algorithm's fixed cost plus the hops a piece of data crosses in sequence,
  each at its transport's and protocol's latency (:mod:`gpufabric.collectives.params`).

busbw follows nccl-tests (doc/PERFORMANCE.md): algbw = size / time, busbw = algbw x factor with
factor 2(n-1)/n for all_reduce, (n-1)/n for all_gather, reduce_scatter and all_to_all, and 1
for broadcast, reduce and send_recv.

Examples
--------
>>> from gpufabric.topology.build import from_spec
>>> t = from_spec({"gpu": "H100-SXM", "gpus_per_node": 8, "scale_up": "nvswitch"})
>>> p = predict(t, "all_gather", 8 * 2**30)
>>> p.algo, p.proto, round(p.busbw)
('ring', 'Simple', 369)
>>> busbw_factor("all_reduce", 8)
1.75
"""

from gpufabric.collectives.tuner import (ALGORITHMS, ALGOS, DTYPE_BYTES, NOT_MODELLED, OPS,
                                         Algorithm, Layout, Model, Plan, Prediction,
                                         busbw_factor, check_algo, check_op, check_proto, layout,
                                         model, predict, register, summary, sweep)

__all__ = ["OPS", "ALGOS", "Prediction", "Model", "model", "predict", "sweep", "summary",
           "busbw_factor", "check_op", "check_algo", "check_proto", "Layout", "layout",
           "ALGORITHMS", "Algorithm", "Plan", "register", "DTYPE_BYTES", "NOT_MODELLED"]

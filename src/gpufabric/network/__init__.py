"""Concurrent transfers over a topology: routes, max-min fair sharing, per-hop latency.

This is where contention lives, once, for every caller: a collective algorithm, a training
step or a scheduler hands a set of concurrent :class:`Transfer` s to :meth:`Network.simulate`
and gets back when each one ends and how busy each link direction was.

Every link is two directed edges (one per direction) with the link's *usable* rate
(:func:`gpufabric.network.capacity.usable_GBps`). Transfers are routed by
:class:`gpufabric.network.routing.Router` (NVLink, PCIe P2P, host-memory bounce, GPUDirect
RDMA or staged, PXN, rails and ECMP across the fabric), then shared max-min fairly as fluid
flows; each transfer also pays the latency of the links it crosses.

Examples
--------
Two GPUs on one PCIe switch, both sending to a third GPU behind the CPU:

>>> from gpufabric.topology.model import Topology, Device, Link
>>> t = Topology("box", meta={"p2p": True})
>>> for d in (Device("cpu", "cpu", numa=0), Device("sw", "pcie_switch", numa=0),
...           Device("g0", "gpu"), Device("g1", "gpu", index=1), Device("g2", "gpu", index=2)):
...     t.add_device(d)
>>> t.add_link(Link("cpu", "sw", "pcie", 31.5, gen=4, lanes=16))
>>> for g in ("g0", "g1"): t.add_link(Link("sw", g, "pcie", 31.5, gen=4, lanes=16))
>>> t.add_link(Link("cpu", "g2", "pcie", 31.5, gen=4, lanes=16))
>>> net = Network(t)
>>> res = net.simulate([Transfer("g0", "g2", 24e9), Transfer("g1", "g2", 24e9)])
>>> [round(x, 3) for x in res.time_s]      # the switch uplink (24 GB/s usable) is shared
[2.0, 2.0]
>>> res.bottleneck().busy
1.0
"""

from gpufabric.network.fairshare import fluid, maxmin_rates
from gpufabric.network.routing import Route, Router
from gpufabric.network.capacity import usable_GBps
from gpufabric.network.sim import (SHM_EFFICIENCY, EdgeUse, Network, SimResult, Transfer,
                                   describe_edge)

__all__ = ["Transfer", "Network", "SimResult", "EdgeUse", "Route", "Router", "usable_GBps",
           "maxmin_rates", "fluid", "SHM_EFFICIENCY", "describe_edge"]

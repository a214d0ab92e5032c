"""The network layer: routes, max-min fair sharing per link direction, per-hop latency."""

import numpy as np
import pytest

from gpufabric.network import Network, Transfer, fluid, maxmin_rates
from gpufabric.network.capacity import usable_GBps
from gpufabric.topology.build import from_spec
from gpufabric.topology.model import Device, Link, Topology


def pcie_box(p2p=True, sockets=2):
    """Two sockets, each with a PCIe Gen4 switch holding two GPUs (raw 31.5, usable 24 GB/s)."""
    t = Topology("box", meta={"p2p": p2p})
    for s in range(sockets):
        t.add_device(Device(f"cpu{s}", "cpu", "EPYC-7763", numa=s))
        t.add_device(Device(f"sw{s}", "pcie_switch", numa=s, index=s))
        t.add_link(Link(f"cpu{s}", f"sw{s}", "pcie", 31.5, 0.15, lanes=16, gen=4,
                        attrs={"host_bridge": 0}))
        for j in range(2):
            g = f"g{2 * s + j}"
            t.add_device(Device(g, "gpu", "A100-SXM4-80GB", index=2 * s + j, numa=s))
            t.add_link(Link(f"sw{s}", g, "pcie", 31.5, 0.15, lanes=16, gen=4))
    if sockets == 2:
        t.add_link(Link("cpu0", "cpu1", "cpu", 108.0, 0.1))
    return t


# -- max-min fair sharing ----------------------------------------------------------------
def test_maxmin_classic_example():
    # flows 0 and 1 share edge 0 (10); flow 1 also crosses edge 1 (30) with flow 2
    rates = maxmin_rates([np.array([0]), np.array([0, 1]), np.array([1])], np.array([10., 30.]))
    assert rates.tolist() == [5.0, 5.0, 25.0]


def test_maxmin_flow_ceiling_frees_capacity():
    rates = maxmin_rates([np.array([0]), np.array([0])], np.array([10.0]),
                         np.array([2.0, np.inf]))
    assert rates.tolist() == [2.0, 8.0]


def test_fluid_reshares_when_a_flow_ends():
    r = fluid([np.array([0]), np.array([0])], np.array([10.0]), np.array([10.0, 30.0]))
    # both at 5 until t=2 (10 bytes sent by the first), then the second alone at 10
    assert r.finish_s.tolist() == [2.0, 4.0]
    assert r.edge_bytes.tolist() == [40.0]


# -- capacities --------------------------------------------------------------------------
def test_usable_rates_come_from_the_catalog_per_link_type():
    t = from_spec({"gpu": "H100-SXM", "gpus_per_node": 8, "nodes": 2, "nic": "ib-ndr"})
    by_kind = {}
    for ln in t.links:
        by_kind.setdefault((ln.kind, ln.a.split(".")[-1][:3]), usable_GBps(ln, t))
    assert by_kind[("nvlink", "gpu")] == pytest.approx(18 * 20.6)   # NVLink4 x18, NCCL rate
    assert by_kind[("pcie", "cpu")] == pytest.approx(48.0)          # Gen5 x16, NCCL rate
    assert by_kind[("net", "nic")] == pytest.approx(50.0 * 0.99)    # NDR x IB efficiency


# -- routing -----------------------------------------------------------------------------
def test_p2p_under_one_switch_stays_below_the_cpu():
    net = Network(pcie_box())
    r = net.router.route("g0", "g1")
    assert r.walks == (("g0", "sw0", "g1"),) and r.transport == "pcie"


def test_p2p_across_sockets_crosses_the_intersocket_link():
    net = Network(pcie_box())
    r = net.router.route("g0", "g3")
    assert r.walks == (("g0", "sw0", "cpu0", "cpu1", "sw1", "g3"),)


def test_no_p2p_bounces_through_host_memory_even_under_one_switch():
    net = Network(pcie_box(p2p=False))
    r = net.router.route("g0", "g1")
    assert r.transport == "shm"
    assert r.walks == (("g0", "sw0", "cpu0", "sw0", "g1"),)


def test_nvswitch_route_and_gdr_to_a_close_nic():
    t = from_spec({"gpu": "H100-SXM", "gpus_per_node": 8, "nodes": 2, "nic": "ib-ndr"})
    net = Network(t)
    assert net.router.route("n0.gpu0", "n0.gpu5").walks == (("n0.gpu0", "n0.nvsw", "n0.gpu5"),)
    nic = net.router.nearest_nic("n0.gpu3")
    assert nic == "n0.nic3"
    r = net.router.route("n0.gpu3", nic)
    assert r.transport == "pcie" and not r.staged          # GPUDirect RDMA
    across = net.router.route("n0.gpu3", "n1.gpu3")
    assert across.transport == "net"
    w = across.walks[0]
    assert w[:3] == ("n0.gpu3", "n0.sw1", "n0.nic3") and w[-3:] == ("n1.nic3", "n1.sw1", "n1.gpu3")
    assert any(d.startswith("fabric.leaf") for d in w)


def test_far_nic_is_staged_through_host_memory():
    t = from_spec({"gpu": "H100-SXM", "gpus_per_node": 1, "nodes": 2, "scale_up": "none",
                   "nics_per_node": 1, "nic": "ib-ndr"})
    net = Network(t)
    r = net.router.route("n0.gpu0", "n0.nic0")
    assert r.staged and "n0.cpu0" in r.walks[0]


# -- simulation --------------------------------------------------------------------------
def test_shared_uplink_halves_each_transfer():
    net = Network(pcie_box())
    one = net.simulate([Transfer("g0", "g2", 24e9)])
    two = net.simulate([Transfer("g0", "g2", 24e9), Transfer("g1", "g3", 24e9)])
    # alone: 24 GB at 24 GB/s = 1 s plus latency; together they share sw0 -> cpu0
    assert one.bw_time_s == pytest.approx(1.0)
    assert two.bw_time_s == pytest.approx(2.0)
    b = two.bottleneck()
    assert b.busy == pytest.approx(1.0)
    assert "socket 0" in b.label and "up" in b.label


def test_directions_are_independent():
    net = Network(pcie_box())
    r = net.simulate([Transfer("g0", "g2", 24e9), Transfer("g2", "g0", 24e9)])
    assert r.bw_time_s == pytest.approx(1.0)


def test_latency_is_the_sum_of_link_latencies():
    net = Network(pcie_box())
    r = net.simulate([Transfer("g0", "g1", 0.0)])
    assert r.time_s[0] == pytest.approx(0.3e-6)
    r = net.simulate([Transfer("g0", "g3", 0.0)])
    assert r.time_s[0] == pytest.approx((4 * 0.15 + 0.1) * 1e-6)


def test_host_bounce_costs_more_than_p2p():
    fast = Network(pcie_box(p2p=True)).simulate([Transfer("g0", "g1", 24e9)])
    slow = Network(pcie_box(p2p=False)).simulate([Transfer("g0", "g1", 24e9)])
    assert slow.bw_time_s > fast.bw_time_s
    assert slow.transports == ["shm"]


def test_host_bounces_share_the_socket_memory():
    # 8 GeForce cards, 4 per socket, no P2P: a ring bounces every hop through the sender's
    # socket memory, written then read: 4 flows x 2 per socket on Xeon 8480+ DRAM
    # (8 x DDR5-4800 = 307.2 GB/s x 0.73 usable)
    from gpufabric.network.capacity import DRAM_EFFICIENCY
    t = from_spec({"gpu": "RTX-5090", "gpus_per_node": 8, "scale_up": "pcie", "p2p": False,
                   "pcie_gen": 5, "host": {"cpu": "Xeon-Platinum-8480+", "sockets": 2}})
    net = Network(t)
    gpus = [g.id for g in t.gpus()]
    ring = [Transfer(a, b, 1e9) for a, b in zip(gpus, gpus[1:] + gpus[:1], strict=True)]
    r = net.simulate(ring)
    dram = 307.2 * DRAM_EFFICIENCY.value
    assert r.bw_time_s == pytest.approx(8 / dram)
    b = r.bottleneck()
    assert b.kind == "dram" and "host memory" in b.label

"""The collective model follows NCCL 2.28.3's own tuning (src/graph/tuning.cc): NVLS cost,
NVLS-tree channel limits, tree mid-size corrections, the ring plateau, LL ceilings and PAT."""

import math

import pytest

from gpufabric import collectives as C
from gpufabric.collectives import params as P
from gpufabric.topology.build import from_spec

GB = 2**30


def test_nvls_bus_bandwidth_does_not_grow_with_the_domain():
    """NCCL's NVLS busBw is 2 x NVLink rate x efficiency, whatever the GPU count: a 72-GPU
    NVLink domain is not faster than an 8-GPU one (measured: 835 and 811 GB/s)."""
    grace = {"cpu": "Grace", "sockets": 1}
    eight = C.predict(from_spec({"gpu": "GB200", "gpus_per_node": 8, "host": grace}),
                      "all_reduce", 8 * GB)
    rack = C.predict(from_spec({"gpu": "GB200", "gpus_per_node": 72, "host": grace}),
                     "all_reduce", 8 * GB)
    assert eight.algo == rack.algo == "nvls"
    assert rack.busbw == pytest.approx(eight.busbw, rel=0.005)
    # NVLink 5 x18 at the catalog's NCCL rate, Blackwell efficiency 0.74, kernel share 0.76
    assert round(rack.busbw, 1) == 810.9


def test_nvls_needs_more_than_two_gpus():
    t = from_spec({"gpu": "H100-SXM", "gpus_per_node": 8})
    assert C.predict(t, "all_reduce", GB, ranks=3).algo == "nvls"
    assert C.predict(t, "all_reduce", GB, ranks=2).algo == "ring"


def test_nvls_tree_is_capped_per_channel_across_many_nodes():
    # NVL72 racks with a NIC per GPU: NVLS inside (810 GB/s) would outrun NCCL's limit of
    # 16 NVLS channels x 43.1 GB/s (Blackwell, more than 2 nodes) = 689.6
    t = from_spec({"gpu": "GB200", "gpus_per_node": 72, "nodes": 4, "nics_per_node": 72,
                   "nic": "ib-ndr", "host": {"cpu": "Grace", "sockets": 36}},
                  materialize_nodes=2)
    p = C.predict(t, "all_reduce", 8 * GB, algo="nvls_tree")
    assert p.busbw <= 16 * 43.1
    assert p.busbw == pytest.approx(16 * 43.1, rel=0.01)
    # on 8-GPU H100 nodes the NICs bind first (each node carries its shards twice)
    h = from_spec({"gpu": "H100-SXM", "gpus_per_node": 8, "nodes": 8, "nics_per_node": 8,
                   "nic": "ib-ndr"})
    assert C.predict(h, "all_reduce", 8 * GB, algo="nvls_tree").busbw < 16 * 45.5 * 0.6


def test_tree_bandwidth_follows_nccl_mid_size_correction():
    t = from_spec({"gpu": "H100-SXM", "gpus_per_node": 8, "nodes": 2, "nics_per_node": 8,
                   "nic": "ib-ndr"})
    m = C.Model(t)
    lay = m.layout(16)
    plan = m.plan("all_reduce", "tree", lay)
    for size, factor in ((2**24, 0.7), (2**27, 0.9), (2**30, 1.0)):
        p = m.predict("all_reduce", size, algo="tree", proto="Simple")
        bw_us = size * plan.bw_s_per_byte / (P.TREE_EFFICIENCY * factor) * 1e6
        assert p.time_us == pytest.approx(plan.lat_us["Simple"] + bw_us, rel=1e-9)


def test_ring_across_nodes_pays_the_plateau_latency():
    t = from_spec({"gpu": "H100-SXM", "gpus_per_node": 8, "nodes": 4, "nics_per_node": 8,
                   "nic": "ib-ndr"})
    m = C.Model(t)
    plan = m.plan("all_reduce", "ring", m.layout(32))
    small = m.predict("all_reduce", 32 * 32 * 63, algo="ring", proto="Simple")
    big = m.predict("all_reduce", 32 * 32 * 64, algo="ring", proto="Simple")
    per_byte = plan.bw_s_per_byte * 1e6
    assert small.time_us == pytest.approx(plan.lat_us["Simple"] + 32 * 32 * 63 * per_byte)
    assert big.time_us == pytest.approx(1.4 * plan.lat_us["Simple"] + 32 * 32 * 64 * per_byte)


def test_ll_is_capped_at_nccl_ll_max_bandwidth():
    a100 = from_spec({"gpu": "A100-SXM4-80GB", "gpus_per_node": 8})
    p = C.predict(a100, "all_reduce", GB, algo="ring", proto="LL")
    lat = C.Model(a100).plan("all_reduce", "ring", C.Model(a100).layout(8)).lat_us["LL"]
    # Ampere, one node: 87.7 GB/s of bus bandwidth at most (half of 240 would be 120)
    assert p.time_us == pytest.approx(lat + GB * 1.75 / 87.7e9 * 1e6, rel=1e-9)


def test_pat_for_one_gpu_per_node():
    t = from_spec({"gpu": "H100-SXM", "gpus_per_node": 8, "nodes": 64, "nics_per_node": 8,
                   "nic": "ib-ndr"}, materialize_nodes=4)
    p = C.predict(t, "all_gather", 2**20, 64, per_node=1)
    assert (p.algo, p.proto) == ("pat", "Simple")
    wire = C.model(t)._net_wire_extra
    lat = 8.0 + math.log2(64) * (14.0 + wire) / 3.5 + 64 * 2.8
    plan = C.model(t).plan("all_gather", "pat", C.model(t).layout(64, 1))
    assert p.time_us == pytest.approx(lat + 2**20 * plan.bw_s_per_byte / 0.75 * 1e6)
    # a full-node group never uses PAT
    assert C.predict(t, "all_gather", 2**20, 512).algo != "pat"

"""Collectives: nccl-tests definitions, algorithms, the automatic choice, symmetry, calibration."""

from pathlib import Path

import pytest

from gpufabric import collectives as C
from gpufabric.collectives import params as P
from gpufabric.collectives.validate import validate
from gpufabric.errors import InputError
from gpufabric.topology.build import from_spec

DATA = Path(__file__).parent / "data" / "calibration" / "collectives.yaml"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "calibration" / "collectives.yaml"

H100 = {"gpu": "H100-SXM", "gpus_per_node": 8, "scale_up": "nvswitch"}
A100 = {"gpu": "A100-SXM4-80GB", "gpus_per_node": 8, "scale_up": "nvswitch"}
GB = 2**30


def spec(**kw):
    return from_spec(kw)


# -- nccl-tests definitions ------------------------------------------------------------
@pytest.mark.parametrize("op,factor", [("all_reduce", 2 * 7 / 8), ("all_gather", 7 / 8),
                                       ("reduce_scatter", 7 / 8), ("all_to_all", 7 / 8),
                                       ("broadcast", 1.0), ("reduce", 1.0), ("send_recv", 1.0)])
def test_busbw_factors_are_nccl_tests(op, factor):
    assert C.busbw_factor(op, 8) == pytest.approx(factor)
    p = C.predict(from_spec(H100), op, GB)
    assert p.busbw == pytest.approx(p.algbw * factor)
    assert p.algbw == pytest.approx(GB / (p.time_us * 1e-6) / 1e9)


def test_unknown_op_and_algorithm_name_what_is_allowed():
    t = from_spec(H100)
    with pytest.raises(InputError, match="allowed: all_reduce, all_gather"):
        C.predict(t, "allsum", 8)
    with pytest.raises(InputError, match="allowed: auto, ring"):
        C.predict(t, "all_reduce", 8, algo="butterfly")
    with pytest.raises(InputError, match="cannot run all_gather"):
        C.predict(t, "all_gather", 8, algo="tree")


# -- exact values ------------------------------------------------------------------------
def test_ring_small_message_latency_is_base_plus_hops():
    # 8 ranks on NVSwitch, LL: 6.6 us + 2*(8-1) hops x 0.6 us = 15.0 us
    p = C.predict(from_spec(H100), "all_reduce", 8)
    assert (p.algo, p.proto) == ("ring", "LL")
    assert p.time_us == pytest.approx(15.0, abs=0.01)


def test_ring_bandwidth_is_the_nvlink_rate_nccl_uses():
    # all_gather 8 GB over 18 NVLink4 links at 20.6 GB/s each: busbw -> 370.8 GB/s, less the
    # ring's pipeline fill: 32 channels (2 per NVLink link, at most 32) x a 1 MiB Simple slice
    # paid once more at that rate
    p = C.predict(from_spec(H100), "all_gather", 8 * GB)
    fill = 32 * 2**20
    assert p.busbw == pytest.approx(370.8 * 8 * GB / (8 * GB + fill), rel=0.002)
    t_bw = (8 * GB + fill) * 7 / 8 / 370.8e9 * 1e6
    assert p.time_us == pytest.approx(P.BASE_LAT_US["ring"]["Simple"] + 7 * 3.4 + t_bw)


def test_rings_on_an_eight_gpu_full_mesh_use_every_link():
    """MI300X's xGMI joins each of 8 GPUs to the 7 others by one link: 7 rings, each over one
    link per GPU and direction, disjoint, carry the data in equal shares (the complete
    directed graph on 8 vertices splits into 7 Hamiltonian cycles); RCCL's 315 GB/s of bus
    bandwidth at 8 GiB on such a node is more than 6 links carry."""
    m = C.Model(spec(gpu="MI300X", gpus_per_node=8, scale_up="xgmi"))
    gpus = m.layout(8).gpus[0]
    rings = m.planner.weighted_rings(gpus)
    assert len(rings) == 7 and all(w == pytest.approx(1 / 7) for _, w in rings)
    used = [(c[i], c[(i + 1) % 8]) for c, _ in rings for i in range(8)]
    assert len(used) == len(set(used)) == 8 * 7           # every directed link, once
    six_links = 6 * 48.0                                  # RCCL's usable xGMI rate per link
    assert C.predict(m.topo, "all_reduce", 8 * GB, algo="ring").busbw > 1.1 * six_links


def test_nvls_reduces_in_the_switch_on_hopper_not_on_ampere():
    h = C.predict(from_spec(H100), "all_reduce", 8 * GB)
    a = C.predict(from_spec(A100), "all_reduce", 8 * GB)
    assert h.algo == "nvls" and a.algo == "ring"
    # NCCL's NVLS model: S (G-1)/G each way through each GPU's NVLink at 370.8 x 0.85 (Hopper
    # NVLS efficiency) x 0.76 (the share NCCL's kernels sustain, fitted on Hopper NVLS):
    # busbw = 2 x 370.8 x 0.85 x 0.76, whatever the number of GPUs, less the pipeline fill
    # (one loop of 16 channels x 8 ranks x 128 KiB, paid once at that rate)
    fill = 16 * 8 * 128 * 1024
    assert h.busbw == pytest.approx(2 * 370.8 * 0.85 * 0.76 * 8 * GB / (8 * GB + fill),
                                    rel=0.001)
    # A100: a ring at 12 NVLink 3 links x 20 GB/s, less its fill (24 channels x 1 MiB)
    assert a.busbw == pytest.approx(240.0 * 8 * GB / (8 * GB + 24 * 2**20), rel=0.002)
    with pytest.raises(InputError):
        C.predict(from_spec(A100), "all_reduce", GB, algo="nvls")


def test_protocol_choice_moves_from_ll_to_simple_with_size():
    rows = C.sweep(from_spec(A100), "all_reduce", [8, 2**16, 2**20, 2**30])
    assert rows[0]["proto"] == "LL" and rows[-1]["proto"] == "Simple"
    pcie = C.sweep(spec(gpu="RTX-5090", gpus_per_node=4, scale_up="pcie", p2p=False),
                   "all_reduce", [8, 2**30])
    assert all(r["proto"] != "LL128" for r in pcie)      # LL128 needs NVLink


def test_no_p2p_pays_the_host_bounce():
    kw = dict(gpu="RTX-5090", gpus_per_node=4, scale_up="pcie", pcie_gen=5)
    bounce = C.predict(spec(**kw, p2p=False), "all_reduce", GB, algo="ring")
    direct = C.predict(spec(**kw, p2p=True, host={"sockets": 1}), "all_reduce", GB, algo="ring")
    assert direct.busbw == pytest.approx(48.0, rel=0.01)          # Gen5 x16 as NCCL rates it
    assert bounce.busbw == pytest.approx(48.0 * 0.73, rel=0.01)   # host-memory bounce
    assert "root port" in bounce.bottleneck
    # on a 2-socket Intel host NCCL does not use P2P across UPI: the ring bounces even so
    across = C.predict(spec(**kw, p2p=True), "all_reduce", GB, algo="ring")
    assert across.busbw == pytest.approx(bounce.busbw, rel=0.001)


def test_multinode_ring_is_bound_by_the_nic_path():
    t = spec(gpu="A100-SXM4-80GB", gpus_per_node=8, nodes=2, nics_per_node=8, nic="ib-hdr")
    p = C.predict(t, "all_reduce", 8 * GB, algo="ring")
    # 8 rails x min(HDR 25 x 0.99, PCIe Gen4 x16 at 24) = 192 GB/s
    assert p.busbw == pytest.approx(192.0, rel=0.01)


def test_nvls_tree_across_two_nodes_beats_the_nic_limit():
    t = spec(gpu="H100-SXM", gpus_per_node=8, nodes=2, nics_per_node=8, nic="ib-ndr")
    p = C.predict(t, "all_reduce", 8 * GB)
    ring = C.predict(t, "all_reduce", 8 * GB, algo="ring")
    assert p.algo == "nvls_tree" and p.busbw > 8 * 48 > ring.busbw * 0.99


def test_hierarchical_phases_overlap_across_chunks():
    t = spec(gpu="H100-SXM", gpus_per_node=8, nodes=2, nics_per_node=8, nic="ib-ndr")
    h = C.predict(t, "all_reduce", 8 * GB, algo="hierarchical")
    r = C.predict(t, "all_reduce", 8 * GB, algo="ring")
    # pipelined, the phases share the NVLink ports: reduce_scatter and all_gather move
    # 2 x 7/8 S each way through them while the NICs carry the shards, so busbw =
    # 2 (16-1)/16 x 370.8 / 1.75 = 397.3 at most, above the flat ring's 370.8
    assert r.busbw < h.busbw <= 397.3
    assert round(h.busbw, 1) == 396.3


# -- symmetry: a sampled cluster gives what the whole cluster gives -----------------------------
@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "all_to_all", "send_recv"])
def test_sampled_nodes_match_the_full_cluster(op):
    sp = {"gpu": "H100-SXM", "gpus_per_node": 8, "nodes": 4, "nics_per_node": 8, "nic": "ib-ndr"}
    full = C.predict(from_spec(sp), op, GB)
    part = C.predict(from_spec(sp, materialize_nodes=2), op, GB)
    assert part.busbw == pytest.approx(full.busbw, rel=1e-6)
    assert part.time_us == pytest.approx(full.time_us, rel=1e-6)


def test_ranks_subset_and_bad_ranks():
    t = from_spec(H100)
    assert C.predict(t, "all_reduce", GB, ranks=4).ranks == 4
    with pytest.raises(InputError, match="between 1 and 8"):
        C.predict(t, "all_reduce", GB, ranks=9)
    t2 = spec(gpu="H100-SXM", gpus_per_node=8, nodes=2, nics_per_node=8, nic="ib-ndr")
    with pytest.raises(InputError, match="multiple of 8"):
        C.predict(t2, "all_reduce", GB, ranks=12)


def test_oversubscription_slows_all_to_all_across_leaves():
    base = {"gpu": "H100-SXM", "gpus_per_node": 8, "nodes": 64, "nics_per_node": 8,
            "nic": "ib-ndr", "fabric": {"topology": "rail-optimized", "nodes_per_leaf": 16}}
    full = from_spec(base, materialize_nodes=2)
    over = from_spec({**base, "fabric": {**base["fabric"], "oversubscription": 2.0}},
                     materialize_nodes=2)
    a, b = C.predict(full, "all_to_all", GB), C.predict(over, "all_to_all", GB)
    assert b.busbw < a.busbw
    assert "core" in b.bottleneck or "uplink" in b.bottleneck


def test_all_to_all_spreads_each_peer_over_every_nic_of_its_gpu():
    """p5: 32 EFA cards, 4 per GPU. NCCL spreads a peer's channels over the NICs of its GPU,
    so across nodes the exchange runs on all 32 cards until the GPU's PCIe port binds
    (hold-out 4's p5 all_to_all: 54 GB/s measured on 4 nodes, 15.5 predicted before)."""
    base = {"gpu": "H100-SXM", "gpus_per_node": 8, "nodes": 4, "nic": "efa-v2"}
    one = C.predict(from_spec({**base, "nics_per_node": 8}), "all_to_all", GB)
    four = C.predict(from_spec({**base, "nics_per_node": 32}), "all_to_all", GB)
    # one card a GPU: the card is the bottleneck; four: the GPU's own PCIe port, which all
    # four cards share (4 x 12.25 GB/s against Gen5 x16)
    assert (round(one.busbw, 1), round(four.busbw, 1)) == (15.8, 61.9)
    assert "NIC port" in one.bottleneck and "PCIe switch" in four.bottleneck
    assert "32 rails" in four.note


def test_first_generation_efa_carries_simple_only():
    """aws-ofi-nccl forces NCCL_PROTO=simple on EFA without 128-byte in-order writes (p4d):
    a 2-node p4d all_reduce of 8 bytes is a Simple tree, and LL is refused."""
    p4d = from_spec({**A100, "nodes": 2, "nics_per_node": 4, "nic": "efa-v1"})
    p = C.predict(p4d, "all_reduce", 8)
    assert (p.algo, p.proto) == ("tree", "Simple")
    with pytest.raises(InputError, match="its network carries Simple only"):
        C.predict(p4d, "all_reduce", 8, proto="LL")
    # one node never crosses the network: every protocol stays
    assert C.predict(p4d, "all_reduce", 8, ranks=8).proto == "LL"
    # p5's EFA (RDMA writes) keeps LL
    p5 = from_spec({**H100, "nodes": 2, "nics_per_node": 32, "nic": "efa-v2"})
    assert C.predict(p5, "all_reduce", 8).proto == "LL"


def test_summary_has_the_compare_columns():
    s = C.summary(from_spec(H100))
    assert set(s) >= {"allreduce_busbw_1GB", "allreduce_8B_lat_us", "alltoall_busbw_1GB"}
    assert s["allreduce_8B_lat_us"] == pytest.approx(15.0, abs=0.05)


# -- calibration -------------------------------------------------------------------------
def _check_goals(path):
    # the goals over every point of the calibration file, fitted ones included: large
    # median <= 10 %; small median <= 20 % on every public file (issue 22 point 5)
    s = validate(str(path))["summary"]["all"]
    assert s["by_size"]["large"]["median_abs_pct"] <= 10.0, s
    assert s["by_size"]["small"]["median_abs_pct"] <= 20.0, s
    return s


def test_calibration_goals_on_the_repository_copy():
    s = _check_goals(DATA)
    assert s["points"] == 21
    # the ring's pipeline fill brought DGX A100 at 32 / 128 MiB (+47 / +30 %) within the goal
    assert s["by_size"]["large"]["max_abs_pct"] <= 25.0, s


@pytest.mark.skipif(not SHARED.is_file(), reason="../shared not present")
def test_calibration_goals_on_shared_file():
    _check_goals(SHARED)


# -- more exact values ---------------------------------------------------------------------
def test_tree_latency_single_node_and_across_nodes():
    # a chain of 8 on NVLink, LL: 6.8 + 2 x 7 hops x 0.6 us
    p = C.predict(from_spec(A100), "all_reduce", 8, algo="tree", proto="LL")
    assert p.time_us == pytest.approx(15.2, abs=0.01)
    # 4 nodes: chains (LL intra-node hops x1.8 when the kernel also drives the network)
    # plus log2(4) = 2 network hops of 5.0 us, up and down
    t = spec(gpu="H100-SXM", gpus_per_node=8, nodes=4, nics_per_node=8, nic="ib-ndr")
    p = C.predict(t, "all_reduce", 8, algo="tree", proto="LL")
    assert p.time_us == pytest.approx(6.8 + 2 * (7 * 0.6 * 1.8 + 2 * 5.0), abs=0.01)


def test_roce_adds_its_wire_latency_to_every_network_hop():
    base = dict(gpu="H100-SXM", gpus_per_node=8, nodes=4, nics_per_node=8)
    ib = C.predict(spec(**base, nic="ib-ndr"), "all_reduce", 8, algo="tree", proto="LL")
    roce = C.predict(spec(**base, nic="roce-400"), "all_reduce", 8, algo="tree", proto="LL")
    # catalog: RoCE 400 NIC-switch-NIC 2.0 us against NDR 1.5 us; 2 x 2 network hops
    assert roce.time_us - ib.time_us == pytest.approx(4 * 0.5, abs=1e-6)


@pytest.mark.parametrize("op", ["broadcast", "reduce", "all_to_all", "send_recv"])
def test_single_node_nvswitch_ops_run_at_the_port_rate(op):
    p = C.predict(from_spec(H100), op, 8 * GB)
    assert p.busbw == pytest.approx(370.8, rel=0.01)


def test_one_gpu_per_node_is_bound_by_its_pcie_path_to_the_nic():
    t = spec(gpu="H100-SXM", gpus_per_node=1, nodes=2, scale_up="none", nics_per_node=1,
             nic="ib-ndr")
    for op in ("all_reduce", "send_recv", "all_gather"):
        assert C.predict(t, op, 8 * GB).busbw == pytest.approx(48.0, rel=0.01)


def test_cached_model_follows_changes_to_the_topology():
    from gpufabric.topology.model import Link
    t = spec(gpu="RTX-4090", gpus_per_node=2, scale_up="pcie", p2p=True,
             host={"sockets": 1})
    before = C.predict(t, "all_reduce", GB).busbw
    t.add_link(Link("n0.gpu0", "n0.gpu1", "nvlink", 56.25, count=4, gen=3))
    after = C.predict(t, "all_reduce", GB).busbw
    assert after == pytest.approx(45.0, rel=0.01) and before == pytest.approx(24.0, rel=0.01)

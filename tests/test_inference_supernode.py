"""Supernode against 8-GPU servers at equal GPU count, under one SLO."""

import pytest

from gpufabric.errors import InputError
from gpufabric.topology.build import from_spec, load
from gpufabric.workloads.inference.serve import ServeConfig
from gpufabric.workloads.inference.supernode import default_layouts, supernode_vs_servers


def test_candidate_layouts():
    sup, srv = default_layouts("llama3-70b", 8, 64)
    assert [x["tp"] for x in sup] == [1, 2, 4, 8, 16, 32, 64]
    assert [x["tp"] for x in srv] == [1, 2, 4, 8]
    moe, _ = default_layouts("deepseek-v3", 8, 64)
    assert moe[-1] == {"tp": 64, "ep": 64, "dp_attention": 64}


def test_moe_gains_from_the_nvlink_domain():
    """DeepSeek-V3 on 16 GPUs under a loose SLO: each layout serves up to its capacity. Wide
    EP (16 ranks) inside the NVL72's NVLink domain serves over twice what the same layout
    does across two 8-GPU servers over InfiniBand (its all-to-all crosses the NICs); each
    system's best is within the GB200's compute edge over the B200 (1.11x) of the other."""
    sup = load("gb200-nvl72")
    srv = from_spec({"gpu": "B200", "gpus_per_node": 8, "nodes": 2, "nic": "ib-ndr"})
    # with EPLB (redundant experts even out the ranks) as wide-EP deployments run
    cfg = ServeConfig(precision="fp8", requests=200, isl=1000, osl=200, slo_ttft_ms=2000,
                      slo_tpot_ms=60, eplb=True)
    r = supernode_vs_servers("deepseek-v3", sup, srv, cfg, 16, duration_s=4.0)
    wide = {k: next(x for x in r[k]["tried"] if x["layout"] == "tp16 ep16 dpa16")
            for k in ("supernode", "servers")}
    assert wide["supernode"]["rate"] > 2 * wide["servers"]["rate"]
    assert r["servers"]["layout"] == "tp8 ep8 dpa8"          # EP inside one server
    assert 1.0 <= r["ratio"] <= 1.11 + 0.03
    assert "GB200 has 1.11x" in r["reason"]


def test_a_model_too_big_for_one_server_goes_wide_or_says_what_fits():
    # DeepSeek-V3 in bf16 (1.34 TB of weights, 156 GiB a GPU at EP8) does not fit eight H200s
    # (141 GiB): the comparison finds the layouts that do (EP16 across two servers over
    # InfiniBand, EP16 inside the NVL72)
    sup = load("gb200-nvl72")
    srv = from_spec({"gpu": "H200", "gpus_per_node": 8, "nodes": 2, "nic": "ib-ndr"})
    cfg = ServeConfig(requests=100, isl=1000, osl=100, slo_ttft_ms=2000, slo_tpot_ms=80)
    r = supernode_vs_servers("deepseek-v3", sup, srv, cfg, 16, duration_s=2.0)
    assert r["servers"]["layout"] == "tp16 ep16 dpa16"
    assert "does not fit" in r["servers"]["tried"][0]["error"]
    # on eight H100s no bf16 or fp8 layout fits: the error names the precision that would
    h100 = from_spec({"gpu": "H100-SXM", "gpus_per_node": 8})
    with pytest.raises(InputError) as exc:
        supernode_vs_servers("deepseek-v3", h100, h100, cfg, 8, duration_s=2.0)
    assert str(exc.value) == ("--precision: deepseek-v3 in bf16 fits no layout of 8 GPUs of "
                              "8xH100-SXM-nvswitch (tp8 ep8 dpa8); it would fit in fp4 from "
                              "tp8 ep8 dpa8, int4 from tp8 ep8 dpa8 (--precision, or more GPUs)")


def test_a_run_that_cannot_meet_the_slo_stops_early_with_the_same_verdict():
    # an overloaded server: the rate search only asks whether 90% of the requests meet the
    # SLO, so the run stops once too many have missed it; run to its end, it misses too
    from gpufabric.workloads.inference.serve import serve
    topo = from_spec({"gpu": "L40S", "gpus_per_node": 1})
    cfg = ServeConfig(requests=200, rate=8.0, isl=1000, osl=300, slo_ttft_ms=1000,
                      slo_tpot_ms=50)
    full = serve("llama3-8b", topo, cfg)
    early = serve("llama3-8b", topo, cfg, stop_below=0.9)
    assert early["stopped_early"] and full["slo_attainment"] < 0.9
    assert full["slo_attainment"] <= early["slo_attainment"] < 0.9   # an upper bound
    light = ServeConfig(requests=50, rate=0.2, isl=1000, osl=100, slo_ttft_ms=1000,
                        slo_tpot_ms=50)
    # a run that meets the SLO runs to its end: the same summary either way
    assert serve("llama3-8b", topo, light, stop_below=0.9) == serve("llama3-8b", topo, light)


def test_the_comparison_names_each_system_by_what_it_is():
    # two 8-GPU servers, neither a supernode: the reason names them and their NVLink domains
    a = from_spec({"gpu": "H100-SXM", "gpus_per_node": 8})
    b = from_spec({"gpu": "A100-SXM4-80GB", "gpus_per_node": 8})
    cfg = ServeConfig(requests=100, isl=500, osl=100, slo_ttft_ms=2000, slo_tpot_ms=50)
    r = supernode_vs_servers("llama3-8b", a, b, cfg, 8, duration_s=2.0)
    assert "supernode" not in r["reason"]
    assert f"{a.name} (8-GPU NVLink domains)" in r["reason"]
    assert f"{b.name} (8-GPU NVLink domains)" in r["reason"]

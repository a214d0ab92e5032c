"""Mixed-GPU prefill/decode deployments in the advisor: pools of different GPU kinds named by
``space.pd_gpus``, priced whole, their KV cache moved over the modelled NICs, ranked beside the
uniform designs.

The space is narrowed to 1-GPU PCIe servers and a 8B model so that the whole ranking (the
co-located designs, the uniform and the mixed disaggregated units) takes about a second.
"""

from __future__ import annotations

import json

import pytest
import yaml

from gpufabric import catalog
from gpufabric.advise import core, prices, scenario
from gpufabric.errors import InputError
from gpufabric.topology.build import from_spec, parse_inline
from gpufabric.workloads.inference.pd import serve_pd
from gpufabric.workloads.inference.serve import ServeConfig

SERVE = {"model": "llama3-8b", "rate": 1, "isl": 2000, "osl": 100, "slo_ttft_ms": 1000,
         "slo_tpot_ms": 50, "pd": True}
MIXED = {"workloads": {"serve": SERVE},
         "constraints": {"deployment": "on-prem", "gpus": ["L40S", "A100-PCIe"]},
         # lowest cost, top 1: the branch and bound stops after the cheaper L40S, so the
         # decode pool's A100-PCIe is run because the scenario names it
         "objective": "lowest-cost",
         "space": {"gpus_per_node": [1], "nodes": [1],
                   "pd_gpus": {"prefill": ["L40S"], "decode": ["A100-PCIe"]}}}
POOL = "gpu={},gpus_per_node=1,scale_up=pcie,nic=roce-400,nics_per_node=1"


@pytest.fixture(scope="module")
def advice():
    return core.advise(scenario.parse(MIXED, "mixed.yaml"), prices.load(), top=1)


def _mixed(adv):
    return [c for c in adv.ranked if c.decode is not None and c.decode.gpu != c.gpu]


def test_a_mixed_design_is_ranked_beside_uniform_ones(advice):
    mixed = _mixed(advice)
    assert [(c.gpu, c.decode.gpu) for c in mixed] == [("L40S", "A100-PCIe")]
    uniform = [c for c in advice.ranked if c.decode is None or c.decode.gpu == c.gpu]
    assert any(c.pd is None for c in uniform) and any(c.pd for c in uniform)
    figures = [c.objective for c in advice.ranked]
    assert figures == sorted(figures)              # one ranking, best first
    # the A100-PCIe design the bounds would have skipped was run to know its layout
    a100 = [c for c in advice.candidates if c.gpu == "A100-PCIe" and c.evaluated]
    assert a100 and "serve" in a100[0].metrics


def test_a_mixed_design_is_priced_as_the_sum_of_its_pools(advice):
    c = _mixed(advice)[0]
    units = c.metrics["serve"]["instances"]
    parts = [prices.design_cost(g, 1, units, POOL.format(g), prices.load(), kwh_usd=0.10,
                                amortize_years=4.0) for g in ("L40S", "A100-PCIe")]
    assert c.cost["capex_usd"] == pytest.approx(sum(p[0]["capex_usd"] for p in parts))
    assert c.cost["usd_per_hour"] == pytest.approx(sum(p[0]["usd_per_hour"] for p in parts))
    assert c.power_kW == pytest.approx(sum(p[1] for p in parts))
    assert c.gpus == 2 * units                     # one prefill and one decode GPU a unit
    # the ranking's $/hour is both pools' ownership, opex included
    assert core.hourly(c) == pytest.approx(sum(
        p[0]["usd_per_hour"] + p[0]["opex_usd_per_hour"] for p in parts))


def test_the_kv_cache_crosses_the_modelled_nics_between_the_pools(advice):
    c = _mixed(advice)[0]
    s = c.metrics["serve"]
    nic = catalog.net_speed("roce-400").nic
    assert s["kv_link"] == f"RDMA NICs ({nic})"   # two servers: never NVLink or PCIe
    assert s["kv_link"] in s["bottleneck"]
    # the same transfer as serve --pd --decode-system on the two pools' servers (TP1: no
    # decode collective shares the NIC, so a transfer's time does not depend on the load)
    r = serve_pd("llama3-8b", from_spec(parse_inline(POOL.format("L40S"))),
                 ServeConfig(rate=0.5, requests=10, isl=2000, osl=100), "1P1D",
                 from_spec(parse_inline(POOL.format("A100-PCIe"))))
    assert s["kv_transfer_ms_p50"] == pytest.approx(r["pd"]["kv_transfer_ms"]["p50"])
    assert (r["pd"]["prefill"]["gpu"], r["pd"]["decode"]["gpu"]) == ("L40S", "A100-PCIe")


def test_the_explanation_says_which_pool_is_which_gpu_and_why(advice):
    c = _mixed(advice)[0]
    d = core.describe(c)
    assert "prefill on 1x 1-GPU L40S server" in d and "decode on 1x 1-GPU A100-PCIe" in d
    why = c.metrics["serve"]["pools"]
    # the catalog's figures that bound each phase: L40S 362 dense bf16 TFLOPS (datasheet),
    # A100 PCIe 80 GB at 1,935 GB/s
    assert "prefill on L40S (compute-bound: 362 dense bf16 TFLOPS" in why
    assert "decode on A100-PCIe (memory-bound: 80 GB of HBM at 1.94 TB/s" in why
    assert "its cache holds" in why
    uniform = [x for x in advice.ranked if x.pd and x.decode is None or
               (x.decode is not None and x.decode.gpu == x.gpu)]
    assert all("pools" not in x.metrics["serve"] for x in uniform)


def _cand(gpu, objective):
    return core.Candidate(gpu=gpu, gpus_per_node=8, nodes=1, spec={"gpu": gpu},
                          deployment="on-prem", design=f"gpu={gpu}", objective=objective,
                          metrics={"serve": {"layout": {"tp": 8}}})


def test_named_pools_pair_each_prefill_kind_with_each_decode_kind_and_nothing_more():
    ranked = [_cand(g, i) for i, g in enumerate(["H200-SXM", "H100-SXM", "MI300X", "B200"])]
    plain = scenario.parse({"workloads": {"serve": {**SERVE, "model": "llama3-70b"}}}, "p")
    pairs = core._pd_pairs(ranked, plain, prices.load(), 4)
    assert len(pairs) == 16                        # every pair of the best kinds, as before
    named = scenario.parse({"workloads": {"serve": {**SERVE, "model": "llama3-70b"}},
                            "space": {"pd_gpus": {"prefill": ["H100-SXM", "B200"],
                                                  "decode": ["H200-SXM", "MI300X"]}}}, "n")
    got = [(a.gpu, b.gpu) for a, b in core._pd_pairs(ranked, named, prices.load(), 4)]
    assert got == [("H200-SXM", "H200-SXM"), ("H100-SXM", "H100-SXM"), ("MI300X", "MI300X"),
                   ("B200", "B200"), ("H100-SXM", "H200-SXM"), ("H100-SXM", "MI300X"),
                   ("B200", "H200-SXM"), ("B200", "MI300X")]


@pytest.mark.parametrize("serve, space, constraints, field", [
    ({**SERVE, "pd": False}, {"pd_gpus": {"prefill": ["H100-SXM"], "decode": ["H200-SXM"]}},
     {}, "space.pd_gpus"),
    (SERVE, {"pd_gpus": {"prefill": ["H100-SXM"]}}, {}, "space.pd_gpus.decode"),
    (SERVE, {"pd_gpus": {"prefill": ["H100-SXM"], "decode": "H200-SXM"}}, {},
     "space.pd_gpus.decode"),
    (SERVE, {"pd_gpus": {"prefill": ["H100-SXM"] * 5, "decode": ["H200-SXM"]}}, {},
     "space.pd_gpus.prefill"),
    (SERVE, {"pd_gpus": {"prefill": ["H1000"], "decode": ["H200-SXM"]}}, {},
     "space.pd_gpus.prefill"),
    (SERVE, {"pd_gpus": {"prefill": ["H100-SXM"], "decode": ["H200-SXM"], "both": []}}, {},
     "space.pd_gpus.both"),
    (SERVE, {"pd_gpus": {"prefill": ["H100-SXM"], "decode": ["MI300X"]}},
     {"vendors": ["nvidia"]}, "space.pd_gpus.decode[0]"),
])
def test_bad_pool_kinds_are_one_line_naming_the_field(serve, space, constraints, field):
    with pytest.raises(InputError) as e:
        scenario.parse({"workloads": {"serve": serve}, "space": space,
                        "constraints": constraints}, "bad.yaml")
    assert e.value.field == field and e.value.file == "bad.yaml"
    assert "\n" not in e.value.message


def test_the_cli_refuses_a_pool_kind_the_constraints_exclude(tmp_path, capsys, cli):
    p = tmp_path / "bad.yaml"
    p.write_text("workloads:\n  serve: {model: llama3-8b, rate: 1, slo_tpot_ms: 50, pd: true}\n"
                 "constraints: {exclude_gpus: [MI300X]}\n"
                 "space: {pd_gpus: {prefill: [H100-SXM], decode: [MI300X]}}\n")
    code, out, err = cli("advise", str(p))
    assert code == 2 and "Traceback" not in err
    assert err.strip().splitlines() == [
        f"gpufabric: error: {p}: space.pd_gpus.decode[0]: MI300X is not allowed by the "
        "constraints (gpus, exclude_gpus, vendors, consumer_gpus)"]


def test_the_builtin_mixed_scenario_names_compute_and_memory_pools():
    sc = scenario.builtin("pd-mixed")
    assert sc.serve is not None and sc.serve.pd
    assert sc.space.pd_prefill == ("H100-SXM",)
    assert sc.space.pd_decode == ("MI300X",)
    # the decode kind holds more than the prefill kind (catalog: 192 GB against 80)
    assert all(catalog.gpu(g).memory_GB > catalog.gpu("H100-SXM").memory_GB
               for g in sc.space.pd_decode)


def test_a_disaggregated_unit_on_several_servers_is_described_without_a_fabric_plan():
    # a PD pool's servers carry the NICs its KV cache crosses, but no planned fabric
    spec = {**parse_inline("gpu=H200-SXM,gpus_per_node=8,nic=roce-400,nics_per_node=8"),
            "nodes": 2}
    c = core.Candidate(gpu="H200-SXM", gpus_per_node=8, nodes=2, spec=spec,
                       deployment="on-prem", pd=(2, 1),
                       metrics={"serve": {"layout": {"tp": 4}}})
    assert core.describe(c) == ("disaggregated 2P1D (tp4) inside each of 2x 8-GPU H200-SXM "
                                "server (default, 8x roce-400)")


def test_disaggregation_is_tried_when_no_colocated_design_meets_the_load():
    # one L40S serves 2.8 requests/s within the SLO co-located (prefill stalls its decode);
    # 5 are asked and the space has one-GPU servers only: a 1P1D unit of two serves 7.2
    sc = scenario.parse({"workloads": {"serve": {**SERVE, "rate": 5}},
                         "constraints": {"deployment": "on-prem", "gpus": ["L40S"]},
                         "space": {"gpus_per_node": [1], "nodes": [1]}}, "five.yaml")
    adv = core.advise(sc, prices.load(), top=1)
    assert [(c.pd, c.gpus) for c in adv.ranked] == [((1, 1), 2)]
    assert adv.ranked[0].metrics["serve"]["capacity"] >= 5


def test_json_names_the_decode_pools_gpu(advice, tmp_path, cli):
    p = tmp_path / "mixed.yaml"
    p.write_text(yaml.safe_dump(MIXED))
    code, out, _ = cli("advise", str(p), "--top", "8", "--json", "--jobs", "1")
    rows = json.loads(out)["designs"]
    mixed = [r for r in rows if r["decode_gpu"] not in (None, r["gpu"])]
    assert code == 0 and [(r["gpu"], r["decode_gpu"]) for r in mixed] == [("L40S", "A100-PCIe")]
    assert mixed[0]["metrics"]["serve"]["kv_link"].startswith("RDMA NICs")

"""Prefill-decode disaggregation and the configuration search."""

import json

import pytest

from gpufabric.errors import InputError
from gpufabric.topology.build import from_spec, load
from gpufabric.workloads.inference.pd import parse_pd, serve_pd
from gpufabric.workloads.inference.search import candidates, search
from gpufabric.workloads.inference.serve import ServeConfig, serve

TWO_NODES = {"gpu": "H100-SXM", "gpus_per_node": 8, "nodes": 2, "nic": "ib-ndr"}
CFG = dict(rate=6.0, requests=150, isl=3000, osl=60, slo_ttft_ms=800, slo_tpot_ms=40)


@pytest.fixture(scope="module")
def two_nodes():
    return from_spec(TWO_NODES)


def test_parse_pd():
    assert parse_pd("2P1D") == (2, 1)
    with pytest.raises(InputError, match="expected xPyD"):
        parse_pd("2:1")


def test_kv_transfer_inside_a_node_and_across(two_nodes):
    inside = serve_pd("llama3-70b", two_nodes, ServeConfig(tp=4, precision="fp8", **CFG),
                      "1P1D")
    across = serve_pd("llama3-70b", two_nodes, ServeConfig(tp=4, precision="fp8", **CFG),
                      "2P2D")
    assert inside["pd"]["kv_link"] == "NVLink"
    assert across["pd"]["kv_link"].startswith("RDMA NICs")
    # 3000 tokens x 80 layers x 2 x 8 KV heads x 128 x 1 B = 491.5 MB, a quarter per GPU
    assert inside["pd"]["kv_bytes_per_request_mean"] == 3000 * 80 * 2 * 8 * 128
    assert across["pd"]["kv_transfer_ms"]["p50"] > 3 * inside["pd"]["kv_transfer_ms"]["p50"]
    # the transfer is part of TTFT, and nothing is lost on the way
    assert across["ttft_ms"]["p50"] > across["pd"]["prefill_ms"]["p50"]
    assert across["requests"] == 150 and across["gpus"] == 16


def test_decode_on_another_gpu_kind(two_nodes):
    r = serve_pd("llama3-70b", two_nodes, ServeConfig(tp=4, precision="fp8", **CFG), "1P1D",
                 from_spec({"gpu": "H20", "gpus_per_node": 8, "nic": "ib-ndr"}))
    assert r["pd"]["decode"]["gpu"] == "H20" and r["pd"]["prefill"]["gpu"] == "H100-SXM"
    h100 = serve_pd("llama3-70b", two_nodes, ServeConfig(tp=4, precision="fp8", **CFG),
                    "1P1D")
    assert r["tpot_ms"]["p50"] > h100["tpot_ms"]["p50"]    # H20: a sixth of the FLOPs


def test_prefill_isolation_helps_tpot(two_nodes):
    # co-located, long prompts stall decode steps; disaggregated, they do not
    cfg = ServeConfig(tp=4, precision="fp8", replicas=2, **CFG)
    co = serve("llama3-70b", two_nodes, cfg)
    dis = serve_pd("llama3-70b", two_nodes, ServeConfig(tp=4, precision="fp8", **CFG), "1P1D")
    assert dis["tpot_ms"]["p99"] < co["tpot_ms"]["p99"]


def test_too_many_instances(two_nodes):
    with pytest.raises(InputError, match="3P2D of 4 GPUs each needs 20 GPUs; the system has 16"):
        serve_pd("llama3-8b", two_nodes, ServeConfig(tp=4, **CFG), "3P2D")


def test_candidates_and_search(two_nodes):
    names = [c["name"] for c in candidates(16, 8, tps=(4, 8), max_pd=2)]
    assert names == ["tp4 x1", "tp4 x2", "tp4 x4", "tp4 1P1D", "tp4 1P2D", "tp4 2P1D",
                     "tp4 2P2D", "tp8 x1", "tp8 x2", "tp8 1P1D"]
    res = search("llama3-70b", two_nodes, ServeConfig(precision="fp8", **CFG), tps=(4, 8),
                 max_pd=2)
    assert res["candidates"] == 10
    top = res["ranked"][0]
    assert top == res["best"]
    assert all(top["goodput_per_gpu"] >= r["goodput_per_gpu"] for r in res["ranked"])


def test_serve_cli_pd_and_search(cli):
    code, out, err = cli("serve", "llama3-8b", "gpu=H100-SXM,gpus_per_node=8", "--tp", "2",
                         "--pd", "1P2D", "--rate", "4", "--requests", "60", "--json")
    assert code == 0, err
    r = json.loads(out)
    assert r["pd"]["name"] == "1P2D" and r["gpus"] == 6
    code, out, err = cli("serve", "llama3-8b", "gpu=H100-SXM,gpus_per_node=2", "--rate", "4",
                         "--requests", "40", "--slo-ttft", "500", "--slo-tpot", "30",
                         "--search")
    assert code == 0 and "best:" in out, err
    code, out, err = cli("serve", "llama3-8b", "hgx-h100", "--search")
    assert code == 2 and "needs an offered load" in err


def test_kv_transfers_queue_at_the_decode_side_too():
    # six prefill instances feed one decode instance over the NICs: their transfers meet on
    # the decode instance's links and wait there; one prefill instance alone never waits
    topo = from_spec({"gpu": "H100-SXM", "gpus_per_node": 8, "nodes": 2, "nic": "ib-ndr"})
    cfg = ServeConfig(tp=2, rate=40.0, requests=300, isl=8000, osl=50)
    many = serve_pd("llama3-8b", topo, cfg, "6P1D")
    assert many["pd"]["kv_link"] == "RDMA NICs (ConnectX-7)"
    assert many["pd"]["kv_transfer_ms"]["p50"] == pytest.approx(13.9, abs=0.05)
    assert many["pd"]["kv_wait_ms"]["p50"] == 0.0
    assert many["pd"]["kv_wait_ms"]["p99"] > many["pd"]["kv_transfer_ms"]["p50"]
    one = serve_pd("llama3-8b", topo, ServeConfig(tp=2, rate=2.0, requests=50, isl=8000,
                                                  osl=50), "1P1D")
    assert one["pd"]["kv_wait_ms"] == {"p50": 0.0, "p90": 0.0, "p99": 0.0}


def test_pd_with_attention_data_parallelism():
    # DeepSeek-V3 with attention-DP 8 x EP8 per instance, one prefill and two decode
    # instances in one NVL72: each attention rank is a request stream with its own KV cache,
    # so a request's whole MLA cache (61 layers x 576 FP8 values per token) moves from one GPU
    topo = load("gb200-nvl72")
    cfg = ServeConfig(tp=8, ep=8, dp_attention=8, precision="fp8", rate=20.0, requests=400,
                      isl=2000, osl=200)
    r = serve_pd("deepseek-v3", topo, cfg, "1P2D")
    assert r["gpus"] == 24 and r["requests"] == 400 and r["pd"]["kv_link"] == "NVLink"
    assert r["pd"]["kv_bytes_per_request_mean"] == 2000 * 61 * 576
    assert r["ttft_ms"]["p50"] < 1000 and r["tpot_ms"]["p50"] < 20


def test_one_pcie_card_per_server_sends_its_kv_cache_over_its_nic():
    # a card without NVLink (the builder records nvlink_links 0) still gets its twin server
    # across the network: the transfer crosses the 400G NIC both servers have
    pre = from_spec({"gpu": "L40S", "gpus_per_node": 1, "nic": "roce-400"})
    dec = from_spec({"gpu": "A100-PCIe", "gpus_per_node": 1, "nic": "roce-400"})
    r = serve_pd("llama3-8b", pre, ServeConfig(rate=1.0, requests=20, isl=2000, osl=20),
                 "1P1D", dec)
    assert r["pd"]["kv_link"] == "RDMA NICs (ConnectX-7)"
    assert (r["pd"]["prefill"]["gpu"], r["pd"]["decode"]["gpu"]) == ("L40S", "A100-PCIe")


def test_the_kv_transfer_goes_at_the_pace_of_the_slower_end():
    # a decode system behind 100G NICs: the cache crosses them whatever the prefill side has
    def kv_ms(pre_nic, dec_nic):
        pre = from_spec({"gpu": "H100-SXM", "gpus_per_node": 8, "nic": pre_nic})
        dec = from_spec({"gpu": "H100-SXM", "gpus_per_node": 8, "nic": dec_nic})
        r = serve_pd("llama3-8b", pre, ServeConfig(rate=0.5, requests=10, isl=4000, osl=10),
                     "1P1D", dec)
        return r["pd"]["kv_transfer_ms"]["p50"], r["pd"]["kv_link"]
    fast, _ = kv_ms("roce-400", "roce-400")
    mixed, link = kv_ms("roce-400", "roce-100")
    slow, _ = kv_ms("roce-100", "roce-100")
    assert mixed == pytest.approx(slow) and mixed > 2 * fast     # 100G against 400G
    assert link.startswith("RDMA NICs (") and link.count(",") == 1   # both ends' NIC models

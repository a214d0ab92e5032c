"""The iteration-time model, KV capacity and `gpufabric serve`."""

import json

import pytest

from gpufabric.errors import InputError
from gpufabric.topology.build import from_spec
from gpufabric.workloads import compute as C
from gpufabric.workloads.inference.itertime import (DTYPE_BYTES, ServeLayout, StepModel,
                                                    rank_load_factor)
from gpufabric.workloads.inference.serve import ServeConfig, serve

H100x8 = {"gpu": "H100-SXM", "gpus_per_node": 8}


@pytest.fixture(scope="module")
def h100():
    return from_spec(H100x8)


def test_decode_of_one_token_reads_every_weight_once(h100):
    m = StepModel("llama3-8b", h100, ServeLayout(), precision="fp8")
    b = m.breakdown(0, 0, 0, 1, 1)
    # memory-bound: the linear layers' weights (1 byte each) at 80% of 3350 GB/s
    lin = m.model.params() - m.model.vocab * m.model.hidden      # all but the input embedding
    assert b.weight_read_s == pytest.approx(lin / (3350e9 * C.HBM_EFF.value), rel=0.01)
    assert b.gemm_compute_s < b.weight_read_s / 10
    assert b.tp_comm_s == 0 and b.ep_comm_s == 0


def test_kv_cache_capacity_gqa_and_mla(h100):
    m = StepModel("llama3-70b", h100, ServeLayout(tp=4), precision="fp8")
    assert m.kv_bytes_per_token == 80 * 2 * (8 // 4) * 128 * 1      # fp8 KV, 2 KV heads a GPU
    mem = m.memory()
    left = 80 * 2**30 * 0.9 - mem["weights_GB"] * 1e9 - m.activation_bytes - m.reserve_bytes
    assert m.kv_blocks == int(left // (m.kv_bytes_per_token * 16))
    assert m.max_concurrency(1000, 1000) == m.kv_blocks // 125
    h200 = from_spec({"gpu": "H200-SXM", "gpus_per_node": 8})
    d = StepModel("deepseek-v3", h200, ServeLayout(tp=8, ep=8, dp_attention=8),
                  precision="fp8")
    assert d.kv_bytes_per_token == 61 * (512 + 64) * 1               # the MLA latent, fp8


def test_tensor_parallel_all_reduce_goes_over_the_links(h100):
    nvl = StepModel("llama3-70b", h100, ServeLayout(tp=4), precision="fp8")
    pcie = StepModel("llama3-70b", from_spec({"gpu": "H100-PCIe", "gpus_per_node": 8}),
                     ServeLayout(tp=4), precision="fp8")
    a, b = nvl.breakdown(2048, 2048 * 1024, 2048, 0, 0), pcie.breakdown(2048, 2048 * 1024,
                                                                         2048, 0, 0)
    assert b.tp_comm_s > 5 * a.tp_comm_s > 0


def test_formats_change_bytes_and_compute():
    assert DTYPE_BYTES["fp8"] == 1.0 and DTYPE_BYTES["fp4"] == 0.5625
    a100 = from_spec({"gpu": "A100-SXM4-80GB", "gpus_per_node": 1})
    m = StepModel("llama3-8b", a100, ServeLayout(), precision="fp8")
    assert m.compute_prec == "bf16"          # no FP8 tensor cores on Ampere: weight-only
    with pytest.raises(InputError, match="unknown data type 'fp6'"):
        StepModel("llama3-8b", a100, ServeLayout(), precision="fp6")


def test_model_that_does_not_fit(h100):
    with pytest.raises(InputError, match="llama3-405b in bf16 does not fit"):
        StepModel("llama3-405b", h100, ServeLayout(tp=4))
    with pytest.raises(InputError, match="--ep 8 must divide --tp 4"):
        StepModel("deepseek-v3", h100, ServeLayout(tp=4, ep=8))


def test_slower_link_never_improves_latency():
    runs = []
    for nv in ("nvswitch", "pcie"):
        topo = from_spec({"gpu": "H100-SXM" if nv == "nvswitch" else "H100-PCIe",
                          "gpus_per_node": 8})
        runs.append(serve("llama3-70b", topo, ServeConfig(tp=8, precision="fp8", rate=2.0,
                                                          requests=60, isl=1000, osl=50)))
    fast, slow = runs
    for m in ("ttft_ms", "tpot_ms"):
        for q in ("p50", "p90", "p99"):
            assert slow[m][q] > fast[m][q]


def test_serve_cli_json(cli):
    code, out, err = cli("serve", "llama3-8b", "gpu=H100-SXM,gpus_per_node=2", "--rate", "4",
                         "--requests", "100", "--isl", "512", "--osl", "32", "--slo-ttft",
                         "200", "--slo-tpot", "20", "--json")
    assert code == 0, err
    r = json.loads(out)
    for k in ("ttft_ms", "tpot_ms", "e2e_ms"):
        assert set(r[k]) >= {"p50", "p90", "p99"}
    assert r["gpus"] == 2 and r["replicas"] == 2 and r["requests"] == 100
    assert r["throughput_tokens_per_s_per_gpu"] == pytest.approx(
        r["throughput_tokens_per_s"] / 2)
    assert 0 < r["goodput_requests_per_s"] <= r["requests_per_s"]
    assert r["bottleneck"]


@pytest.mark.parametrize("args,msg", [
    (["llama3-405b", "hgx-h100", "--tp", "2"], "does not fit"),
    (["llama3-8b", "hgx-h100", "--slo-ttft", "0.5"], "--slo-ttft: 0.5 ms is impossible"),
    (["llama3-8b", "hgx-h100", "--precision", "fp3"], "unknown data type 'fp3'"),
])
def test_serve_cli_refuses_with_one_line(cli, args, msg):
    code, out, err = cli("serve", *args, "--requests", "10")
    assert code == 2 and msg in err and err.count("\n") == 1


def test_serve_cli_malformed_trace(cli, tmp_path):
    f = tmp_path / "bad.csv"
    f.write_text("arrival_s,isl,osl\n0,100,10\n1,100,-3\n")
    code, out, err = cli("serve", "llama3-8b", "hgx-h100", "--trace", str(f))
    assert code == 2 and "bad.csv: row 3.osl: got '-3'" in err


@pytest.mark.parametrize("nics", [("ib-ndr", "ib-hdr", "ib-edr")])
def test_slower_network_never_improves_wide_expert_parallelism(nics):
    # DeepSeek-V3 with EP16 across two 8-GPU servers: the all-to-all crosses the NICs; every
    # request counted (the whole run), so that each network's percentiles are over the same
    # requests (a steady state's window starts where each run's warm-up ends)
    prev = None
    for nic in nics:
        topo = from_spec({"gpu": "H200-SXM", "gpus_per_node": 8, "nodes": 2, "nic": nic})
        r = serve("deepseek-v3", topo, ServeConfig(tp=16, ep=16, dp_attention=16,
                                                   precision="fp8", rate=8.0, requests=160,
                                                   isl=1000, osl=100, measure="run"))
        cur = [r[m][q] for m in ("ttft_ms", "tpot_ms") for q in ("p50", "p90", "p99")]
        assert r["breakdown_ms"]["ep_comm"] > 0
        if prev is not None:
            assert all(c >= p for c, p in zip(cur, prev, strict=True)), (nic, cur, prev)
        prev = cur


def test_serve_a_trace(cli, tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("arrival_s,isl,osl\n0,100,20\n0.5,2000,50\n1.0,300,10\n")
    code, out, err = cli("serve", "llama3-8b", "hgx-h100", "--trace", str(f), "--replicas", "1",
                         "--json")
    assert code == 0, err
    r = json.loads(out)
    assert r["requests"] == 3 and r["gpus"] == 1
    assert r["workload"]["osl"] == pytest.approx(80 / 3)
    # a trace is dealt round-robin to the replicas; one is simulated and scaled
    code, out, err = cli("serve", "llama3-8b", "hgx-h100", "--trace", str(f), "--json")
    r = json.loads(out)
    assert r["requests"] == 3 and r["workload"]["simulated_requests"] == 1


def test_expert_routing_imbalance_sets_the_slowest_rank():
    # balls into bins: 64 decode tokens x top-8 over 256 experts on 8 ranks; the busiest rank
    # carries 18 % more than the mean from sampling noise alone, more with the experts' skew
    assert rank_load_factor(64, 256, 8, 8, cv=0.0) == pytest.approx(1.1765, abs=1e-4)
    assert rank_load_factor(64, 256, 8, 8) > rank_load_factor(64, 256, 8, 8, cv=0.0)
    assert rank_load_factor(64, 256, 8, 1) == 1.0            # no EP: every GPU does all
    # EPLB removes the skew at the cost of 32 redundant experts' weights (4 per rank at EP8)
    b200 = from_spec({"gpu": "B200", "gpus_per_node": 8})
    lay = ServeLayout(tp=8, ep=8, dp_attention=8)
    plain = StepModel("deepseek-v3", b200, lay, precision="fp8")
    eplb = StepModel("deepseek-v3", b200, lay, precision="fp8", eplb=True)
    extra = (eplb.weights_bytes - plain.weights_bytes) / 1e9
    assert extra == pytest.approx(4 * 58 * 3 * 7168 * 2048 / 1e9, rel=1e-9)   # 10.2 GB
    assert float(eplb(4096, 0, 0, 0, 0)) < float(plain(4096, 0, 0, 0, 0))


def test_parallel_block_serves_with_one_tp_all_reduce_per_layer(h100):
    from dataclasses import replace

    from gpufabric.workloads.models import load_model
    gptj = load_model("gpt-j-6b")
    side = StepModel(gptj, h100, ServeLayout(tp=4), precision="fp16")
    serial = StepModel(replace(gptj, parallel_block=False), h100, ServeLayout(tp=4),
                       precision="fp16")
    one, two = side.breakdown(0, 0, 0, 8, 1024), serial.breakdown(0, 0, 0, 8, 1024)
    assert one.tp_comm_s == pytest.approx(two.tp_comm_s / 2)


def test_element_wise_passes_are_counted_where_they_weigh():
    """The norms and the activation move the batch's activations through HBM: the hidden state
    whole on every TP rank, the MLP width split by TP (bytes as the engines' fused kernels
    move them). In an 8192-token prefill they are a few percent of the step; in a one-token
    decode step nothing."""
    topo = from_spec({"gpu": "H100-SXM", "gpus_per_node": 8})
    tp1 = StepModel("llama3-8b", topo, ServeLayout())
    tp2 = StepModel("llama3-8b", topo, ServeLayout(tp=2))
    assert tp1.elementwise_bytes_per_token == 32 * (2 * 4 * 4096 + 3 * 14336) * 2
    assert tp2.elementwise_bytes_per_token == 32 * (2 * 4 * 4096 + 3 * 7168) * 2
    moe = StepModel("mixtral-8x7b", topo, ServeLayout(tp=2))
    m = moe.model
    assert moe.elementwise_bytes_per_token == 2 * m.layers * (
        8 * m.hidden + 3 * m.expert_ffn * m.top_k / 2)
    pre = tp1.breakdown(8192, 8192 * 512 / 2, 8192, 0, 0)
    share = pre.elementwise_s / pre.total_s
    assert 0.03 < share < 0.15
    dec = tp1.breakdown(0, 0, 0, 1, 1000)
    assert dec.elementwise_s / dec.total_s < 0.001

"""Each engine's own prefill token budget, and the KV transfer sharing the fabric."""

from gpufabric.topology.build import from_spec
from gpufabric.workloads.inference.serve import (ServeConfig, engine_batched_tokens,
                                                 scheduler_config, step_model)


def test_engine_budgets_follow_the_engines_defaults_by_gpu_memory():
    assert engine_batched_tokens("vllm", "H100-SXM")[0] == 8192
    assert engine_batched_tokens("vllm", "A100-SXM4-80GB")[0] == 2048   # A100 excluded
    assert engine_batched_tokens("vllm", "L40S")[0] == 2048             # 48 GB < 70 GiB
    assert engine_batched_tokens("sglang", "H200")[0] == 8192
    assert engine_batched_tokens("sglang", "B200")[0] == 16384
    assert engine_batched_tokens("tensorrt-llm", "B200")[0] == 8192
    assert engine_batched_tokens("fastertransformer", "A100-SXM4-80GB") == (
        8192, "gpufabric default (engine without a published default)")


def test_the_budget_is_the_scheduler_default_and_an_option_overrides_it():
    topo = from_spec({"gpu": "B200", "gpus_per_node": 8})
    cfg = ServeConfig(tp=1, engine="sglang")
    sm = step_model("llama3-8b", topo, cfg)
    assert (sm.max_tokens, scheduler_config(sm, cfg).max_batched_tokens) == (16384, 16384)
    cfg = ServeConfig(tp=1, engine="sglang", max_batched_tokens=4096)
    sm = step_model("llama3-8b", topo, cfg)
    assert (sm.max_tokens, scheduler_config(sm, cfg).max_batched_tokens) == (4096, 4096)


# -- the KV transfer shares the decode pool's links ------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from gpufabric.workloads.inference.pd import link_sharing, serve_pd  # noqa: E402

TWO_NODES = {"gpu": "H100-SXM", "gpus_per_node": 8, "nodes": 2, "nic": "ib-ndr"}


@settings(max_examples=25, deadline=None)
@given(st.floats(0.0, 5e8), st.floats(0.0, 5e8), st.sampled_from([1, 2, 4, 8]),
       st.sampled_from([1, 2]))
def test_more_concurrent_traffic_never_speeds_the_transfer(a, b, senders, per_node):
    topo = from_spec(TWO_NODES)
    lo, hi = sorted((a, b))
    kv_lo, dec_lo = link_sharing(topo, per_node, senders, lo)
    kv_hi, dec_hi = link_sharing(topo, per_node, senders, hi)
    assert 0.0 <= kv_lo <= kv_hi + 1e-12
    assert 0.0 <= dec_lo <= dec_hi + 1e-12


def test_sharing_a_nic_costs_each_side_the_others_bytes():
    # 100 MB of all-to-all arriving at a 400G NIC (48 GB/s usable) while a KV cache arrives:
    # max-min fair halves both, so each loses the other's bytes at the NIC's rate
    kv, dec = link_sharing(from_spec(TWO_NODES), 1, 8, 100e6)
    assert (round(kv * 1e3, 4), round(dec * 1e3, 4)) == (2.0833, 2.0833)
    assert link_sharing(from_spec(TWO_NODES), 1, 8, 0.0) == (0.0, 0.0)


def test_a_decode_pool_whose_all_to_all_crosses_the_nics_slows_the_transfer():
    # DeepSeek-V3 in FP8, 1P1D of 16 GPUs each (EP16 with attention-DP over two 8-GPU nodes):
    # half of the decode pool's all-to-all crosses the NICs the KV caches arrive by
    topo, dtopo = from_spec(TWO_NODES), from_spec(TWO_NODES)
    cfg = ServeConfig(tp=16, ep=16, dp_attention=16, precision="fp8", rate=16.0, requests=400,
                      isl=2000, osl=200)
    r = serve_pd("deepseek-v3", topo, cfg, "1P1D", decode_topo=dtopo)
    sh = r["pd"]["link_sharing"]
    assert r["pd"]["kv_link"] == "RDMA NICs (ConnectX-7)"
    assert round(sh["decode_bytes_per_iteration"] / 1e6, 2) == 21.32
    assert round(sh["kv_slowdown"], 4) == 1.0190
    assert round(r["pd"]["kv_transfer_ms"]["p50"], 3) == 2.267
    assert sh["kv_link_busy"] > 0 and sh["decode_comm_ms_per_iteration"] > 0


def test_a_decode_pool_inside_one_node_leaves_the_nics_to_the_transfer():
    # TP8 decode instances on their own node: their all-reduce stays on NVLink
    cfg = ServeConfig(tp=8, precision="fp8", rate=4.0, requests=100, isl=2000, osl=100)
    r = serve_pd("llama3-70b", from_spec(TWO_NODES), cfg, "1P1D")
    assert r["pd"]["link_sharing"] == {"decode_bytes_per_iteration": 0.0, "kv_slowdown": 1.0,
                                       "kv_link_busy": 0.0,
                                       "decode_comm_ms_per_iteration": 0.0}

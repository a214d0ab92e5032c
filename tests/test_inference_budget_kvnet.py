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

"""Training memory as the frameworks account it, checked on the papers' own figures."""

from pathlib import Path

import pytest

from gpufabric.workloads.memory import (GiB, block_activation_bytes, params_per_gpu,
                                        training_memory)
from gpufabric.workloads.models import load_model, model_from_shape
from gpufabric.workloads.parallel import Parallel
from gpufabric.workloads.validate import validate

MEMORY = Path(__file__).parent / "data" / "calibration" / "training_memory.yaml"
GPT3 = load_model("gpt3-175b")
A100 = "A100-SXM4-80GB"


def model_state_bytes(par: Parallel, stage: int = 0) -> float:
    m = training_memory(GPT3, par, 2048, A100)
    return (m.weights_GiB + m.grads_GiB + m.optimizer_GiB) * GiB


@pytest.mark.parametrize("zero, per_param", [
    (0, lambda d: 18),                 # BF16 weight, FP32 gradient, FP32 master + 2 moments
    (1, lambda d: 6 + 12 / d),         # Megatron's distributed optimizer: "6 + 12/d"
    (2, lambda d: 2 + 16 / d),         # ZeRO-2: gradients sharded too
    (3, lambda d: 18 / d),             # ZeRO-3 / FSDP: everything sharded
])
def test_model_states_are_bytes_per_parameter_as_megatron_counts_them(zero, per_param):
    # Megatron-LM docs/source/api-guide/dist_optimizer.md: bf16 params with fp32 grads take
    # 18 bytes per parameter, 6 + 12/d with the distributed optimizer over d ranks
    par = Parallel(tp=8, pp=8, dp=16, zero=zero, micro_batch=1, global_batch=128)
    params = sum(params_per_gpu(GPT3, par, 0))
    assert model_state_bytes(par) == pytest.approx(params * per_param(16), rel=1e-12)


def test_a_stage_holds_its_blocks_and_the_embedding():
    par = Parallel(tp=8, pp=8, vpp=3, micro_batch=1, global_batch=64)
    dense, expert = params_per_gpu(GPT3, par, 0)
    block = (GPT3.attn_params() + GPT3.mlp_params(GPT3.ffn)) / 8 + 2 * GPT3.norm_params()
    emb = GPT3.vocab * GPT3.hidden / 8 + GPT3.positions * GPT3.hidden
    assert expert == 0 and dense == pytest.approx(12 * block + emb)


# Korthikanti et al. 2022 (arXiv 2205.05198) Table 2: activation bytes per transformer layer
S, B, H, A, T = 2048, 1, 12288, 96, 8          # GPT-3 175B as in the paper's Table 3
SBH = S * B * H
TABLE2 = {
    ("none", False): SBH * (10 + 24 / T + 5 * A * S / (H * T)),   # tensor parallel
    ("none", True): SBH / T * (34 + 5 * A * S / H),                # + sequence parallel
    ("selective", False): SBH * (10 + 24 / T),                     # + selective recompute
    ("selective", True): SBH / T * 34,                             # both
}


@pytest.mark.parametrize("recompute, sp", list(TABLE2))
def test_block_activations_are_korthikanti_table_2(recompute, sp):
    par = Parallel(tp=T, pp=8, sp=sp, recompute=recompute, global_batch=64)
    got = block_activation_bytes(GPT3, 0, B, S, par, "bf16", flash=False)
    assert got == pytest.approx(TABLE2[recompute, sp], rel=1e-12)


@pytest.mark.parametrize("mode, published", [
    # Figure 7, GPT-3 175B: activation memory against tensor parallelism alone (percent), as
    # calculon-ai/calculon calculon/llm/validation.py (seqsel_fig7) transcribes the bars
    (("none", True), 62.04), (("selective", False), 56.53), (("selective", True), 18.49)])
def test_recompute_and_sequence_parallel_savings_match_figure_7(mode, published):
    assert 100 * TABLE2[mode] / TABLE2["none", False] == pytest.approx(published, abs=0.1)


def test_full_recompute_keeps_each_layer_input():
    # Table 2: full recompute keeps 2sbh per layer (sbh/t... split by t with sequence
    # parallelism); Figure 7 puts it at 8.71% of tensor parallelism alone for 175B
    par = Parallel(tp=T, pp=8, vpp=3, sp=False, recompute="full", global_batch=64)
    m = training_memory(GPT3, par, S, A100, flash=False)
    working = block_activation_bytes(GPT3, 0, B, S, par.with_(recompute="none"), "bf16",
                                     flash=False)
    inflight = 8 * (1 + 7 / 24)
    assert m.activations_GiB * GiB == pytest.approx(12 * 2 * SBH * inflight + working)
    assert 100 * 2 * SBH / TABLE2["none", False] == pytest.approx(8.71, abs=0.02)


@pytest.mark.parametrize("shape, par, gib", [
    # Figure 1 of the paper: activations per GPU of its Table 3 layouts, no recompute
    ((48, 6144, 64), Parallel(tp=8, micro_batch=4, sp=False), 59.25),
    # the first of 8 stages holds 8 micro-batches, times 1 + 7/24 with 3 model chunks
    ((96, 12288, 96), Parallel(tp=8, pp=8, vpp=3, global_batch=64, sp=False), 66.84375),
    ((128, 25600, 160), Parallel(tp=8, pp=64, global_batch=512, sp=False), 131.25),
])
def test_in_flight_micro_batches_give_figure_1(shape, par, gib):
    layers, hidden, heads = shape
    m = model_from_shape({"layers": layers, "hidden": hidden, "heads": heads,
                          "ffn": 4 * hidden, "vocab": 51200, "arch": "dense"}, "Table 3")
    got = training_memory(m, par, 2048, A100, flash=False)
    assert got.activations_GiB == pytest.approx(gib, rel=1e-9)


def test_fsdp_under_a_pipeline_keeps_weights_gathered_and_gradients_unsharded():
    par = Parallel(tp=8, pp=8, dp=8, fsdp="full", micro_batch=1, global_batch=64,
                   recompute="full")
    flat = training_memory("llama3-405b", par.with_(pp=1, global_batch=8), 8192, "H100-SXM")
    piped = training_memory("llama3-405b", par, 8192, "H100-SXM")
    stage = sum(params_per_gpu(load_model("llama3-405b"), par, 0))
    assert piped.buffers_GiB * GiB >= (2 + 4) * stage       # BF16 weights + FP32 gradients
    assert flat.buffers_GiB < piped.buffers_GiB / 10


def test_op_level_selective_recompute_keeps_less_than_the_whole_block():
    par = Parallel(dp=8, fsdp="full", micro_batch=2, global_batch=16, recompute="selective")
    op = training_memory("llama3-8b", par, 8192, "H100-SXM", sac="op")
    attn = training_memory("llama3-8b", par, 8192, "H100-SXM")
    assert op.activations_GiB < 0.5 * attn.activations_GiB


def test_memory_metric_on_published_figures():
    r = validate(str(MEMORY))
    held = r.summary["by_metric"]
    # Korthikanti's Figure 1 is its Table 2 equations, which the model implements: the
    # activations are exact; its parameter figure counts 12 L h^2 without the embedding and
    # biases the first stage also holds (1T: 11%)
    assert held["activations_GiB"]["points"] == 8 and held["activations_GiB"]["max_abs_pct"] < 0.01
    assert held["model_states_GiB"]["points"] == 8 and held["model_states_GiB"]["max_abs_pct"] < 12
    assert r.summary["points"] == 16 and r.summary["median_abs_pct"] < 10
    # torchtitan's peak reserved memory (looked at while the model gained op-level SAC and
    # FSDP under a pipeline): within 10% median is the goal, 16% what the model gives (the
    # allocator's reserve and the FP8 casts' buffers are priors, not fitted)
    mem = held["memory_GiB"]["looked_at"]
    assert mem["points"] == 20 and mem["median_abs_pct"] < 20 and mem["max_abs_pct"] < 35

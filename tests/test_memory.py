"""Training memory as the frameworks account it, checked on the papers' own figures."""

from pathlib import Path

import pytest

from gpufabric.errors import InputError
from gpufabric.workloads.memory import (GiB, block_activation_bytes, fit_hint, params_per_gpu,
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
    # activations are exact; its parameter figure counts 12 L h^2 at 18 B (the blocks only:
    # model_states_counted, the entries say so), which the model's blocks meet but for their
    # biases and norms (13 h of 12 h^2 + 13 h a layer); looked at: model_states_counted was
    # added after their model-states miss was read
    act, states = held["activations_GiB"]["looked_at"], held["model_states_GiB"]["looked_at"]
    assert act["points"] == 8 and act["max_abs_pct"] < 0.01
    assert states["points"] == 8 and states["max_abs_pct"] < 0.1
    # torchtitan's peak reserved memory (looked at while the model gained op-level SAC, FSDP
    # under a pipeline, FSDP's FP32 shards and root, the loss's buffers and what the allocator
    # reports): the goal is within 10% median; nothing here is fitted, so a miss of a few
    # GiB on an 80 GiB part is what the unmodelled allocator and FP8 casts leave
    mem = held["memory_GiB"]["looked_at"]
    assert mem["points"] == 20 and mem["median_abs_pct"] < 10 and mem["max_abs_pct"] < 20
    # KempnerForge's peak allocated memory (two reports), added after the model changed (held
    # out): BF16 parameters, FSDP gradient accumulation without sync and its loss from its own
    # profile; its largest misses (<= 20%) are the few-GPU runs where the unsharded FP32
    # gradients of the accumulation dominate, and one nvidia-smi reading (the allocator's
    # cache over the 5% fragmentation prior)
    kf = [p for p in r.points if p["id"].startswith("kempnerforge")]
    errs = sorted(abs(p["error_pct"]) for p in kf)
    assert len(kf) == 21 and all(p["status"] == "held-out" for p in kf)
    assert errs[len(errs) // 2] < 10 and errs[-1] < 25


LOGITS = 2 * 8192 * 128256          # micro-batch 2 x seq 8192 x Llama 3's vocabulary


@pytest.mark.parametrize("kind, per_logit", [
    ("eager", 12),              # FP32 log-probs, their gradient, the input gradient
    ("vocab_parallel", 6),      # Megatron: FP32 softmax made the gradient in place + 16-bit
    ("fused", 4),               # compiled: 16-bit logits saved + 16-bit gradient
])
def test_the_loss_holds_bytes_per_logit_by_how_it_is_computed(kind, per_logit):
    par = Parallel(dp=8, fsdp="full", micro_batch=2, global_batch=16, recompute="full")
    m = training_memory("llama3-8b", par, 8192, "H100-SXM", cross_entropy=kind)
    none = training_memory("llama3-8b", par, 8192, "H100-SXM", cross_entropy="fused")
    assert (m.buffers_GiB - none.buffers_GiB) * GiB == pytest.approx((per_logit - 4) * LOGITS)


def test_eager_loss_on_vocabulary_sharded_logits_holds_four_fp32_copies():
    # PyTorch's loss_parallel backward: log-probs, zeros_like, exp and their sum (16 B)
    par = Parallel(tp=8, dp=8, fsdp="full", micro_batch=2, global_batch=16, recompute="full")
    eager = training_memory("llama3-70b", par, 8192, "H100-SXM", cross_entropy="eager")
    fused = training_memory("llama3-70b", par, 8192, "H100-SXM", cross_entropy="fused")
    assert (eager.buffers_GiB - fused.buffers_GiB) * GiB == pytest.approx(12 * LOGITS / 8)


def test_fsdp_keeps_an_fp32_shard_as_the_master_weight():
    par = Parallel(dp=8, fsdp="full", micro_batch=1, global_batch=8)
    m = training_memory("llama3-8b", par, 8192, "H100-SXM")
    n = load_model("llama3-8b").params()
    # FSDP2: FP32 sharded parameter (4 B), FP32 gradient (4 B), two FP32 moments (8 B)
    assert (m.weights_GiB, m.grads_GiB, m.optimizer_GiB) == pytest.approx(
        (4 * n / 8 / GiB, 4 * n / 8 / GiB, 8 * n / 8 / GiB))
    zero3 = training_memory("llama3-8b", Parallel(dp=8, zero=3), 8192, "H100-SXM")
    assert zero3.weights_GiB == pytest.approx(2 * n / 8 / GiB)      # DeepSpeed: 2 + 4 + 12


def test_fsdp_keeps_the_root_modules_parameters_gathered():
    # FSDP2 does not reshard the root (embedding, final norm, output layer) after forward
    m = load_model("llama3-8b")
    par = Parallel(dp=8, fsdp="full", micro_batch=1, global_batch=8)
    fsdp = training_memory(m, par, 8192, "H100-SXM", cross_entropy="fused")
    zero3 = training_memory(m, Parallel(dp=8, zero=3), 8192, "H100-SXM",
                            cross_entropy="fused")
    assert (fsdp.buffers_GiB - zero3.buffers_GiB) * GiB == pytest.approx(
        2 * m.embedding_params())


def test_interleaving_never_holds_more_than_the_steps_micro_batches():
    # 8 micro-batches on 8 stages of 2 chunks: every chunk of every micro-batch is in flight
    # before the first backward, 8 micro-batches' worth, as with 1F1B (torchtitan Table 5)
    par = Parallel(tp=8, pp=8, dp=8, fsdp="full", micro_batch=4, global_batch=256,
                   recompute="full")
    one = training_memory("llama3-405b", par, 8192, "H100-SXM")
    two = training_memory("llama3-405b", par.with_(vpp=2), 8192, "H100-SXM")
    assert two.activations_GiB == pytest.approx(one.activations_GiB)


def test_what_a_source_reports_is_the_device_total_less_what_it_does_not_count():
    m = training_memory("llama3-8b", Parallel(dp=8, fsdp="full"), 8192, "H100-SXM")
    assert m.reported_GiB("device") == m.total_GiB
    # torch.cuda.max_memory_reserved: no CUDA context (0.5) nor NCCL / cuBLAS buffers (2.0)
    assert m.total_GiB - m.reported_GiB("reserved") == pytest.approx(2.5)
    assert m.reported_GiB("allocated") == pytest.approx(
        m.weights_GiB + m.grads_GiB + m.optimizer_GiB + m.activations_GiB + m.buffers_GiB)


@pytest.mark.parametrize("key, good, bad, allowed", [
    ("memory_reported", "reserved", "smi", "device, reserved, allocated"),
    ("model_states_counted", "blocks", "layers", "all, blocks"),
])
def test_an_unknown_memory_count_is_one_line_naming_the_field(tmp_path, key, good, bad,
                                                              allowed):
    text = MEMORY.read_text().replace(f"\n  {key}: {good}", f"\n  {key}: {bad}", 1)
    path = tmp_path / "m.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as e:
        validate(str(path))
    assert key in str(e.value) and allowed in str(e.value) and "m.yaml" in str(e.value)


def test_without_master_weights_a_parameter_holds_sixteen_bit_state_only():
    # KempnerForge casts the model to BF16: BF16 gradient and AdamW moments in the same dtype
    par = Parallel(dp=4, fsdp="full", micro_batch=1, global_batch=4)
    m = training_memory("llama3-8b", par, 4096, "H200-SXM", master_weights=False)
    n = load_model("llama3-8b").params()
    assert (m.weights_GiB + m.grads_GiB + m.optimizer_GiB) * GiB == pytest.approx(8 * n / 4)


def test_fsdp_accumulation_without_sync_holds_every_unsharded_fp32_gradient():
    par = Parallel(dp=4, fsdp="full", micro_batch=1, global_batch=8)      # 2 micro-batches
    kw = {"cross_entropy": "fused"}
    synced = training_memory("llama3-8b", par, 4096, "H200-SXM", **kw)
    held = training_memory("llama3-8b", par, 4096, "H200-SXM", grad_accum_no_sync=True, **kw)
    one = training_memory("llama3-8b", par.with_(global_batch=4), 4096, "H200-SXM",
                          grad_accum_no_sync=True, **kw)
    assert (held.buffers_GiB - synced.buffers_GiB) * GiB == pytest.approx(
        4 * load_model("llama3-8b").params())
    assert one.buffers_GiB == synced.buffers_GiB        # nothing to accumulate


def test_a_loss_on_gathered_logits_is_over_the_whole_vocabulary():
    par = Parallel(tp=4, dp=1, fsdp="full", micro_batch=1, global_batch=1, recompute="full")
    kw = {"cross_entropy": "eager_16bit"}
    split = training_memory("llama3-8b", par, 4096, "H200-SXM", **kw)
    whole = training_memory("llama3-8b", par, 4096, "H200-SXM", loss_parallel=False, **kw)
    assert (whole.buffers_GiB - split.buffers_GiB) * GiB == pytest.approx(
        8 * 4096 * 128256 * (1 - 1 / 4))


def test_a_source_that_reads_rank_0_gets_the_first_stages_memory():
    par = Parallel(tp=4, pp=2, dp=4, fsdp="full", micro_batch=4, global_batch=64,
                   recompute="full", sp=False)
    kw = {"cross_entropy": "eager_16bit", "loss_parallel": False}
    most = training_memory("llama3-8b", par, 4096, "H200-SXM", **kw)
    first = training_memory("llama3-8b", par, 4096, "H200-SXM", stage="first", **kw)
    assert most.stage == "last" and first.stage == "first"      # the loss is on the last
    assert first.total_GiB < most.total_GiB
    with pytest.raises(InputError, match="memory_stage: got 'middle'; allowed: max, first"):
        training_memory("llama3-8b", par, 4096, "H200-SXM", stage="middle")


def test_the_fit_hint_counts_memory_as_the_framework_does():
    # torchtitan's eager FP32 loss and op-level recomputation, for the check and for the hint
    acct = {"sac": "op", "cross_entropy": "eager"}
    par = Parallel(dp=8, fsdp="full", micro_batch=2, global_batch=16)
    hint = fit_hint("llama3-8b", par, 8192, "H100-SXM", **acct)
    fixed = training_memory("llama3-8b", par.with_(recompute="selective"), 8192, "H100-SXM",
                            **acct)
    assert hint == f"fits with --recompute selective ({fixed.total_GiB:.1f} GiB)"

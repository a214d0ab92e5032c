"""The workloads layer: model descriptions, compute model, memory model."""

import pytest

from gpufabric.errors import InputError
from gpufabric.workloads.compute import (
    Heads, Split, attention, gemm, gemm_efficiency, gpu_spec, head_ops, layer_ops, op_time_s,
    tile_shapes,
)
from gpufabric.workloads.memory import (
    check_fits, kv_cache_bytes_per_token, training_memory, weight_bytes,
)
from gpufabric.workloads.models import list_models, load_model
from gpufabric.workloads.parallel import Parallel, group_shape

# -- models -------------------------------------------------------------------------------------


def test_issue_models_are_listed_under_their_paper_names():
    names = {m.name for m in list_models()}
    for n in ("gpt3-175b", "llama3-8b", "llama3-70b", "llama3-405b", "mixtral-8x7b",
              "deepseek-v3", "bert-large", "resnet-50", "llama2-7b", "llama2-13b", "llama2-70b",
              "qwen3-8b", "qwen3-235b-a22b", "mcore-gpt-462b", "megatron-gpt-1t"):
        assert n in names
    assert load_model("Llama3.1-70B") is load_model("llama3-70b")   # aliases, any case
    assert load_model("deepseek-r1") is load_model("deepseek-v3")


def test_parameter_counts_match_the_published_totals():
    assert round(load_model("llama3-70b").params() / 1e9, 1) == 70.6
    assert round(load_model("llama3-8b").params() / 1e9, 2) == 8.03
    assert round(load_model("llama3-405b").params() / 1e9, 1) == 405.9
    assert round(load_model("gpt3-175b").params() / 1e9, 1) == 174.6
    ds = load_model("deepseek-v3")
    assert round(ds.params() / 1e9) == 671
    assert round(ds.active_params() / 1e9, 1) == 37.6     # report: "37B activated"
    mx = load_model("mixtral-8x7b")
    assert (round(mx.params() / 1e9, 1), round(mx.active_params() / 1e9, 1)) == (46.7, 12.9)
    # every model within 3% of the total its source publishes (1.7B is a rounded 1.65B); an
    # active count is published with the input embedding (Mistral's 12.9B) or without it, a
    # lookup rather than a GEMM (gpt-oss's card, DeepSeek-V2-Lite's 2.4B): either matches
    for m in list_models():
        if "params" in m.published:
            assert abs(m.params() / m.published["params"] - 1) < 0.03, (m.name, "params")
        if "active_params" in m.published:
            act, emb = m.active_params(), m.vocab * m.hidden
            assert min(abs(a / m.published["active_params"] - 1) for a in (act, act - emb)
                       ) < 0.03, (m.name, "active_params")


def test_deepseek_v3_shape():
    ds = load_model("deepseek-v3")
    assert (ds.experts, ds.top_k, ds.shared_experts, ds.dense_layers) == (256, 8, 1, 3)
    assert (ds.moe_layers, ds.q_head_dim, ds.kv_lora_rank) == (58, 192, 512)


def test_a_users_own_model_file(tmp_path):
    f = tmp_path / "tiny.yaml"
    f.write_text("name: tiny\narch: dense\nsource: mine\nlayers: 2\nhidden: 256\nheads: 4\n"
                 "ffn: 1024\nvocab: 1000\n")
    m = load_model(str(f))
    assert (m.name, m.head_dim, m.kv_heads) == ("tiny", 64, 4)
    assert m.params() == 2 * (4 * 256 * 256 + 2 * 256 * 1024 + 4 * 256) + 2 * 1000 * 256 + 2 * 256


@pytest.mark.parametrize("text, msg", [
    ("name: x\narch: rnn\nsource: s\n", "arch: got 'rnn'; allowed: dense, moe, encoder, cnn"),
    ("name: x\narch: dense\nsource: s\nlayers: 2\nhidden: 256\nheads: 4\nffn: 8\nvocab: 10\n"
     "kv_heads: 3\n", "heads 4 must be a multiple of kv_heads 3"),
    ("name: x\narch: dense\nsource: s\nlayerz: 2\n", "unknown field(s) ['layerz']"),
])
def test_bad_model_files_name_the_field(tmp_path, text, msg):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(InputError) as e:
        load_model(str(f))
    assert msg in str(e.value) and "bad.yaml" in str(e.value)


def test_a_partial_shape_takes_the_convention_and_names_it(tmp_path):
    f = tmp_path / "partial.yaml"
    f.write_text("name: x\narch: dense\nsource: s\nlayers: 2\nhidden: 256\nheads: 4\n"
                 "vocab: 10\n")
    m = load_model(str(f))
    assert (m.ffn, m.kv_heads) == (1024, 4)
    assert "ffn = 4 x hidden = 1024 (not given; the GPT convention)" in m.assumed


def test_unknown_model_suggests_the_closest():
    with pytest.raises(InputError, match="did you mean 'llama3-70b'"):
        load_model("llama3-70B-x")


# -- compute ------------------------------------------------------------------------------------


def test_gpu_peaks_per_precision_from_the_catalog():
    h = gpu_spec("H100-SXM")
    assert [h.peak_tflops(p) for p in ("fp32", "tf32", "bf16", "fp8")] == [67, 494.5, 989, 1979]
    assert gpu_spec("B200").peak_tflops("fp4") == 9000
    assert gpu_spec("V100-SXM3-32GB").peak_tflops("fp16") == 125
    with pytest.raises(InputError, match="A100-SXM4-80GB has no fp8 tensor rate; allowed: "
                                         "fp32, tf32, fp16, bf16"):
        gpu_spec("A100-SXM4-80GB").peak_tflops("fp8")
    with pytest.raises(InputError, match="V100-SXM3-32GB has no bf16"):
        gpu_spec("V100-SXM3-32GB").peak_tflops("bf16")


def test_gemm_efficiency_rises_as_tiles_fill_the_sms():
    g = gpu_spec("H100-SXM")
    effs = [gemm_efficiency(gemm("x", n, n, n, 2), g) for n in (256, 1024, 4096)]
    assert effs == sorted(effs) and effs[0] < 0.1 and effs[-1] > 0.6
    # a tile wave that leaves SMs idle costs: 132 tiles of 128 x 256 fill H100's 132 SMs once;
    # 133 would need two waves (fill 0.50), so the library takes 266 tiles of 128 x 128 in
    # three waves instead (fill 266 / 396 = 0.67)
    assert round(gemm_efficiency(gemm("x", 128 * 132, 256, 4096, 2), g), 3) == 0.765
    assert round(gemm_efficiency(gemm("x", 128 * 133, 256, 4096, 2), g), 3) == 0.514
    assert tile_shapes("hopper") == [(128, 256), (256, 128), (128, 128)]


def test_layer_flops_are_twice_the_parameters_per_token_plus_attention():
    m = load_model("llama3-8b")
    ops = layer_ops(m, 0, 1, 4096)
    gemm_flops = sum(o.flops for o in ops if o.kind == "gemm")
    block = m.attn_params() + m.mlp_params(m.ffn)
    assert gemm_flops == 2 * block * 4096
    core = next(o for o in ops if o.name == "attn_core")
    assert core.flops == 2 * 32 * 4096 * 4096 * 256 / 2      # causal half, flash
    # tensor parallelism splits them evenly
    ops8 = layer_ops(m, 0, 1, 4096, split=Split(tp=8))
    assert sum(o.flops for o in ops8) * 8 == pytest.approx(sum(o.flops for o in ops))


def test_attention_without_flash_moves_the_score_matrix():
    fl = attention("a", 1, 4096, 4096, Heads(32, 8, 128, 128), 2, flash=True)
    no = attention("a", 1, 4096, 4096, Heads(32, 8, 128, 128), 2, flash=False)
    # Megatron's fused softmax and dropout move 13 bytes per score through HBM
    assert no.bytes - fl.bytes == 32 * 4096 * 4096 * 13
    g = gpu_spec("A100-SXM4-80GB")
    assert op_time_s(no, g, "bf16") > op_time_s(fl, g, "bf16")


def test_moe_layer_runs_top_k_experts_per_token():
    ds = load_model("deepseek-v3")
    ops = layer_ops(ds, 5, 1, 4096, split=Split(ep=64))
    up = next(o for o in ops if o.name == "expert_up")
    assert up.count == 4 and up.m == 4096 * 8 * 64 // 256
    assert sum(o.flops for o in ops if o.name.startswith("expert")) == \
        2 * 4096 * 8 * 3 * 7168 * 2048
    assert head_ops(ds, 1, 4096)[2].n == 129280


# -- memory -------------------------------------------------------------------------------------


def test_zero_stages_shard_optimizer_then_gradients_then_weights():
    m = [training_memory("llama2-7b", Parallel(dp=8, zero=z), 4096, "A100-SXM4-80GB")
         for z in (0, 1, 2, 3)]
    p = load_model("llama2-7b").params()
    assert round(m[0].optimizer_GiB, 2) == round(12 * p / 2**30, 2)
    assert round(m[1].optimizer_GiB, 2) == round(12 * p / 8 / 2**30, 2)
    assert m[1].grads_GiB == m[0].grads_GiB and m[2].grads_GiB == m[0].grads_GiB / 8
    assert m[3].weights_GiB == m[0].weights_GiB / 8
    assert [x.total_GiB for x in m] == sorted((x.total_GiB for x in m), reverse=True)


def test_recomputation_trades_activation_memory():
    acts = [training_memory("llama3-8b", Parallel(tp=2, dp=4, recompute=r), 8192,
                            "H100-SXM").activations_GiB for r in ("none", "selective", "full")]
    assert acts[0] >= acts[1] > acts[2]
    # full recomputation keeps each block's 16-bit input, split by sequence parallelism
    assert round(acts[2], 3) == round((32 * 8192 * 4096 * 2 / 2 + 0) / 2**30
                                      + 0, 3) + round(
        training_memory("llama3-8b", Parallel(tp=2, dp=4, recompute="none"), 8192,
                        "H100-SXM").activations_GiB / 32, 3)


def test_pipeline_first_stage_holds_pp_micro_batches():
    one = training_memory("llama3-70b", Parallel(tp=8, pp=4, dp=2, global_batch=16), 4096,
                          "H100-SXM")
    per_mb = training_memory("llama3-70b", Parallel(tp=8, pp=4, dp=2, global_batch=2), 4096,
                             "H100-SXM")
    assert one.activations_GiB == pytest.approx(4 * per_mb.activations_GiB)


def test_a_layout_that_does_not_fit_is_refused_with_one_line():
    mem = training_memory("llama3-70b", Parallel(dp=8), 8192, "H100-SXM")
    assert not mem.fits
    with pytest.raises(InputError) as e:
        check_fits(mem)
    assert str(e.value) == f"memory: needs {mem.total_GiB:.1f} GiB per GPU, H100-SXM has 80"


def test_inference_sizes():
    assert kv_cache_bytes_per_token("llama3-8b", tp=2) == 32 * 2 * 4 * 128 * 2
    assert weight_bytes("llama3-8b") == load_model("llama3-8b").params() * 2


# -- layout -------------------------------------------------------------------------------------


def test_megatron_rank_order_puts_tp_inside_nodes_and_dp_across():
    p = Parallel(tp=4, cp=2, pp=2, dp=8)
    assert p.group("tp", 8) == group_shape("tp", 4, 1, 8)
    assert (p.group("tp", 8).per_node, p.group("tp", 8).concurrent) == (4, 2)
    assert (p.group("cp", 8).ranks, p.group("cp", 8).per_node) == (2, 2)
    dp = p.group("dp", 8)
    assert (dp.ranks, dp.per_node, dp.concurrent) == (8, 1, 8)
    with pytest.raises(InputError, match="ep 3 must divide dp\\*cp = 16"):
        Parallel(tp=4, cp=2, dp=8, ep=3)
    with pytest.raises(InputError, match="global batch 100 is not a multiple of dp x "
                                         "micro-batch = 8 x 1"):
        Parallel(dp=8, global_batch=100)


def test_moe_parallel_folding_lays_experts_over_tp_cp_and_dp():
    # Megatron-Core's MoE parallel folding: expert TP 1, EP 32 over tp 2 x dp 16 of a stage;
    # expert ranks etp-innermost, so the EP group is 32 consecutive ranks (4 nodes of 8)
    p = Parallel(tp=2, pp=8, dp=16, ep=32, etp=1)
    assert (p.expert_tp, p.folded, p.edp) == (1, True, 1)
    assert p.group("ep", 8) == group_shape("ep", 32, 1, 8)
    assert p.group("edp", 8).ranks == 1
    q = Parallel(tp=2, dp=16, ep=8, etp=1)           # edp 4, 8 ranks apart
    assert (q.edp, q.group("edp", 8)) == (4, group_shape("edp", 4, 8, 8))
    legacy = Parallel(tp=2, dp=16, ep=8)             # etp = tp: EP carved out of dp
    assert (legacy.expert_tp, legacy.folded, legacy.edp, legacy.stride("ep")) == (2, False, 2, 2)
    with pytest.raises(InputError, match="ep x etp = 32 x 2 must divide tp x cp x dp = 32"):
        Parallel(tp=4, dp=8, ep=32, etp=2)
    with pytest.raises(InputError, match="needs the pipeline outermost"):
        Parallel(tp=2, dp=16, ep=32, etp=1, order="tp-cp-ep-pp-dp")


def test_fp8_gemm_inputs_pay_a_cast_unless_a_norm_wrote_them():
    # Transformer Engine casts each GEMM input to FP8 (a 16-bit read, the 8-bit copy and its
    # transpose); LayerNormLinear fuses the cast of QKV's and the MLP's normalised inputs
    from gpufabric.workloads.compute import FP8_CAST_PASSES, layer_ops
    m = load_model("llama3-8b")
    fp8 = {o.name: o for o in layer_ops(m, 0, 1, 4096, precision="fp8")}
    bf16 = {o.name for o in layer_ops(m, 0, 1, 4096, precision="bf16")}
    assert set(fp8) - bf16 == {"attn_out_cast", "mlp_down_cast"}
    assert fp8["mlp_down_cast"].bytes == 4096 * m.ffn * FP8_CAST_PASSES.value * 2
    assert fp8["attn_out_cast"].bytes == 4096 * m.hidden * FP8_CAST_PASSES.value * 2


def test_grouped_gemm_over_streams_fills_the_sms_as_separate_kernels():
    # Transformer Engine runs a grouped GEMM as one cuBLAS GEMM per expert over 4 streams: four
    # at a time share the SMs, each kernel is launched on its own
    from gpufabric.workloads.compute import GROUPED_STREAMS, gemm, gemm_efficiency, gpu_spec
    g = gpu_spec("B200")
    batched = gemm("e", 2048, 1536, 2048, 1, count=16)
    streamed = gemm("e", 2048, 1536, 2048, 1, count=16, streams=GROUPED_STREAMS.value)
    assert GROUPED_STREAMS.value == 4
    assert gemm_efficiency(streamed, g, "fp8") < gemm_efficiency(batched, g, "fp8")
    # 2048 x 1536 on 256 x 256 tiles: 48 tiles, four kernels 192 on 148 SMs -> 2 waves each
    # sixteen over four streams fill the SMs as four rounds of four side by side
    four = gemm("e", 2048, 1536, 2048, 1, count=4)
    assert gemm_efficiency(streamed, g, "fp8") == gemm_efficiency(four, g, "fp8")
    # and pay sixteen launches where the batched kernel pays one
    from gpufabric.workloads.compute import KERNEL_US, op_time_s
    extra = op_time_s(streamed, g, "fp8") - 4 * op_time_s(four, g, "fp8")
    assert extra == pytest.approx((16 - 4) * KERNEL_US.value * 1e-6)


def test_search_considers_moe_parallel_folding():
    # with tp > 1 the layouts include experts folded over tp x dp (whole at etp 1), the only way
    # EP 16 runs on 16 GPUs at tp 2
    from gpufabric.workloads.search import candidates
    cands = candidates("qwen3-30b-a3b", 16, 8, "H100-SXM", global_batch=64, seq_len=4096,
                       micro_batches=(1,))
    folded = {(c.tp, c.dp, c.ep) for c in cands if c.folded}
    assert (2, 8, 16) in folded
    # expert TP other than tp: any divisor of tp below it (whole experts at etp 1)
    assert {c.expert_tp for c in cands if c.folded and c.tp == 4} == {1, 2}
    assert any(not c.folded and c.tp == 2 and c.ep == 8 for c in cands)


def test_expert_work_per_gpu_does_not_depend_on_the_expert_tp():
    # whatever the folding, a GPU runs top_k / tp experts' worth of its block's tokens
    from gpufabric.workloads.compute import Split, layer_ops
    m = load_model("qwen3-235b-a22b")
    layer = next(i for i in range(m.layers) if m.moe_layer(i))

    def expert_flops(**kw):
        return sum(o.flops for o in layer_ops(m, layer, 1, 4096, split=Split(tp=2, **kw))
                   if o.name.startswith("expert_"))
    full = 2 * 4096 * m.top_k * 3 * m.hidden * m.expert_ffn / 2
    assert expert_flops(ep=32, etp=1) == pytest.approx(full, rel=1e-3)
    assert expert_flops(ep=8) == pytest.approx(full, rel=1e-3)       # etp = tp
    # the experts' parameters are split over ep x etp GPUs
    from gpufabric.workloads.memory import params_per_gpu
    e_fold = params_per_gpu(m, Parallel(tp=2, pp=8, dp=16, ep=32, etp=1))[1]
    e_legacy = params_per_gpu(m, Parallel(tp=2, pp=8, dp=16, ep=8))[1]
    assert e_fold == pytest.approx(e_legacy * 16 / 32)


@pytest.mark.parametrize("mod", ["workloads.models", "workloads.compute", "workloads.memory",
                                 "workloads.parallel", "workloads.training", "workloads.search",
                                 "report.training", "sweep"])
def test_docstring_examples_run(mod):
    import doctest
    import importlib
    m = importlib.import_module(f"gpufabric.{mod}")
    assert doctest.testmod(m).failed == 0

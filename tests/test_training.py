"""The training-step model and its validation against published runs."""

from pathlib import Path

import pytest

from gpufabric.errors import InputError
from gpufabric.topology.build import load
from gpufabric.workloads.parallel import Parallel
from gpufabric.workloads.training import model_flops_per_token, predict_step
from gpufabric.workloads.validate import MEMORY_METRICS, validate

DATA = Path(__file__).parent / "data" / "calibration" / "training.yaml"
H100_IB = "gpu=H100-SXM,gpus_per_node=8,nodes=16,nic=ib-ndr,nics_per_node=8"


@pytest.fixture(scope="module")
def h100():
    return load(H100_IB, materialize_nodes=4)


def test_breakdown_adds_up_to_the_step(h100):
    r = predict_step("llama3-70b", h100, Parallel(tp=8, pp=4, dp=4, vpp=5, micro_batch=1,
                                                  global_batch=64, zero=1), 4096)
    assert r.step_time_s == pytest.approx(sum(r.breakdown_s.values()))
    assert r.tokens_per_s == pytest.approx(64 * 4096 / r.step_time_s)
    assert r.tokens_per_s_per_gpu == pytest.approx(r.tokens_per_s / 128)
    assert r.groups["tp"] == {"kind": "tp", "ranks": 8, "per_node": 8, "concurrent": 1}
    assert r.groups["pp"] == {"kind": "pp", "ranks": 4, "per_node": 1, "concurrent": 8}
    # 16 micro-batches per rank, 4 stages, 5 virtual stages: bubble = 3/5 of a micro-batch
    per_mb = (r.breakdown_s["compute"] + r.breakdown_s["tp_comm"]) / 16
    assert r.breakdown_s["pipeline_bubble"] == pytest.approx(3 / 5 * per_mb)
    assert 0 < r.mfu < 1 and r.fits


def test_interleaving_shrinks_the_bubble(h100):
    base = Parallel(tp=8, pp=8, dp=2, micro_batch=1, global_batch=32)
    one = predict_step("llama3-70b", h100, base, 4096)
    two = predict_step("llama3-70b", h100, base.with_(vpp=2), 4096)   # 5-layer chunks
    assert two.breakdown_s["pipeline_bubble"] == pytest.approx(
        one.breakdown_s["pipeline_bubble"] / 2, rel=0.01)
    assert two.step_time_s < one.step_time_s


def test_tp_across_nodes_costs_more_than_inside_one(h100):
    inside = predict_step("llama3-8b", h100, Parallel(tp=8, dp=16, global_batch=64), 8192)
    across = predict_step("llama3-8b", h100, Parallel(tp=8, dp=16, global_batch=64,
                                                      order="dp-cp-ep-tp-pp"), 8192)
    assert across.groups["tp"]["per_node"] == 1
    assert across.breakdown_s["tp_comm"] > 3 * inside.breakdown_s["tp_comm"]


def test_moe_expert_parallel_all_to_all(h100):
    r = predict_step("mixtral-8x7b", h100, Parallel(tp=2, ep=8, dp=64, micro_batch=1,
                                                    global_batch=256, zero=1), 4096)
    assert r.breakdown_s["ep_comm"] > 0 and r.comm_s["ep"] == r.breakdown_s["ep_comm"]
    assert r.groups["ep"]["ranks"] == 8


def test_data_parallel_reduction_hides_chunk_by_chunk_under_interleaving(h100):
    # Megatron reduces each virtual stage's gradients once its last backward is done: more
    # virtual stages leave less of the reduction exposed
    par = Parallel(tp=8, pp=4, dp=4, micro_batch=1, global_batch=32, zero=1)
    one = predict_step("llama3-70b", h100, par, 4096)
    five = predict_step("llama3-70b", h100, par.with_(vpp=5), 4096)
    assert one.comm_s["dp"] == pytest.approx(five.comm_s["dp"])
    assert 0 < five.breakdown_s["dp_comm"] < one.breakdown_s["dp_comm"] / 3


def test_parallel_block_has_one_tp_reduction_per_pass(h100):
    from dataclasses import replace

    from gpufabric.workloads.models import load_model
    gptj = load_model("gpt-j-6b")
    assert gptj.parallel_block
    par = Parallel(tp=8, dp=16, micro_batch=1, global_batch=64)
    side = predict_step(gptj, h100, par, 2048)
    serial = predict_step(replace(gptj, parallel_block=False), h100, par, 2048)
    assert side.comm_s["tp"] == pytest.approx(serial.comm_s["tp"] / 2)
    assert side.step_time_s < serial.step_time_s


def test_parallel_block_fuses_its_input_projections():
    # PaLM Sec. 2: attention and MLP read the same normalised input, so their input
    # projections run as one GEMM of the summed width; the FLOPs do not change
    from dataclasses import replace

    from gpufabric.workloads.compute import Split, layer_ops
    from gpufabric.workloads.models import load_model
    gptj = load_model("gpt-j-6b")
    side = {o.name: o for o in layer_ops(gptj, 0, 1, 2048, split=Split(tp=8))}
    serial = {o.name: o for o in layer_ops(replace(gptj, parallel_block=False), 0, 1, 2048,
                                           split=Split(tp=8))}
    assert "qkv_mlp_up" in side and "qkv" not in side and "mlp_up" not in side
    assert (side["qkv_mlp_up"].m, side["qkv_mlp_up"].n, side["qkv_mlp_up"].k) == \
        (2048, 3 * 4096 // 8 + 16384 // 8, 4096)
    assert side["qkv_mlp_up"].flops == serial["qkv"].flops + serial["mlp_up"].flops


def test_a_model_file_flag_must_be_true_or_false(tmp_path):
    from gpufabric.workloads.models import load_model
    f = tmp_path / "m.yaml"
    f.write_text("name: x\narch: dense\nsource: s\nlayers: 2\nhidden: 64\nheads: 4\n"
                 "ffn: 256\nvocab: 100\nparallel_block: yes please\n")
    with pytest.raises(InputError, match="got 'yes please'; expected true or false") as e:
        load_model(str(f))
    assert e.value.field == "parallel_block"


def test_mfu_counts_six_flops_per_active_parameter_plus_attention():
    from gpufabric.workloads.models import load_model
    m = load_model("llama3-8b")
    emb = m.vocab * m.hidden
    assert model_flops_per_token(m, 8192) == 6 * (m.params() - emb) + 6 * 32 * 8192 * 4096


@pytest.mark.parametrize("par, msg", [
    (Parallel(tp=3, dp=1), "tp 3 must divide the 64 attention heads"),
    (Parallel(dp=256), "layout needs 256 GPUs (tp 1 x cp 1 x pp 1 x dp 256), the system has 128"),
])
def test_layouts_that_cannot_run_are_refused(h100, par, msg):
    with pytest.raises(InputError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        predict_step("llama3-70b", h100, par, 4096)


def test_refuses_what_does_not_fit_when_asked(h100):
    with pytest.raises(InputError, match=r"memory: needs \d+\.\d GiB per GPU, H100-SXM has 80"):
        predict_step("llama3-70b", h100, Parallel(dp=8), 4096, check_memory=True)


def test_validation_on_the_published_runs():
    r = validate(str(DATA))
    s = r.summary
    # status, derived: fitted where a workloads record names the entry, looked-at where
    # training.yaml marks it (its looked_at key says what changed after looking at its
    # misses), held out otherwise
    assert s["all"]["points"] == 135
    # of them 20 memory figures (torchtitan's peak reserved memory; tests/test_memory.py)
    assert sum(m["all"]["points"] for k, m in s["by_metric"].items()
               if k in MEMORY_METRICS) == 20
    assert s["points"] >= 15                      # enough held-out points to mean something
    # the goal of the training model (issue 22): held-out median |error| <= 10 %
    assert s["median_abs_pct"] <= 10, s
    # the fit's own points: within the same goal
    assert s["fitted"]["median_abs_pct"] <= 10, s["fitted"]
    skipped = {x["id"] for x in r.skipped}
    assert skipped == {"megatron-core-h100-gpt3-177b-strong-scaling", "opt-175b-992-a100",
                       "zero-100b-400-v100"}
    assert all(set(x) == {"id", "point", "reason"} for x in r.skipped)
    reasons = {x["id"]: x["reason"] for x in r.skipped}
    # the peak figure is a key of the entry, quoted from its source
    assert "up to 147 TFLOP/s" in reasons["opt-175b-992-a100"]
    mega = [p["error_pct"] for p in r.points
            if p["id"].startswith("megascale-megatron-baseline-175b-bs6144")]
    # Megatron-LM without --overlap-grad-reduce (its default): the gradient reduction over
    # RoCE is exposed, so the large-DP rows stay within 15 % (a bound, not today's value)
    assert max(abs(e) for e in mega) <= 15, mega
    eos = {p["id"]: p["error_pct"] for p in r.points if p["id"].startswith("mlperf-")}
    # evaluation inside the timed run counted (eval_every_samples / eval_samples): the 10k-GPU
    # runs within 5 %
    assert abs(eos["mlperf-train-v4.0-gpt3-175b-eos-10752gpu"]) <= 5
    assert abs(eos["mlperf-train-v4.0-gpt3-175b-eos-11616gpu"]) <= 5


def test_second_holdout_of_runs_never_tuned_against():
    # Megatron-Bridge's published tables (25.11, 26.02, 26.08; H100, B200, GB200), collected
    # after the model was settled and never tuned against: no entry is fitted or marked. The
    # H100 Llama runs are within 11 %; MoE with small experts on B200 / H100 (Qwen3-30B-A3B,
    # dropless, all-to-all dispatcher) is over-predicted by up to ~3x, the worst misses
    r = validate(str(DATA.parent / "training_holdout2.yaml"))
    s = r.summary
    assert (s["points"], s["fitted"]["points"], s["looked_at"]["points"]) == (35, 0, 0)
    assert s["median_abs_pct"] <= 10, s       # the goal for a held-out file
    assert s["max_abs_pct"] <= 200, s         # the Qwen3-30B-A3B rows
    err = {p["id"]: p["error_pct"] for p in r.points}
    llama = [e for i, e in err.items() if "llama" in i and "-h100-" in i]
    assert len(llama) == 5 and all(abs(e) <= 11 for e in llama), llama
    # EP 32 over dp 16 x tp 2: only Megatron's MoE parallel folding runs it (expert TP 1)
    qwen = {i: e for i, e in err.items() if "qwen3-235b" in i and "-h100-" in i}
    assert set(qwen) == {"mbridge-26.02-h100-qwen3-235b-fp8-tp2-pp8-256gpu",
                         "mbridge-25.11-h100-qwen3-235b-fp8-cs-tp2-pp8-256gpu"}
    assert all(abs(e) <= 10 for e in qwen.values()), qwen
    small = [e for i, e in err.items() if "qwen3-30b" in i]
    assert len(small) == 6 and all(15 <= e <= 200 for e in small), small
    assert "etp1" in next(p["layout"] for p in r.points if "h100-qwen3" in p["id"])
    assert r.skipped == []
    # every entry names its framework: Megatron-Bridge's profile (nemo) runs them
    assert all(x in p["layout"] for p in r.points for x in ("zero1",)
               if "fsdp" not in p["layout"])


def test_torchtitan_op_level_recomputation_costs_more_than_megatrons(h100):
    par = Parallel(dp=128, fsdp="full", micro_batch=2, global_batch=256, recompute="selective")
    attn = predict_step("llama3-8b", h100, par, 8192, fused=False, attn_kernel="fa2")
    op = predict_step("llama3-8b", h100, par, 8192, fused=False, attn_kernel="fa2", sac="op")
    none = predict_step("llama3-8b", h100, Parallel(dp=128, fsdp="full", micro_batch=2,
                                                    global_batch=256), 8192, fused=False,
                        attn_kernel="fa2")
    # Megatron's selective recomputes the attention core; torchtitan's recomputes every second
    # matmul (wk, wo, w3) and all element-wise ops, which in eager PyTorch costs more
    assert none.breakdown_s["compute"] < attn.breakdown_s["compute"] < op.breakdown_s["compute"]
    assert round(op.breakdown_s["compute"] / none.breakdown_s["compute"], 3) == 1.133
    with pytest.raises(InputError, match="allowed: attention, op"):
        predict_step("llama3-8b", h100, par, 8192, sac="layer")


def test_power_cap_slows_the_tensor_clock_by_the_cube_root():
    from gpufabric.workloads.compute import gpu_spec, power_capped
    from gpufabric.workloads.validate import power_cap
    g = gpu_spec("H100-SXM")
    assert g.tdp_W == 700
    capped = power_capped(g, 500)
    assert round(capped.tflops["bf16"], 1) == 884.1          # 989 x (500/700)^(1/3)
    assert capped.hbm_GBps == g.hbm_GBps                     # memory keeps its clock
    assert power_capped(g, 700).tflops == g.tflops           # a cap at the TDP: no change
    with pytest.raises(InputError, match=r"at most 700 W \(H100-SXM's TDP\), got 800"):
        power_capped(g, 800)                                 # above it: a typo, refused
    import dataclasses                                       # a GPU file without a TDP
    with pytest.raises(InputError, match="has no TDP in the catalog"):
        power_capped(dataclasses.replace(gpu_spec("T4"), tdp_W=0.0), 50)
    # a part that ships power-limited (the catalog's power_limit_W) runs capped by default, and
    # a cap is then taken from its limit, never twice
    meta = gpu_spec("H100-SXM-96GB")
    assert (meta.tdp_W, meta.tflops) == (500, capped.tflops)
    assert power_capped(meta, 500).tflops == capped.tflops
    with pytest.raises(InputError, match=r"at most 500 W \(H100-SXM-96GB's power limit\)"):
        power_capped(meta, 600)
    from gpufabric.advise import prices                # and it draws its limit, not its TDP
    assert prices.load().gpu_watts("H100-SXM-96GB") == 500
    assert power_cap({"gpu_variant": "96GB HBM2e (Grand Teton)", "power_cap_W": 500}) == 500
    assert power_cap({"gpu_variant": "95/96GB HBM2e, lower TDP"}) is None
    with pytest.raises(InputError, match="system.power_cap_W: got 'high'"):
        power_cap({"power_cap_W": "high"})
    sysd = "gpu=H100-SXM,gpus_per_node=8,nodes=1"
    par = Parallel(dp=8, micro_batch=1, global_batch=8)
    full = predict_step("llama3-8b", sysd, par, 4096)
    slow = predict_step("llama3-8b", sysd, par, 4096, power_cap_W=500)
    assert 1.0 < full.tokens_per_s / slow.tokens_per_s < 700 / 500


def test_hybrid_fsdp_gathers_inside_the_node_and_reduces_across(h100):
    full = predict_step("llama2-7b", h100, Parallel(dp=128, fsdp="full", micro_batch=2,
                                                    global_batch=256), 4096)
    hyb = predict_step("llama2-7b", h100, Parallel(dp=128, fsdp="hybrid", micro_batch=2,
                                                   global_batch=256), 4096)
    assert hyb.groups["dp_shard"] == {"kind": "dp_shard", "ranks": 8, "per_node": 8,
                                      "concurrent": 1}
    assert hyb.groups["dp_replica"] == {"kind": "dp_replica", "ranks": 16, "per_node": 1,
                                        "concurrent": 8}
    assert hyb.comm_s["zero3"] < full.comm_s["zero3"]        # NVSwitch instead of the NICs
    assert hyb.memory["optimizer_GiB"] > full.memory["optimizer_GiB"]   # sharded 8-way only


def test_context_parallel_ranks_do_their_share_of_causal_attention():
    from gpufabric.workloads.compute import Split, layer_ops
    from gpufabric.workloads.models import load_model
    m = load_model("llama3-405b")

    def attn_flops(seq, cp):
        ops = layer_ops(m, 0, 1, seq, split=Split(tp=8, cp=cp))
        return next(o.flops for o in ops if o.name == "attn_core")
    # a causal sequence of 131072 tokens over 16 ranks in load-balanced chunks: each rank does
    # 1/16 of the whole sequence's causal attention (half of its queries x all keys)
    assert attn_flops(131072, 16) == attn_flops(131072, 1) / 16


def test_korthikanti_rows_run_from_the_file():
    # Korthikanti et al. 2022, Table 5: the eight rows Calculon validates against (22B to 1T on
    # A100, full and selective recomputation), all held out; each within 15 % (the model's
    # unfused attention and fp16 GEMMs on A100: the rows lie between the Megatron 2021 runs
    # the A100 efficiency was fitted on)
    r = validate(str(DATA.parent / "training_korthikanti.yaml"))
    s = r.summary
    assert (s["points"], s["fitted"]["points"], s["looked_at"]["points"]) == (8, 0, 0)
    # with Megatron-LM's 2022 mechanisms stated (asynchronous TP backward, pipeline
    # scatter/gather, its unfused softmax's traffic), nothing fitted on these rows: the mean
    # stays within Calculon's 3.65 % on the same rows with a margin for later changes elsewhere
    errs = [abs(p["error_pct"]) for p in r.points]
    assert sum(errs) / len(errs) <= 5, errs
    assert s["max_abs_pct"] <= 10, s


A100_NODE = "gpu=A100-SXM4-80GB,gpus_per_node=8,nodes=1,scale_up=nvswitch"


@pytest.mark.parametrize("sp", [False, True])
def test_megatron_async_tp_backward_hides_the_input_gradient_collective(sp):
    # Megatron-LM's column-parallel backward launches the input-gradient all-reduce (with
    # sequence parallelism: the input all-gather and the reduce-scatter) ahead of the GEMM it
    # runs under; the forward's collectives stay exposed
    par = Parallel(tp=8, micro_batch=4, global_batch=4, sp=sp)
    kw = dict(precision="fp16", flash=False)
    off = predict_step("gpt3-175b", A100_NODE, par, 2048, tp_bwd_overlap=False, **kw)
    on = predict_step("gpt3-175b", A100_NODE, par, 2048, tp_bwd_overlap=True, **kw)
    assert on.breakdown_s["compute"] == off.breakdown_s["compute"]
    # half of the TP time is the backward's; with sequence parallelism the row-parallel
    # output's backward all-gather stays exposed, so less than half is hidden
    saved = 1 - on.breakdown_s["tp_comm"] / off.breakdown_s["tp_comm"]
    assert (0.45 < saved <= 0.5) if not sp else (0.2 < saved < 0.5), saved
    # the re-gather of the sharded input is extra traffic with sequence parallelism only
    assert (on.comm_s["tp"] > off.comm_s["tp"]) is sp
    # userbuffers overlap (tp_overlap) takes precedence: same step either way
    ub = [predict_step("gpt3-175b", A100_NODE, par, 2048, tp_overlap=True, tp_bwd_overlap=b,
                       **kw).step_time_s for b in (False, True)]
    assert ub[0] == ub[1]


def test_pipeline_scatter_gather_sends_one_tp_slice_per_rank():
    # Megatron-LM 2021-2023 without sequence parallelism: each TP rank sends 1/tp of the
    # boundary activations over its own NIC and the next stage all-gathers them over NVLink
    sys2 = "gpu=A100-SXM4-80GB,gpus_per_node=8,nodes=2,scale_up=nvswitch,nic=ib-hdr"
    par = Parallel(tp=8, pp=2, micro_batch=1, global_batch=8, sp=False)
    plain, sg = (predict_step("gpt3-175b", sys2, par, 2048, precision="fp16",
                              pp_scatter_gather=b).breakdown_s["pp_comm"] for b in (False, True))
    # an eighth of the bytes over the NICs, plus the NVLink gather and each send's latency
    assert plain / 8 < sg < plain / 3
    # with sequence parallelism the activations are already split: the option changes nothing
    par = par.with_(sp=True)
    assert len({predict_step("gpt3-175b", sys2, par, 2048, precision="fp16",
                             pp_scatter_gather=b).step_time_s for b in (False, True)}) == 1

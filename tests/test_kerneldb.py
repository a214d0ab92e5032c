"""Measured kernel tables as calibration data (gpufabric.kerneldb, `gpufabric kernels`).

The tables are tests/data/kerneldb: a few hand-written rows in the layout and columns of NVIDIA
AIConfigurator's database, so none of these tests needs the aiconfigurator package.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufabric.errors import InputError
from gpufabric.kerneldb import compare as K
from gpufabric.kerneldb import db as D
from gpufabric.workloads import compute as C
from gpufabric.workloads.inference import itertime as IT

FX = Path(__file__).parent / "data" / "kerneldb"
H100 = C.gpu_spec("H100-SXM")


@pytest.fixture(autouse=True)
def no_env_db(monkeypatch):
    monkeypatch.delenv(D.ENV, raising=False)


def test_each_backend_is_read_at_its_newest_version_unless_every_version_is_asked_for():
    gemm = D.tables(FX, gpu="H100-SXM", family="gemm")
    assert [(t.backend, t.version) for t in gemm] == [("vllm", "0.24.0")]
    every = D.tables(FX, gpu="H100-SXM", family="gemm", latest=False)
    assert [t.version for t in every] == ["0.14.0", "0.24.0"]


def test_coverage_lists_every_system_and_names_those_the_catalog_lacks():
    cov = {r["system"]: r for r in D.coverage(FX)}
    assert cov["a30"]["gpu"] is None
    assert cov["h100_sxm"]["gpu"] == "H100-SXM"
    assert cov["h100_sxm"]["families"]["gemm"] == {"vllm": ["0.14.0", "0.24.0"]}
    assert set(cov["h100_sxm"]["families"]) == set(D.FAMILIES)


def test_a_csv_table_reads_as_the_parquet_columns_would():
    row = D.read(D.tables(FX, family="gemm", gpu="H100-SXM")[0])[0]
    assert row["m"] == 8192 and isinstance(row["m"], int)
    assert row["latency"] == 1.5 and row["gemm_dtype"] == "bfloat16"


def test_a_gemm_is_timed_as_the_serving_model_times_it():
    pts = K.points(D.tables(FX, family="gemm", gpu="H100-SXM")[0])
    # the row of a format gpufabric does not know is left out, the six others are timed
    assert len(pts) == 6
    big = pts[0]
    c, m = IT.linear_s(H100, "bf16", 8192, 8192, 8192, wb=2, ab=2)
    assert big["parts"] == [(c, m)]
    assert K.errors([big]) == [pytest.approx(max(c, m) / 1.5e-3 - 1)]


def test_decode_attention_reads_the_cache_at_the_hbm_rate_and_skips_windowed_rows():
    pts = K.points(D.tables(FX, family="attention-decode")[0])
    assert len(pts) == 3                    # the sliding-window row is left out
    first = pts[0]
    kv_bytes = 64 * 8192 * 2 * 8 * 128 * 2  # sequences x cached tokens x K and V x heads x dim
    assert first["parts"][0][1] == pytest.approx(kv_bytes / (3350e9 * C.HBM_EFF.value))
    # an FP8 cache is half the bytes
    assert pts[2]["parts"][0][1] == pytest.approx(first["parts"][0][1] / 2)


def test_moe_rows_of_skewed_routing_are_left_out():
    pts = K.points(D.tables(FX, family="moe")[0])
    assert [p["precision"] for p in pts] == ["bfloat16", "fp8"]
    assert all(len(p["parts"]) == 2 for p in pts)     # up and down GEMMs


MOE_HEAD = ("framework,version,device,op_name,kernel_source,moe_dtype,num_tokens,hidden_size,"
            "inter_size,topk,num_experts,moe_tp_size,moe_ep_size,distribution,latency\n")


def _moe_table(root, version, rows, reuse_from=None):
    d = root / "h100_sxm" / "moe" / "trtllm" / version
    d.mkdir(parents=True)
    (d / "moe_perf.csv").write_text(MOE_HEAD + "".join(
        f"TRTLLM,{version},H100,moe,{src},bfloat16,{tokens},4096,1536,8,128,1,1,balanced,{lat}\n"
        for src, tokens, lat in rows))
    if reuse_from:
        (d / "reuse.yaml").write_text(
            f"schema_version: 1\nreuse:\n- table: moe_perf\n  from_version: {reuse_from}\n")


def test_a_version_that_reuses_an_earlier_ones_table_reads_its_rows_too(tmp_path):
    # 2.0 measured 4096 tokens again and declares the rest reused from 1.0
    _moe_table(tmp_path, "1.0", [("moe_torch_flow", 1024, 0.5), ("moe_torch_flow", 4096, 1.5)])
    _moe_table(tmp_path, "2.0", [("moe_torch_flow", 4096, 1.2)], reuse_from="1.0")
    t = D.tables(tmp_path, family="moe")[0]
    assert t.version == "2.0" and D.reused(t).version == "1.0"
    rows = D.read(t, ["num_tokens", "latency"])
    assert sorted((r["num_tokens"], r["latency"]) for r in rows) == [(1024, 0.5), (4096, 1.2)]
    # two versions that declare each other reused: each table read once
    (D.reused(t).path.parent / "reuse.yaml").write_text(
        "reuse:\n- {table: moe_perf, from_version: '2.0'}\n")
    assert len(D.read(t)) == 2
    # without a declaration only the version's own rows are read
    (t.path.parent / "reuse.yaml").unlink()
    assert [r["num_tokens"] for r in D.read(t)] == [4096]


def test_a_non_gated_moe_kernel_is_timed_with_its_single_up_projection(tmp_path):
    _moe_table(tmp_path, "1.0", [("moe_torch_flow", 4096, 1.0),
                                 ("moe_torch_flow_nongated", 4096, 1.0)])
    gated, plain = K.points(D.tables(tmp_path, family="moe")[0])
    # the up GEMM of the gated kernel is twice as wide (gate and up), the down GEMMs equal
    assert gated["parts"][1] == plain["parts"][1]
    assert gated["parts"][0][0] == pytest.approx(2 * plain["parts"][0][0], rel=0.02)


def test_allreduce_rows_are_nccl_all_reduces_timed_by_the_collective_model():
    pts = K.points(D.tables(FX, family="allreduce")[0])
    assert [p["shape"] for p in pts] == [(8,), (8,), (4,)]   # the all_gather row is not one
    # a larger message takes longer, in the model as on the machine
    assert K.time_s(pts[0]["parts"]) > K.time_s(pts[1]["parts"])


def test_compare_summarises_each_table_and_the_fit_holds_shapes_out():
    res = {r["family"]: r for r in K.compare(FX, gpu="H100-SXM")}
    assert set(res) == set(D.FAMILIES)
    assert res["gemm"]["rows"] == 6 and res["gemm"]["version"] == "0.24.0"
    # the large kernels (0.1 ms or longer) are a subset
    assert res["gemm"]["large_rows"] == 4
    fits = K.fit(FX, gpu="H100-SXM", family="gemm")
    assert {f["precision"] for f in fits} == {"bfloat16", "fp8"}
    for f in fits:
        assert 0 < f["fitted"] <= 1.0             # a fraction of the peak
        assert f["fit_rows"] + f["held_out_rows"] >= 2


def test_split_by_shape_never_puts_one_shape_on_both_sides():
    pts = [{"shape": (n, 1)} for n in (3, 1, 2, 1, 3, 4)]
    fit_on, held = K.split_by_shape(pts)
    assert {p["shape"] for p in fit_on}.isdisjoint({p["shape"] for p in held})
    assert len(fit_on) + len(held) == len(pts)


def test_a_table_without_latencies_is_refused(tmp_path):
    f = tmp_path / "h100_sxm" / "gemm" / "vllm" / "1.0" / "gemm_perf.csv"
    f.parent.mkdir(parents=True)
    f.write_text("m,n,k\n1,2,3\n")
    with pytest.raises(InputError, match="no latency column"):
        D.read(D.tables(tmp_path)[0])


def test_without_the_extra_the_command_says_how_to_install_it(cli, monkeypatch):
    monkeypatch.setattr(D, "package_data", lambda: None)
    code, out, err = cli("kernels", "compare")
    assert code == 2 and out == ""
    assert err.strip() == ("gpufabric: error: --db: the kernel database is not installed: "
                           f"{D.INSTALL}")


def test_the_command_prints_a_row_per_family_and_refuses_unknown_names(cli):
    code, out, _ = cli("kernels", "compare", "--db", str(FX), "--gpu", "H100-SXM")
    assert code == 0
    assert [ln.split()[1] for ln in out.splitlines() if ln.startswith("  H100-SXM")] == \
        ["allreduce", "attention-decode", "attention-prefill", "gemm", "moe"]
    code, _, err = cli("kernels", "compare", "--db", str(FX), "--family", "gemmm")
    assert code == 2 and "did you mean 'gemm'" in err
    code, _, err = cli("kernels", "fit", "--db", str(FX / "nowhere"))
    assert code == 2 and err.startswith("gpufabric: error: --db: not a folder")


# --- measured GEMM times as a timing source (gpufabric.kerneldb.timing) ----------------------

def test_a_measured_gemm_is_interpolated_in_rows_and_scaled_from_a_neighbouring_shape():
    from gpufabric.kerneldb import timing as T
    src = T.Source(FX)
    # (4096, 4096) bf16 is measured at m = 1 (12 us) and 4096 (200 us): linear between them
    at = src.gemm_s("H100-SXM", "vllm", "bf16", 2048, 4096, 4096)
    assert at == pytest.approx(12e-6 + 188e-6 * 2047 / 4095)
    # beyond the largest count the kernel is compute-bound: proportional to the rows
    assert src.gemm_s("H100-SXM", "vllm", "bf16", 8192, 4096, 4096) == pytest.approx(400e-6)
    # an unmeasured (6144, 4096) within a factor 2 of (4096, 4096): that shape's time, scaled
    # by the weights' size n x k
    assert src.gemm_s("H100-SXM", "vllm", "bf16", 4096, 6144, 4096) == pytest.approx(300e-6)
    # a shape 3.5x away, a format or GPU the database lacks, a launch-sized kernel: the model
    assert src.gemm_s("H100-SXM", "vllm", "bf16", 4096, 28672, 4096) is None
    assert src.gemm_s("H100-SXM", "vllm", "fp4", 4096, 4096, 4096) is None
    assert src.gemm_s("B200", "vllm", "bf16", 4096, 4096, 4096) is None
    assert src.gemm_s("H100-SXM", "vllm", "bf16", 8, 4096, 4096) is None


def test_tensorrt_llm_backends_read_only_the_kernels_of_their_own_runtime(tmp_path):
    from gpufabric.kerneldb import timing as T
    # TensorRT-LLM's tables measure its PyTorch flow; a trt_flow row is a TensorRT-flow plugin
    d = tmp_path / "h100_sxm" / "gemm" / "trtllm" / "1.0"
    d.mkdir(parents=True)
    (d / "gemm_perf.csv").write_text(
        "framework,version,device,op_name,kernel_source,gemm_dtype,m,n,k,latency\n"
        "TRTLLM,1.0,H100,gemm,torch_flow,bfloat16,4096,4096,4096,0.2\n"
        "TRTLLM,1.0,H100,gemm,trt_flow_/gemm_L1/PLUGIN_V2_Gemm_0,bfloat16,4096,16384,16384,0.9\n")
    src = T.Source(tmp_path)
    pytorch, trt = "tensorrt-llm", "tensorrt-llm-tensorrt"
    assert src.gemm_s("H100-SXM", pytorch, "bf16", 4096, 4096, 4096) == pytest.approx(2e-4)
    assert src.gemm_s("H100-SXM", pytorch, "bf16", 4096, 16384, 16384) is None
    assert src.gemm_s("H100-SXM", trt, "bf16", 4096, 16384, 16384) == pytest.approx(9e-4)
    assert src.gemm_s("H100-SXM", trt, "bf16", 4096, 4096, 4096) is None
    assert src.table("H100-SXM", pytorch) == src.table("H100-SXM", trt) == "h100_sxm trtllm 1.0"
    # no TensorRT-flow row of a format it times on this GPU (a weight-only plugin's is not):
    # the TensorRT backend is not covered, and says why
    (d / "gemm_perf.csv").write_text(
        "framework,version,device,op_name,kernel_source,gemm_dtype,m,n,k,latency\n"
        "TRTLLM,1.0,H100,gemm,torch_flow,bfloat16,4096,4096,4096,0.2\n"
        "TRTLLM,1.0,H100,gemm,trt_flow_/wo_L1/PLUGIN_V2_WeightOnly_0,int4_wo,4096,4096,4096,0.3\n")
    src = T.Source(tmp_path)
    assert src.gemm_s("H100-SXM", trt, "bf16", 4096, 4096, 4096) is None
    assert src.table("H100-SXM", trt) == ""
    assert "TensorRT backend" in src.missing("H100-SXM", trt)


def test_serve_takes_measured_gemms_where_covered_and_says_how_much(monkeypatch):
    from gpufabric.kerneldb import timing as T
    from gpufabric.topology.build import from_spec
    from gpufabric.workloads.inference.serve import ServeConfig, serve
    topo = from_spec({"gpu": "H100-SXM", "gpus_per_node": 1})
    cfg = ServeConfig(tp=1, requests=40, isl=2048, osl=16, concurrency=8, engine="vllm")
    base = serve("llama3-8b", topo, cfg)
    assert "kernel_times" not in base
    monkeypatch.setenv(D.ENV, str(FX))
    with T.use("aic"):
        measured = serve("llama3-8b", topo, cfg)
        other = serve("llama3-8b", topo, ServeConfig(**{**cfg.__dict__, "engine": "lmdeploy"}))
    kt = measured["kernel_times"]
    # llama3-8b's projections are measured (4096 x 4096) or near it, its MLP (28672) is not
    assert kt["table"] == "h100_sxm vllm 0.24.0" and 0 < kt["measured_share"] < 1
    assert measured["ttft_ms"]["p50"] != base["ttft_ms"]["p50"]
    assert other["kernel_times"]["measured_share"] == 0
    assert "lmdeploy" in other["kernel_times"]["note"]


def test_kernel_times_refuses_an_unknown_source_and_a_missing_database(cli, tmp_path,
                                                                      monkeypatch):
    args = ["serve", "llama3-8b", "gpu=H100-SXM,gpus_per_node=1", "--tp", "1", "--requests",
            "4", "--isl", "64", "--osl", "4", "--concurrency", "1"]
    code, _, err = cli(*args, "--kernel-times", "bogus")
    assert code == 2 and "--kernel-times: got 'bogus'; allowed: model, aic" in err
    monkeypatch.setenv(D.ENV, str(tmp_path / "none"))
    code, _, err = cli(*args, "--kernel-times", "aic")
    assert code == 2 and "--kernel-times: not a folder" in err
    monkeypatch.setenv(D.ENV, str(FX))
    code, out, _ = cli(*args, "--kernel-times", "aic")
    assert code == 0 and "kernel times     " in out


def test_a_measured_moe_layer_is_read_at_its_shape_layout_and_format():
    from gpufabric.kerneldb import timing as T
    src = T.Source(FX)
    # Qwen3-235B's expert shape (hidden 4096, 1536 per expert, 128 experts, top 8) on one
    # H100 through vLLM: 1.2 ms balanced in BF16, 0.8 ms in FP8, at 4096 tokens
    from gpufabric.workloads.inference.kerneltimes import MoeShape
    shape = MoeShape(4096, 1536, 8, 128, 1, 1, True)
    assert src.moe_s("H100-SXM", "vllm", "bf16", 4096, shape) == pytest.approx(1.2e-3)
    assert src.moe_s("H100-SXM", "vllm", "fp8", 4096, shape) == pytest.approx(0.8e-3)
    # beyond the measured tokens: proportional (compute-bound)
    assert src.moe_s("H100-SXM", "vllm", "bf16", 8192, shape) == pytest.approx(2.4e-3)
    # another expert layout, a non-gated kernel, a format or engine not measured: the model
    assert src.moe_s("H100-SXM", "vllm", "bf16", 4096, shape._replace(moe_ep=8)) is None
    assert src.moe_s("H100-SXM", "vllm", "bf16", 4096, shape._replace(gated=False)) is None
    assert src.moe_s("H100-SXM", "vllm", "fp4", 4096, shape) is None
    assert src.moe_s("H100-SXM", "lmdeploy", "bf16", 4096, shape) is None


def test_trtllm_moe_reads_its_default_kernels_at_the_newest_version_that_measured_them(
        tmp_path):
    from gpufabric.kerneldb import timing as T
    # 1.0 measured the gated shape with CUTLASS and min-latency kernels; 2.0 re-measured only
    # a non-gated kernel and declares no reuse
    _moe_table(tmp_path, "1.0", [("moe_torch_flow_cutlass", 4096, 2.0),
                                 ("moe_torch_flow_min_latency", 4096, 1.0)])
    _moe_table(tmp_path, "2.0", [("moe_torch_flow_nongated", 4096, 3.0)])
    from gpufabric.workloads.inference.kerneltimes import MoeShape
    src = T.Source(tmp_path)
    args = ("H100-SXM", "tensorrt-llm", "bf16", 4096)
    gated = MoeShape(4096, 1536, 8, 128, 1, 1, True)
    # CUTLASS, TensorRT-LLM's default; a non-gated kernel is not one of its defaults
    assert src.moe_s(*args, gated) == pytest.approx(2.0e-3)
    assert src.moe_s(*args, gated._replace(gated=False)) is None


def test_serve_times_the_routed_experts_from_the_measured_moe_kernels(tmp_path):
    from gpufabric.kerneldb import timing as T
    from gpufabric.topology.build import from_spec
    from gpufabric.workloads.inference import kerneltimes
    # a database with Qwen3-235B's experts measured on 8 H100s at expert parallelism 8
    d = tmp_path / "h100_sxm" / "moe" / "vllm" / "1.0"
    d.mkdir(parents=True)
    (d / "moe_perf.csv").write_text(MOE_HEAD + "".join(
        f"VLLM,1.0,H100,moe,vllm_fused_moe,fp8,{t},4096,1536,8,128,1,8,balanced,{lat}\n"
        for t, lat in ((256, 0.5), (8192, 2.0))))
    topo = from_spec({"gpu": "H100-SXM", "gpus_per_node": 8})
    lay = IT.ServeLayout(tp=8, ep=8)

    def experts_s():
        sm = IT.StepModel("qwen3-235b-a22b", topo, lay, precision="fp8", engine="vllm")
        per = 8192 * 8 / 128 * IT.rank_load_factor(8192, 128, 8, 8, sm.load_cv)
        g = 2 if sm.model.gated else 1
        parts = sm._experts(per, sm.model.expert_ffn, g, 16, 16.0)
        return sum(max(c, b) for c, b in parts), sm.gemm_sources

    model_s, model_src = experts_s()
    with kerneltimes.use(T.Source(tmp_path)):
        meas_s, meas_src = experts_s()
    assert "measured" not in model_src
    # the busiest rank's load, as balanced tokens, read off the measured curve
    busiest = round(8192 * IT.rank_load_factor(8192, 128, 8, 8))
    assert meas_s == pytest.approx(0.5e-3 + 1.5e-3 * (busiest - 256) / (8192 - 256)
                                   if busiest <= 8192 else 2.0e-3 * busiest / 8192)
    assert meas_src["measured"] > 0 and meas_s != pytest.approx(model_s)

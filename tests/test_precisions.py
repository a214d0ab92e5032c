"""The table of weight and KV-cache formats: bytes with scales, compute rates, engines' names."""

import pytest

from gpufabric.errors import InputError
from gpufabric.topology.build import from_spec
from gpufabric.workloads.inference import precisions as P
from gpufabric.workloads.inference.itertime import (COMPUTE_CHAIN, DTYPE_BYTES, DTYPES,
                                                    ServeLayout, StepModel)


@pytest.fixture(scope="module")
def h100():
    return from_spec({"gpu": "H100-SXM", "gpus_per_node": 8})


def test_the_existing_names_keep_their_bytes_and_compute():
    assert DTYPE_BYTES["fp16"] == DTYPE_BYTES["bf16"] == 2.0
    assert DTYPE_BYTES["fp8"] == 1.0
    assert DTYPE_BYTES["fp4"] == 0.5 + 1 / 16            # NVFP4: an FP8 scale per 16
    assert DTYPE_BYTES["int4"] == 0.5 + 2 / 128          # an FP16 scale per 128
    assert COMPUTE_CHAIN["int4"] == ("bf16", "fp16")     # weight-only
    assert COMPUTE_CHAIN["fp4"] == ("fp4", "fp8", "bf16", "fp16")
    assert DTYPES == ("fp16", "bf16", "fp8", "fp4", "int4")


def test_group_scales_and_zero_points_set_the_bytes():
    # AWQ / GPTQ: 4 bits, an FP16 scale and a 4-bit zero point per group
    assert P.weight_bytes("int4-awq") == 0.5 + 20 / 8 / 128
    assert P.weight_bytes("int4-gptq-g128") == 0.5 + 20 / 8 / 128
    assert P.weight_bytes("int4-gptq-g32") == 0.5 + 20 / 8 / 32
    assert P.weight_bytes("mxfp4") == 0.5 + 1 / 32       # an E8M0 scale per 32
    # per-channel scales: one per output row of depth k
    assert P.weight_bytes("int8-weight-only", k=8192) == 1 + 2 / 8192
    assert P.weight_bytes("fp8-per-channel", k=4096) == 1 + 4 / 4096
    # LMDeploy's INT8 KV: an FP16 scale and zero point per head of 128
    assert P.kv_bytes("int8", head_dim=128) == 1 + 4 / 128


@pytest.mark.parametrize("alias,use,name", [
    ("W4A16_AWQ", "weights", "int4-awq"), ("awq", "weights", "int4-awq"),
    ("awq_marlin", "weights", "int4-awq"), ("gptq", "weights", "int4-gptq-g128"),
    ("W4A16_GPTQ", "weights", "int4-gptq-g128"), ("W8A16", "weights", "int8-weight-only"),
    ("W8A8_SQ_PER_CHANNEL", "weights", "w8a8-int8"), ("nvfp4", "weights", "fp4"),
    ("FP4 (NVFP4)", "weights", "fp4"), ("modelopt_fp4", "weights", "fp4"),
    ("FP8_PER_CHANNEL_PER_TOKEN", "weights", "fp8-per-channel"),
    ("fp8_e4m3", "kv", "fp8"), ("fp8_e5m2", "kv", "fp8"), ("NVFP4", "kv", "fp4"),
    ("int8", "kv", "int8-kv"), ("int8", "weights", "int8-weight-only"),
    ("BFloat16", "weights", "bf16"), ("int4", "weights", "int4"),
])
def test_names_as_engines_spell_them(alias, use, name):
    assert P.lookup(alias, use).name == name


def test_every_format_has_a_source_and_aliases_are_unambiguous():
    for use in P.USES:
        seen: dict[str, str] = {}
        for f in P.formats().values():
            assert f.source
            if use not in f.use:
                continue
            for a in (f.name, *f.aliases):
                assert seen.setdefault(a, f.name) == f.name, (a, use)


def test_a_bad_name_is_one_line_listing_the_formats():
    with pytest.raises(InputError) as e:
        P.lookup("int3", "weights")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("--precision: unknown data type 'int3'")
    assert "int4-awq" in msg and "int8-weight-only" in msg
    with pytest.raises(InputError, match="--kv-dtype: unknown data type 'fp6'"):
        P.lookup("fp6", "kv")
    with pytest.raises(InputError, match="--kv-dtype"):
        P.lookup("int4-awq", "kv")               # a weight format is no KV cache format


def test_weight_only_formats_decode_on_smaller_weights_and_prefill_at_16_bit(h100):
    bf = StepModel("llama3-8b", h100, ServeLayout(), precision="bf16")
    awq = StepModel("llama3-8b", h100, ServeLayout(), precision="int4-awq")
    w8 = StepModel("llama3-8b", h100, ServeLayout(), precision="w8a16")
    assert awq.compute_prec == w8.compute_prec == "bf16" and awq.ab == 2.0
    assert awq.kv_dtype == "bf16"
    # decode: bandwidth-bound on the weights, about a quarter of BF16's bytes
    d_bf, d_awq, d_w8 = (bf.breakdown(0, 0, 0, 1, 1000).weight_read_s,
                         awq.breakdown(0, 0, 0, 1, 1000).weight_read_s,
                         w8.breakdown(0, 0, 0, 1, 1000).weight_read_s)
    assert 0.24 < d_awq / d_bf < 0.28 and 0.49 < d_w8 / d_bf < 0.52
    # prefill: compute-bound at the same 16-bit rate, so no faster than BF16
    p_bf, p_awq = (bf.breakdown(8192, 8192 * 4096, 8192, 0, 0).gemm_compute_s,
                   awq.breakdown(8192, 8192 * 4096, 8192, 0, 0).gemm_compute_s)
    assert p_awq == pytest.approx(p_bf, rel=0.02)
    assert awq.weights_bytes < 0.27 * bf.weights_bytes


def test_w8a8_int8_runs_at_the_int8_rate():
    h100 = from_spec({"gpu": "H100-SXM", "gpus_per_node": 1})
    a100 = from_spec({"gpu": "A100-SXM4-80GB", "gpus_per_node": 1})
    m = StepModel("llama3-8b", h100, ServeLayout(), precision="smoothquant")
    assert (m.compute_prec, m.compute_rate, m.ab) == ("fp8", 1.0, 1.0)   # INT8 TOPS = FP8
    a = StepModel("llama3-8b", a100, ServeLayout(), precision="w8a8-int8")
    assert (a.compute_prec, a.compute_rate, a.ab) == ("fp16", 2.0, 1.0)  # 624 = 2 x 312
    w = StepModel("llama3-8b", a100, ServeLayout(), precision="int8-weight-only")
    pre = (8192, 8192 * 4096, 8192, 0, 0)
    # prefill on the A100: the INT8 GEMMs run at twice the weight-only kernel's 16-bit rate
    assert a.breakdown(*pre).gemm_compute_s < 0.6 * w.breakdown(*pre).gemm_compute_s


def test_kv_formats_set_the_cache_capacity(h100):
    fp16 = StepModel("llama3-70b", h100, ServeLayout(tp=4), precision="fp8", kv_dtype="fp16")
    e4 = StepModel("llama3-70b", h100, ServeLayout(tp=4), precision="fp8", kv_dtype="fp8_e4m3")
    nv = StepModel("llama3-70b", h100, ServeLayout(tp=4), precision="fp8", kv_dtype="nvfp4")
    assert e4.kv_bytes_per_token * 2 == fp16.kv_bytes_per_token
    assert nv.kv_bytes_per_token == e4.kv_bytes_per_token * 0.5625
    assert e4.kv_dtype == "fp8" and nv.kv_dtype == "fp4"


def test_mxfp4_computes_at_fp4_on_blackwell_weight_only_before():
    b200 = from_spec({"gpu": "B200", "gpus_per_node": 1})
    h100 = from_spec({"gpu": "H100-SXM", "gpus_per_node": 1})
    assert StepModel("llama3-8b", b200, ServeLayout(), precision="mxfp4").compute_prec == "fp4"
    assert StepModel("llama3-8b", h100, ServeLayout(), precision="mxfp4").compute_prec == "bf16"


@pytest.mark.parametrize("args,msg", [
    (["--precision", "int3"], "--precision: unknown data type 'int3' for weights; allowed: "),
    (["--kv-dtype", "fp6"], "--kv-dtype: unknown data type 'fp6' for the KV cache; allowed: "),
])
def test_serve_cli_refuses_a_bad_format_in_one_line(cli, args, msg):
    code, out, err = cli("serve", "llama3-8b", "hgx-h100", *args, "--requests", "10")
    assert code == 2 and msg in err and err.count("\n") == 1


def test_serve_cli_takes_an_engines_spelling(cli):
    import json
    code, out, err = cli("serve", "llama3-8b", "gpu=H100-SXM,gpus_per_node=1", "--precision",
                         "W4A16_AWQ", "--kv-dtype", "fp8_e5m2", "--requests", "20", "--json")
    assert code == 0, err
    r = json.loads(out)
    assert (r["precision"], r["kv_dtype"], r["compute_precision"]) == ("int4-awq", "fp8", "bf16")

"""llama.cpp's GGUF formats and llama-bench's figures (pp512, tg128) in the serving model."""

import json
import statistics
from pathlib import Path

import pytest
import yaml

from gpufabric.errors import InputError
from gpufabric.topology.build import from_spec
from gpufabric.workloads.inference import precisions as P
from gpufabric.workloads.inference.itertime import ServeLayout, StepModel
from gpufabric.workloads.inference.validate import validate

LLAMACPP = Path(__file__).parent / "data" / "calibration" / "llamacpp.yaml"


# bytes of one block as ggml-common.h declares it (static_assert on sizeof), weights per block
@pytest.mark.parametrize("name,block_bytes,weights", [
    ("q4_0", 2 + 16, 32),                 # d, qs[16]
    ("q4_1", 2 + 2 + 16, 32),             # d, m, qs[16]
    ("q5_0", 2 + 4 + 16, 32),             # d, qh[4], qs[16]
    ("q5_1", 2 + 2 + 4 + 16, 32),         # d, m, qh[4], qs[16]
    ("q8_0", 2 + 32, 32),                 # d, qs[32]
    ("q2_k", 16 + 64 + 2 + 2, 256),       # scales[16], qs[64], d, dmin
    ("q3_k", 32 + 64 + 12 + 2, 256),      # hmask[32], qs[64], scales[12], d
    ("q4_k", 2 + 2 + 12 + 128, 256),      # d, dmin, scales[12], qs[128]
    ("q5_k", 2 + 2 + 12 + 32 + 128, 256),  # d, dmin, scales[12], qh[32], qs[128]
    ("q6_k", 128 + 64 + 16 + 2, 256),     # ql[128], qh[64], scales[16], d
])
def test_gguf_block_formats_have_their_exact_bytes_per_weight(name, block_bytes, weights):
    assert P.weight_bytes(name) == block_bytes / weights


def test_the_bits_per_weight_ggml_states():
    bpw = {n: P.weight_bytes(n) * 8 for n in ("q4_0", "q8_0", "q2_k", "q3_k", "q4_k", "q6_k")}
    assert bpw == {"q4_0": 4.5, "q8_0": 8.5, "q2_k": 2.625, "q3_k": 3.4375, "q4_k": 4.5,
                   "q6_k": 6.5625}


def test_mixes_are_their_published_size_and_between_their_block_types():
    # llama-quantize: Q4_K_M 4.58 GiB and Q4_K_S 4.37 GiB for Llama-3-8B (8.03e9 weights)
    assert P.weight_bytes("q4_k_m") * 8 == pytest.approx(4.58 * 2**30 * 8 / 8.03e9, abs=1e-3)
    for mix, low, high in [("q3_k_m", "q3_k", "q6_k"), ("q4_k_s", "q4_k", "q6_k"),
                           ("q4_k_m", "q4_k", "q6_k"), ("q5_k_s", "q5_k", "q6_k"),
                           ("q5_k_m", "q5_k", "q6_k")]:
        assert P.weight_bytes(low) < P.weight_bytes(mix) < P.weight_bytes(high), mix
    assert P.weight_bytes("q4_k_s") < P.weight_bytes("q4_k_m")


@pytest.mark.parametrize("alias,name", [
    ("Q4_K_M", "q4_k_m"), ("q4_k_m", "q4_k_m"), ("Q4_K - Medium", "q4_k_m"),
    ("Q5_K_S", "q5_k_s"), ("Q8_0", "q8_0"), ("q4-0", "q4_0"), ("Q6_K", "q6_k"),
    ("F16", "fp16"), ("int4-awq-w4a16", "int4-awq"), ("int4-weight-only-g32", "int4-g32"),
    ("int4-weight-only-g128", "int4"), ("int4_awq_w4a16_g64", "int4-awq-g64"),
])
def test_engine_spellings_resolve(alias, name):
    assert P.lookup(alias, "weights").name == name


def test_group_size_sets_the_bytes_of_w4a16():
    assert P.weight_bytes("int4-weight-only-g32") == 0.5 + 2 / 32
    assert P.weight_bytes("int4-awq-w4a16-g64") == 0.5 + (2 + 0.5) / 64


def test_a_bad_gguf_name_is_refused_listing_the_allowed_ones():
    with pytest.raises(InputError) as e:
        P.lookup("Q4_K_XL", "weights")
    msg = str(e.value)
    assert "\n" not in msg and "unknown data type 'Q4_K_XL'" in msg
    assert "q4_k_m" in msg and "q8_0" in msg and "int4-awq" in msg


def test_serve_cli_refuses_a_bad_gguf_name(cli):
    code, out, err = cli("serve", "llama3-8b", "gpu=RTX-4090,gpus_per_node=1", "--precision",
                         "Q7_K", "--requests", "5")
    assert code == 2 and err.count("\n") == 1 and "allowed: " in err and "q4_k_m" in err


def test_gguf_decode_reads_the_packed_blocks_and_prefill_runs_at_fp16():
    rtx = from_spec({"gpu": "RTX-4090", "gpus_per_node": 1})
    f16, q8, q4 = (StepModel("llama3-8b", rtx, ServeLayout(), precision=p)
                   for p in ("f16", "Q8_0", "Q4_K_M"))
    assert q8.compute_prec == q4.compute_prec == "fp16"
    read = [m.breakdown(0, 0, 0, 1, 100).weight_read_s for m in (f16, q8, q4)]
    assert read[1] / read[0] == pytest.approx(8.5 / 16, rel=0.01)
    assert read[2] / read[0] == pytest.approx(P.weight_bytes("q4_k_m") / 2, rel=0.01)
    pre = (512, 512 * 256, 512, 0, 0)
    assert q4.breakdown(*pre).gemm_compute_s == pytest.approx(
        f16.breakdown(*pre).gemm_compute_s, rel=0.02)


def test_serve_takes_a_gguf_format(cli):
    code, out, err = cli("serve", "llama3-8b", "gpu=RTX-4090,gpus_per_node=1", "--engine",
                         "llama.cpp", "--precision", "Q4_K_M", "--requests", "5", "--json")
    assert code == 0, err
    r = json.loads(out)
    assert (r["precision"], r["compute_precision"]) == ("q4_k_m", "fp16")


def test_llama_bench_measurements_file_is_held_out_and_well_formed():
    entries = yaml.safe_load(LLAMACPP.read_text())
    points = [p for e in entries for p in e["points"]]
    gpus = {p.get("gpu") or e["system"]["gpu"] for e in entries for p in e["points"]}
    formats = {P.lookup(p.get("precision") or e["model"]["precision"], "weights").name
               for e in entries for p in e["points"]}
    assert len(points) >= 20 and len(gpus) >= 3 and len(formats) >= 3
    assert all(e.get("source") and e.get("source_id") for e in entries)


def test_llama_bench_figures_within_their_bound():
    """Held-out median error of each llama-bench figure within 25%: a prompt batch is a
    roofline of FP16 GEMMs (llama.cpp's MMQ kernels reach up to a third more on int8 tensor
    cores, cuBLAS at FP16 accumulate less), a generated token a read of the packed weights
    plus launch overhead (CUDA graphs or not); either spread is about a quarter."""
    res = validate(str(LLAMACPP))
    assert not res["skipped"]
    by = {}
    for p in res["points"]:
        assert p["status"] == "held-out"
        by.setdefault(p["metric"], []).append(abs(p["error_pct"]))
    assert set(by) == {"prompt_tokens_per_s", "generation_tokens_per_s"}
    for metric, errs in by.items():
        assert statistics.median(errs) <= 25, metric

"""One record type for every model constant: collectives and workloads share the registry."""

import json
from pathlib import Path

import pytest

import gpufabric.workloads.inference.pd  # noqa: F401  (records the inference constants)
import gpufabric.workloads.inference.serve  # noqa: F401
from gpufabric import params
from gpufabric.collectives import params as CP
from gpufabric.fileio import load_yaml
from gpufabric.workloads import compute, training
from gpufabric.workloads import validate as training_validate
from gpufabric.workloads.inference import itertime
from gpufabric.workloads.inference.validate import fitted_on

DATA = Path(__file__).parent / "data" / "calibration"


def test_both_layers_record_into_one_registry():
    assert params.REGISTRY["NVLS_EFFICIENCY"].layer == "collectives"
    assert CP.REGISTRY is params.layer_registry("collectives")
    assert compute.GEMM_EFF["hopper"] is params.REGISTRY["GEMM_EFF[hopper]"]
    assert compute.GEMM_EFF["hopper"].fitted_on == ("megatron-core-h100-gpt-*",
                                                    "mlperf-train-v4.0-gpt3-175b-eos-512gpu")
    assert training.LAYER_OVERHEAD_US.value == 40.0
    assert itertime.ENGINE_OVERHEAD_S["vllm"].kind == "prior"
    assert itertime.ENGINE_OVERHEAD_S["vllm"].fitted_on == ()
    # every constant of the layer is in the one registry (their number grows)
    assert len(params.layer_registry("workloads")) >= 40
    assert set(params.REGISTRY) == set(CP.REGISTRY) | set(params.layer_registry("workloads"))


def test_a_name_is_recorded_once_across_layers():
    with pytest.raises(ValueError, match="parameter KERNEL_US recorded twice"):
        CP.record("KERNEL_US", 1.0, "us", "x", "estimate")
    with pytest.raises(ValueError, match="parameter NVLS_LAT_US recorded twice"):
        compute.record("NVLS_LAT_US", 1.0, "us", "x", "prior")


def test_training_status_comes_from_the_records_and_the_file():
    """fitted: a workloads record names the entry; looked-at: the file's looked_at key."""
    from gpufabric import validation
    entries = load_yaml(DATA / "training.yaml")
    st = {e["id"]: validation.status(e["id"], e.get("looked_at", "")) for e in entries}
    fitted = {i for i, s in st.items() if s == "fitted"}
    assert fitted == {i for i in st if params.matches_fitted(i, params.fitted_ids("workloads"))}
    assert len(fitted) == 20 and all(i.startswith(
        ("megatron-2021-a100-gpt-", "megatron-core-h100-gpt-", "megascale-megatron-baseline",
         "mlperf-train-v4.0-gpt3-175b-eos-")) for i in fitted)
    looked = {i for i, s in st.items() if s == "looked-at"}
    # the entries whose misses changed the model (issue 7's list among them)
    assert len(looked) >= 16 and all(isinstance(e["looked_at"], str) and e["looked_at"]
                                     for e in entries if e["id"] in looked)
    assert {"dle-bert-large-pretrain-seq512-dgx-a100-multinode"} <= looked
    assert not hasattr(training_validate, "FITTED_ON")
    assert not hasattr(training_validate, "TUNED_ON")


def test_inference_fitted_entries_come_from_the_records():
    assert fitted_on("trtllm-1.0-llama4-maverick-moe-tp8")
    assert fitted_on("trtllm-0.14-online-anything")
    assert not fitted_on("trtllm-0.17-llama31-70b-h200-fp8-tp-sweep")


def test_cli_params_by_layer(cli):
    code, out, _ = cli("params", "--layer", "workloads", "--json")
    rows = json.loads(out)["params"]
    assert code == 0 and len(rows) == len(params.layer_registry("workloads"))
    assert {r["layer"] for r in rows} == {"workloads"}
    kv = next(r for r in rows if r["name"] == "KV_EFF")
    assert (kv["value"], kv["kind"], kv["fitted_on"]) == (
        0.81, "fitted", ["mooncake-vllm-pd-1p1d-h800-qwen3-8b-kv-transfer"])
    code, out, _ = cli("params", "--layer", "all")
    assert code == 0 and out.startswith(
        f"# gpufabric params: {len(params.REGISTRY)} constants")
    assert "KERNEL_US                  prior    workloads    us" in out
    code, _, err = cli("params", "--layer", "scheduler")
    assert code == 2 and "--layer: unknown layer 'scheduler'" in err

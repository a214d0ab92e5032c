"""One record type for every model constant: collectives and workloads share the registry."""

import json
import re
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
    assert len(fitted) == 22 and all(i.startswith(
        ("megatron-2021-a100-gpt-", "megatron-core-h100-gpt-", "megascale-megatron-baseline",
         "mlperf-train-v4.0-gpt3-175b-eos-", "torchtitan-h100-llama31-")) for i in fitted)
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
    assert (kv["value"], kv["kind"], kv["fitted_on"], kv["status"]) == (
        0.81, "fitted", ["mooncake-vllm-pd-1p1d-h800-qwen3-8b-kv-transfer",
                         "mooncake-sglang-pd-1p1d-h20-qwen3-235b-kv-transfer"], "entries")
    code, out, _ = cli("params", "--layer", "all")
    assert code == 0 and out.startswith(
        f"# gpufabric params: {len(params.REGISTRY)} constants")
    assert "KERNEL_US                  prior    workloads    us" in out
    code, _, err = cli("params", "--layer", "scheduler")
    assert code == 2 and "--layer: unknown layer 'scheduler'" in err


#: what a record's history looks like (a record keeps its source and what it was fitted on):
#: a refit's old -> new, "was <value>", a work stop or a project issue, a fitting pass,
#: "before/after/once/since" a change, "no longer". An issue of another repository
#: ("NVIDIA/nccl issue 527") is a source and stays.
HISTORY = re.compile(
    r"(?i)\brefit\b|\b\d[\d.]*\s*->\s*\d[\d.]*\s*(?:once|after|when|since)\b|\bwas\s+\d"
    r"|\bwas\s+(?:refit|fitted on|changed|raised|lowered|tuned)\b|\bstop\s+\d+"
    r"|\bissue\s+\d+|\b(?:first|second|third|"
    r"\d+(?:st|nd|rd|th))\s+pass\b|\bpass\s+\d+|\b(?:before|after|once|since)\s+the\s+"
    r"(?:refit|fit|change|fix)\b|\bno longer\b|\bwere modell?ed\b|\bwas modell?ed\b"
    r"|\bused to be\b|\bpreviously\b")
#: an issue of a named repository (owner/name issue N) is a source, not history
CITED_ISSUE = re.compile(r"[\w.-]+/[\w.-]+\s+issues?\s+\d+")


def history(text: str) -> bool:
    """Whether a source string tells the record's history."""
    return bool(HISTORY.search(CITED_ISSUE.sub("", text)))


def _yaml_sources(node, where=""):
    """Every ``source`` string of a profile YAML (engines, frameworks, precisions)."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "source" and isinstance(v, str):
                yield f"{where}.source", v
            else:
                yield from _yaml_sources(v, f"{where}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _yaml_sources(v, f"{where}[{i}]")


def test_history_pattern_tells_sources_from_history():
    for text in ("refit 0.75 -> 0.77 once the casts were modelled", "was 0.75",
                 "issue 7's second pass", "stop 12", "that entry is no longer held out"):
        assert history(text), text
    for text in ("NVIDIA/nccl issue 527", "the next all-gather issued before the gradient",
                 "after the backward pass", "Llama 2 34B was not released",
                 "3.8e9 multiply-adds -> 2 x 4.1e9 FLOPs"):
        assert not history(text), text


def test_records_keep_sources_not_history():
    """Every record's source and every profile YAML's source states facts and where they come
    from, never the record's history (no 'refit a -> b', 'was', 'stop N', 'issue N',
    'pass N')."""
    bad = [(p.name, p.source) for p in params.REGISTRY.values() if history(p.source)]
    data = Path(compute.__file__).parent / "data"
    for f in sorted([*data.glob("engines/*.yaml"), *data.glob("frameworks/*.yaml"),
                     data / "precisions.yaml"]):
        bad += [(f"{f.name}{w}", s) for w, s in _yaml_sources(load_yaml(f))
                if history(s)]
    assert bad == []


def test_every_fitted_constant_rests_on_two_entries_or_is_an_answer():
    """A fitted constant names two or more entries (different sources or machines), or is
    marked as its single entry's answer with the reason; `params --check` exits 0."""
    fitted = [p for p in params.REGISTRY.values() if p.fitted_on]
    assert fitted and all(p.status in ("entries", "answer") for p in fitted)
    assert all(p.answer for p in fitted if p.single_entry)
    assert not any(p.answer for p in fitted if not p.single_entry)
    assert params.REGISTRY["FP4_EFF"].fitted_on == ("trtllm-1.0-llama33-70b-b200-tp1-fp4",
                                                    "trtllm-1.0-llama33-70b-gb200-tp1-fp4")
    assert params.REGISTRY["KV_SETUP_S"].status == "answer"


def test_params_check_exit_status(cli, monkeypatch):
    code, out, _ = cli("params", "--layer", "all", "--check")
    assert code == 0 and "0 need a second entry or the mark" in out
    p = params.REGISTRY["KV_SETUP_S"]
    monkeypatch.setitem(params.REGISTRY, "KV_SETUP_S", params.Param(
        p.name, p.value, p.unit, p.applies_to, p.source, p.fitted_on, layer=p.layer))
    code, out, _ = cli("params", "--layer", "all", "--check", "--wide")
    assert code == 1 and "(a single entry, not marked: needs a second entry" in out


def test_refit_command_refits_on_the_named_entries_and_changes_nothing(tmp_path, monkeypatch):
    """benchmarks/refit.py: a constant is refitted on the points of its entries that it moves
    (KV_EFF: the transfer times of both Mooncake runs, not their times to first token), the
    report says old -> new, and the shipped value stays."""
    import importlib.util

    import yaml

    from gpufabric import validation
    spec = importlib.util.spec_from_file_location(
        "refit", Path(__file__).parents[1] / "benchmarks" / "refit.py")
    refit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(refit)
    ents, _ = validation.entries_of(load_yaml(DATA / "inference.yaml"), "inference.yaml")
    f = tmp_path / "kv.yaml"
    kv = params.REGISTRY["KV_EFF"].fitted_on
    f.write_text(yaml.safe_dump([e for e in ents if e["id"] in kv]))
    out = tmp_path / "refit.md"
    from gpufabric import crossval                       # the refit search's grid
    monkeypatch.setattr(crossval, "COARSE", (0.9, 1.0, 1.1))   # a short one keeps the test fast
    monkeypatch.setattr(crossval, "FINE", ())
    assert refit.main(["--only", "KV_EFF", "--files", str(f), "-o", str(out)]) == 0
    text = out.read_text()
    row = next(ln for ln in text.splitlines() if ln.startswith("| `KV_EFF` |"))
    # both entries, their 17 transfer times (9 + 8), none of the TTFT points
    assert "| entries | 2 | kv.yaml | 17 (transfer_ms) |" in row
    assert "| 0.81 |" in row and "Held-out headline" in text
    assert params.REGISTRY["KV_EFF"].value == 0.81

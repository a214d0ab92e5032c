"""`gpufabric validate` on inference measurement files (schema of calibration/inference.yaml)."""

import json
from pathlib import Path

import pytest
import yaml

from gpufabric.workloads.inference.validate import fitted_on, model_name, validate

DATA = Path(__file__).parent / "data" / "calibration" / "inference.yaml"


def subset(tmp_path, *ids):
    entries = [e for e in yaml.safe_load(DATA.read_text()) if e["id"] in ids]
    f = tmp_path / "subset.yaml"
    f.write_text(yaml.safe_dump(entries))
    return str(f)


def test_model_names_from_free_text():
    assert model_name("Llama 3.1 70B Instruct") == "llama3-70b"
    assert model_name("Mixtral 8x7B") == "mixtral-8x7b"
    assert model_name("GPT-175B") == "gpt3-175b"


def test_offline_points_held_out(tmp_path):
    f = subset(tmp_path, "trtllm-0.17-llama31-70b-h200-fp8-tp-sweep")
    res = validate(f)
    s = res["summary"]
    # held out (no parameter names the entry): the goal, median <= 10 %
    assert s["points"] == s["all"]["points"] == 18 and s["median_abs_pct"] <= 10
    assert res["skipped"] == []
    assert not fitted_on("trtllm-0.17-llama31-70b-h200-fp8-tp-sweep")
    assert {r["status"] for r in res["points"]} == {"held-out"}


def test_mtp_entries_run_with_speculative_decoding(tmp_path):
    """DeepSeek-R1 with 3 MTP draft tokens at one request (TensorRT-LLM's min-latency runs on
    8x B200 and 8x H200): modelled with the sourced MTP acceptance, nothing fitted on them."""
    ids = ("trtllm-deepseek-r1-b200-min-latency-tp8-ep2-mtp3",
           "trtllm-deepseek-r1-h200-min-latency-tp8-ep4-mtp3")
    res = validate(subset(tmp_path, *ids))
    assert res["skipped"] == []
    rows = {(r["id"], r["metric"]): r for r in res["points"]}
    assert {i for i, _ in rows} == set(ids)
    assert {r["status"] for r in res["points"]} == {"held-out"}
    for i in ids:
        assert abs(rows[(i, "output_tokens_per_s")]["error_pct"]) <= 25
        assert abs(rows[(i, "latency_ms")]["error_pct"]) <= 25
    assert res["summary"]["median_abs_pct"] <= 15


def test_online_latencies_against_trtllm(tmp_path):
    res = validate(subset(tmp_path, "trtllm-0.14-online-llama31-8b-h100-tp1-isl467-osl256"))
    rows = {(r["point"], r["metric"]): r for r in res["points"]}
    # 2 requests/s: TTFT is one 467-token prefill, ITL one decode step of the 8B model
    # (measured 8 ms): the engine overhead is fitted on this entry, so within 15 %
    assert rows[(0, "itl_ms")]["measured"] == 8
    assert abs(rows[(0, "itl_ms")]["error_pct"]) <= 15
    assert abs(rows[(0, "output_tokens_per_s")]["error_pct"]) <= 15
    assert all(r["status"] == "fitted" for r in res["points"])
    s = res["summary"]
    assert s["points"] == 0 and s["fitted"]["points"] == s["all"]["points"] > 0


def test_validate_cli_dispatches_by_content(cli, tmp_path):
    f = subset(tmp_path, "fastertransformer-gpt-6.7b-a100-tp1")
    code, out, err = cli("validate", f, "--json")
    assert code == 0, err
    r = json.loads(out)
    keys = {"median_abs_pct", "p90_abs_pct", "max_abs_pct", "points"}
    assert keys | {"fitted", "looked_at", "by_metric"} <= set(r["summary"])
    assert r["summary"]["all"]["points"] == 6
    assert all(set(sk) == {"id", "point", "reason"} for sk in r["skipped"])
    code, out, err = cli("validate", f)
    assert code == 0 and out.splitlines()[1] == f"# summary of {f}"
    assert out.splitlines()[2].startswith("# held-out (")


def test_validate_bad_file(cli, tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("- id: x\n  engine: {name: vLLM}\n  workload: {mode: offline}\n  model: 3\n")
    code, out, err = cli("validate", str(f))
    assert code == 2 and "bad.yaml: [0](x).system: missing or not a mapping" in err


def test_run_settings_are_checked_keys(tmp_path):
    """Run settings are keys of the entry: vLLM 0.6's multi-step scheduling is read from
    ``engine.num_scheduler_steps`` (the streamed ITL is then a round, ~10 steps), and a bad
    value of it or of ``workload.duration_s`` refuses the entry with the field named."""
    entries = [e for e in yaml.safe_load(DATA.read_text())
               if e["id"] == "vllm-0.6.0-llama31-8b-a100-sharegpt"]
    assert entries[0]["engine"]["num_scheduler_steps"] == 10
    f = tmp_path / "e.yaml"
    f.write_text(yaml.safe_dump(entries))
    rows = {(r["point"], r["metric"]): r for r in validate(str(f))["points"]}
    # the measured streamed gap is ~9x the time per token; the model's within 30 % of it
    assert rows[(0, "itl_ms_p50")]["measured"] > 9 * rows[(0, "tpot_ms_p50")]["measured"]
    assert abs(rows[(0, "itl_ms_p50")]["error_pct"]) < 30
    for key, bad, where in (("engine", "ten", "engine.num_scheduler_steps"),
                            ("workload", "long", "workload.duration_s")):
        e = json.loads(json.dumps(entries[0]))
        e[key]["num_scheduler_steps" if key == "engine" else "duration_s"] = bad
        f.write_text(yaml.safe_dump([e]))
        skipped = validate(str(f))["skipped"]
        assert skipped and all(where in s["reason"] and "refused" in s["reason"]
                               for s in skipped)


def test_the_engine_backend_is_a_key_of_the_entry(tmp_path):
    """``engine.backend`` picks the backend's profile: TensorRT-LLM 0.14 through Triton ran
    built TensorRT engines (no CUDA graphs, a per-layer launch cost), and the same entry
    named as the PyTorch backend runs faster decode steps. A backend with no profile of its
    own is the engine's; a backend that is not a name refuses the entry with the field."""
    from gpufabric.workloads.inference.validate import entry_engine
    eid = "trtllm-0.14-online-llama31-70b-h100-tp4-isl467-osl256"
    entries = [e for e in yaml.safe_load(DATA.read_text()) if e["id"] == eid]
    assert entries[0]["engine"]["backend"] == "tensorrt"
    assert entry_engine(entries[0]) == "TensorRT-LLM tensorrt"
    f = tmp_path / "e.yaml"
    f.write_text(yaml.safe_dump(entries))
    itl = {r["point"]: r for r in validate(str(f))["points"] if r["metric"] == "itl_ms"}
    assert {r["engine"] for r in itl.values()} == {"tensorrt-llm-tensorrt"}
    e = json.loads(json.dumps(entries[0]))
    e["engine"]["backend"] = "pytorch"
    assert entry_engine(e) == "TensorRT-LLM"
    f.write_text(yaml.safe_dump([e]))
    other = {r["point"]: r for r in validate(str(f))["points"] if r["metric"] == "itl_ms"}
    # 2 requests/s, a near-unloaded decode of 80 layers: the steps differ by the two profiles'
    # per-step costs (launches of 80 layers against the Python executor's overhead), give or
    # take the CUDA-graph padding of the PyTorch backend's decode batches
    from gpufabric.workloads.inference import engines as E
    trt, pyt = E.profile("tensorrt-llm-tensorrt"), E.profile("tensorrt-llm")
    gap_ms = (trt.overhead_s + 80 * trt.layer_s - pyt.overhead_s) * 1e3
    assert itl[0]["predicted"] - other[0]["predicted"] == pytest.approx(gap_ms, abs=0.5)
    e["engine"]["backend"] = ["tensorrt"]
    f.write_text(yaml.safe_dump([e]))
    skipped = validate(str(f))["skipped"]
    assert skipped and all("engine.backend" in s["reason"] for s in skipped)


def test_engine_settings_are_keys_of_the_workload(tmp_path):
    """AMD's MLPerf v4.1 harness ran vLLM 0.4.3 (the V0 engine) with the settings its code
    folder gives, stated as keys: ``chunked_prefill`` and ``gpu_memory_utilization`` change the
    run; a value of the wrong kind refuses the entry naming the field."""
    mlperf = DATA.parent / "mlperf_inference.yaml"
    eid = "mlperf-v4.1-amd-1xmi300x-2xepyc-9374f-llama2-70b-99-offline"
    e = [x for x in yaml.safe_load(mlperf.read_text()) if x["id"] == eid][0]
    wl = e["workload"]
    assert (wl["chunked_prefill"], wl["gpu_memory_utilization"], wl["batch_size"]) == (
        False, 0.99, 2048)
    f = tmp_path / "e.yaml"

    def run(**changes):
        x = json.loads(json.dumps(e))
        x["workload"].update(changes)
        f.write_text(yaml.safe_dump([x]))
        return validate(str(f))

    whole = run()["points"][0]
    assert whole["engine"] == "vllm-v0"
    assert run(chunked_prefill=True)["points"][0]["predicted"] != whole["predicted"]
    assert run(gpu_memory_utilization=0.5)["points"][0]["predicted"] < whole["predicted"]
    for key, bad in (("chunked_prefill", "yes"), ("gpu_memory_utilization", 1.5)):
        skipped = run(**{key: bad})["skipped"]
        assert skipped and f"workload.{key}" in skipped[0]["reason"]

"""tests/data/calibration/mlperf_inference.yaml: MLPerf Inference submissions (v4.0, v4.1, v5.0) as
serving measurements, each entry naming its LoadGen summary at a commit, its submitter's round
(`source_id`), the system, the LoadGen scenario (`workload.client`) and its figures."""

import json
import re
from pathlib import Path

import pytest
import yaml

from gpufabric import catalog
from gpufabric.workloads.inference import clients, datasets
from gpufabric.workloads.inference.validate import METRICS, load_entries, validate

DATA = Path(__file__).parent / "data" / "calibration" / "mlperf_inference.yaml"
SOURCE = re.compile(r"mlcommons/inference_results_v(4\.0|4\.1|5\.0) \S+/mlperf_log_summary\.txt "
                    r"\(commit [0-9a-f]{40}"
                    r"( of the mirror ntuhpc/mlperf_inference_results_v5\.0)?\)")


def entries():
    return load_entries(str(DATA))


def test_every_entry_states_its_source_system_client_and_a_figure():
    es = entries()
    assert len(es) >= 30
    assert len({e["id"] for e in es}) == len(es)
    for e in es:
        eid = e["id"]
        m = SOURCE.match(e["source"])
        assert m, eid
        # the round and submitter of the summary's path make the source_id
        submitter = e["source"].split()[1].split("/")[1].lower().replace("_", "-")
        assert e["source_id"] == f"mlperf-inference-v{m.group(1)}-{submitter}", eid
        assert catalog.gpu(e["system"]["gpu"]).name == e["system"]["gpu"], eid
        assert e["system"]["gpus"] >= 1, eid
        assert clients.get(e["workload"]["client"]).name.startswith("mlperf-"), eid
        assert any(k in METRICS or k == "requests_per_s" for k in e["result"]), eid
        if e["workload"]["client"] == "mlperf-server":
            assert e["workload"]["request_rate"] > 0 and e["workload"]["duration_s"] >= 600, eid


def test_the_datasets_named_are_the_benchmarks_own():
    names = {datasets.match(e["workload"]["dataset"]).name for e in entries()}
    assert names <= {"mlperf-llama2-70b-openorca", "mlperf-mixtral-8x7b", "cnn-dailymail",
                     "mlperf-llama3.1-405b"}
    mixtral = datasets.get("mlperf-mixtral-8x7b")
    # the reference output length is the benchmark's accuracy target (tokens_per_sample)
    assert mixtral.osl.mean == 144.84


def test_the_validator_runs_a_few_entries(tmp_path, monkeypatch):
    # (fewer arrivals per engine than the stated duration's, for the test's time)
    monkeypatch.setattr(clients, "MAX_DURATION_REQUESTS", 8000)
    ids = ["mlperf-v4.1-amd-1xmi300x-2xepyc-9374f-llama2-70b-99-offline",
           "mlperf-v4.1-fujitsu-gx2560m7-h100-sxm-80gbx4-trt-mixtral-8x7b-server",
           "mlperf-v4.1-nvidia-h200-sxm-141gbx8-trt-gptj-99-offline"]
    picked = [e for e in yaml.safe_load(DATA.read_text()) if e["id"] in ids]
    f = tmp_path / "few.yaml"
    f.write_text(yaml.safe_dump(picked))
    res = validate(str(f))
    rows = {(r["id"], r["metric"]): r for r in res["points"]}
    assert {r["status"] for r in res["points"]} == {"held-out"}
    off = rows[(ids[0], "output_tokens_per_s")]
    assert off["measured"] == 3062.72 and off["predicted"] > 0
    # Server: LoadGen's Poisson arrivals at the target rate; below capacity the tokens served
    # are those the arrivals bring, so the throughput follows the rate
    srv = rows[(ids[1], "output_tokens_per_s")]
    assert abs(srv["error_pct"]) <= 10
    assert {(ids[1], k) for k in ("ttft_ms_p99", "tpot_ms_p99")} <= set(rows)
    # ... and the highest rate within its p99 limits, searched for by the model's own runs
    assert rows[(ids[1], "max_requests_per_s_within_slo")]["measured"] == 173.96
    # GPT-J's summaries give samples per second only: listed as skipped, with the reason
    assert res["skipped"] == [{"id": ids[2], "point": 0,
                               "reason": "no figure the model predicts"}]


def test_an_offline_run_of_a_stated_duration_runs_its_stated_requests(tmp_path, monkeypatch):
    """LoadGen's Offline query holds enough samples for its minimum duration (the log's
    samples_per_query over min_duration): an entry stating them is run long (at least
    STEADY_BATCHES full batches of each engine), so its throughput is a long run's, not one
    dominated by the ramp-up and drain of the first 1000 requests, nor by those of 20,000
    (under three batches of each of these eight engines of 896); a bad duration refuses the
    entry with its field."""
    from gpufabric.workloads.inference import validate as V
    from gpufabric.workloads.inference.validate import MAX_SIM_REQUESTS
    eid = "mlperf-v4.1-nvidia-dgx-h100-h100-sxm-80gbx8-trt-mixtral-8x7b-offline"
    e = next(x for x in yaml.safe_load(DATA.read_text()) if x["id"] == eid)
    assert e["workload"]["num_requests"] > 8 * e["workload"]["batch_size"] > MAX_SIM_REQUESTS
    f = tmp_path / "e.yaml"

    def predicted(entry):
        f.write_text(yaml.safe_dump([entry]))
        res = validate(str(f))
        return res["points"][0]["predicted"] if res["points"] else res["skipped"]

    long_run = predicted(e)
    # half the batches lose a little more to the ramp-up and drain (their share doubles): the
    # run is long enough that its throughput has nearly settled
    monkeypatch.setattr(V, "STEADY_BATCHES", V.STEADY_BATCHES // 2)
    assert long_run / 1.05 < predicted(e) < long_run
    monkeypatch.undo()
    # 20,000 requests in all leave most of the run to the ramp-up and drain
    monkeypatch.setattr(V, "STEADY_BATCHES", 0)
    assert predicted(e) < 0.85 * long_run
    monkeypatch.undo()
    short = json.loads(json.dumps(e))
    del short["workload"]["duration_s"]
    # without a stated duration the mlperf-offline client's own minimum (LoadGen's 600 s)
    # sets the run: the same long run
    assert short["workload"]["client"] == "mlperf-offline"
    assert predicted(short) == pytest.approx(long_run, rel=0.01)
    # neither a duration nor a client: 1000 requests over 8 engines of 896 never fill one
    # batch, a fraction of the long run's throughput
    del short["workload"]["client"]
    assert predicted(short) < 0.5 * long_run
    bad = json.loads(json.dumps(e))
    bad["workload"]["duration_s"] = "long"
    skipped = predicted(bad)
    assert "workload.duration_s" in skipped[0]["reason"] and "refused" in skipped[0]["reason"]


def _nearcap_tool():
    import importlib.util
    path = Path(__file__).resolve().parents[1] / "tools" / "nearcap_sensitivity.py"
    spec = importlib.util.spec_from_file_location("nearcap_sensitivity", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_near_capacity_a_server_run_amplifies_an_error_of_the_step_cost():
    """Supermicro's H100 TP2 Server run offers the rate its submitter chose, about nine tenths
    of what its engines serve: there 3% more cost per step lengthens the predicted TPOT by far
    more than 3% (the steady batch rate a / (1 - rate b) grows as the capacity 1/b nears the
    rate), while the throughput stays the offered one: LoadGen's completed tokens over its
    whole run, within 1% of it whatever the step cost (tools/nearcap_sensitivity.py)."""
    tool = _nearcap_tool()
    eid = "mlperf-v4.1-supermicro-sys-821ge-tnhr-h100-sxm-80gbx8-trt-llama2-70b-99-server"
    e = next(x for x in entries() if x["id"] == eid)
    base, slower = tool.predict(e, 1.0), tool.predict(e, 1.03)
    assert slower["tpot_ms"]["mean"] > 1.03 ** 3 * base["tpot_ms"]["mean"]
    assert slower["throughput_tokens_per_s"] == pytest.approx(base["throughput_tokens_per_s"],
                                                              rel=0.01)
    # the step cost is restored after each prediction
    from gpufabric.workloads.inference import serve
    assert serve.step_model is tool._STEP_MODEL


def test_every_server_run_states_its_limits_and_its_rate_within_them():
    # LoadGen's p99 limits of each benchmark, as data (the summaries' ttft_latency and
    # tpot_latency); the submitter's rate (completed samples per second) is the highest it found
    # within them. llama2-70b-interactive runs the Server scenario under tighter limits.
    limits = {"mlperf-server": {"ttft_ms_p99": 2000, "tpot_ms_p99": 200},
              "mlperf-interactive": {"ttft_ms_p99": 450, "tpot_ms_p99": 40}}
    online = [e for e in entries() if e["workload"]["client"] in limits]
    server = [e for e in online if e["workload"]["client"] == "mlperf-server"]
    interactive = [e for e in online if e["workload"]["client"] == "mlperf-interactive"]
    assert len(server) == 15 + 6 and len(interactive) == 1
    assert all("llama2-70b-interactive" in e["source"] for e in interactive)
    for e in online:
        assert e["workload"]["slo"] == limits[e["workload"]["client"]], e["id"]
        assert e["result"]["max_requests_per_s_within_slo"] == e["result"]["requests_per_s"]
        # every run the submitter published met its limits
        for k, v in e["workload"]["slo"].items():
            assert e["result"][k] <= v, e["id"]


def test_the_rate_within_the_limits_is_the_highest_the_models_runs_meet_them_at(monkeypatch):
    """The search's answer passes both p99 limits below capacity, and a rate 4 % higher (over
    twice the search's resolution) does not: the limits, not the measured rate, decide it."""
    # (fewer arrivals per engine than the stated duration's, for the test's time)
    monkeypatch.setattr(clients, "MAX_DURATION_REQUESTS", 8000)
    from dataclasses import replace

    from gpufabric.workloads.inference import validate as V
    from gpufabric.workloads.inference.serve import serve
    eid = "mlperf-v4.1-nvidia-h200-sxm-141gbx8-trt-mixtral-8x7b-server"
    e = next(x for x in entries() if x["id"] == eid)
    calls = []
    real = V.rate_within_slo

    def spy(model, topo, cfg, slo, dur, gpus):
        calls.append((model, topo, cfg, slo, dur))
        return real(model, topo, cfg, slo, dur, gpus)
    mp = pytest.MonkeyPatch()
    mp.setattr(V, "rate_within_slo", spy)
    try:
        r, _ = V._run_point(e, {}, within_slo=True)
    finally:
        mp.undo()
    model, topo, cfg, slo, dur = calls[0]
    assert slo == {"ttft_ms_p99": 2000.0, "tpot_ms_p99": 200.0}
    assert dur == e["workload"]["duration_s"]
    best = r["rate_within_slo"]

    def run(rate):
        out = serve(model, topo, replace(cfg, rate=rate,
                                         requests=V._duration_requests(cfg, topo, rate, dur)))
        return not out.get("overloaded") and out["ttft_ms"]["p99"] <= 2000 and \
            out["tpot_ms"]["p99"] <= 200
    assert run(best) and not run(1.04 * best)


@pytest.mark.parametrize("change, field", [
    ({"slo": {"ttft_p99": 2000}}, "workload.slo.ttft_p99"),
    ({"slo": {"tpot_ms_p99": -1}}, "workload.slo.tpot_ms_p99"),
    ({"slo": None}, "workload.slo"),
    ({"mode": "offline", "request_rate": None}, "result.max_requests_per_s_within_slo"),
])
def test_a_bad_slo_refuses_the_entry_naming_the_field(tmp_path, change, field):
    eid = "mlperf-v4.1-nvidia-b200-sxm-180gbx1-trt-llama2-70b-99-server"
    e = next(x for x in yaml.safe_load(DATA.read_text()) if x["id"] == eid)
    e["workload"].update(change)
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump([e]))
    res = validate(str(f))
    assert res["points"] == [] and len(res["skipped"]) == 1
    assert res["skipped"][0]["reason"].startswith(f"refused: {field}: ")


def test_the_validator_builds_the_scale_up_an_entry_states(tmp_path):
    """Fujitsu's GX2560M7 is an HGX H100 4-GPU board: its system file states six NVLink links
    from each GPU to each other one (a direct mesh, 150 GB/s a pair each way, no NVSwitch). The
    validator builds the scale-up an entry states (it used to keep only nvswitch and pcie), so
    the tensor-parallel pair's all-reduce runs at a third of an NVSwitch's rate."""
    eid = "mlperf-v4.1-fujitsu-gx2560m7-h100-sxm-80gbx4-trt-llama2-70b-99-offline"
    e = next(x for x in yaml.safe_load(DATA.read_text()) if x["id"] == eid)
    assert e["system"]["scale_up"] == "nvlink-mesh" and e["parallelism"]["tp"] == 2
    e["workload"] = {**e["workload"], "num_requests": 3000}       # a short run, for time
    del e["workload"]["duration_s"]
    f = tmp_path / "e.yaml"

    def predicted(scale_up):
        f.write_text(yaml.safe_dump([{**e, "system": {**e["system"], "scale_up": scale_up}}]))
        pt = validate(str(f))["points"][0]
        assert pt["system"] == f"4xH100-SXM-{scale_up}"       # each point names what it ran on
        return pt["predicted"]

    mesh, switch = predicted("nvlink-mesh"), predicted("nvswitch")
    assert mesh < 0.9 * switch
    # a scale-up the system cannot have refuses the point with the reason, not the file
    f.write_text(yaml.safe_dump([{**e, "system": {**e["system"], "scale_up": "sli"}}]))
    res = validate(str(f))
    assert not res["points"] and res["skipped"][0]["reason"].startswith("refused: ")

"""`advise --check`: published comparisons as a check of the advisor (the project's own file,
the agreement rule, bad files)."""

from __future__ import annotations

import json

import pytest
import yaml

from gpufabric.advise import check
from gpufabric.cli import main
from gpufabric.errors import InputError


def _builtin(*ids: str) -> list[dict]:
    entries = yaml.safe_load(check.builtin_text())["comparisons"]
    return [e for e in entries if e["id"] in ids]


def test_the_projects_file_holds_20_sourced_comparisons():
    comps = check.load("builtin")
    assert len(comps) >= 20
    assert len({c.id for c in comps}) == len(comps)
    for c in comps:
        assert c.url.startswith("https://") and c.date and c.source, c.id
    # the kinds the issue names are all there: generations, SXM vs PCIe, IB vs RoCE, cost
    ids = " ".join(c.id for c in comps)
    for kind in ("h200-vs-h100", "b200", "mi300x", "pcie", "ib-vs-roce", "gpu-hour"):
        assert kind in ids, kind


def test_a_comparison_on_figures_a_constant_was_fitted_on_is_in_sample():
    # FP4_EFF was fitted on TensorRT-LLM 1.0's B200 FP4 row (src/gpufabric/data/fits.yaml)
    assert "FP4_EFF" in check.fitted_on(("trtllm-1.0-llama33-70b-b200-tp1-fp4",))
    # an engine profile's constants count for a comparison whose sides run that engine: the
    # TensorRT backend's overheads were fitted on a 0.17 row, which vLLM runs leave held out
    assert check.fitted_on(("trtllm-0.17-llama31-8b-h100-tp1-fp8",)) == []
    assert check.fitted_on(("trtllm-0.17-llama31-8b-h100-tp1-fp8",),
                           ("tensorrt-llm-tensorrt",)) == [
        "ENGINE_LAYER_S[tensorrt-llm-tensorrt]", "ENGINE_OVERHEAD_S[tensorrt-llm-tensorrt]"]
    comps = {c.id: c for c in check.load("builtin")}
    c = comps["trtllm017-llama8b-h200-vs-h100"]
    assert check.engines(c) == ("tensorrt-llm-tensorrt",)
    assert check.fitted_on(c.calibration, check.engines(c))
    assert check.fitted_on(comps["trtllm10-llama70b-b200-fp4-vs-h200-fp8"].calibration)
    c = comps["mlperf41-llama2-70b-server-h200-vs-h100"]
    assert not check.fitted_on(c.calibration, check.engines(c))


def test_each_side_runs_the_engine_its_published_run_used():
    # the engine is how the published run was configured: the comparison states it for each
    # side, and it is the profile the calibration entry of the same figures maps to
    from pathlib import Path

    from gpufabric.workloads.inference.engines import engine_key
    from gpufabric.workloads.inference.validate import entry_engine, load_entries
    folder = Path(__file__).parent / "data" / "calibration"
    ran = {e["id"]: engine_key(entry_engine(e)) for f in ("inference.yaml",
                                                          "mlperf_inference.yaml")
           for e in load_entries(str(folder / f))}
    seen = 0
    for c in check.load("builtin"):
        if c.scenario.serve is None or not c.calibration:
            continue
        ids = c.calibration if len(c.calibration) == 2 else c.calibration * 2
        for d, i in zip((c.a, c.b), ids, strict=True):
            assert d.scenario(c.scenario).serve.engine == ran[i], (c.id, i)
            seen += 1
    assert seen >= 40
    # AMD's MLPerf v4.1 runs were vLLM 0.4.3's (the V0 engine), NVIDIA's TensorRT-LLM's
    # TensorRT backend
    c = {c.id: c for c in check.load("builtin")}["mlperf41-llama2-70b-offline-mi300x-vs-h100"]
    assert (c.a.scenario(c.scenario).serve.engine,
            c.b.scenario(c.scenario).serve.engine) == ("vllm-v0", "tensorrt-llm-tensorrt")


@pytest.mark.parametrize("pred, pub, higher, ok", [
    (1.20, 1.15, True, True),      # same winner (a), within 1.5x
    (1.80, 1.10, True, False),     # same winner, but 1.64x the published ratio
    (1.02, 1.00, True, True),      # both ties (within 5% of 1)
    (1.10, 1.00, True, False),     # a published tie, a predicted winner
    (0.90, 1.20, True, False),     # opposite winners
    (0.60, 0.70, False, True),     # lower is better (a cost): a wins in both
])
def test_agreement_is_the_same_winner_and_a_ratio_within_1_5x(pred, pub, higher, ok):
    assert check.agrees(pred, pub, higher_is_better=higher) is ok


def test_check_on_real_comparisons_prints_rows_and_the_summary(tmp_path, capsys):
    # two cost comparisons (no model run) and one 1-GPU serving comparison, from the real file
    entries = _builtin("lambda-h100-vs-a100-gpu-hour", "ionet-h100-sxm-vs-pcie-gpu-hour",
                       "trtllm017-llama8b-h200-vs-h100")
    # the serving question again as $ per million output tokens (same model runs: run once);
    # its "published" ratio is this test's, not a source's
    serve = next(e for e in entries if e["id"] == "trtllm017-llama8b-h200-vs-h100")
    entries.append({**serve, "id": "mtok", "metric": "usd_per_mtok", "published": {"ratio": 1.0}})
    f = tmp_path / "four.yaml"
    f.write_text(yaml.safe_dump({"comparisons": entries}))
    main(["advise", "--check", str(f), "--jobs", "1", "--json"])
    res = json.loads(capsys.readouterr().out)
    assert res["total"] == 4 and res["not_evaluated"] == 0
    rows = {r["id"]: r for r in res["rows"]}
    for r in rows.values():
        assert r["agree"] == check.agrees(r["predicted_ratio"], r["published_ratio"],
                                          higher_is_better=check.METRICS[r["metric"]][1])
        assert r["predicted_ratio"] == pytest.approx(r["predicted"]["a"] / r["predicted"]["b"])
    # $/Mtok is $/hour over the tokens served in an hour: its ratio is the ratio of $/hour
    # over that of tokens/s, and the H200 server costs more an hour (a dearer GPU, the same
    # host)
    tps = rows["trtllm017-llama8b-h200-vs-h100"]["predicted"]
    mtok = rows["mtok"]["predicted"]
    hourly = {k: mtok[k] * tps[k] * 3600 / 1e6 for k in "ab"}   # $/hour of each 1-GPU server
    assert hourly["a"] > hourly["b"] > 0
    assert rows["mtok"]["predicted_ratio"] == pytest.approx(
        hourly["a"] / hourly["b"] / rows["trtllm017-llama8b-h200-vs-h100"]["predicted_ratio"])
    assert res["agree"] == sum(r["agree"] for r in rows.values())
    # facts of the file: Lambda's $2.99 against $1.79 an hour
    assert rows["lambda-h100-vs-a100-gpu-hour"]["published_ratio"] == pytest.approx(2.99 / 1.79)
    # the H200's 43% more HBM bandwidth on the same compute makes it the faster GPU for an
    # 8B model at 1000/1000 tokens: it must win, as published, without the ratio going wild
    h200 = rows["trtllm017-llama8b-h200-vs-h100"]
    assert h200["predicted_winner"] == "a" and 1.0 < h200["predicted_ratio"] < 1.5
    main(["advise", "--check", str(f), "--jobs", "1"])
    out = capsys.readouterr().out
    assert "lambda-h100-vs-a100-gpu-hour" in out and f"{res['agree']} of 4 agree" in out


GOOD = {"id": "x", "question": "q", "source": "s", "url": "https://example.org", "date": 2024,
        "metric": "usd_per_gpu_hour", "scenario": "small-chat",
        "designs": {"a": "gpu=H100-SXM,gpus_per_node=8", "b": "gpu=L40S,gpus_per_node=8"},
        "published": {"a": 2.0, "b": 1.0}}


@pytest.mark.parametrize("change, field", [
    ({"metric": "speed"}, "comparisons[0].metric"),
    ({"colour": "red"}, "comparisons[0].colour"),
    ({"published": {"a": 2.0}}, "comparisons[0].published"),
    ({"published": {"ratio": -1}}, "comparisons[0].published.ratio"),
    ({"url": "example.org"}, "comparisons[0].url"),
    ({"calibration": "x"}, "comparisons[0].calibration"),
    ({"designs": {"a": "gpu=H1000"}}, "comparisons[0].designs"),
    ({"designs": {"a": "gpu=H1000", "b": "gpu=L40S"}}, "comparisons[0].designs.a"),
    ({"designs": {"a": {"instance": "no-such-box"}, "b": "gpu=L40S"}},
     "comparisons[0].designs.a.instance"),
    ({"designs": {"a": {"system": "gpu=L40S", "precision": "fp3"}, "b": "gpu=L40S"}},
     "comparisons[0].designs.a.precision"),
    ({"designs": {"a": {"system": "gpu=L40S", "engine": "warp-drive"}, "b": "gpu=L40S"}},
     "comparisons[0].designs.a.engine"),
    ({"scenario": {"workloads": {"serve": {"model": "llama3-8b", "rate": 2}}}},
     "comparisons[0].scenario.workloads.serve.slo_tpot_ms"),
])
def test_a_bad_comparisons_file_is_one_line_naming_file_and_field(tmp_path, capsys, change,
                                                                  field):
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump({"comparisons": [{**GOOD, **change}]}))
    with pytest.raises(SystemExit) as e:
        main(["advise", "--check", str(f), "--jobs", "1"])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1
    assert f"{f}: {field}:" in err


def test_a_key_given_twice_or_a_missing_file_or_a_scenario_too_is_refused(tmp_path, capsys):
    f = tmp_path / "twice.yaml"
    f.write_text("comparisons:\n  - id: x\n    id: y\n")
    with pytest.raises(InputError) as e:
        check.load(str(f))
    assert e.value.file == str(f) and "twice" in str(e.value)
    for args in (["--check", str(tmp_path / "none.yaml")], ["small-chat", "--check", "builtin"],
                 ["--check", "builtin", "-o", str(tmp_path / "x.html")]):
        with pytest.raises(SystemExit) as ex:
            main(["advise", *args])
        assert ex.value.code == 2 and len(capsys.readouterr().err.strip().splitlines()) == 1

"""Named serving datasets: the table, seeded sampling, free-text matching, `serve --dataset`,
`gpufabric datasets`, and models by normalised name or by shape."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from gpufabric.errors import InputError
from gpufabric.workloads.inference import datasets as D
from gpufabric.workloads.inference.validate import Skip, dataset_lengths, validate
from gpufabric.workloads.models import find_model, load_model, model_from_shape
from gpufabric.workloads.validate import resolve_model

INFERENCE = Path(__file__).parent / "data" / "calibration" / "inference.yaml"


def error(cli, *args: str) -> str:
    """The one error line of a refused command (exit 2, nothing on stdout)."""
    code, out, err = cli(*args)
    assert (code, out) == (2, ""), (code, out, err)
    assert err.startswith("gpufabric: error: ") and err.count("\n") == 1, err
    return err.removeprefix("gpufabric: error: ").rstrip("\n")


# -- the table ----------------------------------------------------------------------------------


def test_every_dataset_the_issue_names_is_in_the_table_with_sources():
    names = set(D.names())
    assert {"sharegpt-v3", "cnn-dailymail", "mlperf-llama2-70b-openorca",
            "mlperf-llama3.1-405b", "mlperf-deepseek-r1", "arxiv-summarization", "longbench",
            "azure-conv-2023", "azure-code-2023", "mooncake-conversation", "trtllm-fixed",
            "trtllm-normal", "vllm-random"} <= names
    for ds in D.datasets():
        assert ds.isl.source and ds.osl.source and ds.fitted_on
        # a number that could not be found says so instead of being filled in
        for ls in (ds.isl, ds.osl):
            assert ls.quantiles or ls.run or ls.unknown or ls.point is not None


def test_published_figures_are_the_sources_numbers():
    # facts: MLPerf's reference output lengths, the Azure trace medians (Splitwise's too)
    assert D.get("mlperf-llama2-70b-openorca").osl.mean == 294.45
    assert D.get("mlperf-llama3.1-405b").osl.mean == 684.68
    assert D.get("mlperf-deepseek-r1").osl.mean == 3886.2274
    conv, code = D.get("azure-conv-2023"), D.get("azure-code-2023")
    assert (conv.isl.median, conv.osl.median, code.isl.median, code.osl.median) == \
        (1020, 129, 1469, 13)
    assert D.get("mooncake-conversation").isl.mean == 12035.1
    # facts: the MLPerf inputs, computed from performance-dashboard's per-sample summaries
    orca = D.get("mlperf-llama2-70b-openorca").isl
    assert (orca.mean, orca.median, orca.min, orca.max) == (222.3, 152, 48, 1021)
    assert D.get("mlperf-llama3.1-405b").isl.median == 10112
    assert D.get("mlperf-deepseek-r1").isl.mean == 803.8
    assert D.get("mlperf-llama3.1-8b-cnndm").isl.mean == 870.7


def test_quantiles_are_monotone_and_end_at_the_published_extremes():
    for ds in D.datasets():
        assert len(ds.at) == 19 and list(ds.at) == sorted(ds.at)
        for ls in (ds.isl, ds.osl):
            q = ls.quantiles
            if not q:
                continue
            assert all(b >= a for a, b in zip(q, q[1:], strict=False)), ds.name
            assert (q[0], q[-1]) == (ls.min, ls.max), ds.name
            # the quantiles are whole tokens; a median between two samples ends in .5
            assert abs(q[ds.at.index(50)] - ls.median) <= 0.5, ds.name


# -- sampling -----------------------------------------------------------------------------------


def test_sampling_is_reproducible_for_a_seed():
    a = D.sample("azure-conv-2023", 500, seed=7)
    b = D.sample("azure-conv-2023", 500, seed=7)
    c = D.sample("azure-conv-2023", 500, seed=8)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(a[0], c[0])


@pytest.mark.parametrize("name", ["azure-conv-2023", "azure-code-2023", "arxiv-summarization",
                                  "mooncake-conversation", "mooncake-synthetic",
                                  "openchat-sharegpt4", "mlperf-llama3.1-405b",
                                  "mlperf-deepseek-r1"])
def test_a_large_sample_has_the_published_statistics(name):
    ds = D.get(name)
    isl, osl = D.sample(ds, 100_000, seed=0)
    for drawn, ls in ((isl, ds.isl), (osl, ds.osl)):
        # the quantile grid interpolates linearly between 19 points: the mean within 5%
        # (the long tails sit between p99.9 and the maximum), the median within 2%
        assert abs(drawn.mean() / ls.mean - 1) < 0.05
        assert abs(np.median(drawn) / ls.median - 1) < 0.02
        assert drawn.min() >= ls.min and drawn.max() <= ls.max


def test_the_openorca_inputs_drawn_have_the_published_mean_and_outputs_the_reference_length():
    ds = D.get("mlperf-llama2-70b-openorca")
    isl, osl = D.sample(ds, 100_000, seed=3)
    # 100,000 draws: a sampling error of 0.3 % (stdev 192 tokens / sqrt(1e5) of 222.3), and
    # the linear steps between 19 quantiles fatten the right-skewed tail by about 1 %: 3 %
    assert abs(isl.mean() / 222.3 - 1) < 0.03
    assert 48 <= isl.min() and isl.max() <= 1021
    # the output is MLPerf's accuracy target (294.45 generated tokens), not the GPT-4 answers
    assert set(osl.tolist()) == {294}


def test_a_mean_only_dataset_is_drawn_at_its_mean():
    isl, osl = D.sample("mooncake-toolagent", 100, seed=0)
    assert set(isl.tolist()) == {8596} and set(osl.tolist()) == {182}


def test_sharegpt_v3_is_the_benchmark_samplers_distribution():
    # facts: percentiles of the 16,384 (prompt, first answer) pairs vLLM's benchmark_serving
    # sampler keeps (JonnyKong/vidur 941a76c sharegpt_v3_filtered.csv, Llama 3.1 tokenizer);
    # the means are vLLM PR #18566's printed totals over 1000 requests
    ds = D.get("sharegpt-v3")
    assert ds.max_context == 2048
    assert (ds.isl.mean, ds.isl.median, ds.isl.p90, ds.isl.p99, ds.isl.min, ds.isl.max) == \
        (229.7, 103, 611, 876, 4, 1024)
    assert (ds.osl.mean, ds.osl.median, ds.osl.p90, ds.osl.p99, ds.osl.min, ds.osl.max) == \
        (203.1, 135, 487, 771, 4, 1853)
    assert not ds.isl.fixed and not ds.osl.fixed
    # the samplers' filters: prompts of 4 to 1024 tokens, outputs of at least 4
    assert ds.isl.quantiles[0] == 4 and ds.isl.quantiles[-1] == 1024
    assert ds.osl.quantiles[0] == 4


def test_sharegpt_v3_draws_have_the_samples_and_the_published_means():
    ds = D.get("sharegpt-v3")
    isl, osl = D.sample(ds, 100_000, seed=0)
    # every pair within the 2048-token context, inputs within the 1024-token prompt filter
    assert int((isl + osl).max()) <= 2048 and int(isl.max()) <= 1024
    assert int(isl.min()) >= 4 and int(osl.min()) >= 4
    # against the 16,384-pair sample's own means (3,598,561 and 3,265,280 tokens): the linear
    # steps between 19 quantiles fatten the right-skewed tails; within 3 %
    assert abs(isl.mean() / (3_598_561 / 16_384) - 1) < 0.03
    assert abs(osl.mean() / (3_265_280 / 16_384) - 1) < 0.03
    # against the published means: another draw of 1000 requests (stdev 243 and 209 tokens:
    # a standard error of 3.3 % of each mean) from another copy of the file; within 8 %,
    # about two standard errors and the 3 % above
    assert abs(isl.mean() / ds.isl.mean - 1) < 0.08
    assert abs(osl.mean() / ds.osl.mean - 1) < 0.08
    # long-tailed: the median well under the mean (whole tokens: within 2 tokens)
    assert abs(np.median(isl) - 103) <= 2 and abs(np.median(osl) - 135) <= 2


def test_synthetic_shapes_centre_on_the_run_lengths():
    i, o = D.sample("trtllm-fixed", 50, isl=1000, osl=1000)
    assert set(i.tolist()) == {1000} and set(o.tolist()) == {1000}
    i, o = D.sample("vllm-random", 20_000, isl=1000, osl=200, spread=0.5)
    assert (int(i.min()), int(i.max())) == (500, 1500)     # vLLM: len x [1 - r, 1 + r]
    assert abs(i.mean() / 1000 - 1) < 0.02                 # uniform: mean at the centre
    i, _ = D.sample("trtllm-normal", 20_000, isl=1000, osl=200, spread=0.1)
    assert abs(i.std() / 100 - 1) < 0.05


def test_a_dataset_without_published_lengths_is_refused_with_the_reason():
    with pytest.raises(InputError, match="cannot be sampled: input"):
        D.sample("cnn-dailymail", 10)
    with pytest.raises(InputError, match="cannot be sampled: output: mean not published"):
        D.sample("mlperf-llama3.1-8b-cnndm", 10)


# -- names --------------------------------------------------------------------------------------


@pytest.mark.parametrize("text,name", [
    ("ShareGPT V3 unfiltered", "sharegpt-v3"),
    ("MLPerf llama2-70b: OpenOrca", "mlperf-llama2-70b-openorca"),
    ("CNN/DailyMail summarisation", "cnn-dailymail"),
    ("MLPerf GPT-J", "cnn-dailymail"),
    ("MLPerf Llama 3.1 8B CNN/DailyMail", "mlperf-llama3.1-8b-cnndm"),
    ("MLPerf OpenOrca subset (performance_sample_count 24576)", "mlperf-llama2-70b-openorca"),
    ("sharegpt", "sharegpt-v3"),
    ("openchat_sharegpt4", "openchat-sharegpt4"),
    ("Azure LLM inference trace 2023, code", "azure-code-2023"),
    ("synthetic, uniform ISL/OSL (prepare_dataset.py token-norm-dist, stdev 0)",
     "trtllm-fixed"),
])
def test_free_text_names_a_dataset(text, name):
    assert D.match(text).name == name


def test_unknown_free_text_matches_nothing_and_an_unknown_name_lists_the_names():
    assert D.match("our internal chat logs") is None
    with pytest.raises(InputError) as e:
        D.get("sharegtp")
    assert "sharegpt-v3" in str(e.value) and "vllm-random" in str(e.value)


@pytest.mark.parametrize("text", ["Llama-3.1-405B", "LLAMA3.1_405B", "llama3.1-405b",
                                  "Meta-Llama-3.1-405B-Instruct",
                                  "meta-llama/Llama-3.1-405B-Instruct-FP8"])
def test_model_names_match_in_their_usual_spellings(text):
    assert find_model(text) is load_model("llama3-405b")
    assert load_model(text) is load_model("llama3-405b")


def test_no_two_built_in_models_normalise_alike():
    from gpufabric.workloads.models import _by_key
    assert len({m.name for m in _by_key().values()}) == len({m.name for m in
                                                             __import__("gpufabric.workloads."
                                                                        "models", fromlist=["x"]
                                                                        ).list_models()})


# -- models by shape ----------------------------------------------------------------------------

SHAPE = {"name": "Acme-13B", "arch": "dense", "layers": 44, "hidden": 5120, "heads": 40,
         "kv_heads": 8, "ffn": 13824, "vocab": 32000, "activation": "swiglu",
         "norm": "rmsnorm", "precision": "bf16", "params": 13e9}


def test_a_model_given_by_shape_is_built():
    m = model_from_shape(SHAPE, "entry acme")
    # 44 blocks of GQA attention (5120 x 128 x (40 + 2 x 8 + 40)) and a SwiGLU MLP
    # (3 x 5120 x 13824), two norms, plus two 32000 x 5120 embeddings: 12.44B (a fact)
    assert (m.layers, m.kv_heads, m.ffn) == (44, 8, 13824)
    assert round(m.params() / 1e9, 2) == 12.44


def test_the_training_validator_builds_an_unnamed_model_from_its_shape():
    m = resolve_model(SHAPE)
    assert m is not None and m.name == "acme-13b" and m.layers == 44
    assert resolve_model({"name": "Acme-13B", "layers": 44, "hidden": 5120}) is None  # no ffn


def _entry(**kw):
    e = {"id": "t-1", "source": "test", "system": {"gpu": "H100-SXM", "gpus": 1},
         "engine": {"name": "vLLM"}, "model": {"name": "Llama 3.1 8B Instruct"},
         "parallelism": {"tp": 1},
         "workload": {"mode": "online", "request_rate": 2, "num_requests": 200},
         "result": {"tpot_ms_p50": 10.0}}
    e.update(kw)
    return e


def _run(tmp_path, *entries):
    f = tmp_path / "m.yaml"
    f.write_text(yaml.safe_dump(list(entries)))
    return validate(str(f))


def test_an_entry_that_names_a_dataset_runs_on_it(tmp_path):
    e = _entry()
    e["workload"]["dataset"] = "ShareGPT V3 unfiltered"
    res = _run(tmp_path, e)
    assert not res["skipped"]
    (row,) = res["points"]
    # the run's lengths are the means of the dataset's draws
    assert row["dataset"] == "sharegpt-v3"
    assert (row["isl"], row["osl"]) == D.mean_lengths(D.get("sharegpt-v3"))


def test_unknown_or_unpublished_datasets_skip_with_the_reason(tmp_path):
    a, b, c = _entry(id="a"), _entry(id="b"), _entry(id="c")
    a["workload"]["dataset"] = "our internal chat logs"
    b["workload"]["dataset"] = "CNN/DailyMail"
    res = _run(tmp_path, a, b, c)
    reasons = {s["id"]: s["reason"] for s in res["skipped"]}
    assert reasons == {
        "a": "dataset 'our internal chat logs' is not a known dataset (gpufabric datasets) "
             "and no lengths are stated",
        "b": "dataset cnn-dailymail: input and output length statistics not published",
        "c": "input / output lengths not stated"}


def test_no_entry_of_the_inference_file_that_names_a_dataset_is_skipped_for_it(tmp_path):
    entries = yaml.safe_load(INFERENCE.read_text())
    def names_one(e: dict) -> bool:
        wl = e.get("workload") or {}
        ds = D.match(str(wl.get("dataset", "")))
        return "isl" not in wl and ds is not None and not ds.synthetic

    named = [e for e in entries if names_one(e)]
    for e in named:
        try:
            dataset_lengths(e["workload"])
        except Skip as why:
            pytest.fail(f"{e['id']}: {why}")
    # the MLPerf Llama 2 70B results (five entries, 15 figures) run on the OpenOrca lengths
    mlperf = [e for e in named if D.match(e["workload"]["dataset"]).name ==
              "mlperf-llama2-70b-openorca"]
    assert len(mlperf) == 5
    res = _run(tmp_path, *mlperf)
    assert not res["skipped"] and len(res["points"]) == 15
    assert {p["dataset"] for p in res["points"]} == {"mlperf-llama2-70b-openorca"}


def test_an_entry_with_a_model_by_shape_runs(tmp_path):
    e = _entry(model=dict(SHAPE))
    e["workload"].update(isl=512, osl=64)
    res = _run(tmp_path, e)
    assert not res["skipped"] and res["points"][0]["model"] == "acme-13b"
    e2 = _entry(model={"name": "Acme-13B", "layers": 44, "hidden": 5120})
    e2["workload"].update(isl=512, osl=64)
    (skip,) = _run(tmp_path, e2)["skipped"]
    assert skip["reason"].startswith("model 'Acme-13B' not in the model catalog and its "
                                     "shape is incomplete")


# -- the command line ---------------------------------------------------------------------------


def test_datasets_lists_them_and_json_gives_the_statistics(cli):
    code, out, _ = cli("datasets")
    assert code == 0 and "sharegpt-v3" in out and "azure-conv-2023" in out
    code, out, _ = cli("datasets", "--json")
    rows = {r["name"]: r for r in json.loads(out)}
    assert rows["azure-conv-2023"]["isl"]["median"] == 1020
    assert rows["mlperf-llama2-70b-openorca"]["samplable"] is True
    assert rows["cnn-dailymail"]["samplable"] is False


def test_serve_on_a_dataset_and_its_refusals(cli):
    code, out, _ = cli("serve", "llama3-8b", "gpu=H100-SXM,gpus_per_node=1", "--dataset",
                       "azure-conv-2023", "--rate", "2", "--requests", "200", "--json")
    r = json.loads(out)
    assert code == 0 and "dataset azure-conv-2023" in r["workload"]["source"]
    assert 800 < r["workload"]["isl"] < 1500      # 200 draws around the published 1155
    msg = error(cli, "serve", "llama3-8b", "gpu=H100-SXM,gpus_per_node=1", "--dataset",
                "sharegtp")
    assert msg.startswith("--dataset: unknown dataset 'sharegtp'") and "sharegpt-v3" in msg
    assert error(cli, "serve", "llama3-8b", "gpu=H100-SXM,gpus_per_node=1",
                 "--dataset-spread", "0.5") == "--dataset-spread: applies only with " \
        "--dataset (a synthetic dataset's spread)"


ACME = """name: acme-13b
arch: dense
source: "a test shape"
layers: 44
hidden: 5120
heads: 40
kv_heads: 8
ffn: 13824
vocab: 32000
activation: swiglu
norm: rmsnorm
"""


def test_model_file_runs_train_and_serve_and_refuses_a_model_argument_with_it(cli, tmp_path):
    f = tmp_path / "acme.yaml"
    f.write_text(ACME)
    code, out, _ = cli("train", "--model-file", str(f), "hgx-h100", "--tp", "8", "--json")
    assert code == 0 and json.loads(out)["model"] == "acme-13b"
    code, out, _ = cli("serve", "--model-file", str(f), "gpu=H100-SXM,gpus_per_node=1",
                       "--requests", "50", "--json")
    assert code == 0 and json.loads(out)["model"] == "acme-13b"
    assert error(cli, "serve", "--model-file", str(f), "llama3-8b", "hgx-h100") == \
        "--model-file: give the system as the only argument: --model-file FILE SYSTEM " \
        "(the file gives the model)"
    assert error(cli, "train", "--model-file", str(tmp_path / "none.yaml"), "hgx-h100") \
        .endswith("none.yaml: no such file")


def test_lengths_a_dataset_gives_are_not_also_taken_from_the_command_line(cli):
    sys1 = "gpu=H100-SXM,gpus_per_node=1"
    assert error(cli, "serve", "llama3-8b", sys1, "--dataset", "sharegpt", "--isl", "500") == \
        "--isl: cannot be used with --dataset sharegpt-v3 (the dataset gives the lengths; " \
        "only the synthetic ones, trtllm-fixed, trtllm-normal and vllm-random, centre on " \
        "--isl / --osl)"
    assert error(cli, "serve", "llama3-8b", sys1, "--dataset", "trtllm-fixed",
                 "--dataset-spread", "0.2") == \
        "--dataset-spread: applies only to trtllm-normal and vllm-random, not trtllm-fixed"
    code, out, _ = cli("serve", "llama3-8b", sys1, "--dataset", "vllm-random", "--isl", "800",
                       "--osl", "100", "--dataset-spread", "0.5", "--requests", "100", "--json")
    w = json.loads(out)["workload"]
    assert code == 0 and 600 < w["isl"] < 1000 and 75 < w["osl"] < 125   # uniform, +-50 %



def test_small_streams_keep_the_datasets_mean():
    """Draws are stratified over the distribution, so one simulated stream of a deployment's
    share (a few hundred requests) has the dataset's mean: over 20 seeds, 125 ShareGPT draws
    stay within 2 % of 100,000 (unstratified draws of 125 spread by about 8 %)."""
    big = D.sample("sharegpt-v3", 100_000, seed=1)[0].mean()
    means = [D.sample("sharegpt-v3", 125, seed=s)[0].mean() for s in range(20)]
    assert max(abs(m / big - 1) for m in means) < 0.02
    assert np.std(means) / big < 0.01

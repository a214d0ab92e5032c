"""gpufabric train / models / validate (training files) from the command line."""

import json
from pathlib import Path

DATA = Path(__file__).parent / "data" / "calibration"
SYS = "gpu=H100-SXM,gpus_per_node=8,nodes=16,nic=ib-ndr,nics_per_node=8"


def test_train_json_has_the_top_level_keys(cli):
    code, out, err = cli("train", "llama3-70b", SYS, "--tp", "8", "--pp", "2", "--vpp", "5",
                         "--global-batch", "64", "--seq-len", "4096", "--json")
    assert code == 0, err
    r = json.loads(out)
    for k in ("step_time_s", "tokens_per_s_per_gpu", "mfu", "memory_GiB_per_gpu"):
        assert isinstance(r[k], float)
    assert r["parallel"]["dp"] == 8 and r["parallel"]["grad_accum"] == 8
    assert r["step_time_s"] * r["tokens_per_s_per_gpu"] * 128 == \
        __import__("pytest").approx(64 * 4096)
    assert set(r["breakdown_s"]) >= {"compute", "tp_comm", "dp_comm", "pipeline_bubble"}


def test_train_prints_the_breakdown_and_the_bottleneck(cli):
    code, out, _ = cli("train", "llama3-8b", SYS, "--global-batch", "256", "--seq-len", "4096")
    assert code == 0
    assert "step time" in out and "MFU" in out and "bottleneck" in out
    assert "memory per GPU" in out and "of 80" in out


def test_a_layout_that_does_not_fit_exits_2_with_one_line(cli):
    code, out, err = cli("train", "llama3-70b", "hgx-h100")
    assert code == 2 and out == ""
    assert err.startswith("gpufabric: error: memory: needs ") and \
        err.strip().endswith("GiB per GPU, H100-SXM has 80; no --zero, --recompute or "
                             "--micro-batch setting fits this layout; try --search")
    assert len(err.strip().splitlines()) == 1


def test_unknown_model_and_bad_layout_exit_2(cli):
    code, _, err = cli("train", "llama9-1b", "hgx-h100")
    assert code == 2 and "unknown model 'llama9-1b'" in err
    code, _, err = cli("train", "llama3-8b", "hgx-h100", "--tp", "3")
    assert code == 2 and "tp x pp x cp = 3 does not divide the 8 GPUs" in err


def test_search_ranks_layouts_by_throughput(cli):
    code, out, err = cli("train", "llama3-8b", "gpu=H100-SXM,gpus_per_node=8,nodes=2,nic=ib-ndr",
                         "--global-batch", "32", "--seq-len", "4096", "--search", "--top", "3",
                         "--json")
    assert code == 0, err
    r = json.loads(out)
    tps = [x["tokens_per_s"] for x in r["layouts"]]
    assert len(tps) == 3 and tps == sorted(tps, reverse=True)
    assert r["step_time_s"] == r["layouts"][0]["step_time_s"]
    assert all(x["fits"] for x in r["layouts"])


def test_models_lists_the_issue_models(cli):
    code, out, _ = cli("models", "--json")
    names = {m["name"] for m in json.loads(out)}
    assert {"gpt3-175b", "llama3-405b", "deepseek-v3", "bert-large", "resnet-50"} <= names


def test_validate_dispatches_training_files_and_keeps_collectives(cli):
    code, out, _ = cli("validate", str(DATA / "training.yaml"), "--json")
    s = json.loads(out)["summary"]
    assert code == 0 and s["all"]["points"] == 135      # 115 throughput, 20 memory figures
    assert {"median_abs_pct", "p90_abs_pct", "max_abs_pct", "points", "fitted",
            "looked_at", "by_metric"} <= set(s)
    code, out, _ = cli("validate", str(DATA / "collectives.yaml"), "--json")
    assert code == 0 and "by_size" in json.loads(out)["summary"]


def test_bad_training_file_and_oversized_model_exit_2(cli, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("- id: x\n  system: {gpu: H100-SXM, gpus: 16}\n  model: {name: Llama 3 8B}\n"
                   "  parallelism: {tp: abc}\n  result: {tokens_per_s_per_gpu: 100}\n")
    code, _, err = cli("validate", str(bad))
    assert code == 2 and "bad.yaml: x.points[0]: bad value" in err
    big = tmp_path / "big.yaml"
    big.write_text("name: big\narch: dense\nsource: s\nlayers: 1000000000\nhidden: 64\n"
                   "heads: 1\nffn: 64\nvocab: 10\n")
    code, _, err = cli("train", str(big), "hgx-h100")
    assert code == 2 and err.strip().endswith("big.yaml: layers: got 1000000000; at most 10,000")


def test_a_cnn_trains_data_parallel_only(cli):
    code, out, _ = cli("train", "resnet-50", "dgx-a100", "--micro-batch", "256",
                       "--precision", "fp16", "--json")
    assert code == 0 and json.loads(out)["parallel"]["dp"] == 8
    code, _, err = cli("train", "resnet-50", "dgx-a100", "--tp", "2")
    assert code == 2 and "resnet-50 is a cnn: data parallelism only" in err


def test_power_cap_and_torchtitan_recomputation_from_the_command_line(cli):
    one = "gpu=H100-SXM,gpus_per_node=8,nodes=1"
    args = ("train", "llama3-8b", one, "--fsdp", "full", "--recompute", "selective",
            "--seq-len", "4096", "--json")
    base = json.loads(cli(*args)[1])
    capped = json.loads(cli(*args, "--power-cap", "500", "--sac", "op")[1])
    # Meta's 500 W H100s run a slower tensor clock, and torchtitan's op-level policy recomputes
    # more than the attention core: both lengthen the step
    assert capped["step_time_s"] > base["step_time_s"]
    code, _, err = cli("train", "llama3-8b", one, "--power-cap", "-5")
    assert (code, err) == (2, "gpufabric: error: --power-cap: must be a number above 0, got -5\n")
    code, _, err = cli("train", "llama3-8b", one, "--sac", "layer")
    assert code == 2 and "allowed: attention, op" in err

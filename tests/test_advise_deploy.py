"""`advise --deploy-dir`: the winning serving design written as Kubernetes manifests, as
`recommend --deploy-dir` writes them (one shared writer, gpufabric/cli/deploy.py)."""

from __future__ import annotations

import json

import pytest
import yaml

from gpufabric.advise import core
from gpufabric.errors import InputError

SMALL = """name: one-box
workloads:
  serve: {model: llama3-8b, rate: 2, isl: 500, osl: 100, slo_ttft_ms: 1000, slo_tpot_ms: 50,
          precision: fp8}
constraints: {deployment: on-prem, gpus: [H100-SXM]}
objective: lowest-cost
space: {gpus_per_node: [8], nodes: [1]}
"""


def _docs(folder) -> dict:
    return {p.name: list(yaml.safe_load_all(p.read_text())) for p in folder.iterdir()}


def test_the_winner_of_a_serving_scenario_is_written_with_its_layout_and_instances(
        cli, tmp_path):
    sc = tmp_path / "one-box.yaml"
    sc.write_text(SMALL)
    out = tmp_path / "deploy"
    code, text, err = cli("advise", str(sc), "--top", "1", "--json", "--deploy-dir", str(out),
                          "--weights", "meta-llama/Llama-3.1-8B-Instruct")
    assert code == 0, err
    res = json.loads(text)
    best = res["designs"][0]
    m = best["metrics"]["serve"]
    assert res["deploy"] == {"dir": str(out), "files": ["deployment.yaml", "service.yaml"],
                             "name": "llama3-8b-vllm", "kind": "Deployment"}
    docs = _docs(out)
    dep = docs["deployment.yaml"][0]
    assert dep["kind"] == "Deployment" and dep["spec"]["replicas"] == m["instances"]
    c = dep["spec"]["template"]["spec"]["containers"][0]
    args = c["args"] if "args" in c else c["command"]
    line = " ".join(str(a) for a in args)
    assert "meta-llama/Llama-3.1-8B-Instruct" in line
    assert f"--tensor-parallel-size {m['layout']['tp']}" in line
    assert "--kv-cache-dtype fp8" in line and "--max-model-len 600" in line
    assert c["resources"]["limits"]["nvidia.com/gpu"] == str(m["layout"]["tp"])
    head = (out / "deployment.yaml").read_text().splitlines()[0]
    assert head == f"# gpufabric advise one-box: {best['design']}"


def test_a_rack_scale_winner_runs_on_its_trays(tmp_path):
    """A GB200 NVL72 winner (moe-supernode's: 9 instances of dp_attention8 ep8 tp8 on the
    72-GPU domain) runs each 8-GPU instance over two 4-GPU compute trays, the Kubernetes
    nodes: a LeaderWorkerSet of 9 groups of two pods."""
    from gpufabric.advise import scenario
    from gpufabric.cli.advise import _deploy
    sc = scenario.load("moe-supernode")
    c = core.Candidate("GB200", 72, 1, {"gpu": "GB200", "gpus_per_node": 72}, "on-prem",
                       metrics={"serve": {"layout": {"dp_attention": 8, "ep": 8, "tp": 8},
                                          "instances": 9, "per_instance": 2.5,
                                          "ttft_ms_p90": 400.0, "tpot_ms_p90": 30.0}})
    out = tmp_path / "moe"
    wrote = _deploy(c, sc, {"deploy_dir": str(out), "weights": "deepseek-ai/DeepSeek-V3",
                            "draft_weights": None, "image": None, "name": None,
                            "namespace": None})
    assert wrote["kind"] == "LeaderWorkerSet"
    lws = _docs(out)["leaderworkerset.yaml"][0]
    assert lws["spec"]["replicas"] == 9
    group = lws["spec"]["leaderWorkerTemplate"]
    assert group["size"] == 2
    for tmpl in (group["leaderTemplate"], group["workerTemplate"]):
        limits = tmpl["spec"]["containers"][0]["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == "4"


@pytest.mark.parametrize("args, field, words", [
    (["training-box", "--deploy-dir", "d", "--weights", "w"], "--deploy-dir", "serves no model"),
    (["small-chat", "--deploy-dir", "d"], "--weights", "needs the weights"),
    (["--check", "builtin", "--deploy-dir", "d"], "--check", "cannot be used with --deploy-dir"),
    (["small-chat", "--interactivity", "20,60", "--deploy-dir", "d", "--weights", "w"],
     "--deploy-dir", "give one --interactivity target"),
])
def test_what_cannot_be_written_is_refused_before_the_search(cli, tmp_path, monkeypatch, args,
                                                             field, words):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(core, "advise", lambda *a, **k: pytest.fail("the search ran"))
    code, out, err = cli("advise", *args)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert f"error: {field}: " in err and words in err
    assert not (tmp_path / "d").exists()


def test_an_engine_the_manifests_do_not_run_is_refused_before_the_search(cli, tmp_path,
                                                                         monkeypatch):
    # the manifests run the engine the figures were predicted with, or nothing is written
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(core, "advise", lambda *a, **k: pytest.fail("the search ran"))
    (tmp_path / "trt.yaml").write_text(SMALL.replace("precision: fp8}",
                                                     "precision: fp8, engine: TensorRT-LLM}"))
    code, out, err = cli("advise", "trt.yaml", "--deploy-dir", "d", "--weights", "w")
    assert code == 2 and out == ""
    assert err.strip().endswith("--deploy-dir: writes vllm or sglang deployments; one-box "
                                "serves with tensorrt-llm")
    assert not (tmp_path / "d").exists()


def test_a_disaggregated_winner_is_refused_naming_it():
    from gpufabric.advise import scenario
    from gpufabric.cli.advise import _deploy
    sc = scenario.parse(yaml.safe_load(SMALL), "one-box.yaml")
    pre = core.Candidate("H100-SXM", 8, 1, {"gpu": "H100-SXM", "gpus_per_node": 8}, "on-prem",
                         pd=(1, 1))
    with pytest.raises(InputError) as e:
        _deploy(pre, sc, {"deploy_dir": "d"})
    assert e.value.field == "--deploy-dir" and "disaggregated" in e.value.message

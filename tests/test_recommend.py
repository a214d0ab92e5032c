"""recommend: the fewest GPUs that serve a load within its SLO, the next-smaller design and the
SLO it misses, prefix reuse and MTP on the same command line, and Kubernetes manifests of the
design (parsed, and checked against the Kubernetes API client's own models)."""

from __future__ import annotations

import json
import math
import shlex

import pytest
import yaml

from gpufabric.advise import scenario
from gpufabric.errors import InputError
from gpufabric.k8s.manifests import Design, manifests, objects
from gpufabric.workloads.inference.serve import ServeConfig, serve


def _flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_fewest_gpus_its_margins_the_next_smaller_design_and_its_deployment(cli, tmp_path):
    """Llama 3 8B at 30 requests/s on A100 80 GB servers: the answer is the fewest GPUs of
    the layouts tried, meets the SLO at the load, and the next-smaller design misses it; the
    manifests run that very design."""
    out = tmp_path / "deploy"
    code, text, err = cli("recommend", "llama3-8b", "A100-SXM4-80GB", "--rate", "30",
                          "--isl", "500", "--osl", "100", "--slo-ttft", "300", "--slo-tpot",
                          "20", "--json", "--deploy-dir", str(out), "--weights",
                          "meta-llama/Llama-3.1-8B-Instruct")
    assert code == 0, err
    r = json.loads(text)
    d = r["design"]
    rows = [x for x in r["layouts"] if "gpus" in x]
    for x in rows:            # the instances a layout needs: the load over one's capacity
        assert x["instances"] == math.ceil(30 / x["per_instance"] - 1e-9)
    assert d["gpus"] == min(x["gpus"] for x in rows) == d["instances"] * d["gpus_per_instance"]
    assert d["capacity"] >= 30
    # run at the load (below its capacity within the SLO), the design keeps the advisor's
    # verdict: 90% of requests within both targets
    assert d["predicted"]["slo_attainment"] >= 0.9
    assert {m["slo"] for m in d["margins"]} == {"TTFT", "TPOT"}
    n = r["next_smaller"]
    assert n["gpus"] < d["gpus"] and n["predicted"]["slo_attainment"] < 0.9 and n["misses"]
    docs = {p.name: yaml.safe_load(p.read_text()) for p in out.iterdir()}
    assert sorted(docs) == ["deployment.yaml", "service.yaml"]
    dep, svc = docs["deployment.yaml"], docs["service.yaml"]
    assert (dep["apiVersion"], dep["kind"], svc["kind"]) == ("apps/v1", "Deployment", "Service")
    assert dep["spec"]["replicas"] == d["instances"]
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["command"] == ["vllm", "serve"]
    assert c["args"][0] == "meta-llama/Llama-3.1-8B-Instruct"
    assert _flag(c["args"], "--tensor-parallel-size") == str(d["layout"]["tp"])
    assert _flag(c["args"], "--max-num-seqs") == str(d["predicted"]["max_num_seqs"])
    assert _flag(c["args"], "--max-model-len") == "600"          # 500 in + 100 out
    assert c["resources"]["limits"]["nvidia.com/gpu"] == str(d["gpus_per_instance"])
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]


def _api(obj: dict, kind: str) -> dict:
    """``obj`` read into the Kubernetes client's model of ``kind`` and written back: a
    missing required field raises, an unknown one is dropped (so the two differ)."""
    from kubernetes.client import ApiClient
    api = ApiClient()
    return api.sanitize_for_serialization(api._ApiClient__deserialize(obj, kind))


def test_a_multi_server_moe_instance_is_a_leaderworkerset_with_the_engines_real_flags():
    """DeepSeek-V3 as 16-wide attention-DP + EP instances over two 8-GPU servers, with MTP:
    vLLM's data-parallel flags (a headless worker from rank 8) and SGLang's DP attention."""
    base = dict(name="dsv3", weights="deepseek-ai/DeepSeek-V3",
                layout={"tp": 16, "ep": 16, "dp_attention": 16}, gpus_per_instance=16,
                instances=3, gpus_per_node=8, max_num_seqs=128, max_model_len=9000,
                kv_fp8=True, speculative=("mtp", 2))
    v = objects(Design(engine="vllm", **base))
    lws = v["leaderworkerset.yaml"]
    assert (lws["apiVersion"], lws["kind"]) == ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")
    assert lws["spec"]["replicas"] == 3 and lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    t = lws["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):
        assert _api(t[role], "V1PodTemplateSpec") == t[role]
        c = t[role]["spec"]["containers"][0]
        assert c["resources"]["limits"]["nvidia.com/gpu"] == "8"
    lead = shlex.split(t["leaderTemplate"]["spec"]["containers"][0]["args"][0])
    work = t["workerTemplate"]["spec"]["containers"][0]["args"][0]
    assert _flag(lead, "--data-parallel-size") == "16" and "--enable-expert-parallel" in lead
    assert _flag(lead, "--data-parallel-size-local") == "8"
    assert json.loads(_flag(lead, "--speculative-config")) == {"method": "mtp",
                                                               "num_speculative_tokens": 2}
    assert _flag(lead, "--kv-cache-dtype") == "fp8" and "--headless" not in lead
    assert "--headless" in work and "$((LWS_WORKER_INDEX * 8))" in work
    assert v["service.yaml"]["spec"]["selector"] == {"app": "dsv3", "role": "leader"}
    s = shlex.split(objects(Design(engine="sglang", **base))["leaderworkerset.yaml"]["spec"][
        "leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]["args"][0])
    assert [_flag(s, f) for f in ("--tp-size", "--dp-size", "--ep-size", "--nnodes",
                                  "--speculative-algorithm", "--speculative-num-steps")] == \
        ["16", "16", "16", "$(LWS_GROUP_SIZE)", "EAGLE", "2"]
    assert "--enable-dp-attention" in s


def test_a_single_server_deployment_and_service_pass_the_kubernetes_models():
    d = Design(name="l8", engine="sglang", weights="meta-llama/Llama-3.1-8B-Instruct",
               layout={"tp": 2}, gpus_per_instance=2, instances=3, gpus_per_node=8,
               prefix_caching=True, namespace="serving")
    text = manifests(d)
    dep = yaml.safe_load(text["deployment.yaml"])
    assert _api(dep, "V1Deployment") == dep
    svc = yaml.safe_load(text["service.yaml"])
    assert _api(svc, "V1Service") == svc
    assert "&id" not in text["deployment.yaml"]       # no YAML aliases
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["command"] == ["python3", "-m", "sglang.launch_server"]
    assert _flag(c["args"], "--model-path") == d.weights and _flag(c["args"], "--tp-size") == "2"


@pytest.mark.parametrize("args, field", [
    (["--rate", "2"], "--slo-tpot"),                                   # no SLO
    (["--slo-tpot", "50"], "--rate"),                                  # no load
    (["--rate", "2", "--slo-tpot", "50", "--engine", "trt"], "--engine"),
    (["--rate", "2", "--slo-tpot", "50", "--prefix-tokens", "2000", "--isl", "1000"],
     "--prefix-tokens"),
    (["--rate", "2", "--slo-tpot", "50", "--spec", "mtp"], "--spec"),  # Llama has no MTP
    (["--rate", "2", "--slo-tpot", "50", "--deploy-dir", "x"], "--weights"),
    (["--rate", "2", "--slo-tpot", "50", "--precision", "int3"], "--precision"),
    (["--rate", "2", "--slo-tpot", "50", "--pd", "--deploy-dir", "x", "--weights", "w"],
     "--deploy-dir"),                                                 # no PD manifests
    (["--concurrency", "8", "--slo-tpot", "50", "--pd"], "--pd"),     # xPyD takes a rate
    (["--rate", "2", "--slo-tpot", "1", "--max-instance-gpus", "2"], "--slo-tpot"),  # unmeetable
])
def test_bad_input_is_one_line_naming_the_option(cli, args, field):
    code, out, err = cli("recommend", "llama3-8b", "H100-SXM", *args)
    assert code == 2 and err.count("\n") == 1 and f" {field}: " in err, err


def test_the_engine_is_the_serve_workloads_and_pd_units_run_it():
    from gpufabric.advise import core
    from gpufabric.advise import recommend as R
    serve_ = scenario._serve({"model": "llama3-8b", "rate": 2, "slo_tpot_ms": 50,
                              "engine": "sglang", "pd": True}, "")
    t = R.Target(serve=serve_, node=R.server_spec("H100-SXM"), pd=True)
    jobs = core._jobs(R._candidate(t), R._scenario(t), every=True)[1]
    assert jobs and {j.engine for j, _ in jobs} == {"sglang"}
    pd = [j for j, _ in R._pd_jobs(t, jobs)]
    assert pd and all(isinstance(j, core._PDJob) and j.engine == "sglang" for j in pd)


def test_the_deploy_folder_is_made_but_never_its_parents(cli, tmp_path):
    missing = tmp_path / "no" / "deploy"
    code, _, err = cli("recommend", "llama3-8b", "H100-SXM", "--rate", "2", "--slo-tpot", "50",
                       "--deploy-dir", str(missing), "--weights", "w")
    assert code == 2 and "--deploy-dir: directory" in err and "create it first" in err
    assert not missing.parent.exists()


def test_a_shared_prefix_is_found_cached_and_shortens_the_prefill():
    """800 of 1,000 prompt tokens shared: every request but the first finds the 50 whole
    16-token blocks cached (80% of its prompt), so the median TTFT falls."""
    from gpufabric.topology.build import load
    topo = load("gpu=H100-SXM,gpus_per_node=1")
    cfg = ServeConfig(rate=20.0, isl=1000, osl=50, requests=200)
    none = serve("llama3-8b", topo, cfg)
    shared = serve("llama3-8b", topo, ServeConfig(rate=20.0, isl=1000, osl=50, requests=200,
                                                  prefix_tokens=800))
    assert shared["kv_tiers"]["hit_rate"] == pytest.approx(0.8 * 199 / 200, abs=0.01)
    assert shared["ttft_ms"]["p50"] < none["ttft_ms"]["p50"]


def test_a_scenario_takes_a_dataset_and_a_shared_prefix():
    s = scenario.parse({"workloads": {"serve": {"model": "llama3-8b", "rate": 2,
                                                "dataset": "sharegpt", "prefix_tokens": 64,
                                                "slo_tpot_ms": 50}}}, "s.yaml")
    assert (s.serve.dataset, s.serve.prefix_tokens) == ("sharegpt-v3", 64)
    with pytest.raises(InputError, match="workloads.serve.isl: cannot be used with dataset"):
        scenario.parse({"workloads": {"serve": {"model": "llama3-8b", "rate": 2, "isl": 9,
                                                "dataset": "sharegpt", "slo_tpot_ms": 50}}},
                       "s.yaml")


def test_the_shared_prefix_closed_form_is_the_lru_replay():
    """Requests that all use the same blocks take the closed form; it gives the distances the
    general replay (a Fenwick tree over time) gives the same requests followed by another."""
    import numpy as np

    from gpufabric.workloads.inference import kvcache as K
    ids = [tuple(("s", j) for j in range(5))] * 4
    mine = np.array([False, True, False, True])
    closed = K._distances(ids, np.array([5, 2]), mine)
    replay = K._distances(ids + [(99,)], np.array([5, 2]), np.append(mine, False))
    assert [d.tolist() for d in closed] == [d.tolist() for d in replay] == \
        [[5.0, 4.0, 3.0, 2.0, 1.0], [5.0, 4.0]]

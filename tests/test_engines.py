"""Engine profiles as data, and memory as the engines account it."""

import json

import pytest

from gpufabric import params
from gpufabric.errors import InputError
from gpufabric.topology.build import from_spec
from gpufabric.workloads.inference import engines as E
from gpufabric.workloads.inference.itertime import (ENGINE_LAYER_S, ENGINE_OVERHEAD_S,
                                                    ENGINE_REQUEST_S, ServeLayout, StepModel,
                                                    engine_key)
from gpufabric.workloads.inference.serve import (ServeConfig, scheduler_config, serve,
                                                 step_model, with_client)

ENGINES = ("vllm", "vllm-v0", "sglang", "tensorrt-llm", "tensorrt-llm-tensorrt", "lmdeploy",
           "llama.cpp", "fastertransformer")


def test_one_profile_per_engine_each_value_with_a_source():
    prof = E.builtin()
    assert set(ENGINES) | {"default"} == set(prof)
    for p in prof.values():
        assert p.scheduler_source and p.overhead.source
        assert all(r.source for r in p.token_rules)
        assert p.policy in E.POLICIES and p.mem_of in E.MEM_OF


def test_engine_key_keeps_its_prefix_matching():
    assert engine_key("TensorRT-LLM") == engine_key("trtllm") == "tensorrt-llm"
    assert engine_key("vLLM") == engine_key("Mooncake Transfer Engine") == "vllm"
    assert engine_key("SGLang") == "sglang" and engine_key("NIM") == "tensorrt-llm"
    assert engine_key("FasterTransformer") == "fastertransformer"
    assert engine_key("LMDeploy") == engine_key("TurboMind") == "lmdeploy"
    assert engine_key("llama.cpp") == engine_key("llama-server") == "llama.cpp"
    # NVIDIA NIM's LLM containers run TensorRT-LLM engines (NIM docs, "Model Profiles")
    assert engine_key("NVIDIA NIM") == "tensorrt-llm"
    assert engine_key(None) == engine_key("other") == "default"
    # a backend with its own profile: TensorRT-LLM's TensorRT engines (C++ executor)
    assert engine_key("TensorRT-LLM tensorrt") == engine_key("trtllm tensorrt") == \
        engine_key("NVIDIA NIM tensorrt") == "tensorrt-llm-tensorrt"
    assert engine_key("TensorRT-LLM pytorch") == "tensorrt-llm"


def test_the_fitted_records_stay_visible_as_parameters():
    assert ENGINE_OVERHEAD_S["tensorrt-llm-tensorrt"].fitted_on == (
        "trtllm-0.14-online-*", "trtllm-0.17-llama31-8b-h100-tp1-fp8")
    assert ENGINE_LAYER_S["tensorrt-llm-tensorrt"].fitted_on == (
        "trtllm-0.14-online-*", "trtllm-0.17-llama31-8b-h100-tp1-fp8")
    assert params.REGISTRY["ENGINE_REQUEST_S[tensorrt-llm]"].kind == "prior"
    assert ENGINE_REQUEST_S["vllm"].fitted_on == (
        "mooncake-vllm-pd-1p1d-h800-qwen3-8b-kv-transfer",)
    assert ENGINE_LAYER_S["fastertransformer"].value == 100e-6
    assert params.REGISTRY["ENGINE_OVERHEAD_S[vllm]"].kind == "prior"
    assert params.REGISTRY["ENGINE_GPU_MEMORY_UTILIZATION[vllm]"].value == 0.9
    assert params.REGISTRY["ENGINE_MAX_NUM_SEQS[tensorrt-llm]"].value == 2048


def test_the_profile_sets_the_scheduler_and_memory(h100=None):
    topo = from_spec({"gpu": "H100-SXM", "gpus_per_node": 1})
    for eng, seqs, full in (("vllm", 256, False), ("tensorrt-llm", 2048, True),
                            ("lmdeploy", 256, False), ("fastertransformer", 256, True)):
        cfg = ServeConfig(engine=eng)
        sm = step_model("llama3-8b", topo, cfg)
        s = scheduler_config(sm, cfg)
        assert (s.max_num_seqs, s.reserve_full, s.block_size) == (seqs, full,
                                                                 sm.profile.block_size)
    assert step_model("llama3-8b", topo, ServeConfig(engine="lmdeploy")).block_size == 64
    # LMDeploy: 0.8 of what the weights leave, vLLM: 0.9 of all
    lm = step_model("llama3-8b", topo, ServeConfig(engine="lmdeploy"))
    vl = step_model("llama3-8b", topo, ServeConfig(engine="vllm"))
    assert (lm.mem_util, lm.profile.mem_of, vl.mem_util, vl.profile.mem_of) == (
        0.8, "free", 0.9, "total")


def _write(tmp_path, text, name="mine.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_a_users_profile_file_inherits_from_a_base(tmp_path):
    path = _write(tmp_path, """
name: my-vllm
title: vLLM with a slower host
base: vllm
overhead_s: {value: 0.006, source: "measured: nsys on our host, 6 ms a step"}
gpu_memory_utilization: {value: 0.95, of: total, source: "our deployment's setting"}
""")
    p = E.profile(path)
    assert (p.name, p.overhead_s, p.mem_utilization, p.max_num_seqs) == ("my-vllm", 0.006,
                                                                        0.95, 256)
    assert "my-vllm" not in params.REGISTRY and E.check(path).name == "my-vllm"
    sm = StepModel("llama3-8b", from_spec({"gpu": "H100-SXM", "gpus_per_node": 1}),
                   ServeLayout(), engine=path)
    assert sm.engine == "my-vllm" and sm.overhead_s == 0.006


@pytest.mark.parametrize("text,field", [
    ("name: x\nbase: vllm\noverhead_s: 0.004\n", "overhead_s"),
    ("name: x\nbase: nope\n", "base"),
    ("name: x\ntitle: y\n", "scheduler"),
    ("name: x\nbase: vllm\nscheduler: {policy: lifo, chunked_prefill: true, "
     "admission: on-demand, source: s}\n", "scheduler.policy"),
    ("name: x\nbase: vllm\ngpu_memory_utilization: {value: 1.5, of: total, source: s}\n",
     "gpu_memory_utilization.value"),
    ("name: x\nbase: vllm\nspeed: 3\n", "speed"),
])
def test_a_bad_profile_file_is_one_line_naming_the_field(tmp_path, text, field):
    path = _write(tmp_path, text, f"bad{abs(hash(text))}.yaml")
    with pytest.raises(InputError) as e:
        E.profile(path)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{path}: {field}:")


def test_serve_cli_engine_names_and_files(cli, tmp_path):
    code, out, err = cli("serve", "llama3-8b", "hgx-h100", "--engine", "tgi", "--requests", "10")
    assert code == 2 and err.count("\n") == 1 and "--engine: unknown engine 'tgi'" in err
    assert "lmdeploy" in err and "llama.cpp" in err
    code, out, err = cli("serve", "llama3-8b", "gpu=H100-SXM,gpus_per_node=1", "--engine",
                         "TurboMind", "--requests", "10", "--json")
    assert code == 0 and json.loads(out)["engine"] == "lmdeploy"
    path = _write(tmp_path, "name: mine\nbase: sglang\n")
    code, out, err = cli("serve", "llama3-8b", "gpu=H100-SXM,gpus_per_node=1", "--engine", path,
                         "--requests", "10", "--json")
    assert code == 0 and json.loads(out)["engine"] == "mine"
    code, out, err = cli("serve", "llama3-8b", "hgx-h100", "--engine",
                         str(tmp_path / "missing.yaml"), "--requests", "10")
    assert code == 2 and err.count("\n") == 1 and "missing.yaml" in err


# -- memory as the engines account it -----------------------------------------------------------

def test_kv_blocks_match_what_vllm_logged():
    """vLLM PR #2031 (github.com/vllm-project/vllm/pull/2031, Dec 2023): Llama-2-7B, TP1 on one
    A100-80GB, gpu_memory_utilization 0.9, block size 16, FP16: "# GPU blocks: 7351" (the
    profile run at max_num_batched_tokens 4096, max(max_model_len, 2048))."""
    a100 = from_spec({"gpu": "A100-SXM4-80GB", "gpus_per_node": 1})
    m = StepModel("llama2-7b", a100, ServeLayout(), precision="fp16", engine="vllm",
                  max_tokens=4096)
    assert m.kv_bytes_per_token == 32 * 2 * 32 * 128 * 2 and m.block_size == 16   # facts
    # within 3%: the activation peak and the non-torch memory are modelled, vLLM measures them
    assert abs(m.kv_blocks / 7351 - 1) < 0.03


@pytest.mark.parametrize("model", ["llama2-70b", "llama3-70b"])
@pytest.mark.parametrize("util", [0.9, 0.95])
def test_a_70b_model_in_16_bit_fits_two_80gb_gpus(model, util):
    """Llama 2/3 70B in FP16 at TP2 on two 80 GB GPUs runs under vLLM at
    gpu_memory_utilization 0.9-0.95 with a small KV cache (a few 10k tokens)."""
    topo = from_spec({"gpu": "H100-SXM", "gpus_per_node": 2})
    m = StepModel(model, topo, ServeLayout(tp=2), precision="fp16", engine="vllm",
                  mem_utilization=util)
    tokens = m.kv_blocks * m.block_size
    assert 8_000 < tokens < 80_000            # small: the weights take 64-66 GiB of 80


def test_a_deployment_that_cannot_run_is_refused_with_the_figures():
    topo = from_spec({"gpu": "H100-SXM", "gpus_per_node": 1})
    with pytest.raises(InputError) as e:
        StepModel("llama3-70b", topo, ServeLayout(), precision="fp16", engine="vllm")
    msg = str(e.value)
    assert "\n" not in msg and "llama3-70b in fp16 does not fit on 1 H100-SXM" in msg
    for part in ("gpu_memory_utilization 0.9 x 80.0 GiB = 72.0 GiB", "weights take 131.4 GiB",
                 "activations and workspace", "non-torch memory 2.5 GiB",
                 "320.0 KiB per token", "leaving -"):
        assert part in msg, part


def test_serve_takes_the_memory_fraction_and_refuses_a_bad_one(cli):
    sys70 = "gpu=H100-SXM,gpus_per_node=2"
    code, out, err = cli("serve", "llama2-70b", sys70, "--tp", "2", "--precision", "fp16",
                         "--gpu-memory-utilization", "0.95", "--requests", "20", "--json")
    assert code == 0, err
    r = json.loads(out)
    assert r["memory"]["memory_utilization"] == 0.95 and r["memory"]["kv_tokens"] > 40_000
    code, out, err = cli("serve", "llama2-70b", sys70, "--tp", "2",
                         "--gpu-memory-utilization", "1.5", "--requests", "10")
    assert code == 2 and err.count("\n") == 1
    assert "--gpu-memory-utilization: must be a fraction above 0 and at most 1" in err


def test_a_profile_sets_a_built_in_engines_costs():
    """A calibration profile (or a refit) that sets an engine's recorded cost reaches the
    engine the models use; a user's engine file keeps its own values."""
    from gpufabric.measure import profile
    from gpufabric.workloads.inference import engines as E
    sg = E.builtin()["sglang"]
    shipped = sg.request_s
    with profile.overrides({"ENGINE_REQUEST_S[sglang]": 0.5,
                            "ENGINE_OVERHEAD_S[sglang]": 0.01}):
        assert (sg.request_s, sg.overhead_s) == (0.5, 0.01)
    assert sg.request_s == shipped
    assert not E.parse(dict(_yaml_of("sglang")), "mine.yaml").registered


def _yaml_of(name):
    import yaml
    from importlib import resources
    return yaml.safe_load(resources.files("gpufabric.workloads").joinpath(
        "data", "engines", f"{name}.yaml").read_text())


def test_tensorrt_llms_backends_differ_where_the_runtimes_do():
    """The TensorRT backend (built engines, C++ executor) launches every layer's kernels each
    iteration without CUDA graphs; the PyTorch backend replays CUDA graphs. Same scheduler and
    memory accounting."""
    trt, pyt = E.profile("tensorrt-llm-tensorrt"), E.profile("tensorrt-llm")
    assert trt.cuda_graph_batch_sizes == () and pyt.cuda_graph_batch_sizes
    assert trt.layer_s > 0 and pyt.layer_s == 0
    assert (trt.policy, trt.chunked_prefill, trt.reserve_full, trt.mem_of) == (
        pyt.policy, pyt.chunked_prefill, pyt.reserve_full, pyt.mem_of)
    topo = from_spec({"gpu": "H100-SXM", "gpus_per_node": 1})
    sm = step_model("llama3-8b", topo, ServeConfig(engine="trtllm tensorrt"))
    assert sm.overhead_s == pytest.approx(trt.overhead_s + 32 * trt.layer_s)


def test_chunked_prefill_is_the_options_else_the_clients_else_the_engines():
    """A prompt above the token budget: the TensorRT-LLM profile's engine (no chunked context
    by default) refuses it; --chunked-prefill, or trtllm-bench's own setting (it starts the
    engine with chunked context), runs it in chunks of the budget."""
    topo = from_spec({"gpu": "H100-SXM", "gpus_per_node": 1})
    base = dict(engine="tensorrt-llm", isl=12000, osl=8, rate=1.0, requests=20)

    def chunked(**kw):
        cfg = with_client(ServeConfig(**{**base, **kw}))
        return scheduler_config(step_model("llama3-8b", topo, cfg), cfg).chunked_prefill

    assert (chunked(), chunked(chunked_prefill=True), chunked(engine="vllm")) == (
        False, True, True)
    assert chunked(client="trtllm-bench", rate=None) is True
    assert chunked(client="trtllm-bench", rate=None, chunked_prefill=False) is False
    assert chunked(client="mlperf-server") is False          # LoadGen leaves the engine be
    with pytest.raises(InputError, match="a prompt of 12000 tokens exceeds the token budget "
                                         "8192 without chunked prefill"):
        serve("llama3-8b", topo, ServeConfig(**base))
    r = serve("llama3-8b", topo, ServeConfig(**base, chunked_prefill=True))
    assert r["requests"] == 20


def test_the_cli_turns_chunked_prefill_on_or_off(cli):
    args = ("serve", "llama3-8b", "gpu=H100-SXM,gpus_per_node=1", "--engine", "vllm",
            "--isl", "12000", "--osl", "8", "--rate", "1", "--requests", "20")
    code, out, err = cli(*args, "--no-chunked-prefill")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "exceeds the token budget 8192 without chunked prefill" in err
    code, out, err = cli(*args, "--chunked-prefill", "--json")
    assert code == 0 and json.loads(out)["requests"] == 20


def test_a_budget_that_would_take_hours_is_refused_before_any_work(cli):
    """A token budget of one token over long prompts needs more prefill iterations than the
    simulator runs (each is a pass of its loop): one line, exit 2, before the run starts
    (its 1,000 requests x 100,000 prompt tokens)."""
    code, out, err = cli("serve", "llama3-8b", "gpu=H100-SXM,gpus_per_node=1",
                         "--engine", "sglang", "--max-batched-tokens", "1", "--isl", "100000",
                         "--osl", "10", "--rate", "1")
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [
        "gpufabric: error: max_batched_tokens: the prompts need at least 100,000,000 prefill "
        "iterations at a budget of 1 tokens; at most 10,000,000 are simulated: raise the "
        "token budget or run fewer requests"]


def test_vllm_refuses_a_budget_below_its_batch_limit(cli):
    """vLLM refuses max_num_batched_tokens below max_num_seqs (its SchedulerConfig check);
    its profiles say so, and so does `serve`. SGLang and TensorRT-LLM take such a budget
    (NVIDIA's MLPerf v5.0 H200 engines ran 1,536 tokens under a batch of 2,048)."""
    assert E.profile("vllm").budget_covers_batch and E.profile("vllm-v0").budget_covers_batch
    assert not E.profile("tensorrt-llm").budget_covers_batch
    base = ("serve", "llama3-8b", "gpu=H100-SXM,gpus_per_node=1", "--rate", "1",
            "--requests", "20")
    code, out, err = cli(*base, "--max-batched-tokens", "128")
    assert code == 2 and out == "" and err.strip().splitlines() == [
        "gpufabric: error: --max-batched-tokens: a budget of 128 tokens is below the batch "
        "limit of 256 sequences, which vLLM V1 refuses: raise it to 256 or lower "
        "--max-num-seqs"]
    assert cli(*base, "--max-batched-tokens", "128", "--max-num-seqs", "128")[0] == 0
    assert cli(*base, "--max-batched-tokens", "128", "--engine", "tensorrt-llm",
               "--chunked-prefill")[0] == 0


def test_vllm_v0_without_chunked_prefill_sizes_its_budget_to_the_context():
    """vLLM V0 without chunked prefill sets max_num_batched_tokens to max(max_model_len,
    2048): a prompt up to the model's context fits one step (Llama 3 8B: 8,192 tokens)."""
    topo = from_spec({"gpu": "H100-SXM", "gpus_per_node": 1})
    whole = step_model("llama3-8b", topo, ServeConfig(engine="vllm-v0"))
    chunked = step_model("llama3-8b", topo, ServeConfig(engine="vllm-v0", chunked_prefill=True))
    stated = step_model("llama3-8b", topo, ServeConfig(engine="vllm-v0", max_batched_tokens=4096))
    assert (whole.max_tokens, chunked.max_tokens, stated.max_tokens) == (8192, 2048, 4096)
    r = serve("llama3-8b", topo, ServeConfig(engine="vllm-v0", isl=6000, osl=8, rate=1.0,
                                            requests=10))
    assert r["requests"] == 10

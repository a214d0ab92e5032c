"""Any model by its Hugging Face config.json: `--model-file config.json` on train and serve, the
conventions a partial shape gets, names in their usual spellings, and clean errors."""

from __future__ import annotations

import json

import pytest

from gpufabric.errors import InputError
from gpufabric.workloads.models import find_model, list_models, load_model, load_model_file

ONE_GPU = "gpu=H100-SXM,gpus_per_node=1"
EIGHT_GPUS = "hgx-h100"
#: where each size trains: 8 GPUs with the optimizer state sharded; 32 with TP 8 past 40B
TRAIN_8 = (EIGHT_GPUS, "--zero", "3")
TRAIN_32 = ("gpu=H100-SXM,gpus_per_node=8,nodes=4,nic=ib-ndr", "--tp", "8", "--zero", "3")

# One config of each architecture the reader knows, written from the published config.json on
# the Hugging Face Hub (https://huggingface.co/<repo>/blob/main/config.json; only the fields
# that shape the model), with the parameter count of its model card or paper.
CONFIGS = {
    # meta-llama/Llama-3.2-1B; model card 1.23B
    "llama": ({"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192,
               "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
               "head_dim": 64, "vocab_size": 128256, "tie_word_embeddings": True,
               "max_position_embeddings": 131072, "hidden_act": "silu"}, 1.24e9, ONE_GPU),
    # mistralai/Mistral-7B-v0.1 (sliding window 4096); 7.24B
    "mistral": ({"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
                 "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                 "vocab_size": 32000, "sliding_window": 4096,
                 "max_position_embeddings": 32768}, 7.24e9, ONE_GPU),
    # mistralai/Mixtral-8x7B-v0.1; Mixtral paper (arXiv 2401.04088): 46.7B total
    "mixtral": ({"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
                 "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                 "vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 2},
                46.7e9, EIGHT_GPUS),
    # Qwen/Qwen2.5-0.5B; 0.49B
    "qwen2": ({"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
               "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
               "vocab_size": 151936, "tie_word_embeddings": True, "use_sliding_window": False,
               "sliding_window": 32768}, 0.49e9, ONE_GPU),
    # Qwen/Qwen3-0.6B (head_dim 128 apart from hidden/heads); 0.6B
    "qwen3": ({"model_type": "qwen3", "hidden_size": 1024, "intermediate_size": 3072,
               "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
               "head_dim": 128, "vocab_size": 151936, "tie_word_embeddings": True}, 0.6e9,
              ONE_GPU),
    # Qwen/Qwen1.5-MoE-A2.7B (a shared expert of 4 x 1408); 14.3B
    "qwen2_moe": ({"model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632,
                   "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
                   "num_hidden_layers": 24, "num_attention_heads": 16,
                   "num_key_value_heads": 16, "num_experts": 60, "num_experts_per_tok": 4,
                   "decoder_sparse_step": 1, "mlp_only_layers": [], "vocab_size": 151936},
                  14.3e9, ONE_GPU),
    # Qwen/Qwen3-30B-A3B; 30.5B
    "qwen3_moe": ({"model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144,
                   "moe_intermediate_size": 768, "num_hidden_layers": 48,
                   "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
                   "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1,
                   "vocab_size": 151936, "tie_word_embeddings": False}, 30.5e9, ONE_GPU),
    # google/gemma-2-2b (local window 4096 on alternate layers, tied); Gemma 2 report: 2.6B
    "gemma2": ({"model_type": "gemma2", "hidden_size": 2304, "intermediate_size": 9216,
                "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
                "head_dim": 256, "vocab_size": 256000, "sliding_window": 4096,
                "hidden_activation": "gelu_pytorch_tanh"}, 2.61e9, ONE_GPU),
    # google/gemma-3-4b-pt (the language model in text_config); Gemma 3 report: 3.88B
    "gemma3": ({"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"],
                "text_config": {"model_type": "gemma3_text", "hidden_size": 2560,
                                "intermediate_size": 10240, "num_hidden_layers": 34,
                                "num_attention_heads": 8, "num_key_value_heads": 4,
                                "head_dim": 256, "vocab_size": 262208, "sliding_window": 1024,
                                "sliding_window_pattern": 6}}, 3.88e9, ONE_GPU),
    # microsoft/Phi-3-mini-4k-instruct; Phi-3 report: 3.8B
    "phi3": ({"model_type": "phi3", "hidden_size": 3072, "intermediate_size": 8192,
              "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
              "vocab_size": 32064, "sliding_window": 2047}, 3.8e9, ONE_GPU),
    # deepseek-ai/DeepSeek-V2-Lite (MLA without query compression, 2 shared + 64 routed
    # experts, first layer dense); DeepSeek-V2 report: 15.7B
    "deepseek_v2": ({"model_type": "deepseek_v2", "hidden_size": 2048,
                     "intermediate_size": 10944, "moe_intermediate_size": 1408,
                     "num_hidden_layers": 27, "num_attention_heads": 16,
                     "num_key_value_heads": 16, "n_routed_experts": 64, "n_shared_experts": 2,
                     "num_experts_per_tok": 6, "first_k_dense_replace": 1, "moe_layer_freq": 1,
                     "q_lora_rank": None, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
                     "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 102400},
                    15.7e9, ONE_GPU),
    # deepseek-ai/DeepSeek-V3; DeepSeek-V3 report: 671B (the MTP module apart)
    "deepseek_v3": ({"model_type": "deepseek_v3", "hidden_size": 7168,
                     "intermediate_size": 18432, "moe_intermediate_size": 2048,
                     "num_hidden_layers": 61, "num_attention_heads": 128,
                     "num_key_value_heads": 128, "n_routed_experts": 256,
                     "n_shared_experts": 1, "num_experts_per_tok": 8,
                     "first_k_dense_replace": 3, "moe_layer_freq": 1, "q_lora_rank": 1536,
                     "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                     "v_head_dim": 128, "vocab_size": 129280}, 671e9, None),
    # EleutherAI/pythia-160m; Pythia paper (arXiv 2304.01373) Table 1: 162,322,944
    "gpt_neox": ({"model_type": "gpt_neox", "hidden_size": 768, "intermediate_size": 3072,
                  "num_hidden_layers": 12, "num_attention_heads": 12, "vocab_size": 50304,
                  "use_parallel_residual": True, "tie_word_embeddings": False}, 162.3e6,
                 ONE_GPU),
    # tiiuae/falcon-7b (multi-query, parallel attention, tied); 7B
    "falcon": ({"model_type": "falcon", "hidden_size": 4544, "num_hidden_layers": 32,
                "num_attention_heads": 71, "multi_query": True, "parallel_attn": True,
                "new_decoder_architecture": False, "bias": False, "vocab_size": 65024},
               6.92e9, ONE_GPU),
    # mosaicml/mpt-7b (d_model, n_heads, n_layers, expansion_ratio); model card 6.7B
    "mpt": ({"model_type": "mpt", "d_model": 4096, "n_heads": 32, "n_layers": 32,
             "expansion_ratio": 4, "vocab_size": 50432, "max_seq_len": 2048, "no_bias": True},
            6.7e9, ONE_GPU),
    # bigscience/bloom-560m (n_layer, n_head); BLOOM paper Table 3: 559M
    "bloom": ({"model_type": "bloom", "hidden_size": 1024, "n_layer": 24, "n_head": 16,
               "vocab_size": 250880}, 0.56e9, ONE_GPU),
    # openai/gpt-oss-20b (32 experts top-4, 128-token window on alternate layers); 20.9B
    "gpt_oss": ({"model_type": "gpt_oss", "hidden_size": 2880, "intermediate_size": 2880,
                 "num_hidden_layers": 24, "num_attention_heads": 64, "num_key_value_heads": 8,
                 "head_dim": 64, "num_local_experts": 32, "num_experts_per_tok": 4,
                 "vocab_size": 201088, "sliding_window": 128,
                 "layer_types": ["sliding_attention", "full_attention"] * 12}, 20.9e9, ONE_GPU),
    # meta-llama/Llama-4-Scout-17B-16E (text_config: 16 experts top-1 + a shared one, chunked
    # attention on three layers in four); model card 109B with the vision encoder
    "llama4": ({"model_type": "llama4", "text_config": {
        "model_type": "llama4_text", "hidden_size": 5120, "intermediate_size": 8192,
        "intermediate_size_mlp": 16384, "num_hidden_layers": 48, "num_attention_heads": 40,
        "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 202048,
        "num_local_experts": 16, "num_experts_per_tok": 1, "interleave_moe_layer_step": 1,
        "attention_chunk_size": 8192}}, 108e9, EIGHT_GPUS),
}


def write(tmp_path, name: str, cfg: dict) -> str:
    d = tmp_path / name
    d.mkdir(exist_ok=True)
    f = d / "config.json"
    f.write_text(json.dumps(cfg))
    return str(f)


@pytest.mark.parametrize("arch", sorted(CONFIGS))
def test_a_config_of_each_architecture_reads_to_its_published_size(arch, tmp_path):
    cfg, params, _ = CONFIGS[arch]
    m = load_model_file(write(tmp_path, f"My-{arch}", cfg))
    assert m.name == f"my-{arch}"             # the folder a Hub download is named after
    assert m.params() == pytest.approx(params, rel=0.03)
    assert m.assumed == ()                    # a full config leaves nothing to convention


@pytest.mark.parametrize("arch", sorted(a for a, c in CONFIGS.items() if c[2]))
def test_a_config_of_each_architecture_runs_in_train_and_serve(arch, cli, tmp_path):
    cfg, _, system = CONFIGS[arch]
    f = write(tmp_path, arch, cfg)
    big = system == EIGHT_GPUS
    code, out, err = cli("train", "--model-file", f, *(TRAIN_32 if big else TRAIN_8),
                         "--seq-len", "1024", "--json")
    assert code == 0, err
    r = json.loads(out)
    assert r["model"] == arch and r["step_time_s"] > 0
    code, out, err = cli("serve", "--model-file", f, system, *(["--tp", "8"] if big else []),
                         "--requests", "20",
                         "--isl", "256", "--osl", "32", "--json")
    assert code == 0, err
    r = json.loads(out)
    assert r["model"] == arch and r["throughput_tokens_per_s"] > 0
    assert "note" not in err                  # nothing assumed


def test_the_features_of_a_config_land_in_the_model():
    read = {a: load_model_file_from(c[0]) for a, c in CONFIGS.items()}
    # MLA, shared and routed experts, the first dense layers
    v3 = read["deepseek_v3"]
    assert (v3.attention, v3.kv_lora_rank, v3.shared_experts, v3.experts, v3.dense_layers) == \
        ("mla", 512, 1, 256, 3)
    assert v3.params() == load_model("deepseek-v3").params()    # the built-in's shape
    assert read["deepseek_v2"].q_lora_rank == 0                   # V2-Lite: no query LoRA
    assert read["qwen3_moe"].params() == load_model("qwen3-30b-a3b").params()
    assert read["mixtral"].params() == load_model("mixtral-8x7b").params()
    assert read["qwen2_moe"].shared_experts == 4                  # 5632 / 1408
    # sliding windows: all layers, alternate layers, five in six, chunked three in four
    assert (read["mistral"].sliding_window, read["mistral"].sliding_layers) == (4096, 32)
    assert (read["gemma2"].sliding_window, read["gemma2"].sliding_layers) == (4096, 13)
    assert (read["gemma3"].sliding_window, read["gemma3"].sliding_layers) == (1024, 29)
    assert (read["gpt_oss"].sliding_window, read["gpt_oss"].sliding_layers) == (128, 12)
    assert (read["llama4"].sliding_window, read["llama4"].sliding_layers) == (8192, 36)
    assert read["qwen2"].sliding_window == 0                      # use_sliding_window false
    # tied embeddings, head_dim apart from hidden / heads, K/V heads, parallel blocks
    assert read["gemma2"].tied_embeddings and not read["mistral"].tied_embeddings
    assert read["mpt"].tied_embeddings and read["bloom"].tied_embeddings
    assert (read["qwen3"].head_dim, read["qwen3"].hidden // read["qwen3"].heads) == (128, 64)
    assert read["falcon"].kv_heads == 1 and read["falcon"].parallel_block
    assert read["gpt_neox"].parallel_block and read["gpt_neox"].norm == "layernorm"
    assert (read["gemma3"].activation, read["llama"].activation) == ("geglu", "swiglu")


def load_model_file_from(cfg: dict):
    from gpufabric.workloads.models import model_from_config
    return model_from_config(cfg, "config.json", name="m")


def test_llama4_maverick_config_reads_to_the_built_in_maverick():
    # meta-llama/Llama-4-Maverick-17B-128E config.json text_config: MoE on every other layer
    cfg = {"model_type": "llama4", "text_config": {
        "model_type": "llama4_text", "hidden_size": 5120, "intermediate_size": 8192,
        "intermediate_size_mlp": 16384, "num_hidden_layers": 48, "num_attention_heads": 40,
        "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 202048,
        "num_local_experts": 128, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2}}
    m = load_model_file_from(cfg)
    built_in = load_model("llama4-maverick")
    assert (m.params(), m.active_params()) == (built_in.params(), built_in.active_params())


def test_a_partial_shape_runs_with_each_assumption_named(cli, tmp_path):
    # GPT-NeoX-style config with only layers, width and heads (as a paper's table gives them)
    f = write(tmp_path, "neox-1b", {"model_type": "gpt_neox", "hidden_size": 2048,
                                     "num_hidden_layers": 24, "num_attention_heads": 16})
    code, out, err = cli("train", "--model-file", f, *TRAIN_8, "--seq-len", "1024", "--json")
    assert code == 0
    assert json.loads(out)["model"] == "neox-1b"
    assert err.strip() == (
        f"gpufabric: note: {f}: assumed vocab = 50432 (vocab_size not given; the gpt-neox "
        "tokenizer's); ffn = 4 x hidden = 8192 (intermediate_size not given; the GPT "
        "convention)")
    # A YAML model file of a partial shape: K/V heads, FFN and vocabulary by convention
    y = tmp_path / "gpt-1.3b.yaml"
    y.write_text("name: gpt-1.3b\narch: dense\nsource: a paper's table\nlayers: 24\n"
                 "hidden: 2048\nheads: 16\n")
    m = load_model_file(str(y))
    assert (m.kv_heads, m.ffn, m.vocab) == (16, 8192, 50257)
    assert [a.split(" (")[0] for a in m.assumed] == ["kv_heads = heads = 16",
                                                     "ffn = 4 x hidden = 8192",
                                                     "vocab = 50257"]
    y.write_text("name: llama-like\narch: dense\nsource: s\nlayers: 32\nhidden: 4096\n"
                 "heads: 32\nactivation: swiglu\nnorm: rmsnorm\ntokenizer: llama3\n")
    m = load_model_file(str(y))
    assert (m.ffn, m.vocab) == (11008, 128256)     # Llama 2 7B's FFN: 2/3 x 4 x 4096 to 256
    code, out, err = cli("serve", "--model-file", str(y), ONE_GPU, "--requests", "20",
                         "--isl", "256", "--osl", "32", "--json")
    assert code == 0 and "ffn = 2/3 x 4 x hidden" in err


def test_a_measurements_entry_shape_gets_the_same_conventions():
    from gpufabric.workloads.models import model_from_shape
    m = model_from_shape({"name": "MPT-style 3B", "layers": 32, "hidden": 2560, "heads": 32,
                          "tokenizer": "gpt-neox"}, "entry x")
    assert (m.ffn, m.kv_heads, m.vocab) == (10240, 32, 50432) and len(m.assumed) == 3


@pytest.mark.parametrize("spelling, name", [
    ("MPT-7B", "mpt-7b"), ("mpt_7b", "mpt-7b"), ("MPT-30B", "mpt-30b"),
    ("BLOOM-176B", "bloom-176b"), ("bloom176b", "bloom-176b"), ("bigscience/bloom", "bloom-176b"),
    ("Transformer-XL", "transformer-xl"), ("GPT-NeoX-20B", "gpt-neox-20b"),
    ("EleutherAI/pythia-1.4b", "pythia-1.4b"), ("Qwen/Qwen2.5-72B-Instruct", "qwen2.5-72b"),
    ("google/gemma-3-1b-pt", "gemma3-1b"), ("meta-llama/Llama-4-Scout-17B-16E-Instruct",
                                           "llama4-scout"),
    ("openai/gpt-oss-120b", "gpt-oss-120b"), ("Falcon 180B", "falcon-180b"),
    ("moonshotai/Kimi-K2-Instruct", "kimi-k2"), ("mistralai/Mixtral-8x22B-v0.1",
                                                 "mixtral-8x22b"),
])
def test_well_known_names_resolve_in_their_usual_spellings(spelling, name):
    assert find_model(spelling).name == name


def test_the_catalog_holds_at_least_80_models_each_with_its_source_and_size():
    ms = list_models()
    assert len(ms) >= 80
    for m in ms:
        assert m.source
        if m.is_transformer and m.published.get("params"):
            assert m.params() == pytest.approx(m.published["params"], rel=0.06), m.name


def test_models_lists_them(cli):
    code, out, _ = cli("models")
    assert code == 0 and len(out.splitlines()) - 1 >= 80
    assert any(line.startswith("gpt-oss-120b ") for line in out.splitlines())


@pytest.mark.parametrize("cfg, message", [
    ({"model_type": "t5", "d_model": 512},
     "model_type: got 't5'; allowed: bloom, deepseek_v2, deepseek_v3, falcon, gemma, gemma2, "
     "gemma3, gemma3_text, gpt2, gpt_neox, gpt_oss, kimi_k2, llama, llama4, llama4_text, "
     "mistral, mixtral, mpt, phi3, qwen2, qwen2_moe, qwen3, qwen3_moe, RefinedWeb, "
     "RefinedWebModel"),
    ({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32},
     "num_hidden_layers: missing; a llama config needs num_hidden_layers or n_layer or "
     "n_layers or num_layers (the number of layers)"),
    ({"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
      "num_attention_heads": 32, "vocab_size": 32000},
     "intermediate_size: missing; a llama config needs intermediate_size (the MLP width)"),
    ({"model_type": "mixtral", "hidden_size": 4096, "num_hidden_layers": 32,
      "num_attention_heads": 32, "intermediate_size": 14336, "num_experts_per_tok": 2},
     "num_local_experts: missing; a mixtral config needs num_local_experts or num_experts "
     "(the routed experts)"),
    ({"model_type": "qwen2", "hidden_size": "wide", "num_hidden_layers": 2,
      "num_attention_heads": 2}, "hidden_size: got 'wide'; expected a non-negative whole number"),
])
def test_a_bad_config_is_one_line_naming_file_and_field(cli, tmp_path, cfg, message):
    f = write(tmp_path, "bad", cfg)
    code, out, err = cli("train", "--model-file", f, ONE_GPU)
    assert code == 2 and err.strip() == f"gpufabric: error: {f}: {message}"


def test_a_file_that_is_not_json_or_not_a_config(cli, tmp_path):
    f = tmp_path / "config.json"
    f.write_text('{"model_type": ')
    code, _, err = cli("serve", "--model-file", str(f), ONE_GPU)
    assert code == 2 and err.startswith(f"gpufabric: error: {f}: not valid JSON: ")
    f.write_text("[1, 2]")
    with pytest.raises(InputError, match="holds 2 models"):
        load_model_file(str(f))


def test_measurements_and_scenarios_name_a_model_file_relative_to_themselves(tmp_path):
    from gpufabric.advise import scenario
    from gpufabric.workloads.models import with_model_file
    write(tmp_path, "qwen", CONFIGS["qwen2"][0])
    entry = with_model_file({"model_file": "qwen/config.json", "precision": "bf16"},
                            str(tmp_path / "measurements.yaml"), "[0](x)")
    assert entry["model_file"] == str(tmp_path / "qwen" / "config.json")
    sc = tmp_path / "scenario.yaml"
    sc.write_text("name: small\nworkloads:\n  serve:\n    model_file: qwen/config.json\n"
                  "    rate: 2\n    slo_tpot_ms: 50\n")
    s = scenario.load(str(sc))
    assert load_model(s.serve.model).name == "qwen" and s.serve.model.endswith("config.json")
    sc.write_text("name: small\nworkloads:\n  serve:\n    model_file: none.json\n"
                  "    rate: 2\n    slo_tpot_ms: 50\n")
    with pytest.raises(InputError, match="model_file: no such file .*none.json"):
        scenario.load(str(sc))


def test_a_training_measurement_names_its_model_by_a_config_beside_it(cli, tmp_path):
    write(tmp_path, "neox", CONFIGS["gpt_neox"][0])
    m = tmp_path / "runs.yaml"
    m.write_text("- id: my-pythia-run\n  source: a test\n"
                 "  system: {gpu: H100-SXM, gpus: 8, gpus_per_node: 8, nodes: 1}\n"
                 "  model: {model_file: neox/config.json}\n"
                 "  parallelism: {dp: 8, tp: 1, pp: 1, global_batch: 64, precision: bf16}\n"
                 "  result: {tflops_per_gpu: 100}\n")
    code, out, err = cli("validate", str(m), "--json")
    assert code == 0, err
    assert [p["id"] for p in json.loads(out)["points"]] == ["my-pythia-run"]
    m.write_text(m.read_text().replace("neox/config.json", "gone.json"))
    code, _, err = cli("validate", str(m))
    assert code == 2 and err.strip() == (
        f"gpufabric: error: {m}: [0](my-pythia-run).model.model_file: no such file "
        f"{tmp_path / 'gone.json'} (a path to a Hugging Face config.json or a model YAML, "
        "relative to this file)")

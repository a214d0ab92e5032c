"""Model shapes from a Hugging Face transformers ``config.json``, and the conventions that fill a
partial shape.

One reader turns a transformers config (Llama, Mistral, Mixtral, Qwen2/Qwen3 and their MoE,
Gemma 2/3, Phi-3/4, DeepSeek-V2/V3 and Kimi-K2, GPT-NeoX, Falcon, MPT, BLOOM, GPT-2, gpt-oss,
Llama 4) into the fields of a :class:`~gpufabric.workloads.models.ModelSpec`: it serves
``--model-file config.json``, a ``model_file:`` key in measurements files and scenarios, and the
built-in models that are stored as the config fields that matter (``config:`` in
``workloads/data/models/*.yaml``). Every field the config leaves out and the reader fills with the
convention of its framework is named in the notes it returns.

Examples
--------
>>> fields, notes = read_config({"model_type": "llama", "hidden_size": 4096,
...     "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
...     "num_key_value_heads": 8, "vocab_size": 128256}, "config.json")
>>> fields["arch"], fields["kv_heads"], fields["ffn"], fields["activation"], notes
('dense', 8, 14336, 'swiglu', [])
>>> fields, notes = read_config({"model_type": "gpt_neox", "hidden_size": 2048,
...     "num_hidden_layers": 24, "num_attention_heads": 16}, "pythia.json")
>>> fields["ffn"], fields["vocab"]
(8192, 50432)
>>> for n in notes: print(n)
vocab = 50432 (vocab_size not given; the gpt-neox tokenizer's)
ffn = 4 x hidden = 8192 (intermediate_size not given; the GPT convention)
"""

from __future__ import annotations

import math
from typing import Any

from gpufabric.errors import InputError

#: model_type -> family: the reader's branch (architectures that share a config layout).
MODEL_TYPES: dict[str, str] = {
    "llama": "llama", "mistral": "llama", "qwen2": "llama", "qwen3": "llama", "phi3": "llama",
    "gemma": "gemma", "gemma2": "gemma", "gemma3": "gemma", "gemma3_text": "gemma",
    "mixtral": "mixtral", "qwen2_moe": "qwen_moe", "qwen3_moe": "qwen_moe",
    "deepseek_v2": "deepseek", "deepseek_v3": "deepseek", "kimi_k2": "deepseek",
    "gpt_oss": "gpt_oss", "llama4": "llama4", "llama4_text": "llama4",
    "gpt_neox": "gpt_neox", "falcon": "falcon", "RefinedWeb": "falcon",
    "RefinedWebModel": "falcon", "mpt": "mpt", "bloom": "bloom", "gpt2": "gpt2",
}

#: A config without model_type: its ``architectures`` class name -> model_type.
ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral",
    "MixtralForCausalLM": "mixtral", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3",
    "Qwen2MoeForCausalLM": "qwen2_moe", "Qwen3MoeForCausalLM": "qwen3_moe",
    "Gemma2ForCausalLM": "gemma2", "Gemma3ForCausalLM": "gemma3_text",
    "Gemma3ForConditionalGeneration": "gemma3", "Phi3ForCausalLM": "phi3",
    "DeepseekV2ForCausalLM": "deepseek_v2", "DeepseekV3ForCausalLM": "deepseek_v3",
    "GptOssForCausalLM": "gpt_oss", "Llama4ForConditionalGeneration": "llama4",
    "Llama4ForCausalLM": "llama4_text", "GPTNeoXForCausalLM": "gpt_neox",
    "FalconForCausalLM": "falcon", "RWForCausalLM": "falcon", "MPTForCausalLM": "mpt",
    "BloomForCausalLM": "bloom", "GPT2LMHeadModel": "gpt2",
}

#: Vocabulary (embedding rows) of each tokenizer family, as its models publish it.
TOKENIZERS: dict[str, int] = {
    "gpt2": 50257, "gpt-neox": 50432, "llama": 32000, "llama3": 128256, "llama4": 202048,
    "mistral": 32768, "qwen": 151936, "gemma": 256000, "gemma3": 262208, "phi3": 32064,
    "deepseek-v2": 102400, "deepseek-v3": 129280, "kimi": 163840, "o200k": 201088,
    "falcon": 65024, "bloom": 250880,
}

#: The tokenizer family a model_type's models use (its vocabulary when a config leaves it out).
TYPE_TOKENIZER: dict[str, str] = {
    "llama": "llama", "mistral": "llama", "mixtral": "llama", "qwen2": "qwen", "qwen3": "qwen",
    "qwen2_moe": "qwen", "qwen3_moe": "qwen", "phi3": "phi3", "gemma": "gemma",
    "gemma2": "gemma", "gemma3": "gemma3", "gemma3_text": "gemma3", "deepseek_v2": "deepseek-v2",
    "deepseek_v3": "deepseek-v3", "kimi_k2": "kimi", "gpt_oss": "o200k", "llama4": "llama4",
    "llama4_text": "llama4", "gpt_neox": "gpt-neox", "falcon": "falcon",
    "RefinedWeb": "falcon", "RefinedWebModel": "falcon", "mpt": "gpt-neox", "bloom": "bloom",
    "gpt2": "gpt2",
}

#: Families whose embeddings are tied unless the config says otherwise (transformers' defaults).
_TIED_DEFAULT = {"gemma", "falcon", "mpt", "bloom", "gpt2"}
#: GPT-style families (LayerNorm, GELU MLP of 4 x hidden unless given).
_GPT_STYLE = {"gpt_neox", "falcon", "mpt", "bloom", "gpt2"}


def _allowed() -> str:
    return ", ".join(sorted(MODEL_TYPES, key=str.lower))


class _Config:
    """A config mapping read with the error and note conventions of the reader."""

    def __init__(self, cfg: dict[str, Any], where: str, model_type: str) -> None:
        self.cfg, self.where, self.type = cfg, where, model_type
        self.notes: list[str] = []

    def get(self, *keys: str, default: Any = None) -> Any:
        for k in keys:
            if self.cfg.get(k) is not None:
                return self.cfg[k]
        return default

    def need(self, *keys: str, what: str) -> Any:
        v = self.get(*keys)
        if v is None:
            raise InputError(f"missing; a {self.type} config needs {' or '.join(keys)} "
                             f"({what})", file=self.where, field=keys[0])
        return self.whole(v, keys[0])

    def whole(self, v: Any, key: str) -> int:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or v != int(v):
            raise InputError(f"got {v!r}; expected a non-negative whole number",
                             file=self.where, field=key)
        return int(v)

    def num(self, *keys: str, default: Any = None) -> Any:
        v = self.get(*keys)
        return default if v is None else self.whole(v, keys[0])


def _model_type(cfg: dict[str, Any], where: str) -> str:
    mt = cfg.get("model_type")
    if mt is None:
        arch = cfg.get("architectures")
        if isinstance(arch, list):
            for a in arch:
                if a in ARCHITECTURES:
                    return ARCHITECTURES[a]
        raise InputError(f"missing; allowed model_type: {_allowed()}", file=where,
                         field="model_type")
    if mt not in MODEL_TYPES:
        raise InputError(f"got {mt!r}; allowed: {_allowed()}", file=where, field="model_type")
    return str(mt)


def _layer_count(c: _Config, layers: int, kind: str) -> int | None:
    """Layers of ``kind`` in a ``layer_types`` list, where the config gives one."""
    lt = c.get("layer_types")
    if isinstance(lt, list) and lt:
        return sum(1 for t in lt if t == kind)
    return None


def _sliding(c: _Config, family: str, layers: int) -> tuple[int, int]:
    """(window in tokens, layers that use it) of sliding-window (or chunked) attention."""
    if family == "llama4":
        window = c.num("attention_chunk_size", default=0)
        nope = c.get("no_rope_layers")
        if isinstance(nope, list) and nope:      # 1: a chunked RoPE layer, 0: global NoPE
            return window, (sum(1 for x in nope if x) if window else 0)
        step = c.num("no_rope_layer_interval", default=4) or 4
        return window, (layers - layers // step if window else 0)
    window = c.num("sliding_window", default=0)
    if not window:
        return 0, 0
    if c.type in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe"):
        if not c.get("use_sliding_window", default=False):
            return 0, 0
        return window, max(layers - c.num("max_window_layers", default=layers), 0)
    counted = _layer_count(c, layers, "sliding_attention")
    if counted is not None:
        return window, counted
    if c.type == "gemma2" or c.type == "gpt_oss":    # alternate, the first sliding
        return window, (layers + 1) // 2
    if c.type in ("gemma3", "gemma3_text"):          # all but every N-th layer
        n = c.num("sliding_window_pattern", default=6) or 6
        return window, layers - layers // n
    return window, layers


def read_config(config: Any, where: str) -> tuple[dict[str, Any], list[str]]:
    """The :class:`ModelSpec` fields of a transformers config (all but name and source), and
    notes naming each field the config left out that the reader filled by convention.

    Raises
    ------
    InputError
        An unknown ``model_type`` (naming the allowed ones) or a missing required field
        (naming it and the architecture that needs it).
    """
    if not isinstance(config, dict):
        raise InputError("expected a Hugging Face config (a JSON object with model_type, "
                         "hidden_size, num_hidden_layers, ...)", file=where)
    mt = _model_type(config, where)
    cfg = dict(config)
    if isinstance(cfg.get("text_config"), dict):       # multimodal: the language model
        cfg = {**cfg, **cfg["text_config"]}
    c = _Config(cfg, where, mt)
    family = MODEL_TYPES[mt]
    out = _trunk(c, family)
    out.update(_block(c, family))
    ffn = _ffn(c, family, out["hidden"])
    mlp = _MOE.get(family)
    if mlp is not None:
        out.update(mlp(c, out, ffn))
    elif ffn is None:
        raise InputError(f"missing; a {mt} config needs intermediate_size (the MLP width)",
                         file=where, field="intermediate_size")
    else:
        out.update(arch="dense", ffn=ffn)
    window, sliding = _sliding(c, family, out["layers"])
    if window:
        out.update(sliding_window=window, sliding_layers=sliding)
    return out, c.notes


def _trunk(c: _Config, family: str) -> dict[str, Any]:
    """Layers, width, query and K/V heads, head width and vocabulary."""
    layers = c.need("num_hidden_layers", "n_layer", "n_layers", "num_layers",
                    what="the number of layers")
    hidden = c.need("hidden_size", "d_model", "n_embd", "n_embed", what="the model width")
    heads = c.need("num_attention_heads", "n_head", "n_heads", what="the attention heads")
    out: dict[str, Any] = {"layers": layers, "hidden": hidden, "heads": heads}
    kv = c.num("num_key_value_heads", "num_kv_heads", "n_head_kv")
    if family == "falcon" and kv is None and not c.get("new_decoder_architecture") \
            and c.get("multi_query", default=True):       # Falcon-7B: one shared K/V head
        kv = 1
    if family == "mpt":
        attn = c.get("attn_config") or {}
        if isinstance(attn, dict) and attn.get("kv_n_heads"):
            kv = c.whole(attn["kv_n_heads"], "attn_config.kv_n_heads")
    if family == "deepseek":                           # MLA: every head has its K and V
        kv = heads
    if kv is None:
        kv = heads
        if family not in _GPT_STYLE:
            c.notes.append(f"kv_heads = heads = {heads} (num_key_value_heads not given)")
    out["kv_heads"] = kv
    hd = c.num("head_dim")
    if hd:
        out["head_dim"] = hd
    elif family == "deepseek" and hidden % heads:
        out["head_dim"] = c.num("v_head_dim", default=0)
    vocab = c.num("vocab_size", "padded_vocab_size")
    if vocab is None:
        tok = TYPE_TOKENIZER[c.type]
        vocab = TOKENIZERS[tok]
        c.notes.append(f"vocab = {vocab} (vocab_size not given; the {tok} tokenizer's)")
    out["vocab"] = vocab
    return out


def _block(c: _Config, family: str) -> dict[str, Any]:
    """Embeddings, activation, norm, biases, block layout and default sequence length."""
    out: dict[str, Any] = {}
    tied = c.get("tie_word_embeddings", "tie_weights")
    if family == "mpt":
        tied = True if tied is None else tied
    out["tied_embeddings"] = bool(family in _TIED_DEFAULT if tied is None else tied)
    if family in _GPT_STYLE:
        out.update(activation="gelu", norm="layernorm")
        out["bias"] = {"gpt_neox": True, "bloom": True, "gpt2": True,
                       "falcon": bool(c.get("bias", default=False)),
                       "mpt": not c.get("no_bias", default=True)}[family]
        out["parallel_block"] = (family == "gpt_neox" and bool(
            c.get("use_parallel_residual", default=True))) or (family == "falcon" and bool(
                c.get("parallel_attn", default=True) or c.get("new_decoder_architecture")))
        if family == "gpt2":
            out["positions"] = c.num("n_positions", default=1024)
    else:
        act = str(c.get("hidden_activation", "hidden_act", default="silu"))
        out["activation"] = "geglu" if family == "gemma" or act.startswith("gelu") else "swiglu"
        out["norm"] = "rmsnorm"
        out["bias"] = family == "gpt_oss"               # attention and expert biases
    max_pos = c.num("max_position_embeddings", "max_seq_len", "n_positions", "seq_length")
    out["seq_len"] = min(max_pos, 4096) if max_pos else 2048
    return out


def _ffn(c: _Config, family: str, hidden: int) -> int | None:
    """The dense MLP's width: given, MPT's expansion ratio, or 4 x hidden for GPT-style."""
    ffn = c.num("intermediate_size", "ffn_hidden_size", "n_inner", "d_ff")
    if family == "mpt":
        ratio = c.get("expansion_ratio")
        if ratio is None:
            c.notes.append("expansion_ratio = 4 (not given; MPT's default)")
            ratio = 4
        return int(round(float(ratio) * hidden))
    if ffn is None and family in _GPT_STYLE:
        ffn = 4 * hidden
        if family == "gpt_neox":         # GPT-2's n_inner is null by design: 4 x n_embd
            c.notes.append(f"ffn = 4 x hidden = {ffn} (intermediate_size not given; the GPT "
                           "convention)")
    return ffn


def _routed(c: _Config, experts: tuple[str, ...], expert_ffn: str) -> dict[str, Any]:
    return {"arch": "moe", "experts": c.need(*experts, what="the routed experts"),
            "top_k": c.need("num_experts_per_tok", "experts_per_token",
                            what="the experts each token uses"),
            "expert_ffn": c.need(expert_ffn, what="the width of one expert")}


def _llama4(c: _Config, out: dict[str, Any], ffn: int | None) -> dict[str, Any]:
    moe = _routed(c, ("num_local_experts",), "intermediate_size")
    step = c.num("interleave_moe_layer_step", default=1) or 1
    moe_layers = c.get("moe_layers")
    if isinstance(moe_layers, list) and moe_layers:
        step = max(1, out["layers"] // len(moe_layers))
    return {**moe, "ffn": c.num("intermediate_size_mlp", default=moe["expert_ffn"]),
            "shared_experts": 1, "moe_every": step}


def _mixtral(c: _Config, out: dict[str, Any], ffn: int | None) -> dict[str, Any]:
    return _routed(c, ("num_local_experts", "num_experts"), "intermediate_size")


def _qwen_moe(c: _Config, out: dict[str, Any], ffn: int | None) -> dict[str, Any]:
    moe = _routed(c, ("num_experts",), "moe_intermediate_size")
    expert = moe["expert_ffn"]
    moe["moe_every"] = c.num("decoder_sparse_step", default=1) or 1
    shared = c.num("shared_expert_intermediate_size", default=0)
    if shared:
        moe["shared_experts"] = max(1, round(shared / expert))
        if shared % expert:
            c.notes.append(f"shared_experts = {moe['shared_experts']} of {expert} "
                           f"(shared_expert_intermediate_size {shared} rounded)")
    dense = c.get("mlp_only_layers") or []
    if dense:
        moe["dense_layers"] = len(dense)
        if sorted(dense) != list(range(len(dense))):
            c.notes.append(f"mlp_only_layers {dense} taken as the first {len(dense)}")
    if ffn and (dense or moe["moe_every"] > 1):
        moe["ffn"] = ffn
    return moe


def _deepseek(c: _Config, out: dict[str, Any], ffn: int | None) -> dict[str, Any]:
    moe = _routed(c, ("n_routed_experts",), "moe_intermediate_size")
    moe.update(attention="mla", shared_experts=c.num("n_shared_experts", default=0),
               dense_layers=c.num("first_k_dense_replace", default=0),
               moe_every=c.num("moe_layer_freq", default=1) or 1,
               q_lora_rank=c.num("q_lora_rank", default=0),
               kv_lora_rank=c.need("kv_lora_rank", what="MLA's latent width"),
               qk_nope_head_dim=c.need("qk_nope_head_dim", what="MLA's query/key width"),
               qk_rope_head_dim=c.need("qk_rope_head_dim", what="MLA's rotary width"),
               v_head_dim=c.need("v_head_dim", what="MLA's value width"))
    if ffn and moe["dense_layers"]:
        moe["ffn"] = ffn
    return moe


#: family -> the MoE fields of its config (the families not here are dense).
_MOE = {"llama4": _llama4, "mixtral": _mixtral, "gpt_oss": _mixtral, "qwen_moe": _qwen_moe,
        "deepseek": _deepseek}


def conventional_shape(raw: dict[str, Any]) -> list[str]:
    """Fill the fields a partial transformer shape leaves out (in place) with the conventions
    of its framework, and return a note for each: ``kv_heads`` = heads (no GQA); ``ffn`` =
    4 x hidden for a GPT-style MLP, Llama's 2/3 of that rounded up to 256 for a gated one;
    ``vocab`` from ``tokenizer`` (a family in :data:`TOKENIZERS`), else GPT-2's or Llama's.

    >>> raw = {"layers": 32, "hidden": 4096, "heads": 32}
    >>> for n in conventional_shape(raw): print(n)
    kv_heads = heads = 32 (not given)
    ffn = 4 x hidden = 16384 (not given; the GPT convention)
    vocab = 50257 (not given; the gpt2 tokenizer's)
    >>> raw = {"layers": 32, "hidden": 4096, "heads": 32, "activation": "swiglu",
    ...        "tokenizer": "llama"}
    >>> _ = conventional_shape(raw); raw["ffn"], raw["vocab"]
    (11008, 32000)
    """
    notes: list[str] = []
    tok = raw.pop("tokenizer", None)
    gated = raw.get("activation") in ("swiglu", "geglu")
    if raw.get("heads") and not raw.get("kv_heads") and raw.get("attention", "mha") == "mha":
        raw["kv_heads"] = raw["heads"]
        notes.append(f"kv_heads = heads = {raw['heads']} (not given)")
    hidden = raw.get("hidden")
    moe_only = bool(raw.get("experts")) and not raw.get("dense_layers") and \
        raw.get("moe_every", 1) in (1, None)
    if hidden and not raw.get("ffn") and not moe_only and isinstance(hidden, int):
        if gated:
            raw["ffn"] = 256 * math.ceil(2 * 4 * hidden / 3 / 256)
            notes.append(f"ffn = 2/3 x 4 x hidden rounded up to 256 = {raw['ffn']} (not "
                         "given; the Llama convention for a gated MLP)")
        else:
            raw["ffn"] = 4 * hidden
            notes.append(f"ffn = 4 x hidden = {raw['ffn']} (not given; the GPT convention)")
    if not raw.get("vocab"):
        if tok is not None and str(tok).lower() not in TOKENIZERS:
            raise InputError(f"got {tok!r}; allowed: {', '.join(TOKENIZERS)}",
                             field="tokenizer")
        fam = str(tok).lower() if tok is not None else ("llama" if gated else "gpt2")
        raw["vocab"] = TOKENIZERS[fam]
        notes.append(f"vocab = {raw['vocab']} (not given; the {fam} tokenizer's)")
    return notes


__all__ = ["read_config", "conventional_shape", "MODEL_TYPES", "TOKENIZERS"]

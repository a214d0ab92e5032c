"""Model descriptions as data: transformer shapes (dense, GQA, MoE, MLA) and CNNs by cost.

The built-in models live in ``workloads/data/models/*.yaml``, every one with its ``source``;
a user's own model is a YAML file of the same shape (one mapping, or a list of them).

Examples
--------
>>> m = load_model("llama3-70b")
>>> round(m.params() / 1e9, 1), m.kv_heads, m.head_dim
(70.6, 8, 128)
>>> d = load_model("deepseek-v3")
>>> round(d.params() / 1e9), round(d.active_params() / 1e9, 1)
(671, 37.6)
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from gpufabric.errors import InputError, unknown_name
from gpufabric.fileio import (MAX_YAML_BYTES, load_data, names_a_path, package_dir, parse_yaml,
                              path_kind, read_text)
from gpufabric.workloads.hfconfig import conventional_shape, read_config

ARCHS = ("dense", "moe", "encoder", "cnn")
ACTIVATIONS = ("gelu", "relu", "swiglu", "geglu")
NORMS = ("layernorm", "rmsnorm")


@dataclass(frozen=True)
class ModelSpec:
    """One model's shape.

    Transformers: ``layers`` blocks of attention + MLP of width ``hidden``; attention has
    ``heads`` query heads of ``head_dim`` and ``kv_heads`` key/value heads (GQA), or, with
    ``attention: mla``, DeepSeek's multi-head latent attention (``q_lora_rank``,
    ``kv_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim``, ``v_head_dim``). MoE blocks
    have ``experts`` routed experts of ``expert_ffn`` of which ``top_k`` run per token, plus
    ``shared_experts`` that always run; the first ``dense_layers`` blocks, and all but every
    ``moe_every``-th, have a dense MLP of ``ffn``. ``sliding_layers`` of the blocks attend to
    the last ``sliding_window`` tokens only (Mistral, Gemma 2/3, gpt-oss; Llama 4's chunks).
    ``parallel_block``: attention and MLP read the same normalised input and their outputs
    are summed (GPT-J, PaLM, MegaScale), so a block has one normalisation and, under tensor
    parallelism, one reduction per pass. CNNs are given by ``params``, ``flops_per_sample``
    (forward) and ``activation_bytes_per_sample``.
    """

    name: str
    arch: str
    source: str
    layers: int = 0
    hidden: int = 0
    heads: int = 0
    kv_heads: int = 0
    head_dim: int = 0
    ffn: int = 0
    activation: str = "gelu"
    norm: str = "layernorm"
    bias: bool = False
    vocab: int = 0
    tied_embeddings: bool = False
    parallel_block: bool = False  # attention and MLP side by side on one normalised input
    positions: int = 0            # learned position embeddings (0: rotary / none)
    seq_len: int = 2048           # default sequence length
    attention: str = "mha"        # mha (incl. GQA/MQA) | mla
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    experts: int = 0
    top_k: int = 0
    shared_experts: int = 0
    expert_ffn: int = 0
    dense_layers: int = 0
    moe_every: int = 1
    sliding_window: int = 0       # sliding-window (or chunked) attention span in tokens
    sliding_layers: int = 0       # blocks that use it (the rest attend to the whole context)
    params_total: float = 0.0     # CNN: given parameters
    flops_per_sample: float = 0.0  # CNN: forward FLOPs per sample
    activation_bytes_per_sample: float = 0.0  # CNN: activations kept for backward (16-bit)
    aliases: tuple[str, ...] = ()
    published: dict[str, float] = field(default_factory=dict, hash=False, compare=False)
    #: fields the description left out that a convention filled (one note each)
    assumed: tuple[str, ...] = field(default=(), hash=False, compare=False)

    # -- shape helpers ---------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def is_transformer(self) -> bool:
        return self.arch != "cnn"

    @property
    def gated(self) -> bool:
        return self.activation in ("swiglu", "geglu")

    def moe_layer(self, i: int) -> bool:
        """Whether block ``i`` (0-based) has an MoE MLP."""
        if not self.is_moe or i < self.dense_layers:
            return False
        return (i - self.dense_layers) % self.moe_every == self.moe_every - 1

    @property
    def moe_layers(self) -> int:
        return sum(self.moe_layer(i) for i in range(self.layers))

    @property
    def q_head_dim(self) -> int:
        """Width of one query/key head (MLA: nope + rope parts)."""
        if self.attention == "mla":
            return self.qk_nope_head_dim + self.qk_rope_head_dim
        return self.head_dim

    @property
    def v_dim(self) -> int:
        return self.v_head_dim if self.attention == "mla" else self.head_dim

    # -- parameter counts ------------------------------------------------------------------
    def mlp_params(self, width: int) -> int:
        """Parameters of one MLP of intermediate ``width``."""
        mats = 3 if self.gated else 2
        return mats * self.hidden * width + ((width + self.hidden) if self.bias else 0)

    def attn_params(self) -> int:
        h, a = self.hidden, self.heads
        if self.attention == "mla":
            qd = self.q_head_dim
            q = (h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * a * qd
                 if self.q_lora_rank else h * a * qd)
            kv = (h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
                  + self.kv_lora_rank * a * (self.qk_nope_head_dim + self.v_head_dim))
            return q + kv + a * self.v_head_dim * h
        d, kv_h = self.head_dim, self.kv_heads
        p = h * a * d + 2 * h * kv_h * d + a * d * h
        if self.bias:
            p += a * d + 2 * kv_h * d + h
        return p

    def norm_params(self) -> int:
        return self.hidden * (2 if self.norm == "layernorm" else 1)

    def moe_params(self, active: bool = False) -> int:
        routed = self.top_k if active else self.experts
        return ((routed + self.shared_experts) * self.mlp_params(self.expert_ffn)
                + self.hidden * self.experts)

    def layer_params(self, i: int, active: bool = False) -> int:
        """Parameters of block ``i`` (active: those one token uses)."""
        mlp = self.moe_params(active) if self.moe_layer(i) else self.mlp_params(self.ffn)
        return self.attn_params() + mlp + 2 * self.norm_params()

    def embedding_params(self) -> int:
        """Input embedding, output layer (unless tied), positions, final norm."""
        emb = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        return emb + self.positions * self.hidden + self.norm_params()

    def params(self) -> float:
        """Total parameters."""
        if not self.is_transformer:
            return self.params_total
        return float(sum(self.layer_params(i) for i in range(self.layers))
                     + self.embedding_params())

    def active_params(self) -> float:
        """Parameters one token uses (total for dense models)."""
        if not self.is_transformer:
            return self.params_total
        return float(sum(self.layer_params(i, active=True) for i in range(self.layers))
                     + self.embedding_params())

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["params"] = self.params()
        d["active_params"] = self.active_params()
        return d


_FIELDS = {f.name: f for f in dataclasses.fields(ModelSpec)}
_INT = {n for n, f in _FIELDS.items() if f.type == "int"}
#: upper bounds that keep a typo from exhausting memory (no real model is near them)
_LIMITS = {"layers": 10_000, "experts": 100_000, "top_k": 100_000}
_NUM = {"params", "flops_per_sample", "activation_bytes_per_sample"}
_KEYS = (set(_FIELDS) - {"params_total", "assumed"}) | {"params", "config"}


def _num(v: Any) -> Any:
    """YAML 1.1 reads ``8.2e9`` as a string; take it as the number it means."""
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return v
    return v


def _check(raw: Any, where: str, assumed: list[str] | None = None) -> ModelSpec:
    if not isinstance(raw, dict):
        raise InputError("expected a mapping of model fields (name, arch, layers, hidden, ...)",
                         file=where)
    unknown = set(raw) - _KEYS
    if unknown:
        raise InputError(f"unknown field(s) {sorted(unknown)}; allowed: {sorted(_KEYS)}",
                         file=where)
    assumed = list(assumed or ())
    if "config" in raw:          # a Hugging Face config's fields; the entry's own keys win
        fields, notes = read_config(raw["config"], f"{where}.config")
        assumed += notes
        raw = {**fields, **{k: v for k, v in raw.items() if k != "config"}}
    for key in ("name", "arch", "source"):
        if not raw.get(key):
            raise InputError("missing; every model needs name, arch and source", file=where,
                             field=key)
    vals = {k: (_num(v) if k in _INT or k in _NUM else v) for k, v in raw.items()}
    vals["name"] = str(vals["name"]).lower()
    if "params" in vals:
        vals["params_total"] = vals.pop("params")        # checked with the numbers below
    if vals["arch"] not in ARCHS:
        raise InputError(f"got {vals['arch']!r}; allowed: {', '.join(ARCHS)}", file=where,
                         field="arch")
    _check_numbers(vals, where)
    _check_choices(vals, where)
    vals["published"] = _published(vals.get("published") or {}, where)
    _check_shape(vals, where)
    if vals.get("sliding_window") and not vals.get("sliding_layers"):
        vals["sliding_layers"] = vals.get("layers", 0)
    if vals.get("sliding_layers", 0) > vals.get("layers", 0):
        raise InputError(f"got {vals['sliding_layers']}; at most layers ({vals.get('layers')})",
                         file=where, field="sliding_layers")
    return ModelSpec(**vals, assumed=tuple(assumed))


def _check_numbers(vals: dict[str, Any], where: str) -> None:
    """Whole-number fields (at most their limits), sizes and flags, checked and cast in place."""
    for key in _INT:
        if key in vals:
            v = vals[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or v != int(v):
                raise InputError(f"got {v!r}; expected a non-negative whole number", file=where,
                                 field=key)
            if v > _LIMITS.get(key, 10**7):
                raise InputError(f"got {v!r}; at most {_LIMITS.get(key, 10**7):,}", file=where,
                                 field=key)
            vals[key] = int(v)
    for key in ("flops_per_sample", "activation_bytes_per_sample", "params_total"):
        if key in vals:
            v = vals[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise InputError(f"got {v!r}; expected a non-negative number", file=where,
                                 field="params" if key == "params_total" else key)
            vals[key] = float(v)
    for key in ("bias", "tied_embeddings", "parallel_block"):
        if key in vals and not isinstance(vals[key], bool):
            raise InputError(f"got {vals[key]!r}; expected true or false", file=where,
                             field=key)


def _check_choices(vals: dict[str, Any], where: str) -> None:
    """Activation, norm, attention and aliases, checked against what is allowed."""
    if "activation" in vals and vals["activation"] not in ACTIVATIONS:
        raise InputError(f"got {vals['activation']!r}; allowed: {', '.join(ACTIVATIONS)}",
                         file=where, field="activation")
    if "norm" in vals and vals["norm"] not in NORMS:
        raise InputError(f"got {vals['norm']!r}; allowed: {', '.join(NORMS)}", file=where,
                         field="norm")
    if vals.get("attention", "mha") not in ("mha", "mla"):
        raise InputError(f"got {vals['attention']!r}; allowed: mha, mla", file=where,
                         field="attention")
    aliases = vals.get("aliases") or ()
    if not isinstance(aliases, (list, tuple)) or not all(isinstance(a, (str, int, float))
                                                          for a in aliases):
        raise InputError(f"got {aliases!r}; expected a list of names", file=where,
                         field="aliases")
    vals["aliases"] = tuple(str(a).lower() for a in aliases)


def _published(published: Any, where: str) -> dict[str, float]:
    """The ``published`` mapping of sizes (params, FLOPs per sample): each a number > 0."""
    if not isinstance(published, dict):
        raise InputError(f"got {published!r}; expected a mapping of published numbers "
                         "(params: 6.74e9)", file=where, field="published")
    out: dict[str, float] = {}
    for k, v in published.items():
        n = _num(v)
        if isinstance(n, bool) or not isinstance(n, (int, float)):
            raise InputError(f"got {v!r}; expected a number", file=where, field=f"published.{k}")
        if n <= 0:     # published counts (params, FLOPs per sample) are sizes
            raise InputError(f"got {v!r}; expected a number > 0", file=where,
                             field=f"published.{k}")
        out[str(k)] = float(n)
    return out


def _check_shape(vals: dict[str, Any], where: str) -> None:
    """What each architecture needs (a cnn its counts; a transformer its shape, MLA and MoE
    fields), with the head dimension and KV heads filled in place where not given."""
    if vals["arch"] == "cnn":
        for key in ("params_total", "flops_per_sample"):
            if not vals.get(key):
                raise InputError("a cnn needs params and flops_per_sample", file=where,
                                 field="params" if key == "params_total" else key)
    else:
        for key in ("layers", "hidden", "heads", "vocab"):
            if not vals.get(key):
                raise InputError("missing or zero; a transformer needs layers, hidden, heads "
                                 "and vocab", file=where, field=key)
        vals.setdefault("kv_heads", vals["heads"])
        if not vals.get("head_dim"):
            if vals["hidden"] % vals["heads"]:
                raise InputError(f"hidden {vals['hidden']} is not a multiple of heads "
                                 f"{vals['heads']}; give head_dim", file=where, field="head_dim")
            vals["head_dim"] = vals["hidden"] // vals["heads"]
        if vals["heads"] % max(vals["kv_heads"], 1) or vals["kv_heads"] < 1:
            raise InputError(f"heads {vals['heads']} must be a multiple of kv_heads "
                             f"{vals['kv_heads']}", file=where, field="kv_heads")
        if vals.get("attention") == "mla":
            for key in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
                if not vals.get(key):
                    raise InputError("MLA attention needs kv_lora_rank, qk_nope_head_dim, "
                                     "qk_rope_head_dim and v_head_dim", file=where, field=key)
        if vals["arch"] == "moe":
            for key in ("experts", "top_k", "expert_ffn"):
                if not vals.get(key):
                    raise InputError("an moe model needs experts, top_k and expert_ffn",
                                     file=where, field=key)
            if vals["top_k"] > vals["experts"]:
                raise InputError(f"top_k {vals['top_k']} exceeds experts {vals['experts']}",
                                 file=where, field="top_k")
            if vals.get("moe_every", 1) < 1:
                raise InputError("must be at least 1", file=where, field="moe_every")
            if vals.get("dense_layers", 0) > 0 and not vals.get("ffn"):
                raise InputError("dense_layers need ffn (the dense MLP width)", file=where,
                                 field="ffn")
        elif not vals.get("ffn"):
            raise InputError("missing or zero; a dense transformer needs ffn", file=where,
                             field="ffn")


def _specs(data: Any, where: str) -> list[ModelSpec]:
    items = data if isinstance(data, list) else [data]
    return [_check(raw, f"{where}[{i}]" if isinstance(data, list) else where)
            for i, raw in enumerate(items)]


@cache
def _builtin() -> dict[str, ModelSpec]:
    out: dict[str, ModelSpec] = {}
    folder = package_dir("gpufabric.workloads").joinpath("data", "models")
    for f in sorted(folder.iterdir(), key=lambda p: p.name):
        if not f.name.endswith(".yaml"):
            continue
        data = load_data("gpufabric.workloads", "data", "models", f.name)
        for m in _specs(data, f"workloads/data/models/{f.name}"):
            for key in (m.name, *m.aliases):
                if key in out:
                    raise InputError(f"duplicate model name {key!r}",
                                     file=f"workloads/data/models/{f.name}")
                out[key] = m
    return out


#: Leading words of a published model name that name its maker, not the model.
_MAKERS = ("meta", "nvidia", "mistralai", "microsoft", "google", "tiiuae", "eleutherai")
#: A word from which on a published name describes a fine-tune or a checkpoint, not the shape.
_TUNES = ("instruct", "chat", "base", "hf", "it", "pt")
#: Trailing words that name a checkpoint's precision or quantisation.
_PRECISIONS = ("fp8", "fp4", "nvfp4", "mxfp4", "bf16", "fp16", "fp32", "int4", "int8", "awq",
               "gptq", "w4a16", "w8a8", "dynamic")


def model_key(text: str) -> str:
    """The normalised spelling of a model name that built-in names and aliases are matched on:
    lower case, the maker, the fine-tune and precision suffixes, parenthetical remarks, a
    Hugging Face organisation and every separator dropped.

    Examples
    --------
    >>> [model_key(t) for t in ("Llama-3.1-405B", "LLAMA3.1_405B", "llama3.1-405b",
    ...                         "Meta-Llama-3.1-405B-Instruct")]
    ['llama3.1405b', 'llama3.1405b', 'llama3.1405b', 'llama3.1405b']
    >>> model_key("Llama 3.3 70B (nvidia/Llama-3.3-70B-Instruct-FP8)")
    'llama3.370b'
    """
    t = re.sub(r"\([^)]*\)?", " ", str(text).lower())
    t = t.rsplit("/", 1)[-1]
    words = re.findall(r"[a-z0-9]+(?:\.[0-9]+)*", t)
    while words and words[0] in _MAKERS:
        words.pop(0)
    for i, w in enumerate(words):
        if w in _TUNES:
            words = words[:i]
            break
    while words and words[-1] in _PRECISIONS:
        words.pop()
    return "".join(words)


@cache
def _by_key() -> dict[str, ModelSpec]:
    out: dict[str, ModelSpec] = {}
    for name, m in _builtin().items():
        k = model_key(name)
        if k in out and out[k].name != m.name:
            raise InputError(f"model names {out[k].name!r} and {m.name!r} normalise alike "
                             f"({k!r})", file="workloads/data/models")
        out[k] = m
    return out


def find_model(text: str) -> ModelSpec | None:
    """The built-in model a name means, in any of its usual spellings; None if none.

    >>> find_model("Meta-Llama-3.1-405B-Instruct").name, find_model("LLAMA3.1_405B").name
    ('llama3-405b', 'llama3-405b')
    >>> find_model("my-model-7b") is None
    True
    """
    hit = _builtin().get(str(text).lower())
    return hit if hit is not None else _by_key().get(model_key(text))


#: Keys of a measurements entry's ``model`` mapping that describe the shape (the rest, such as
#: precision or params, describe the run or restate a count).
SHAPE_KEYS = tuple(k for k in _FIELDS if k not in ("name", "source", "aliases", "published",
                                                    "assumed",
                                                    "params_total", "flops_per_sample",
                                                    "activation_bytes_per_sample"))


def gives_shape(d: dict[str, Any]) -> bool:
    """Whether a mapping gives a transformer's shape (at least layers and hidden)."""
    return bool(d.get("layers")) and bool(d.get("hidden"))


def model_from_shape(d: dict[str, Any], where: str) -> ModelSpec:
    """A model built from the shape keys of a mapping (a measurements entry's ``model``):
    layers, hidden, heads, kv_heads, ffn, vocab, experts, top_k, expert_ffn, ... as in a model
    file; ``arch`` defaults to moe when experts are given, else dense. Checked as a model file
    is (an InputError names the missing or bad key). A partial shape gets the conventions of
    :func:`~gpufabric.workloads.hfconfig.conventional_shape` (``kv_heads`` = heads, ``ffn``
    4 x hidden, the vocabulary of ``tokenizer``), each named in the model's ``assumed``.

    >>> m = model_from_shape({"name": "My 1B", "layers": 16, "hidden": 2048, "heads": 32,
    ...                       "kv_heads": 8, "ffn": 8192, "vocab": 128256,
    ...                       "activation": "swiglu", "norm": "rmsnorm"}, "entry my-1b")
    >>> m.name, round(m.params() / 1e9, 2)
    ('my 1b', 1.5)
    """
    raw: dict[str, Any] = {k: d[k] for k in SHAPE_KEYS if d.get(k) is not None}
    raw["name"] = str(d.get("name") or "model by shape")
    raw["source"] = f"{where} (shape given in the entry)"
    raw.setdefault("arch", "moe" if d.get("experts") else "dense")
    if raw["arch"] not in ARCHS:       # measurement files describe the block, not the class
        raw["arch"] = "moe" if d.get("experts") else "dense"
    if d.get("tokenizer") is not None:
        raw["tokenizer"] = d["tokenizer"]
    return _check(raw, where, _conventions(raw, where))


def _conventions(raw: dict[str, Any], where: str) -> list[str]:
    """The conventions a partial transformer shape gets (notes naming each field filled)."""
    if raw.get("arch") == "cnn" or "config" in raw:
        return []
    try:
        return conventional_shape(raw)
    except InputError as exc:
        raise InputError(exc.message, file=where, field=exc.field) from None


def _model_name(path: str, cfg: dict[str, Any]) -> str:
    """A config's model name: its ``_name_or_path``, else the folder of a ``config.json``
    (as a Hugging Face download names it), else the file's name."""
    named = cfg.get("_name_or_path")
    if isinstance(named, str) and named.strip("/ "):
        return named.strip("/ ").rsplit("/", 1)[-1]
    p = Path(path)
    if p.name == "config.json" and p.parent.name not in ("", "."):
        return p.parent.name
    return p.stem


def model_from_config(cfg: Any, path: str, name: str | None = None) -> ModelSpec:
    """The model of a Hugging Face transformers config (a parsed ``config.json``) through
    :func:`~gpufabric.workloads.hfconfig.read_config`; InputError naming ``path`` and the
    field for an unknown architecture or a missing field."""
    if not isinstance(cfg, dict):
        raise InputError("expected a Hugging Face config (a JSON object with model_type, "
                         "hidden_size, num_hidden_layers, ...)", file=path)
    fields, notes = read_config(cfg, path)
    return _check({**fields, "name": name or _model_name(path, cfg),
                   "source": f"Hugging Face config {path}"}, path, notes)


def is_hf_config(data: Any) -> bool:
    """Whether parsed data is a transformers config rather than a model file of our fields."""
    return isinstance(data, dict) and "arch" not in data and (
        "model_type" in data or "architectures" in data)


def with_model_file(model: dict[str, Any], path: str, where: str) -> dict[str, Any]:
    """A measurements entry's ``model`` mapping with its ``model_file`` (a Hugging Face
    config.json or a model YAML) resolved against the folder of the file ``path`` that names
    it, and read once, so that a bad one is the error (naming ``path`` and the entry)."""
    f = model.get("model_file")
    if f is None:
        return model
    if not isinstance(f, str) or not f.strip():
        raise InputError(f"got {f!r}; expected a path to a config.json or model YAML",
                         file=path, field=f"{where}.model.model_file")
    resolved = model_file_path(f, path, f"{where}.model.model_file")
    load_model_file(resolved)
    return {**model, "model_file": resolved}


def model_file_path(f: str, path: str, field: str) -> str:
    """``f`` resolved against the folder of the file ``path`` that names it; InputError naming
    ``path`` and ``field`` where no such file is there."""
    resolved = str(Path(path).parent / Path(f).expanduser())
    if path_kind(resolved) != "file":
        raise InputError(f"no such file {resolved} (a path to a Hugging Face config.json or a "
                         "model YAML, relative to this file)", file=path, field=field)
    return resolved


def list_models() -> list[ModelSpec]:
    """The built-in models, each once, in file order."""
    seen: dict[str, ModelSpec] = {}
    for m in _builtin().values():
        seen.setdefault(m.name, m)
    return list(seen.values())


def load_model_file(path: str) -> ModelSpec:
    """The one model of a model file (``train/serve --model-file``): a YAML file of the
    built-in files' fields, or a Hugging Face ``config.json`` (any file whose mapping has a
    ``model_type``); a partial shape gets its framework's conventions, named in ``assumed``.
    InputError for a missing, malformed or many-model file."""
    text = read_text(Path(path), what="a model file (YAML or a Hugging Face config.json)",
                     max_bytes=MAX_YAML_BYTES)
    if str(path).endswith(".json") or text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise InputError(f"not valid JSON: {exc}", file=path) from None
    else:
        data = parse_yaml(text, path)
    if is_hf_config(data):
        return model_from_config(data, path)
    if isinstance(data, list) and len(data) != 1:
        raise InputError(f"holds {len(data)} models; give a file with one", file=path)
    raw = data[0] if isinstance(data, list) else data
    if not isinstance(raw, dict):
        return _check(raw, path)
    raw = dict(raw)
    return _check(raw, path, _conventions(raw, path))


def load_model(name_or_path: str | ModelSpec) -> ModelSpec:
    """A built-in model by name or alias, or a user's YAML file of the same shape.

    Raises
    ------
    InputError
        Unknown name (with the closest known one), or a malformed file.

    Examples
    --------
    >>> load_model("Mixtral-8x7B").top_k
    2
    """
    if isinstance(name_or_path, ModelSpec):
        return name_or_path
    text = str(name_or_path)
    if names_a_path(text) and (text.endswith((".yaml", ".yml", ".json"))
                               or path_kind(text) == "file"):
        return load_model_file(text)
    hit = find_model(text)
    if hit is None:
        raise unknown_name("model", text, [m.name for m in list_models()], field="model")
    return hit


__all__ = ["ModelSpec", "load_model", "load_model_file", "list_models", "ARCHS", "find_model",
           "model_key", "model_from_shape", "gives_shape", "SHAPE_KEYS", "model_from_config",
           "is_hf_config", "with_model_file", "model_file_path"]

"""Run settings of a training job and framework profiles (what a framework does by default).

A run setting is how a training run was configured beyond its layout: sequence parallelism,
the ZeRO / FSDP mode, which communication overlaps with compute, the attention kernel, the
recomputation policy, evaluation inside a timed run. :data:`SETTINGS` lists them with their
allowed values; a measurements entry states them as keys (``docs/calibration.md``) and
``gpufabric train`` takes them as options.

A framework profile (``data/frameworks/*.yaml``) gives a framework's defaults, each with its
source (documentation or code at a version). :func:`resolve` lays a job's stated settings over
its profile's defaults: a stated key always wins.

Examples
--------
>>> load_profile("Megatron-LM").name, load_profile("megatron core").name
('megatron', 'megatron')
>>> load_profile("NeMo 2.0").name, load_profile("torchtitan").defaults["attention"]
('nemo', 'sdpa')
>>> resolve(load_profile("torchtitan"), {"fused_kernels": True})["fused_kernels"]
True
>>> load_profile("caffe")
Traceback (most recent call last):
...
gpufabric.errors.InputError: framework: unknown framework 'caffe' (known: composer, deepspeed, \
kempnerforge, maxtext, megatron, nemo, pytorch-fsdp, torchtitan)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

from gpufabric.errors import InputError, unknown_name
from gpufabric.fileio import load_data, parse_yaml, path_kind, read_text

#: run-setting key -> (allowed values: a tuple, or a type; meaning)
SETTINGS: dict[str, tuple[Any, str]] = {
    "sp": (bool, "sequence parallelism with tensor parallelism (reduce-scatter / all-gather "
                 "instead of all-reduce)"),
    "zero": ((0, 1, 2, 3), "ZeRO stage: 1 distributed optimizer, 2 + gradients, 3 + "
                           "parameters"),
    "fsdp": (("full", "hybrid"), "FSDP sharding: full (ZeRO-3) or hybrid (HSDP: shard inside "
                                 "a node, replicate across nodes)"),
    "overlap_grad_reduce": (bool, "data-parallel gradient reduction (and the distributed "
                                  "optimizer's parameter gather) overlapped with compute"),
    "zero3_overlap": (bool, "ZeRO-3/FSDP parameter gathers and gradient reduce-scatter "
                            "prefetched under compute (DeepSpeed overlap_comm)"),
    "tp_comm_overlap": (bool, "tensor-parallel collectives overlapped with the GEMMs "
                              "(TE userbuffers, PyTorch AsyncTP)"),
    "tp_bwd_overlap": (bool, "in the backward pass, the column-parallel linears' input-gradient "
                             "collective (all-reduce; with sequence parallelism the input "
                             "all-gather and the reduce-scatter) runs under their GEMMs "
                             "(Megatron-LM's asynchronous tensor-parallel all-reduce, on by "
                             "default since September 2021)"),
    "pp_scatter_gather": (bool, "without sequence parallelism, each tensor-parallel rank sends "
                                "its 1/tp slice of a stage's boundary activations and the next "
                                "stage all-gathers them over NVLink (Megatron-LM's scatter/gather "
                                "optimisation, February 2021 to March 2023)"),
    "ep_comm_overlap": (bool, "expert all-to-all overlapped with another micro-batch's "
                              "compute (DualPipe, Megatron EP overlap)"),
    "attention": (("flash", "sdpa", "unfused"), "attention kernel: flash (the framework's "
                  "fused kernel: cuDNN / FlashAttention-3 class), sdpa (PyTorch SDPA's "
                  "FlashAttention-2), unfused (scores through HBM: two batched GEMMs and a "
                  "softmax)"),
    "fused_kernels": (bool, "element-wise work fused into few kernels (torch.compile, "
                            "Transformer Engine / Apex fused kernels); false: PyTorch eager"),
    "recompute": (("none", "selective", "full"), "activation recomputation"),
    "sac": (("attention", "op"), "what selective recomputation recomputes: attention "
                                 "(Megatron: the attention core) or op (torchtitan's op-level "
                                 "policy)"),
    "cross_entropy": (("eager", "eager_16bit", "vocab_parallel", "fused"),
                      "how the loss over the logits is computed, which sets its memory: eager "
                      "(PyTorch cross_entropy on an FP32 copy; loss_parallel with tensor "
                      "parallelism), eager_16bit (on the 16-bit logits, which the loop "
                      "holds), vocab_parallel (Megatron's fused vocabulary-parallel softmax, "
                      "in place), fused (a compiled loss on 16-bit logits)"),
    "loss_parallel": (bool, "with tensor parallelism the loss runs on each rank's vocabulary "
                            "shard of the logits; false: the logits are gathered to every rank"),
    "master_weights": (bool, "FP32 master weights and Adam moments beside the 16-bit "
                             "parameters; false: parameters, gradients and moments all 16-bit"),
    "grad_accum_no_sync": (bool, "FSDP gradient accumulation without the reduce-scatter until "
                                 "the last micro-batch (the unsharded gradients are held)"),
    "recompute_modules": (list, "what selective recomputation recomputes, as Megatron-Core's "
                                "--recompute-modules names it: a list of core_attn, mlp, "
                                "moe_act, moe, shared_experts, mla_up_proj, layernorm"),
    "pp_microbatches": (("micro_batch", "stages"), "how a pipeline splits a data-parallel "
                        "rank's batch: into micro_batch-sized micro-batches, or into as many "
                        "micro-batches as pipeline stages (torchtitan)"),
    "vpp": (int, "virtual pipeline stages per rank (interleaved schedule)"),
    "parallel_block": (bool, "attention and MLP run side by side from one input (GPT-J / "
                             "PaLM parallel block)"),
    "eval_every_samples": (int, "a timed run evaluates after this many trained sequences"),
    "eval_samples": (int, "sequences per evaluation"),
    "nccl_algo": (("ring", "tree", "nvls", "nvls_tree", "pat"), "NCCL_ALGO of the run: the "
                  "algorithm of its all-reduces, all-gathers and reduce-scatters"),
    "nccl_proto": (("LL", "LL128", "Simple"), "NCCL_PROTO of the run: the protocol of those "
                   "collectives"),
}


@dataclass(frozen=True)
class Profile:
    """One framework's defaults (:data:`SETTINGS` keys) and the source of each."""

    name: str
    title: str
    aliases: tuple[str, ...]
    version: str
    defaults: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)


def normalise(name: str) -> str:
    """A framework name for matching: lower case, parenthesised text and a trailing version
    dropped, only letters and digits kept.

    >>> normalise("Megatron-LM"), normalise("megatron core"), normalise("NeMo 2.0")
    ('megatronlm', 'megatroncore', 'nemo')
    >>> normalise("Megatron-Core r0.8.0"), normalise("torchtitan (FSDP2)")
    ('megatroncore', 'torchtitan')
    """
    t = re.sub(r"\([^)]*\)", " ", str(name).lower())
    t = re.sub(r"[\s_-]+v?r?\d+(\.\d+)*\s*$", "", t.strip())
    return re.sub(r"[^a-z0-9]", "", t)


def check_setting(key: str, value: Any, *, file: str | None = None,
                  field: str | None = None) -> Any:
    """``value`` if it is allowed for run setting ``key``; an :class:`InputError` naming the
    field and the allowed values otherwise."""
    allowed, _ = SETTINGS[key]
    where = field or key
    if allowed is bool:
        if not isinstance(value, bool):
            raise InputError(f"got {value!r}; expected true or false", file=file, field=where)
    elif allowed is list:
        from gpufabric.workloads.training import RECOMPUTE_MODULES
        if not isinstance(value, list) or not value or \
                any(v not in RECOMPUTE_MODULES for v in value):
            raise InputError(f"got {value!r}; expected a list of "
                             f"{', '.join(RECOMPUTE_MODULES)}", file=file, field=where)
    elif allowed is int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InputError(f"got {value!r}; expected a whole number >= 0", file=file,
                             field=where)
    elif value not in allowed:
        raise InputError(f"got {value!r}; allowed: {', '.join(map(str, allowed))}", file=file,
                         field=where)
    return value


def _profile(raw: Any, where: str) -> Profile:
    if not isinstance(raw, dict):
        raise InputError("expected a mapping (name, title, aliases, version, defaults)",
                         file=where)
    for key in ("name", "defaults"):
        if key not in raw:
            raise InputError("missing; a framework profile needs name and defaults",
                             file=where, field=key)
    defaults: dict[str, Any] = {}
    sources: dict[str, str] = {}
    if not isinstance(raw["defaults"], dict):
        raise InputError("expected a mapping of setting: {value, source}", file=where,
                         field="defaults")
    for key, item in raw["defaults"].items():
        if key not in SETTINGS:
            raise unknown_name("run setting", str(key), SETTINGS, file=where,
                               field=f"defaults.{key}")
        if not isinstance(item, dict) or "value" not in item or not item.get("source"):
            raise InputError("expected {value: ..., source: '...'} (every default names its "
                             "source)", file=where, field=f"defaults.{key}")
        defaults[key] = check_setting(key, item["value"], file=where,
                                      field=f"defaults.{key}.value")
        sources[key] = str(item["source"])
    aliases = tuple(str(a) for a in raw.get("aliases") or ())
    return Profile(str(raw["name"]), str(raw.get("title") or raw["name"]), aliases,
                   str(raw.get("version") or ""), defaults, sources)


@cache
def profiles() -> dict[str, Profile]:
    """The built-in profiles by name."""
    out: dict[str, Profile] = {}
    folder = resources.files("gpufabric.workloads").joinpath("data", "frameworks")
    for f in sorted(folder.iterdir(), key=lambda p: p.name):
        if f.name.endswith(".yaml"):
            where = f"workloads/data/frameworks/{f.name}"
            p = _profile(load_data("gpufabric.workloads", "data", "frameworks", f.name), where)
            out[p.name] = p
    return out


def load_profile(name_or_path: str, *, field: str = "framework") -> Profile:
    """A built-in profile by name (normalised: ``Megatron-LM``, ``megatron core``, ``NeMo
    2.0`` all match) or a user's profile file (YAML, the schema of the built-in ones)."""
    text = str(name_or_path)
    if text.endswith((".yaml", ".yml")) or path_kind(text) == "file":
        return _profile(parse_yaml(read_text(text, what="a framework profile (YAML)"), text),
                        text)
    key = normalise(text)
    for p in profiles().values():
        if key in {normalise(a) for a in (p.name, *p.aliases)}:
            return p
    raise unknown_name("framework", text, profiles(), field=field)


def resolve(profile: Profile | None, stated: dict[str, Any]) -> dict[str, Any]:
    """The run settings of a job: the profile's defaults with every stated key on top."""
    out = dict(profile.defaults) if profile else {}
    out.update({k: v for k, v in stated.items() if k in SETTINGS and v is not None})
    return out


def step_options(settings: dict[str, Any]) -> dict[str, Any]:
    """The fields of :class:`gpufabric.workloads.training.Software` (keyword arguments of
    ``predict_step``) for resolved run settings (a setting not given keeps its default).

    >>> step_options({"attention": "sdpa", "fused_kernels": False, "tp_comm_overlap": True})
    {'tp_overlap': True, 'flash': True, 'attn_kernel': 'fa2', 'fused': False}
    """
    out: dict[str, Any] = {}
    for key, arg in (("tp_comm_overlap", "tp_overlap"), ("ep_comm_overlap", "ep_overlap"),
                     ("overlap_grad_reduce", "dp_overlap"), ("zero3_overlap", "zero3_overlap"),
                     ("sac", "sac"), ("cross_entropy", "cross_entropy"),
                     ("loss_parallel", "loss_parallel"), ("master_weights", "master_weights"),
                     ("grad_accum_no_sync", "grad_accum_no_sync"),
                     ("tp_bwd_overlap", "tp_bwd_overlap"),
                     ("pp_scatter_gather", "pp_scatter_gather")):
        if key in settings:
            out[arg] = settings[key]
    for key in ("nccl_algo", "nccl_proto"):
        if settings.get(key):
            out[key] = settings[key]
    if settings.get("recompute_modules"):
        out["recompute_modules"] = tuple(settings["recompute_modules"])
    if "attention" in settings:
        out["flash"] = settings["attention"] != "unfused"
        out["attn_kernel"] = "fa2" if settings["attention"] == "sdpa" else "native"
    if "fused_kernels" in settings:
        out["fused"] = settings["fused_kernels"]
    return out


__all__ = ["SETTINGS", "Profile", "profiles", "load_profile", "resolve", "step_options",
           "normalise", "check_setting"]

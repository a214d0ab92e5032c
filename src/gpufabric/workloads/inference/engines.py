"""Serving-engine profiles as data: one YAML file per engine in ``workloads/data/engines/``.

A profile gives what the simulator needs of an engine, each value with its source (and, for a
fitted one, the calibration ids it was ``fitted_on``): the scheduler (policy, chunked prefill,
whether a request's whole KV cache is reserved when it is admitted), the default batch limits
(``max_num_seqs``; the prefill token budget of an iteration by GPU memory, which is also the
chunk size), the per-iteration overhead (and a per-layer launch cost for engines without CUDA
graphs), the per-request front end, how much GPU memory the engine lets itself use and of what
(``total``: vLLM's ``gpu_memory_utilization``; ``free``: TensorRT-LLM's
``kv_cache_free_gpu_mem_fraction`` of what the weights and activations leave), the KV block
size and the CUDA-graph batch sizes.

``--engine`` takes a profile's name or alias (an engine name starting with one, as measurement
files spell them: "TensorRT-LLM 0.17", "vLLM V1") or a path to a user's profile file, which
may name a ``base`` profile and give only what differs.

Examples
--------
>>> profile("TensorRT-LLM").name, engine_key("vLLM 0.6.0"), engine_key("my-engine")
('tensorrt-llm', 'vllm-v0', 'default')
>>> p = profile("vllm")
>>> p.max_num_seqs, p.mem_utilization, p.mem_of, p.block_size
(256, 0.9, 'total', 16)
>>> p.batched_tokens("H100-SXM")[0], p.batched_tokens("A100-SXM4-80GB")[0]
(8192, 2048)
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Any

from gpufabric.errors import InputError
from gpufabric.fileio import load_data, package_dir
from gpufabric.params import Param
from gpufabric.workloads.compute import record

#: the folder of the built-in profiles, for messages
FOLDER = "workloads/data/engines"
#: the profile unknown engine names fall back to
DEFAULT = "default"
POLICIES = ("fcfs", "priority")
MEM_OF = ("total", "free")
#: fields a profile must give (a user's profile with a ``base`` inherits the rest)
REQUIRED = ("name", "title", "scheduler", "max_num_seqs", "max_batched_tokens",
            "gpu_memory_utilization", "block_size", "overhead_s")
#: fields a profile may give
OPTIONAL = ("aliases", "source", "request_s", "pd_request_s", "layer_s",
            "cuda_graph_batch_sizes", "base")


@dataclass(frozen=True)
class TokenRule:
    """A default prefill token budget for GPUs of at least ``min_GiB`` (not ``not_gpu``)."""

    value: int
    source: str
    min_GiB: float = 0.0
    not_gpu: tuple[str, ...] = ()
    #: without chunked prefill the budget is at least the model's context length (vLLM V0:
    #: ``max(max_model_len, 2048)``), so every prompt the model takes fits one step
    context: bool = False


@dataclass(frozen=True)
class EngineProfile:
    name: str
    title: str
    aliases: tuple[str, ...]
    policy: str
    chunked_prefill: bool
    reserve_full: bool
    scheduler_source: str
    max_num_seqs: int
    token_rules: tuple[TokenRule, ...]
    mem_utilization: float
    mem_of: str
    block_size: int
    cuda_graph_batch_sizes: tuple[int, ...]
    overhead: Param
    request: Param | None
    layer: Param | None
    file: str
    pd_request: Param | None = None
    params: tuple[Param, ...] = ()
    #: a built-in profile, whose costs are recorded: read through the registry, so that a
    #: calibration profile (``--profile``) or a refit sets them
    registered: bool = False
    #: how an iteration's batch is formed (:mod:`gpufabric.workloads.inference.policies`)
    order: str = "decode-first"
    #: the engine refuses a token budget below its batch limit (vLLM: every running sequence
    #: must be able to put a token in each step)
    budget_covers_batch: bool = False

    def _seconds(self, p: Param | None) -> float:
        """A time of the profile: a built-in profile's as the current parameters have it, a
        user's file's as the file gives it."""
        if p is None:
            return 0.0
        return float(p.value if self.registered else p.shipped)

    def whole_budget(self, tokens: int, context: int) -> int:
        """The token budget without chunked prefill: ``tokens``, or the model's ``context``
        where the engine's rule raises it to that (:attr:`TokenRule.context`)."""
        return max(tokens, context) if any(r.context for r in self.token_rules) else tokens

    def batched_tokens(self, gpu: str) -> tuple[int, str]:
        """The engine's default prefill token budget on this GPU kind, and its source."""
        from gpufabric.workloads import compute as C
        spec = C.gpu_spec(gpu)
        gib = spec.memory_GB * 1e9 / 2**30
        name = spec.name.lower()
        for r in self.token_rules:
            if gib >= r.min_GiB and not any(g in name for g in r.not_gpu):
                return r.value, r.source
        r = self.token_rules[-1]
        return r.value, r.source

    @property
    def overhead_s(self) -> float:
        return self._seconds(self.overhead)

    @property
    def request_s(self) -> float:
        return self._seconds(self.request)

    @property
    def pd_request_s(self) -> float:
        """Per request of a disaggregated deployment, on top of :attr:`request_s`: the PD
        router or proxy and the prefill-decode handshake before the prefill is scheduled."""
        return self._seconds(self.pd_request)

    @property
    def layer_s(self) -> float:
        return self._seconds(self.layer)


def _err(msg: str, file: str, fld: str) -> InputError:
    return InputError(msg, file=file, field=fld)


def _sourced(d: dict, key: str, file: str, kind: type | tuple = (int, float)) -> tuple[Any, str,
                                                                                      tuple]:
    """(value, source, fitted_on) of a ``{value, source[, fitted_on]}`` field."""
    v = d.get(key)
    if not isinstance(v, dict) or "value" not in v or not v.get("source"):
        raise _err("expected a mapping with value and source (and fitted_on for a fitted "
                   "value)", file, key)
    val = v["value"]
    if isinstance(val, bool) or not isinstance(val, kind):
        raise _err(f"value must be {getattr(kind, '__name__', 'a number')}, got {val!r}",
                   file, key + ".value")
    fitted = v.get("fitted_on") or []
    if not isinstance(fitted, list) or not all(isinstance(x, str) for x in fitted):
        raise _err("fitted_on must be a list of calibration ids", file, key + ".fitted_on")
    return val, " ".join(str(v["source"]).split()), tuple(fitted)


def _answer(d: dict, key: str, file: str) -> str:
    """The ``answer`` of a ``{value, source, fitted_on, answer}`` field ('' when none): why a
    value fitted on a single entry is that entry's answer."""
    a = d[key].get("answer") or ""
    if not isinstance(a, str):
        raise _err("answer must be a sentence (why a single entry is all the value rests on)",
                   file, key + ".answer")
    return " ".join(a.split())


def _param(d: dict, key: str, file: str, name: str, unit: str, applies: str,
           register: bool) -> Param | None:
    if d.get(key) is None:
        return None
    val, src, fitted = _sourced(d, key, file)
    if val < 0 or val > 10:
        raise _err(f"must be from 0 to 10 seconds, got {val!r}", file, key + ".value")
    full = f"{name}[{d['name']}]"
    answer = _answer(d, key, file)
    if register:
        return record(full, float(val), unit, applies, src, *fitted, answer=answer)
    return Param(full, float(val), unit, applies, src, fitted, "", "workloads", answer)


def parse(d: Any, file: str, register: bool = False) -> EngineProfile:
    """Check one profile mapping (every failure one line naming ``file`` and the field)."""
    if not isinstance(d, dict):
        raise _err("expected a mapping of profile fields", file, "profile")
    unknown = sorted(set(d) - set(REQUIRED) - set(OPTIONAL))
    if unknown:
        raise _err(f"unknown field; allowed: {', '.join(REQUIRED + OPTIONAL)}", file,
                   unknown[0])
    for k in REQUIRED:
        if k not in d:
            raise _err(f"missing; a profile gives {', '.join(REQUIRED)} (or a base profile "
                       "to inherit from)", file, k)
    name = d["name"]
    if not isinstance(name, str) or not name.strip():
        raise _err("must be a non-empty name", file, "name")
    sch, order = _scheduler(d["scheduler"], file)
    seqs, _, _ = _sourced(d, "max_num_seqs", file, int)
    if seqs < 1:
        raise _err(f"must be at least 1, got {seqs}", file, "max_num_seqs.value")
    rules = _token_rules(d["max_batched_tokens"], file)
    mu = d["gpu_memory_utilization"]
    util, _, _ = _sourced(d, "gpu_memory_utilization", file)
    if not 0 < util <= 1:
        raise _err(f"must be above 0 and at most 1, got {util!r}", file,
                   "gpu_memory_utilization.value")
    if mu.get("of") not in MEM_OF:
        raise _err(f"unknown {mu.get('of')!r}; allowed: {', '.join(MEM_OF)}", file,
                   "gpu_memory_utilization.of")
    bs, _, _ = _sourced(d, "block_size", file, int)
    if bs < 1:
        raise _err(f"must be at least 1, got {bs}", file, "block_size.value")
    graphs: tuple[int, ...] = ()
    if d.get("cuda_graph_batch_sizes") is not None:
        g, _, _ = _sourced(d, "cuda_graph_batch_sizes", file, list)
        if not all(isinstance(x, int) and x >= 1 for x in g):
            raise _err("must be a list of whole numbers >= 1", file,
                       "cuda_graph_batch_sizes.value")
        graphs = tuple(g)
    aliases = d.get("aliases") or []
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise _err("must be a list of names", file, "aliases")
    key = name.strip().lower()
    over = _param(d, "overhead_s", file, "ENGINE_OVERHEAD_S", "s per iteration",
                  f"engine {key}: each iteration", register)
    assert over is not None
    req = _param(d, "request_s", file, "ENGINE_REQUEST_S", "s per request",
                 f"engine {key}: each request", register)
    pdr = _param(d, "pd_request_s", file, "ENGINE_PD_REQUEST_S", "s per request",
                 f"engine {key}: each request of a disaggregated deployment (router, "
                 "handshake)", register)
    lay = _param(d, "layer_s", file, "ENGINE_LAYER_S", "s per layer per iteration",
                 f"engine {key}: each layer of each iteration", register)
    extra: list[Param] = []
    if register:
        _, src, fit = _sourced(d, "gpu_memory_utilization", file)
        extra.append(record(f"ENGINE_GPU_MEMORY_UTILIZATION[{key}]", float(util),
                            f"fraction of GPU memory ({mu['of']})",
                            f"engine {key}: memory it lets itself use", src, *fit))
        _, src, fit = _sourced(d, "max_num_seqs", file, int)
        extra.append(record(f"ENGINE_MAX_NUM_SEQS[{key}]", int(seqs), "sequences",
                            f"engine {key}: default batch limit", src, *fit))
    return EngineProfile(key, str(d["title"]), tuple(a.lower() for a in aliases) or (key,),
                         str(sch["policy"]), bool(sch["chunked_prefill"]),
                         sch["admission"] == "reserve-full", " ".join(str(sch["source"]).split()),
                         int(seqs), tuple(rules), float(util), str(mu["of"]), int(bs), graphs,
                         over, req, lay, file, pdr, tuple(extra), register, str(order),
                         bool(sch.get("budget_covers_batch", False)))


def _scheduler(sch: Any, file: str) -> tuple[dict, str]:
    """A profile's ``scheduler`` mapping checked (policy, admission, chunked prefill, source)
    and its order (default decode-first)."""
    if not isinstance(sch, dict) or not sch.get("source"):
        raise _err("expected policy, chunked_prefill, admission and source", file, "scheduler")
    if sch.get("policy") not in POLICIES:
        raise _err(f"unknown policy {sch.get('policy')!r}; allowed: {', '.join(POLICIES)}",
                   file, "scheduler.policy")
    if sch.get("admission") not in ("on-demand", "reserve-full"):
        raise _err(f"unknown admission {sch.get('admission')!r}; allowed: on-demand, "
                   "reserve-full", file, "scheduler.admission")
    if not isinstance(sch.get("chunked_prefill"), bool):
        raise _err("must be true or false", file, "scheduler.chunked_prefill")
    if not isinstance(sch.get("budget_covers_batch", False), bool):
        raise _err("must be true or false", file, "scheduler.budget_covers_batch")
    from gpufabric.workloads.inference.policies import POLICIES as ORDERS
    order = sch.get("order", "decode-first")
    if order not in ORDERS:
        raise _err(f"unknown order {order!r}; allowed: {', '.join(ORDERS)}", file,
                   "scheduler.order")
    return sch, str(order)


def _token_rules(mbt: Any, file: str) -> list[TokenRule]:
    """The ``max_batched_tokens`` rules, first match wins: each a whole value >= 1 with its
    source, optionally for GPUs of at least ``min_GiB`` or not of ``not_gpu``."""
    if not isinstance(mbt, list) or not mbt:
        raise _err("expected a list of rules {value, source[, min_GiB, not_gpu]}, first "
                   "match wins", file, "max_batched_tokens")
    rules = []
    for i, r in enumerate(mbt):
        where = f"max_batched_tokens[{i}]"
        if not isinstance(r, dict) or not r.get("source") or not isinstance(r.get("value"), int) \
                or isinstance(r.get("value"), bool) or r["value"] < 1:
            raise _err("expected a whole value >= 1 and a source", file, where)
        if not isinstance(r.get("context", False), bool):
            raise _err("must be true or false", file, where + ".context")
        rules.append(TokenRule(int(r["value"]), " ".join(str(r["source"]).split()),
                               float(r.get("min_GiB", 0.0)),
                               tuple(str(g).lower() for g in r.get("not_gpu") or ()),
                               bool(r.get("context", False))))
    return rules


@functools.cache
def builtin() -> dict[str, EngineProfile]:
    """The built-in profiles by name (their parameters recorded for ``gpufabric params``)."""
    folder = package_dir("gpufabric.workloads").joinpath("data", "engines")
    out: dict[str, EngineProfile] = {}
    for f in sorted(folder.iterdir(), key=lambda p: p.name):
        if not f.name.endswith(".yaml"):
            continue
        p = parse(load_data("gpufabric.workloads", "data", "engines", f.name),
                  f"{FOLDER}/{f.name}", register=True)
        out[p.name] = p
    return out


def _alias_order() -> list[tuple[str, str]]:
    """(alias, profile) pairs, longest alias first (so a longer name wins a prefix tie)."""
    pairs = [(a, p.name) for p in builtin().values() for a in p.aliases]
    return sorted(pairs, key=lambda t: -len(t[0]))


def engine_key(engine: str | None) -> str:
    """The built-in profile an engine name (as measurement files spell it) is: the profile
    one of whose aliases the name starts with, else ``default``."""
    e = (engine or DEFAULT).strip().lower()
    for a, name in _alias_order():
        if e.startswith(a):
            return name
    return DEFAULT


def is_path(engine: str) -> bool:
    return engine.lower().endswith((".yaml", ".yml")) or os.sep in engine


@functools.lru_cache(maxsize=64)
def load_file(path: str) -> EngineProfile:
    """A user's profile file; a ``base`` names a built-in profile whose fields it inherits."""
    from gpufabric.fileio import load_yaml
    d = load_yaml(path)
    if not isinstance(d, dict):
        raise _err("expected a mapping of profile fields", path, "profile")
    base = d.get("base")
    if base is not None:
        key = str(base).strip().lower()
        if key not in builtin():
            raise _err(f"unknown base profile {base!r}; allowed: {', '.join(builtin())}",
                       path, "base")
        merged = dict(load_data("gpufabric.workloads", "data", "engines",
                                builtin()[key].file.rsplit("/", 1)[-1]))
        merged.pop("aliases", None)
        merged.update({k: v for k, v in d.items() if k != "base"})
        d = merged
    return parse(d, path)


def profile(engine: str | None) -> EngineProfile:
    """The profile of an engine name, alias or profile file (unknown names: ``default``)."""
    e = (engine or DEFAULT).strip()
    if is_path(e):
        return load_file(e)
    return builtin()[engine_key(e)]


def check(engine: str, fld: str = "--engine") -> EngineProfile:
    """As :func:`profile`, but an unknown name is an error listing the profiles."""
    e = (engine or "").strip()
    if not is_path(e) and engine_key(e) == DEFAULT and e.lower() != DEFAULT:
        known = [n for n in builtin() if n != DEFAULT]
        raise InputError(f"unknown engine '{engine}'; allowed: {', '.join(known)} (or their "
                         "aliases), or a profile file (.yaml)", field=fld)
    return profile(e)


def params_of(what: str) -> dict[str, Param]:
    """``{engine: record}`` of one kind of built-in parameter (``overhead``, ``request``,
    ``layer``) for the engines that have it."""
    out: dict[str, Param] = {}
    for n, p in builtin().items():
        v = getattr(p, what)
        if v is not None:
            out[n] = v
    return out

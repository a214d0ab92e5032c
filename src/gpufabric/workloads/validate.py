"""Predicted against measured training throughput (files in the schema of training.yaml).

Every entry and point is predicted with :func:`gpufabric.workloads.training.predict_step` on
the system it names and compared as **tokens per second per GPU** (images/s for CNNs): a
measured step time, tokens/s, samples/s, MLPerf time-to-train or GPU-hours per trillion tokens
converts to it exactly; TFLOP/s per GPU and MFU convert with the FLOP-counting rule of their
source (Megatron's ``72 l h^2 s (1 + s/6h + V/12lh)`` per sequence, times 4/3 where the source
counts the recomputation forward pass, as Narayanan et al. do). The error of a point is
``predicted / measured - 1``.

Entries the model cannot place (no model shape, no parallel layout, or a peak figure instead of
a run) are listed as skipped, with the reason. Points, skips and the summary are those of
:mod:`gpufabric.validation` (metric: the measured figure the point gives; status: fitted when a
parameter record names the entry, looked-at when the file marks it ``looked_at``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any


from gpufabric import catalog, validation
from gpufabric.errors import InputError
from gpufabric.fileio import load_yaml
from gpufabric.sweep import each
from gpufabric.workloads.frameworks import (SETTINGS, check_setting, load_profile, resolve,
                                            step_options)
from gpufabric.workloads.models import ModelSpec, list_models, load_model
from gpufabric.workloads.models import (find_model, gives_shape, load_model_file,
                                        model_from_shape, with_model_file)
from gpufabric.workloads.memory import (MEMORY_REPORTED, MemoryBreakdown, edge_params,
                                        params_per_gpu)
from gpufabric.workloads.parallel import Parallel
from gpufabric.workloads.training import StepResult, predict_step, step_memory

#: entry model names (lower case, first match wins) -> built-in model
NAME_MAP = (
    ("deepseek-v3", "deepseek-v3"), ("deepseek-r1", "deepseek-v3"),
    ("llama 3.1 405b", "llama3-405b"), ("llama 3 405b", "llama3-405b"),
    ("llama 3.1 70b", "llama3-70b"), ("llama 3 70b", "llama3-70b"),
    ("llama 3.1 8b", "llama3-8b"), ("llama 3 8b", "llama3-8b"),
    ("llama 2 7b", "llama2-7b"), ("llama 2 13b", "llama2-13b"), ("llama 2 34b", "llama2-34b"),
    ("llama 2 70b", "llama2-70b"), ("megascale", "megascale-gpt-175b"),
    ("mlperf gpt3", "gpt3-175b"), ("opt-175b", "opt-175b"), ("bert-large", "bert-large"),
    ("resnet-50", "resnet-50"), ("mixtral", "mixtral-8x7b"), ("qwen3 235b", "qwen3-235b-a22b"),
    ("qwen3 30b", "qwen3-30b-a3b"),
)
#: What a point's ``measured`` and ``predicted`` carry (its ``metric``), with their unit;
#: ``measured_as`` names the figure of :data:`METRICS` the source gave, converted.
UNITS = {"tokens_per_s_per_gpu": "tokens/s per GPU", "samples_per_s_per_gpu": "samples/s per GPU"}
METRICS = ("step_time_s", "tokens_per_s_per_gpu", "tokens_per_s", "samples_per_s",
           "time_to_train_s", "tflops_per_gpu", "mfu", "gpu_hours_per_trillion_tokens")
#: memory figures of the most loaded GPU (GiB = 2**30 bytes), each compared with its part of
#: :class:`gpufabric.workloads.memory.MemoryBreakdown`: ``memory_GiB`` the peak as the
#: framework reports it (the caching allocator's reserved memory: everything, reserve and
#: fragmentation included), ``model_states_GiB`` weights + gradients + optimizer states,
#: ``activations_GiB`` the activations kept for backward
MEMORY_METRICS = {"memory_GiB": ("total_GiB",),
                  "model_states_GiB": ("weights_GiB", "grads_GiB", "optimizer_GiB"),
                  "activations_GiB": ("activations_GiB",)}
@dataclass
class Report:
    """Points (:func:`gpufabric.validation.point` records: measured and predicted tokens/s per
    GPU, CNNs samples/s per GPU, as their ``metric`` and ``unit`` say, with ``measured_as``
    (the source's figure they were converted from), ``layout`` and ``bottleneck``), skips and
    the summary."""

    points: list[dict[str, Any]]
    skipped: list[dict[str, Any]]
    summary: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"summary": self.summary, "points": self.points, "skipped": self.skipped}


def is_training_file(data: Any) -> bool:
    """Whether parsed YAML looks like a training measurements file (entries with a model and a
    parallelism or result), as opposed to a collectives file."""
    items = data.get("entries") if isinstance(data, dict) else data
    return (isinstance(items, list) and bool(items) and isinstance(items[0], dict)
            and "model" in items[0] and "collective" not in items[0])


#: The keys a training entry's ``system`` may state (also the board power limit it ran under).
SYSTEM_FIELDS = validation.SYSTEM_FIELDS | {"power_cap_W"}


def load(path: str) -> list[dict[str, Any]]:
    data = load_yaml(path, what="a training measurements file (YAML)")
    data, file_mark = validation.entries_of(data, path)
    if isinstance(data, dict):
        data = data.get("entries")
    if not isinstance(data, list) or not data:
        raise InputError("expected a list of entries (id, system, model, parallelism, result "
                         "or points)", file=path)
    for i, e in enumerate(data):
        if not isinstance(e, dict):
            raise InputError("expected a mapping", file=path, field=f"[{i}]")
        for key in ("id", "system", "model"):
            if key not in e:
                raise InputError("missing; every entry needs id, system, model", file=path,
                                 field=f"[{i}].{key}")
        if not isinstance(e["system"], dict) or not isinstance(e["model"], dict):
            raise InputError("expected a mapping", file=path, field=f"[{i}]({e['id']}).system")
        validation.check_keys(e["system"], SYSTEM_FIELDS, path, f"[{i}]({e['id']}).system")
        e = data[i] = {**e, "model": with_model_file(e["model"], path, f"[{i}]({e['id']})")}
        why = validation.looked_at(e, file_mark, path, f"[{i}]({e['id']})")
        if why:
            data[i] = {**e, "looked_at": why}
    return data


def resolve_model(m: dict[str, Any]) -> ModelSpec | None:
    """The built-in model an entry names: by shape where it gives one, else by name; an
    entry's ``model_file`` (a Hugging Face config.json or a model YAML) first."""
    if m.get("model_file"):
        return load_model_file(str(m["model_file"]))
    if m.get("layers") and m.get("hidden"):
        for cand in list_models():
            if (cand.layers, cand.hidden) == (m["layers"], m["hidden"]) and \
                    m.get("heads", cand.heads) == cand.heads and \
                    m.get("vocab", cand.vocab) == cand.vocab:
                return cand
    hit = find_model(str(m.get("name", "")))
    if hit is not None:
        return hit
    name = str(m.get("name", "")).lower()
    for key, target in NAME_MAP:
        if key in name:
            return load_model(target)
    if gives_shape(m):       # a model no built-in matches, built from the entry's shape
        try:
            return model_from_shape(m, f"model {m.get('name') or '(by shape)'}")
        except InputError:
            return None
    return None


def _num(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        mm = re.match(r"\s*([0-9.]+(?:e[+-]?\d+)?)", v)
        if mm:
            return float(mm.group(1))
    return None


def _first_word(text: Any) -> str:
    """A setting's value without the source's comment: ``"fp8 (FP8-CS)"`` -> ``"fp8"``,
    ``"selective (layer)"`` -> ``"selective"``."""
    return re.split(r"[\s(,]", str(text).strip().lower(), maxsplit=1)[0]


def _precision(text: Any) -> str:
    return _first_word(text) if text else "bf16"


def _recompute(text: Any) -> str:
    return _first_word(text) if text else "none"


def _spec(system: dict[str, Any], gpus: int) -> dict[str, Any]:
    s: dict[str, Any] = {k: system[k] for k in ("gpu", "gpus_per_node", "scale_up", "nic",
                                              "nics_per_node")
         if k in system}
    gpn = int(s.get("gpus_per_node", 8))
    s["nodes"] = int(system.get("nodes") or math.ceil(gpus / gpn))
    if "nic" in s and "nics_per_node" not in s:
        s["nics_per_node"] = gpn
    if gpn > 16:   # a rack-scale NVLink domain: Grace hosts on NVLink-C2C (as gb200-nvl72)
        s["host"] = {"cpu": "Grace"}
    if s["nodes"] > 1 and "nic" not in s:
        raise InputError("not stated; a system of several nodes needs its scale-out NIC "
                         "(ib-hdr, ib-ndr, roce-400, ...)", field="system.nic")
    return s


def _measured(res: dict[str, Any], gpus: int, tokens_per_seq: int, batch: int,
              m: ModelSpec) -> tuple[str, float] | None:
    """(metric, tokens/s per GPU) from the first metric the point gives. TFLOP/s and MFU count
    FLOPs by Megatron's rule, times 4/3 where the result states
    ``flops_count_includes_recompute`` (the source counts the recomputed forward pass)."""
    for key in METRICS:
        if key not in res:
            continue
        v = _num(res[key])
        if v is None or v <= 0:
            continue
        if key == "step_time_s":
            return key, batch * tokens_per_seq / v / gpus
        if key == "tokens_per_s_per_gpu":
            return key, v
        if key == "tokens_per_s":
            return key, v / gpus
        if key == "samples_per_s":
            return key, v * tokens_per_seq / gpus
        if key == "time_to_train_s" and _num(res.get("tokens_trained")):
            return key, float(_num(res["tokens_trained"]) or 0) / v / gpus
        if key == "gpu_hours_per_trillion_tokens":
            return key, 1e12 / (v * 3600)
        if key in ("tflops_per_gpu", "mfu"):
            tf = v if key == "tflops_per_gpu" else v * float(res.get("_peak", 0))
            if not tf or not m.is_transformer:
                return None
            s = tokens_per_seq
            h, L, V = m.hidden, m.layers, m.vocab
            per_seq = 72 * L * h * h * s * (1 + s / (6 * h) + V / (12 * L * h))
            if m.is_moe or m.gated or m.kv_heads != m.heads:   # Megatron's newer rule: 6N + attn
                from gpufabric.workloads.training import model_flops_per_token
                per_seq = model_flops_per_token(m, s) * s
            if res.get("flops_count_includes_recompute") is True:
                per_seq *= 4 / 3
            return key, tf * 1e12 / (per_seq / s)
    return None


def validate(path: str, *, only: tuple[str, ...] = (),
             topo_cache: dict[str, Any] | None = None,
             progress: Callable[[int, int], None] | None = None) -> Report:
    """Run every entry and point of a training measurements file (``only``: ids starting with
    one of these prefixes). ``progress(n, total)`` is told as each point is done (see
    :func:`gpufabric.sweep.run`)."""
    entries = load(path)
    if only:
        entries = [e for e in entries if str(e["id"]).startswith(only)]
    points: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    fitted_ids = validation.fitted_ids()
    topo_cache = {} if topo_cache is None else topo_cache

    def n_points(e: dict[str, Any]) -> int:
        pts = e.get("points") or [{}]
        return len(pts) if isinstance(pts, list) else 1
    total = sum(n_points(e) for e in entries)
    for e in entries:
        eid = str(e["id"])
        m = resolve_model(e["model"])
        if m is None:
            skipped.append(validation.skip(eid, None, "model shape not given and no built-in "
                                           "model by that name"))
            if progress:
                progress(n_points(e), total)
            continue
        stated = _assumed(e)      # the entry's parallelism and run settings, once
        if stated.get("parallel_block") and m.is_transformer:
            m = replace(m, parallel_block=True)
        pts = e.get("points") or [{}]
        if not isinstance(pts, list):
            raise InputError("expected a list of mappings", file=path, field=f"{eid}.points")
        for j, pt in each(enumerate(pts), progress, total):
            if not isinstance(pt, dict):
                raise InputError("expected a mapping", file=path, field=f"{eid}.points[{j}]")
            try:
                got = _one(e, pt, m, topo_cache, stated)
            except InputError as exc:
                skipped.append(validation.skip(eid, j, str(exc)))
                continue
            except (ValueError, TypeError, ZeroDivisionError) as exc:
                raise InputError(f"bad value ({exc}); numbers are expected for gpus, nodes, "
                                 "tp, pp, dp, cp, ep, vpp, micro_batch, global_batch, seq_len",
                                 file=path, field=f"{eid}.points[{j}]") from None
            if isinstance(got, str):
                skipped.append(validation.skip(eid, j, got))
                continue
            thr, r = got
            status = validation.status(eid, str(e.get("looked_at") or ""), fitted_ids)
            lay = _layout(r)
            for metric, meas in memory_figures(e, pt):
                pred = memory_predicted(r.memory, metric, e, pt, path,
                                        block_share=_block_share(m, r))
                points.append(validation.point(
                    eid, j, metric, round(meas, 2), round(pred, 2), status,
                    error_pct=round((pred / meas - 1) * 100, 2), unit="GiB",
                    breakdown={k: round(v, 3) for k, v in r.memory.items()
                               if k.endswith("_GiB") and k != "capacity_GiB"},
                    layout=lay, bottleneck=f"memory of the {r.memory['stage']} stage"))
            if thr is None:
                continue
            metric, meas = thr
            pred = r.tokens_per_s_per_gpu if m.is_transformer else \
                r.tokens_per_s_per_gpu / max(r.seq_len, 1)
            if metric == "time_to_train_s":
                pred /= 1 + eval_overhead(stated, r)
            if not m.is_transformer:
                meas = meas / max(r.seq_len, 1)
            err = (pred / meas - 1) * 100
            carried = "tokens_per_s_per_gpu" if m.is_transformer else "samples_per_s_per_gpu"
            points.append(validation.point(
                eid, j, carried, round(meas, 2), round(pred, 2), status, error_pct=round(err, 2),
                unit=UNITS[carried], measured_as=metric,
                breakdown={k: round(v, 4) for k, v in r.breakdown_s.items()},
                layout=lay, bottleneck=r.bottleneck))
    return Report(points, skipped, validation.summarize(points))


def _layout(r: StepResult) -> str:
    etp = r.parallel.get("etp") or r.parallel["tp"]
    lay = "tp{tp} pp{pp} dp{dp} cp{cp} ep{ep}".format(**r.parallel) + (
        f" etp{etp}" if etp != r.parallel["tp"] else "") + \
        " vpp{vpp} mb{micro_batch} gb{global_batch}".format(**r.parallel) + (
              f" fsdp-{r.parallel['fsdp']}" if r.parallel["fsdp"]
              else f" zero{r.parallel['zero']}")
    return lay + f" {r.precision} {r.parallel['recompute']}"


def memory_figures(e: dict[str, Any], pt: dict[str, Any]) -> list[tuple[str, float]]:
    """The memory figures (:data:`MEMORY_METRICS`) a point gives, in GiB: the entry's result
    with the point's keys on top.

    >>> memory_figures({"result": {"memory_GiB": 67.0}}, {"activations_GiB": "12.4"})
    [('memory_GiB', 67.0), ('activations_GiB', 12.4)]
    """
    res = {**(e.get("result") or {}), **pt}
    return [(k, v) for k in MEMORY_METRICS if (v := _num(res.get(k))) is not None and v > 0]


def memory_predicted(mem: dict[str, Any], metric: str, e: dict[str, Any],
                     pt: dict[str, Any], path: str = "", block_share: float = 1.0) -> float:
    """The model's figure for one memory metric of a point, from its breakdown ``mem``:
    ``memory_GiB`` as the entry says its source counted it (``memory_reported``, on the entry
    or the point: ``device``, the default, ``reserved`` or ``allocated``;
    :meth:`gpufabric.workloads.memory.MemoryBreakdown.reported_GiB`), the others the sum of
    their parts (:data:`MEMORY_METRICS`). ``model_states_GiB`` of an entry whose source counts
    only the transformer blocks' parameters (``model_states_counted: blocks``) is the
    ``block_share`` of them.

    >>> mem = {"weights_GiB": 1.0, "grads_GiB": 2.0, "optimizer_GiB": 6.0}
    >>> memory_predicted(mem, "model_states_GiB", {"model_states_counted": "blocks"}, {},
    ...                  block_share=0.5)
    4.5
    """
    if metric != "memory_GiB":
        got = float(sum(mem[k] for k in MEMORY_METRICS[metric]))
        counted = str(e.get("model_states_counted") or "all")
        if metric == "model_states_GiB" and counted not in ("all", "blocks"):
            raise InputError(f"got {counted!r}; allowed: all, blocks", file=path,
                             field=f"{e.get('id')}.model_states_counted")
        return got * block_share if counted == "blocks" and metric == "model_states_GiB" \
            else got
    what = str(pt.get("memory_reported") or e.get("memory_reported") or "device")
    if what not in MEMORY_REPORTED:
        raise InputError(f"got {what!r}; allowed: {', '.join(MEMORY_REPORTED)}", file=path,
                         field=f"{e.get('id')}.memory_reported")
    names = [f.name for f in fields(MemoryBreakdown)]
    return MemoryBreakdown(**{k: mem[k] for k in names}).reported_GiB(what)


def _block_share(m: ModelSpec, r: StepResult) -> float:
    """The share of the most loaded GPU's parameters that sit in transformer blocks (the
    rest: embedding, final norm, output layer; :func:`~gpufabric.workloads.memory.edge_params`)."""
    if not m.is_transformer:
        return 1.0
    par = Parallel(**{f.name: r.parallel[f.name] for f in fields(Parallel)
                      if f.name in r.parallel})
    stage = 0 if r.memory["stage"] == "first" else par.pp - 1
    total = sum(params_per_gpu(m, par, stage))
    return 1.0 - edge_params(m, par, stage) / total if total else 1.0


def _assumed(e: dict[str, Any]) -> dict[str, Any]:
    """The entry's parallelism and run settings as its file states them (nothing added)."""
    return dict(e.get("parallelism") or {})


def eval_overhead(par: dict[str, Any], r: Any) -> float:
    """Time spent evaluating, per unit of training time, in a timed time-to-train run that
    evaluates ``eval_samples`` sequences after every ``eval_every_samples`` trained (both in
    ``par``; 0 when the entry states no evaluation). Evaluation runs every
    ``ceil(eval_every_samples / global batch)`` steps and is a forward pass only: of a step's
    compute, communication and bubble (the data-parallel reduction and the optimizer aside),
    the forward share ``1 / (1 + BWD_GEMM)`` (with full recomputation the backward also
    repeats the forward: ``1 / (2 + BWD_GEMM)``).

    >>> from types import SimpleNamespace as NS
    >>> r = NS(parallel={"global_batch": 2304, "recompute": "none"}, step_time_s=12.0,
    ...        breakdown_s={"compute": 11.0, "dp_comm": 0.5, "optimizer": 0.5})
    >>> round(eval_overhead({"eval_every_samples": 24576, "eval_samples": 24567}, r), 4)
    0.2962
    """
    every = _num(par.get("eval_every_samples")) or 0
    n = _num(par.get("eval_samples")) or 0
    if every <= 0 or n <= 0:
        return 0.0
    from gpufabric.workloads.training import BWD_GEMM
    gb = int(r.parallel["global_batch"])
    steps = math.ceil(every / gb)
    b = r.breakdown_s
    fwd_share = 1 / ((2 if r.parallel.get("recompute") == "full" else 1) + BWD_GEMM.value)
    per_step = r.step_time_s - b.get("dp_comm", 0.0) - b.get("optimizer", 0.0)
    return float(n / gb * per_step * fwd_share / (steps * r.step_time_s))


def derived_has_layout(e: dict[str, Any]) -> bool:
    return any(k in (e.get("derived") or {}) for k in ("tp", "pp", "dp"))


def power_cap(system: dict[str, Any]) -> float | None:
    """The board power limit an entry's system states (``power_cap_W``), in watts; None where
    none is stated.

    >>> power_cap({"gpu": "H100-SXM", "power_cap_W": 500})
    500.0
    """
    v = system.get("power_cap_W")
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
        raise InputError(f"got {v!r}; expected a power in W > 0", field="system.power_cap_W")
    return float(v)


#: keys of a point's system and layout that count something: a whole number >= 0 where given
#: as a number (0 or null: not stated)
COUNT_KEYS = ("gpus", "nodes", "gpus_per_node", "nics_per_node", "tp", "pp", "dp", "cp", "ep",
              "etp", "vpp", "model_parallel", "micro_batch", "global_batch", "grad_accum",
              "seq_len", "zero")


def _check_numbers(e: dict[str, Any], pt: dict[str, Any]) -> None:
    """A count below 0 or not whole, or a measured figure <= 0, refuses the point (naming the
    field) instead of being passed over."""
    sections = [(name, e.get(name)) for name in ("system", "model", "parallelism", "result")]
    for section, d in [*sections, ("points", pt)]:
        if not isinstance(d, dict):
            continue
        for k, v in d.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            if k in COUNT_KEYS and (v < 0 or v != int(v)):
                raise InputError(f"got {v!r}; expected a whole number >= 1 (0: not stated)",
                                 field=f"{section}.{k}")
            if (k in METRICS or k in MEMORY_METRICS or k == "tokens_trained") and v <= 0:
                raise InputError(f"got {v!r}; expected a number > 0", field=f"{section}.{k}")


#: keys of a point that change the system, and the layout keys a point may restate
SYSTEM_KEYS = ("gpus", "nodes", "gpus_per_node", "nic", "nics_per_node")
LAYOUT_KEYS = ("dp", "tp", "pp", "cp", "ep", "etp", "micro_batch", "global_batch", "grad_accum",
               "precision", "framework")


def run_settings(par: dict[str, Any]) -> dict[str, Any] | str:
    """The run settings of a point (:data:`gpufabric.workloads.frameworks.SETTINGS`): its
    framework profile's defaults (``framework``; none when absent) with every key the entry or
    point states on top. A framework without a profile is a reason to skip (returned as a
    string); a stated value outside the allowed ones is an :class:`InputError`."""
    stated = dict(par)
    if "recompute" in stated:
        stated["recompute"] = _recompute(stated["recompute"])
    for k, v in stated.items():
        if k in SETTINGS and v is not None:
            check_setting(k, v, field=f"parallelism.{k}")
    profile = None
    if par.get("framework"):
        try:
            profile = load_profile(str(par["framework"]), field="parallelism.framework")
        except InputError as exc:
            return f"no framework profile: {exc}"
    return resolve(profile, stated)


def _one(e: dict[str, Any], pt: dict[str, Any], m: ModelSpec, topo_cache: dict[str, Any],
         stated: dict[str, Any]) -> tuple[tuple[str, float] | None, StepResult] | str:
    _check_numbers(e, pt)
    sysd = dict(e["system"])
    sysd["gpu"] = catalog.gpu_variant(sysd["gpu"], sysd.get("gpu_variant"))
    par = dict(stated)
    if not any(k in par for k in ("tp", "pp", "dp", "model_parallel", "fsdp")) and \
            not any(k in pt for k in ("tp", "pp", "dp")) and not derived_has_layout(e) and \
            m.params() > 20e9:      # small models without a stated layout run data parallel
        return "parallel layout not stated"
    for k, v in pt.items():
        if k in SYSTEM_KEYS:
            sysd[k] = v
        elif k in LAYOUT_KEYS or k in SETTINGS:
            par[k] = v
    if e.get("peak_figure"):
        return f"a peak figure ({e['peak_figure']}), not a run average"
    run = run_settings(par)
    if isinstance(run, str):
        return run
    res = dict(e.get("result") or {})
    res.update({k: v for k, v in pt.items() if k in METRICS or k == "tokens_trained"})
    seq = int(pt.get("seq_len") or e["model"].get("seq_len") or par.get("seq_len")
              or m.seq_len)
    if not m.is_transformer:
        seq = 1
    gpus = int(sysd.get("gpus") or 0) or (int(sysd.get("nodes", 1)) *
                                         int(sysd.get("gpus_per_node", 8)))
    p = _parallel(e, par, run, m, gpus)
    if isinstance(p, str):
        return p
    prec = _precision(par.get("precision"))
    spec = _spec(sysd, gpus)
    key = repr(sorted(spec.items()))
    if key not in topo_cache:
        from gpufabric.collectives import Model
        from gpufabric.topology.build import from_spec
        topo_cache[key] = from_spec(spec, materialize_nodes=Model.SAMPLE_NODES)
    topo = topo_cache[key]
    opts = {"precision": prec, "power_cap_W": power_cap(e["system"]), **step_options(run)}
    r = predict_step(m, topo, p, seq, **opts)
    stage = str(pt.get("memory_stage") or e.get("memory_stage") or "max")
    if stage != "max" and memory_figures(e, pt):    # the source reads one stage's GPU
        r.memory = step_memory(m, topo, p, seq, stage=stage, **opts).to_dict()
    if "mfu" in res:
        from gpufabric.workloads.compute import gpu_spec
        res["_peak"] = gpu_spec(str(sysd["gpu"])).peak_tflops(prec)
    got = _measured(res, p.world, seq, p.global_batch, m)
    if got is None and not memory_figures(e, pt):
        return "no measured throughput or memory the model can compare with"
    return got, r


def _parallel(e: dict[str, Any], par: dict[str, Any], run: dict[str, Any], m: ModelSpec,
              gpus: int) -> Parallel | str:
    """The entry's parallel layout on ``gpus`` GPUs: its stated sizes (or those derived from
    them), data parallelism filling the rest, the batch in whole micro-batches per rank, and
    the run's settings; or why it cannot be run."""
    derived = e.get("derived") or {}
    tp = int(par.get("tp") or _num(derived.get("tp")) or 1)
    pp = int(par.get("pp") or _num(derived.get("pp")) or 1)
    if "model_parallel" in par and "tp" not in par:
        mp = int(par["model_parallel"])
        tp = min(8, mp)
        pp = mp // tp
    cp = int(par.get("cp") or 1)
    dp = int(par.get("dp") or _num(derived.get("dp")) or 0) or gpus // (tp * pp * cp)
    if dp * tp * pp * cp != gpus:
        dp = gpus // (tp * pp * cp)
    if dp < 1:
        return "layout does not fit the GPU count"
    mb = int(par.get("micro_batch") or 1)
    if "global_batch" in par:
        gb = int(par["global_batch"])
    elif "grad_accum" in par:
        gb = dp * mb * int(par["grad_accum"])
    else:
        gb = dp * mb
    if pp > 1 and run.get("pp_microbatches") == "stages" and gb // dp == mb and mb % pp == 0:
        mb //= pp        # the rank's batch splits into as many micro-batches as stages
    if gb % (dp * mb):
        gb = dp * mb * max(1, round(gb / (dp * mb)))
    fsdp = str(run.get("fsdp") or "")
    zero = int(run.get("zero") or 0)
    vpp = int(run.get("vpp") or 1)
    layers = m.layers if m.is_transformer else 1
    if pp * vpp > layers:
        vpp = 1
    ep = int(par.get("ep") or 1)
    etp = int(par.get("etp") or 0)
    if not etp and (dp * cp) % ep and (tp * dp * cp) % ep == 0:
        # EP wider than the data dimension runs only as Megatron-Core's MoE parallel folding;
        # its performance recipes fold with expert TP 1 (Megatron-Bridge
        # scripts/performance/configs/qwen/qwen3_workload_base_configs.py)
        etp = 1
    return Parallel(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vpp=vpp, zero=zero,
                    fsdp=fsdp if fsdp in ("full", "hybrid") else "", micro_batch=mb,
                    global_batch=gb, recompute=str(run.get("recompute") or "none"), etp=etp,
                    sp=bool(run.get("sp", True)))


__all__ = ["validate", "is_training_file", "Report", "resolve_model", "power_cap",
           "memory_figures", "memory_predicted", "MEMORY_METRICS"]

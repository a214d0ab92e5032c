"""Predicted against measured for published LLM serving results.

The file follows the schema of ``tests/data/calibration/inference.yaml`` (its header): a list of
entries with ``id``, ``system`` (gpu, gpus, gpus_per_node, nodes, scale_up), ``engine``,
``model`` (name, precision, kv_cache_dtype), ``parallelism`` (tp, pp, ep, attention_dp,
replicas), ``workload`` (mode, isl, osl, request_rate, concurrency, batch_size, num_requests,
dataset: free text naming the dataset, run on its lengths when isl / osl are not stated)
and either ``result`` or ``points`` (each point overriding workload and parallelism keys and
carrying result keys). Each measured figure the model predicts (output tokens/s, per GPU,
TTFT, ITL/TPOT, end-to-end latency) is one compared point.

Entries the model cannot run are listed as skipped with the reason (lengths not stated,
ratios only, a bulk-transfer benchmark, ...). An entry with ``parallelism.mtp`` (draft tokens
of multi-token prediction) runs with speculative decoding, its acceptance from
``parallelism.mtp_acceptance`` where the entry states it, else the sourced default
(:mod:`gpufabric.workloads.inference.speculative`).

Points, skips and the summary are those of :mod:`gpufabric.validation`: the headline over the
held-out entries (no parameter record names them, the file does not mark them ``looked_at``),
with ``fitted``, ``looked_at`` and ``by_metric`` beside it.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable
from typing import Any


from gpufabric import catalog, validation
from gpufabric.errors import InputError
from gpufabric.fileio import load_yaml
from gpufabric.sweep import each
from gpufabric.topology.build import from_spec
from gpufabric.workloads.inference import clients
from gpufabric.workloads.inference.itertime import engine_key
from gpufabric.workloads.inference.serve import OFFLINE_BATCHES, ServeConfig, serve, streams
from gpufabric.workloads.models import (ModelSpec, gives_shape, load_model, load_model_file,
                                        model_from_shape, with_model_file)
from gpufabric.workloads.models import find_model

#: Most requests simulated for one point (offline runs reach their steady state long before).
MAX_SIM_REQUESTS = 1000
#: Requests an offline run of a stated duration (``workload.duration_s``) simulates at least,
#: up to its stated count (an online one simulates the arrivals of its duration:
#: :func:`~gpufabric.workloads.inference.clients.duration_requests`).
OFFLINE_DURATION_REQUESTS = 20000
#: Full batches of each engine an offline run of a stated duration simulates at least (as an
#: offline `serve` of no stated count does: serve.OFFLINE_BATCHES, where the figures are).
STEADY_BATCHES = OFFLINE_BATCHES
#: Measured keys compared, and the key of the prediction each is compared with.
METRICS = {
    "output_tokens_per_s": ("throughput_tokens_per_s", None),
    "output_tokens_per_s_per_gpu": ("throughput_tokens_per_s_per_gpu", None),
    "ttft_ms": ("ttft_ms", "mean"), "ttft_ms_p50": ("ttft_ms", "p50"),
    "ttft_ms_p99": ("ttft_ms", "p99"),
    "itl_ms": ("itl_ms", "mean"), "itl_ms_p50": ("itl_ms", "p50"),
    "tpot_ms": ("tpot_ms", "mean"), "tpot_ms_p50": ("tpot_ms", "p50"),
    "tpot_ms_p99": ("tpot_ms", "p99"),
    "latency_ms": ("e2e_ms", "mean"), "latency_ms_p50": ("e2e_ms", "p50"),
    "transfer_ms": ("kv_transfer_ms", "p50"),
    # llama-bench: ppN = N prompt tokens / their time, tgN = N tokens generated from an empty
    # context / their time, one sequence (see :func:`_llama_bench`)
    "prompt_tokens_per_s": ("prompt_tokens_per_s", None),
    "generation_tokens_per_s": ("generation_tokens_per_s", None),
    # a disaggregated deployment's pools (points with a phase; see :func:`_run_pd_pool`)
    "input_tokens_per_s_per_node": ("pool_input_tokens_per_s_per_node", None),
    "input_tokens_per_s_per_gpu": ("pool_input_tokens_per_s_per_gpu", None),
    "output_tokens_per_s_per_node": ("pool_output_tokens_per_s_per_node", None),
    "output_tokens_per_s_per_user": ("pool_output_tokens_per_s_per_user", None),
    # the highest request rate the deployment ran at within the entry's latency limits
    # (``workload.slo``; MLPerf Server: the rate its submitter raised until a p99 limit
    # bound), against the highest the model's runs meet them at (:func:`rate_within_slo`)
    "max_requests_per_s_within_slo": ("rate_within_slo", None),
}
#: the latency figures a ``workload.slo`` may limit (keys of METRICS, as the result states
#: them), each a ceiling in milliseconds
SLO_KEYS = ("ttft_ms", "ttft_ms_p50", "ttft_ms_p99", "tpot_ms", "tpot_ms_p50", "tpot_ms_p99",
            "itl_ms", "itl_ms_p50", "latency_ms", "latency_ms_p50")
#: bisections of the rate search within an SLO, after the doubling that brackets it: the
#: bracket [x, 2x] narrowed to x / 64, under 2 % of the answer
SLO_BISECTIONS = 6


def fitted_on(eid: str) -> bool:
    """Whether a parameter record names entry ``eid`` in its ``fitted_on`` (ids and
    ``prefix-*`` patterns; the inference models' records are recorded on import)."""
    import gpufabric.workloads.inference.pd  # noqa: F401  (records KV_EFF, KV_SETUP_S)
    return validation.status(eid) == validation.FITTED


def model_name(text: str) -> str:
    """A catalog model from a free-text name: 'Llama 3.1 70B Instruct' -> 'llama3-70b'
    (:func:`gpufabric.workloads.models.find_model` normalises the spelling).

    >>> model_name("Llama 3.3 70B (nvidia/Llama-3.3-70B-Instruct-FP8)"), model_name("GPT-J 6B")
    ('llama3-70b', 'gpt-j-6b')
    >>> model_name("llama_13b"), model_name("DeepSeek-R1 (FP8)")
    ('llama2-13b', 'deepseek-v3')
    """
    hit = find_model(text)
    if hit is not None:
        return hit.name
    t = re.sub(r"[\s_]+", "-", str(text).split("(")[0].strip().lower())
    if re.fullmatch(r"llama-\d+b", t):            # TensorRT-LLM's llama_13b = Llama 2
        t = "llama-2-" + t.split("-")[1]
    if t == "gpt-175b":
        t = "gpt3-175b"
    return load_model(t).name


def entry_model(mod: dict, name: Any, eid: str) -> ModelSpec:
    """The model of an entry: a built-in by name (any usual spelling), else the shape the
    entry gives (layers, hidden, heads, kv_heads, ffn, vocab, experts, ...).

    A ``model_file`` (a Hugging Face config.json or a model YAML, resolved against the
    measurements file when it is read) gives the model first.

    Raises :class:`Skip` when neither names a model the tool can build.
    """
    if mod.get("model_file"):
        return load_model_file(str(mod["model_file"]))
    try:
        return load_model(model_name(str(name or "")))
    except InputError:
        pass
    if gives_shape(mod):
        try:
            return model_from_shape(mod, f"entry {eid} model")
        except InputError as exc:
            raise Skip(f"model '{name}' not in the model catalog and its shape is incomplete: "
                       f"{exc}") from None
    raise Skip(f"model '{name}' not in the model catalog and no shape given (layers, "
               "hidden, heads, kv_heads, ffn, vocab)")


def dataset_lengths(wl: dict) -> tuple[str, float, float]:
    """(dataset, mean input, mean output) of a workload that names a dataset instead of
    giving its lengths; :class:`Skip` with the reason where it cannot be run."""
    from gpufabric.workloads.inference import datasets as D
    text = wl.get("dataset")
    if not text:
        raise Skip("input / output lengths not stated")
    ds = D.match(str(text))
    if ds is None:
        raise Skip(f"dataset '{text}' is not a known dataset (gpufabric datasets) and no "
                   "lengths are stated")
    if ds.synthetic:
        raise Skip(f"dataset {ds.name} is a synthetic shape and the lengths it centres on "
                   "are not stated")
    if ds.missing:
        gaps = [k for k, ls in (("input", ds.isl), ("output", ds.osl)) if ls.unknown]
        raise Skip(f"dataset {ds.name}: {' and '.join(gaps)} length statistics not published")
    isl, osl = D.mean_lengths(ds)
    return ds.name, isl, osl


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str) and v.strip().lower() in ("inf", "infinity"):
        return math.inf
    return None


def _int(v: Any, field: str, default: int = 1) -> int:
    """A whole number >= 1 from a measurements file (absent, 0 or null: ``default``).

    >>> _int(None, "tp"), _int("4", "tp"), _int(8.0, "tp")
    (1, 4, 8)
    >>> _int([2], "tp")
    Traceback (most recent call last):
    ...
    gpufabric.errors.InputError: tp: got [2]; expected a whole number >= 1
    """
    if v is None or v == 0 or v is False:
        return default
    n = _num(v)
    if n is None and isinstance(v, str):
        try:
            n = float(v)
        except ValueError:
            n = None
    if n is None or not math.isfinite(n) or n < 1 or n != int(n):
        raise InputError(f"got {v!r}; expected a whole number >= 1", field=field)
    return int(n)


def _name(v: Any, field: str, default: str) -> str:
    if v is None:
        return default
    if not isinstance(v, str):
        raise InputError(f"got {v!r}; expected a name", field=field)
    return v


def entry_engine(e: dict) -> str:
    """The engine profile an entry names: ``engine.name``, and with ``engine.backend`` the
    profile of that backend when the engine has one ("TensorRT-LLM" + "tensorrt": the
    TensorRT backend's profile; a backend without its own profile is the engine's)."""
    eng = e.get("engine") or {}
    name = _name(eng.get("name"), "engine.name", "default")
    backend = eng.get("backend")
    if backend is None:
        return name
    backend = _name(backend, "engine.backend", "")
    both = f"{name} {backend}"
    return both if engine_key(both) != engine_key(name) else name


#: The keys an inference entry's ``system`` may state (a disaggregated pool also reads its
#: NVLink domain).
SYSTEM_FIELDS = validation.SYSTEM_FIELDS | {"nvlink_domain"}


def load_entries(path: str) -> list[dict]:
    data = load_yaml(path, what="an inference measurements file (YAML)")
    data, file_mark = validation.entries_of(data, path)
    if not isinstance(data, list) or not data:
        raise InputError("expected a list of entries (id, system, engine, model, workload, "
                         "result or points)", file=path)
    for i, e in enumerate(data):
        if not isinstance(e, dict) or "id" not in e:
            raise InputError("expected a mapping with id, system, engine, model, workload",
                             file=path, field=f"[{i}]")
        for key in ("system", "model"):
            if not isinstance(e.get(key), dict):
                raise InputError("missing or not a mapping", file=path,
                                 field=f"[{i}]({e['id']}).{key}")
        validation.check_keys(e["system"], SYSTEM_FIELDS, path, f"[{i}]({e['id']}).system")
        for key in ("engine", "parallelism", "workload", "result"):
            if e.get(key) is not None and not isinstance(e[key], dict):
                raise InputError("not a mapping", file=path, field=f"[{i}]({e['id']}).{key}")
        pts = e.get("points")
        if pts is not None and not (isinstance(pts, list)
                                    and all(isinstance(x, dict) for x in pts)):
            raise InputError("expected a list of mappings", file=path,
                             field=f"[{i}]({e['id']}).points")
        _check_phases(e, path, i)
        data[i] = e = {**e, "model": with_model_file(e["model"], path, f"[{i}]({e['id']})")}
        why = validation.looked_at(e, file_mark, path, f"[{i}]({e['id']})")
        if why:
            data[i] = {**e, "looked_at": why}
    return data


def is_inference_file(path: str) -> bool:
    """Whether ``path`` holds inference measurements (entries with an engine and a workload)."""
    try:
        data = load_yaml(path, what="a measurements file (YAML)")
    except InputError:
        return False       # the collective validator says what is wrong with the file
    if isinstance(data, dict) and isinstance(data.get("entries"), list):
        data = data["entries"]
    return (isinstance(data, list) and bool(data) and isinstance(data[0], dict)
            and "engine" in data[0] and "workload" in data[0])


class Skip(Exception):
    pass


@functools.lru_cache(maxsize=8)
def _system_of(key: str) -> Any:
    return from_spec(json.loads(key))


def _system(spec: dict[str, Any], sysd: dict[str, Any],
            stated: tuple[str, ...] = ("scale_up", "nic", "nics_per_node", "nvlink_domain")
            ) -> Any:
    """The system of a spec, with what the entry's ``system`` states of ``stated`` (its
    scale-up: an NVSwitch, a direct NVLink mesh, bridges, PCIe; its NICs); one object per
    distinct spec: the points of an entry share it, and with it the collective predictions
    their step tables ask for (nothing in a serving run changes its topology)."""
    spec = {**spec, **{k: sysd[k] for k in stated if sysd.get(k) is not None}}
    return _system_of(json.dumps(spec, sort_keys=True))


def _engine_settings(cfg: ServeConfig, wl: dict) -> None:
    """The engine settings an entry's ``workload`` states: ``chunked_prefill`` (true: prompts
    prefilled in chunks of the token budget; false: whole) and ``gpu_memory_utilization`` (the
    fraction of GPU memory the engine uses); an unstated one stays the client's or the
    engine profile's default."""
    chunked = wl.get("chunked_prefill")
    if chunked is not None:
        if not isinstance(chunked, bool):
            raise InputError(f"must be true or false, got {chunked!r}",
                             field="workload.chunked_prefill")
        cfg.chunked_prefill = chunked
    util = wl.get("gpu_memory_utilization")
    if util is not None:
        u = _num(util)
        if u is None or not 0 < u <= 1:
            raise InputError(f"must be a fraction above 0 and at most 1, got {util!r}",
                             field="workload.gpu_memory_utilization")
        cfg.gpu_memory_utilization = u


def _run_point(e: dict, pt: dict, within_slo: bool = False) -> tuple[dict, dict]:
    """One point's serve run and what it ran; with ``within_slo`` also the highest rate the
    deployment meets the workload's ``slo`` at (``rate_within_slo`` in the run's figures)."""
    sysd, mod = e["system"], e["model"]
    par = {**(e.get("parallelism") or {}), **{k: v for k, v in pt.items()
                                             if k in ("tp", "pp", "ep", "attention_dp")}}
    wl = {**(e.get("workload") or {}), **pt}
    mode = wl.get("mode")
    if wl.get("phase") is not None:
        return _run_pd_pool(e, pt, par, wl)
    if par.get("pd") == "disaggregated":
        return _run_pd(e, pt, par, wl)
    if mode in (None, "bulk-transfer"):
        raise Skip(f"no serving workload (mode {mode})")
    dataset, isl, osl, isl_n, osl_n = _lengths(wl)
    gpu = pt.get("gpu") or sysd.get("gpu")
    if not gpu:
        raise Skip("GPU not stated")
    gpu = catalog.gpu_variant(gpu, sysd.get("gpu_variant"))
    spec_m = entry_model(mod, pt.get("model") or mod.get("name", ""), str(e["id"]))
    model = spec_m.name
    prec = str(pt.get("precision") or mod.get("precision") or "bf16").lower()
    prec = {"nvfp4": "fp4", "fp4 (nvfp4)": "fp4"}.get(prec, prec)
    kv = mod.get("kv_cache_dtype")
    tp = _int(par.get("tp"), "tp")
    pp = _int(par.get("pp"), "pp")
    ep = par.get("ep", 1)
    ep = _int(ep, "ep") if isinstance(ep, int) else 1
    reps = _int(par.get("replicas"), "replicas")
    adp = tp if par.get("attention_dp") else 1
    if par.get("attention_dp") and ep == 1:
        ep = tp
    gpus = _int(pt.get("gpus") or sysd.get("gpus"), "gpus", tp * pp * reps)
    per_node = _int(sysd.get("gpus_per_node"), "gpus_per_node", gpus)
    topo = _system({"gpu": gpu, "gpus_per_node": max(per_node, tp * pp)}, sysd, ("scale_up",))
    # the entry's request count where it states one (None: as many as the run needs)
    n_req = _int(wl.get("num_requests"), "num_requests") if wl.get("num_requests") else None
    rate, conc, batch = (_num(wl.get(k)) for k in ("request_rate", "concurrency",
                                                     "batch_size"))
    # a benchmark client's figures are over its whole run (its requests from the first send
    # to the last answer); a stated duration's are its steady state (below)
    cfg = ServeConfig(measure="run", tp=tp, pp=pp, ep=ep, dp_attention=adp, replicas=reps,
                      precision=prec, kv_dtype=kv, engine=entry_engine(e),
                      isl=isl_n, osl=osl_n, dataset=dataset)
    if wl.get("max_num_tokens"):
        cfg.max_batched_tokens = _int(wl["max_num_tokens"], "max_num_tokens")
    steps = (e.get("engine") or {}).get("num_scheduler_steps")
    if steps is not None:
        cfg.scheduler_steps = _int(steps, "engine.num_scheduler_steps")
    if wl.get("max_batch_per_rank"):
        cfg.max_num_seqs = _int(wl["max_batch_per_rank"], "max_batch_per_rank")
    _engine_settings(cfg, wl)
    _load(cfg, topo, wl, mode, n_req, reps, isl)
    if par.get("mtp"):
        # multi-token prediction: the entry's acceptance where it states one, else the
        # sourced default for the model (speculative.DEFAULTS)
        cfg.spec, cfg.spec_tokens = "mtp", _int(par["mtp"], "mtp")
        acc = par.get("mtp_acceptance")
        cfg.acceptance = tuple(acc) if isinstance(acc, list) else acc
    if within_slo:
        if not (mode == "online" and rate is not None and math.isfinite(rate)):
            raise InputError("a highest rate within the SLO is measured by runs at a rate: "
                             "the workload needs mode online and a request_rate",
                             field="result.max_requests_per_s_within_slo")
        slo = slo_limits(wl.get("slo"))
    r = serve(spec_m, topo, cfg)  # type: ignore[arg-type]  # serve takes a spec or a name
    r.update(_llama_bench(r, isl_n, osl_n))
    if within_slo:
        dur = _duration(wl, clients.get(cfg.client) if cfg.client else None)
        r["rate_within_slo"] = rate_within_slo(spec_m, topo, cfg, slo, dur, gpus)
    return r, {"model": model, "gpu": gpu, "system": topo.name, "tp": tp, "pp": pp, "ep": ep,
               "gpus": gpus, "mode": mode, "isl": isl, "osl": osl, "rate": rate,
               "concurrency": conc, "batch": batch, "precision": prec, "dataset": dataset}


def slo_limits(v: Any, field: str = "workload.slo") -> dict[str, float]:
    """A workload's latency limits: a mapping of :data:`SLO_KEYS` to milliseconds > 0.

    >>> slo_limits({"ttft_ms_p99": 2000, "tpot_ms_p99": 200})
    {'ttft_ms_p99': 2000.0, 'tpot_ms_p99': 200.0}
    >>> try:
    ...     slo_limits({"ttft_p99": 2000})
    ... except InputError as exc:
    ...     print(exc.field, "|", exc.message[:16])
    workload.slo.ttft_p99 | unknown latency;
    """
    if not isinstance(v, dict) or not v:
        raise InputError(f"got {v!r}; expected a mapping of latency figures to their limits "
                         f"in ms (allowed: {', '.join(SLO_KEYS)})", field=field)
    out = {}
    for k, x in v.items():
        if k not in SLO_KEYS:
            raise InputError(f"unknown latency; allowed: {', '.join(SLO_KEYS)}",
                             field=f"{field}.{k}")
        ms = _num(x)
        if ms is None or not 0 < ms < math.inf:
            raise InputError(f"got {x!r}; expected milliseconds > 0", field=f"{field}.{k}")
        out[str(k)] = ms
    return out


def rate_within_slo(model: Any, topo: Any, cfg: ServeConfig, slo: dict[str, float],
                    duration_s: float | None, gpus: int) -> float:
    """The highest request rate at which a run of ``cfg`` (its client, its measure, its
    duration's arrivals: :func:`_duration_requests`) stays within every limit of
    ``slo`` and below the deployment's capacity
    (:func:`~gpufabric.workloads.inference.supernode.highest_rate`): the rate doubles from a
    small one until a run fails, then :data:`SLO_BISECTIONS` bisections (no measured figure
    enters the search). Each trial runs as many requests as the point's own run would at that
    rate (:func:`_load`)."""
    from gpufabric.workloads.inference.supernode import highest_rate
    limits = [(METRICS[k], ms) for k, ms in slo.items()]

    def within(r: dict) -> bool:
        return all((r[pk] if q is None else r[pk][q]) <= ms for (pk, q), ms in limits)

    def requests(rate: float) -> int | None:
        return _duration_requests(cfg, topo, rate, duration_s) if duration_s else \
            cfg.requests
    return highest_rate(model, topo, cfg, within, requests, start=max(0.05, 0.02 * gpus),
                        steps=SLO_BISECTIONS)[0]


def _lengths(wl: dict) -> tuple[str | None, float, float, int, int]:
    """(the dataset the lengths come from, or None; mean input and output lengths; the same
    as whole tokens for the run) of a point's workload: its stated isl/osl, else its
    dataset's."""
    isl, osl = _num(wl.get("isl")), _num(wl.get("osl"))
    dataset = None
    if isl is None or not osl:
        dataset, isl, osl = dataset_lengths(wl)
    if dataset:
        return dataset, isl, osl, max(1, round(isl)), max(1, round(osl))
    # isl 0: pure generation without a prompt (llama.cpp's tg tests)
    return None, isl, osl, (_int(isl, "isl") if isl else 0), _int(osl, "osl")


def _load(cfg: ServeConfig, topo: Any, wl: dict, mode: str, n_req: int | None, reps: int,
          isl: float) -> None:
    """The run's load as the entry's client and mode apply it, set on ``cfg``: a static
    batch (one synchronized round where the client fires at once), a closed loop, an open
    loop at a rate (a stated duration to its steady state), or offline."""
    rate, conc, batch = (_num(wl.get(k)) for k in ("request_rate", "concurrency",
                                                     "batch_size"))
    client = None
    if wl.get("client") is not None:
        # the entry names its benchmark client: its load's shape and how its figures were
        # taken are the client's (the counts below stay the entry's)
        client = clients.get(str(wl["client"]), field="workload.client")
        cfg.client, cfg.measure = client.name, None
    if mode == "static-batch":
        b = _int(batch, "batch_size")
        cfg.requests, cfg.max_num_seqs = b * reps, b
        cfg.max_batched_tokens = b * max(int(isl), 1)
        if client is not None and client.arrivals == "synchronized":
            cfg.concurrency = b * reps     # one round of the static batch per instance
        return
    if mode in ("closed-loop", "single-stream"):
        c = _int(conc or batch, "concurrency")
        cfg.concurrency = c
        cfg.requests = min(n_req or MAX_SIM_REQUESTS, max(MAX_SIM_REQUESTS, 3 * c))
        return
    if mode == "online" and rate is not None and math.isfinite(rate):
        cfg.rate = rate
        dur = _duration(wl, client)
        # a run of a stated duration (MLPerf's Server scenario) is simulated over that time:
        # its arrivals from an empty system, its figures as its client takes them (LoadGen:
        # over every request; without a client, the steady state)
        cfg.requests = min(n_req or MAX_SIM_REQUESTS, MAX_SIM_REQUESTS) if not dur else \
            _duration_requests(cfg, topo, rate, dur)
        if client is None:
            cfg.measure = "steady" if dur else "run"
    else:                                   # offline, or online at an infinite rate
        cfg.requests = _offline_requests(_duration(wl, client), n_req, batch, reps)
    if batch:
        cfg.max_num_seqs = _int(batch, "batch_size")


def _duration_requests(cfg: ServeConfig, topo: Any, rate: float, dur: float) -> int:
    """Requests an online run of ``cfg`` on ``topo`` at ``rate`` simulates for a stated
    duration: its arrivals over ``dur``, at most :data:`~gpufabric.workloads.inference.\
clients.MAX_DURATION_REQUESTS` for each request stream simulated as one
    (:func:`~gpufabric.workloads.inference.serve.streams`)."""
    return clients.duration_requests(rate, dur, streams(topo, cfg)) or 1


def _offline_requests(dur: float | None, n_req: int | None, batch: float | None,
                      engines: int) -> int:
    """Requests an offline run simulates: at most :data:`MAX_SIM_REQUESTS`, and for a run of a
    duration ``dur`` (MLPerf's Offline scenario: one query of samples enough for its minimum
    duration) its stated requests, up to :data:`OFFLINE_DURATION_REQUESTS` or
    :data:`STEADY_BATCHES` full batches of each of its ``engines``, whichever is more: each
    engine fills its batch, runs it and drains, and with fewer batches the ramp-up and drain
    are a large part of the run, where LoadGen's long run makes them a small one.

    >>> _offline_requests(600, 971520, 896, 8)      # 24 batches of 896 x 8
    172032
    >>> _offline_requests(600, 52800, None, 8), _offline_requests(None, 52800, 896, 8)
    (20000, 1000)
    >>> _offline_requests(600, None, 896, 4)        # no count stated: the run's own
    86016
    """
    if not dur:
        return min(n_req or MAX_SIM_REQUESTS, MAX_SIM_REQUESTS)
    full = max(OFFLINE_DURATION_REQUESTS, STEADY_BATCHES * int(batch or 0) * max(engines, 1))
    return min(n_req, full) if n_req else full


def _llama_bench(r: dict, isl: int, osl: int) -> dict:
    """llama-bench's figures from a serve run of one sequence: ``prompt_tokens_per_s`` (ppN:
    the prompt's N tokens over its time to first token) and, for a run without a prompt,
    ``generation_tokens_per_s`` (tgN: its N tokens over the whole request, the first one
    included, as llama-bench times N single-token decodes).

    >>> _llama_bench({"ttft_ms": {"mean": 100.0}, "e2e_ms": {"mean": 1000.0}}, 512, 1)
    {'prompt_tokens_per_s': 5120.0}
    >>> _llama_bench({"ttft_ms": {"mean": 8.0}, "e2e_ms": {"mean": 1000.0}}, 0, 128)
    {'generation_tokens_per_s': 128.0}
    """
    out = {}
    ttft, e2e = (r.get("ttft_ms") or {}).get("mean"), (r.get("e2e_ms") or {}).get("mean")
    if isl and ttft:
        out["prompt_tokens_per_s"] = isl / (ttft / 1e3)
    if not isl and e2e:
        out["generation_tokens_per_s"] = osl / (e2e / 1e3)
    return out


def _duration(wl: dict, client: clients.Client | None = None) -> float | None:
    """A workload's run duration in seconds: its stated ``duration_s``, else the shortest run
    its benchmark client accepts (MLPerf LoadGen's 600 s), else None."""
    dur = _num(wl.get("duration_s"))
    if wl.get("duration_s") is not None and not (dur and 0 < dur < math.inf):
        raise InputError(f"got {wl.get('duration_s')!r}; expected seconds > 0",
                         field="workload.duration_s")
    return dur if dur is not None else (client.min_duration_s if client else None)


def _run_pd(e: dict, pt: dict, par: dict, wl: dict) -> tuple[dict, dict]:
    """A 1P1D single-request run: TTFT and the KV transfer (Mooncake's tables)."""
    from gpufabric.workloads.inference.pd import serve_pd
    sysd, mod = e["system"], e["model"]
    if wl.get("mode") != "single-stream" or not _num(wl.get("isl")):
        raise Skip("disaggregated entry without a single-request workload")
    x = _int(par.get("prefill_instances"), "prefill_instances")
    y = _int(par.get("decode_instances"), "decode_instances")
    try:
        model = (str(mod["model_file"]) if mod.get("model_file") else
                 model_name(mod.get("name", "")))
    except InputError:
        raise Skip(f"model '{mod.get('name')}' not in the model catalog") from None
    tp = _int(par.get("tp"), "tp")
    spec: dict[str, Any] = {"gpu": sysd.get("gpu"),
                            "gpus_per_node": _int(sysd.get("gpus_per_node"), "gpus_per_node", 8),
                            "nodes": _int(sysd.get("nodes"), "nodes", 2)}
    topo = _system(spec, sysd, ("scale_up", "nic", "nics_per_node"))
    isl = _int(wl["isl"], "isl")
    prec = str(mod.get("precision") or "bf16").lower()
    cfg = ServeConfig(tp=tp, precision=prec, engine=entry_engine(e),
                      rate=0.05, requests=1, isl=isl, osl=2)
    _engine_settings(cfg, wl)
    if cfg.chunked_prefill is False:
        cfg.max_batched_tokens = max(isl, 8192)
    r = serve_pd(model, topo, cfg, (x, y))
    r["kv_transfer_ms"] = r["pd"]["kv_transfer_ms"]
    return r, {"model": model, "gpu": sysd["gpu"], "system": topo.name, "tp": tp, "pp": 1,
               "ep": 1, "gpus": (x + y) * tp, "mode": "pd single-stream", "isl": isl, "osl": 2,
               "rate": None, "concurrency": 1, "batch": None, "precision": prec}


#: The largest decode batch per rank a pool point without a stated batch is searched over.
DECODE_BATCH_CAP = 4096


def _check_phases(e: dict, path: str, i: int) -> None:
    """A pool point's ``phase`` is prefill or decode (in the entry's workload or a point)."""
    from gpufabric.workloads.inference.pd import PHASES
    where = [("workload", e.get("workload") or {})]
    where += [(f"points[{j}]", p) for j, p in enumerate(e.get("points") or [])]
    for name, d in where:
        ph = d.get("phase")
        if ph is not None and ph not in PHASES:
            raise InputError(f"got {ph!r}; allowed: {', '.join(PHASES)}", file=path,
                             field=f"[{i}]({e['id']}).{name}.phase")


def _run_pd_pool(e: dict, pt: dict, par: dict, wl: dict) -> tuple[dict, dict]:
    """A disaggregated deployment's prefill or decode pool at steady state
    (:func:`gpufabric.workloads.inference.pd.prefill_pool` / ``decode_pool``): input tokens/s
    of a prefill pool at a token budget and prompt length, output tokens/s of a decode pool
    at a batch (or a per-user speed, or a full KV cache) and an average KV length."""
    from gpufabric.workloads.inference.itertime import StepModel, ServeLayout
    from gpufabric.workloads.inference.pd import decode_pool, prefill_pool
    sysd, mod = e["system"], e["model"]
    phase = wl["phase"]
    if par.get("mtp"):
        raise Skip("multi-token prediction (speculative decoding) is not modeled")
    gpu = pt.get("gpu") or sysd.get("gpu")
    if not gpu:
        raise Skip("GPU not stated")
    try:
        model = (str(mod["model_file"]) if mod.get("model_file") else
                 model_name(pt.get("model") or mod.get("name", "")))
    except InputError:
        raise Skip(f"model '{mod.get('name')}' not in the model catalog") from None
    ep = _int(par.get("ep"), "ep")
    tp = _int(par.get("tp"), "tp", ep)
    adp = tp if par.get("attention_dp") else 1
    per_node = _int(sysd.get("gpus_per_node"), "gpus_per_node", 8)
    nodes = max(_int(sysd.get("nodes"), "nodes", 1), -(-tp // per_node))
    spec: dict[str, Any] = {"gpu": catalog.gpu_variant(gpu, sysd.get("gpu_variant")),
                            "gpus_per_node": per_node, "nodes": nodes}
    if nodes > 1:
        spec["nic"] = "ib-ndr"              # unless the entry states its NICs
    prec = str(pt.get("precision") or mod.get("precision") or "bf16").lower()
    prec = {"nvfp4": "fp4", "fp4 (nvfp4)": "fp4"}.get(prec, prec)
    kv = pt.get("kv_cache_dtype") or mod.get("kv_cache_dtype")
    engine = entry_engine(e)
    overlap = bool(pt.get("two_batch_overlap", par.get("two_batch_overlap", False)))
    isl, kv_len = _num(wl.get("isl")), _num(wl.get("avg_kv_len"))
    tokens = _num(wl.get("tokens_per_rank"))
    batch = _num(wl.get("batch"))
    conc = _num(wl.get("concurrency"))
    if phase == "decode" and not batch and conc:   # in flight over the attention ranks
        batch = float(max(1, round(conc / adp)))
    if phase == "prefill" and not isl:
        raise Skip("prefill pool without the prompt length (isl)")
    if phase == "decode" and not kv_len:
        osl = _num(wl.get("osl")) or 0.0
        if not isl:
            raise Skip("decode pool without the KV length (avg_kv_len or isl)")
        kv_len = isl + osl / 2.0
    budget = _int(tokens, "tokens_per_rank") if tokens else None
    if phase == "decode":       # the step tables cover the batch (or the largest one sought)
        budget = _int(batch, "batch") if batch else DECODE_BATCH_CAP
    sm = StepModel(model, _system(spec, sysd), ServeLayout(tp=tp, ep=ep, dp_attention=adp),
                   precision=prec, kv_dtype=kv, engine=engine,
                   max_tokens=budget or 8192, eplb=bool(par.get("eplb")))
    r: dict[str, Any]
    if phase == "prefill":
        p = prefill_pool(sm, _int(isl, "isl"), budget, overlap=overlap, gpus_per_node=per_node)
        r = {"pool_input_tokens_per_s_per_node": p["input_tokens_per_s_per_node"],
             "pool_input_tokens_per_s_per_gpu": p["input_tokens_per_s_per_gpu"]}
    else:
        per_user = _num(wl.get("output_tokens_per_s_per_user"))
        p = decode_pool(sm, _int(round(kv_len or 0.0), "avg_kv_len"),
                        _int(batch, "batch") if batch else None,
                        None if batch else per_user, overlap=overlap, gpus_per_node=per_node)
        r = {"pool_output_tokens_per_s_per_node": p["output_tokens_per_s_per_node"],
             "throughput_tokens_per_s_per_gpu": p["output_tokens_per_s_per_gpu"]}
        if batch or per_user is None:      # a speed that set the batch is no prediction
            r["pool_output_tokens_per_s_per_user"] = p["output_tokens_per_s_per_user"]
    r["pool"] = p
    r["bottleneck"] = (f"{phase} pool: {p['iteration_ms']:.1f} ms per iteration, "
                       f"{p['bound']}-bound (compute {p['compute_ms']:.1f} ms, "
                       f"communication {p['comm_ms']:.1f} ms"
                       + (", two-batch overlap)" if overlap else ")"))
    return r, {"model": model, "gpu": gpu, "system": sm.topo.name, "tp": tp, "pp": 1,
               "ep": ep, "gpus": tp, "mode": f"pd {phase} pool", "isl": isl, "osl": None,
               "rate": None, "concurrency": None, "batch": p.get("batch_per_rank", budget),
               "precision": prec}


def _predicted(r: dict, key: str, gpus: int) -> float | None:
    pk, q = METRICS[key]
    v = r.get(pk)
    if q is not None:
        v = v.get(q) if isinstance(v, dict) else None
    if v is None:
        return None
    if pk == "throughput_tokens_per_s":
        v = r["throughput_tokens_per_s_per_gpu"] * gpus
    return float(v)


def validate(path: str, progress: Callable[[int, int], None] | None = None) -> dict:
    """Every comparable figure of every entry: measured, predicted, error; and a summary.

    ``progress(n, total)`` is told as each point is done (see :func:`gpufabric.sweep.run`).
    """
    import gpufabric.workloads.inference.pd  # noqa: F401  (records KV_EFF, KV_SETUP_S)
    entries = load_entries(path)
    rows: list[dict] = []
    skipped: list[dict] = []
    fitted_ids = validation.fitted_ids()
    total = sum(len(e.get("points") or [{}]) for e in entries)
    for e in entries:
        eid = str(e["id"])
        status = validation.status(eid, str(e.get("looked_at") or ""), fitted_ids)
        pts = e.get("points") or [{}]
        for j, pt in each(enumerate(pts), progress, total):
            meas_src = {**(e.get("result") or {}), **pt}
            keys = [k for k in METRICS if _num(meas_src.get(k))]
            if not keys:
                skipped.append(validation.skip(eid, j, "no figure the model predicts"))
                continue
            try:
                r, info = _run_point(e, pt, "max_requests_per_s_within_slo" in keys)
            except Skip as s:
                skipped.append(validation.skip(eid, j, str(s)))
                continue
            except InputError as exc:
                skipped.append(validation.skip(eid, j, f"refused: {exc}"))
                continue
            for k in keys:
                pred = _predicted(r, k, info["gpus"])
                meas = float(meas_src[k])
                if pred is None or meas <= 0:
                    continue
                rows.append(validation.point(
                    eid, j, k, meas, pred, status,
                    engine=engine_key(entry_engine(e)), **info,
                    bottleneck=r["bottleneck"]))
    return {"summary": summary(rows), "points": rows, "skipped": skipped}


def summary(rows: list[dict]) -> dict:
    """:func:`gpufabric.validation.summarize` of some points."""
    return validation.summarize(rows)

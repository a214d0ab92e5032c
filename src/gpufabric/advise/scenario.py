"""Advisor scenarios: what must run (train / serve / services), the constraints and the objective.

A scenario is a YAML file (docs/advisor.md gives the schema) or the name of a built-in one
(``advise/data/scenarios/*.yaml``). :func:`load` checks every key and value and raises one
:class:`~gpufabric.errors.InputError` naming the file, the dotted field and what is allowed.

Examples
--------
>>> s = parse({"workloads": {"serve": {"model": "llama3-8b", "rate": 2, "isl": 1000,
...            "osl": 200, "slo_tpot_ms": 50}}, "objective": "lowest-cost"}, "x.yaml")
>>> s.serve.model, s.objective, s.train is None
('llama3-8b', 'lowest-cost', True)
>>> parse({"workloads": {}}, "x.yaml")
Traceback (most recent call last):
...
gpufabric.errors.InputError: x.yaml: workloads: expected a train and/or a serve workload
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpufabric import catalog
from gpufabric.errors import InputError, check_range
from gpufabric.fileio import load_yaml, names_a_path, package_dir, parse_yaml

OBJECTIVES = ("lowest-cost", "fastest", "tokens-per-watt", "cost-per-million-tokens")
DEPLOYMENTS = ("any", "on-prem", "cloud")
PRECISIONS = ("bf16", "fp16", "fp8", "fp4")

TOP_KEYS = ("name", "description", "workloads", "constraints", "objective", "space")
TRAIN_KEYS = ("model", "model_file", "tokens", "steps", "global_batch", "seq_len", "precision",
              "deadline_hours")
SERVE_KEYS = ("model", "model_file", "rate", "concurrency", "isl", "osl", "slo_ttft_ms",
              "slo_tpot_ms", "interactivity", "precision", "pd", "speculative", "dataset",
              "prefix_tokens", "engine", "chunked_prefill")
SPECULATIVE_KEYS = ("method", "tokens", "acceptance", "draft_model")
SERVICE_KEYS = ("name", "cores", "memory_GB")
CONSTRAINT_KEYS = ("budget_capex_usd", "budget_usd_per_hour", "power_kW", "max_gpus",
                   "gpus", "exclude_gpus", "vendors", "deployment", "ethernet_only",
                   "amortize_years", "cloud_term", "consumer_gpus")
SPACE_KEYS = ("gpus_per_node", "nodes", "nics", "fabrics", "oversubscription", "cloud",
              "pd_gpus")
PD_GPUS_KEYS = ("prefill", "decode")

# The largest value each number may take: past these a scenario is a typo, and sums and products
# of it would overflow or run for ever. Each is far above any real plan.
#: Training tokens: Llama 3 was trained on 15.6e12; 64 times that.
MAX_TRAIN_TOKENS = 1e15
#: Optimizer steps (at one step a second, 30 years).
MAX_STEPS = 1_000_000_000
#: Sequences in a global batch (Llama 3 405B: 2,048 of 8,192 tokens at the end).
MAX_GLOBAL_BATCH = 10_000_000
#: Tokens of one sequence or request (serving's bound, ``serve --isl``).
MAX_SEQ_TOKENS = 100_000_000
#: A deadline (hours): a hundred years.
MAX_HOURS = 876_000.0
#: Requests per second of a serving workload.
MAX_RATE = 1_000_000.0
#: Users of a closed loop (serving's most requests in one run).
MAX_USERS = 5_000_000
#: An SLO target (ms): a day.
MAX_SLO_MS = 86_400_000.0
#: Output tokens per second one user sees (interactivity): far above any engine's decode.
MAX_INTERACTIVITY = 100_000.0
#: Interactivity targets of one sweep.
MAX_INTERACTIVITY_TARGETS = 32
#: CPU cores and memory (GB) of a service beside the GPUs: a thousand of the largest servers.
MAX_SERVICE_CORES, MAX_SERVICE_MEMORY_GB = 1_000_000, 1_000_000.0
#: Budgets, power and GPU counts of the constraints.
MAX_CAPEX_USD, MAX_USD_PER_HOUR, MAX_POWER_KW, MAX_GPUS = 1e13, 1e9, 1e7, 10_000_000
#: Years a purchase is paid off over.
MAX_AMORTIZE_YEARS = 100.0
#: Servers of a design in the space (the largest cluster built holds about 25,000 8-GPU ones).
MAX_SPACE_NODES = 100_000
#: GPU kinds of one pool list in ``space.pd_gpus``: 4 x 4 pairs, each a few PD simulations.
MAX_PD_KINDS = 4


@dataclass(frozen=True)
class Train:
    model: str
    tokens: float
    global_batch: int
    seq_len: int
    precision: str = "bf16"
    deadline_hours: float | None = None


@dataclass(frozen=True)
class Serve:
    model: str
    rate: float | None = None
    concurrency: int | None = None
    isl: int = 1024
    osl: int = 256
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    precision: str = "bf16"
    pd: bool = False                 # also try prefill/decode disaggregation (xPyD)
    #: target output tokens/s per user, as buyers state interactivity (a TPOT target of
    #: 1000 / x ms); more than one: a sweep (``advise`` ranks at each)
    interactivity: tuple[float, ...] = ()
    #: speculative decoding as ``serve --spec`` takes it: (method, draft tokens, per-position
    #: acceptance, draft model), checked and with the sourced acceptance filled in
    speculative: tuple[str, int, tuple[float, ...], str | None] | None = None
    #: the requests' lengths drawn from this named dataset (``serve --dataset``: the synthetic
    #: ones centre on isl / osl), None: every request isl in and osl out
    dataset: str | None = None
    #: prompt tokens every request shares, found cached (``serve --prefix-tokens``)
    prefix_tokens: int = 0
    #: the engine profile every instance runs (``serve --engine``: a built-in profile)
    engine: str = "vllm"
    #: prompts prefilled in chunks of the budget (True) or whole (False); None: the engine
    #: profile's default (``serve --chunked-prefill``)
    chunked_prefill: bool | None = None


@dataclass(frozen=True)
class Service:
    name: str
    cores: int
    memory_GB: float = 0.0


@dataclass(frozen=True)
class Constraints:
    budget_capex_usd: float | None = None
    budget_usd_per_hour: float | None = None
    power_kW: float | None = None
    max_gpus: int | None = None
    gpus: tuple[str, ...] = ()
    exclude_gpus: tuple[str, ...] = ()
    vendors: tuple[str, ...] = ()           # GPU vendors allowed (catalog ``vendor``)
    deployment: str = "any"
    ethernet_only: bool = False
    amortize_years: float = 4.0
    cloud_term: str = "on-demand"           # a cloud instance's rate: on-demand, 1y or 3y
    #: GPUs whose driver license forbids datacenter deployment (catalog ``datacenter_use``:
    #: GeForce) are left out unless this is true (an office server, a workstation)
    consumer_gpus: bool = False

    def allows(self, gpu: Any) -> bool:
        """Whether the constraints let a design use this catalog GPU (``gpus``,
        ``exclude_gpus``, ``vendors``, ``consumer_gpus``)."""
        return not ((self.gpus and gpu.name not in self.gpus) or gpu.name in self.exclude_gpus
                    or (self.vendors and gpu.vendor not in self.vendors)
                    or not (gpu.datacenter_use or self.consumer_gpus))

    def left_out(self) -> list[str]:
        """Why GPUs the other constraints allow are left out: those whose driver license
        forbids datacenter deployment, unless ``consumer_gpus``, in one line (or none)."""
        out = [catalog.gpu(n) for n in catalog.names("gpu")
               if not self.allows(catalog.gpu(n))
               and replace(self, consumer_gpus=True).allows(catalog.gpu(n))]
        if not out:
            return []
        why = sorted({license_of(g) for g in out})
        return [f"left out {', '.join(g.name for g in out)}: their driver license forbids "
                f"datacenter deployment ({'; '.join(why)}); constraints.consumer_gpus: true "
                "includes them"]


def license_of(gpu: Any) -> str:
    """The license clause that keeps ``gpu`` out of datacenters, as its catalog source names
    it (the quotation left out)."""
    return gpu.sources.get("datacenter_use", "its catalog entry").split(" '", 1)[0]


@dataclass(frozen=True)
class Space:
    """Narrows the generated design space (every key optional)."""

    gpus_per_node: tuple[int, ...] = (1, 2, 4, 8)
    nodes: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128)
    nics: tuple[str, ...] = ()              # network speeds (net_speeds.yaml); () = all
    fabrics: tuple[str, ...] = ("rail-optimized", "fat-tree")
    oversubscription: tuple[float, ...] = (1.0, 2.0)
    cloud: bool = True
    #: mixed-GPU disaggregation: GPU kinds the prefill pool and the decode pool may use; every
    #: (prefill, decode) pair of them is tried beside the pairs of the best co-located designs
    pd_prefill: tuple[str, ...] = ()
    pd_decode: tuple[str, ...] = ()


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    train: Train | None
    serve: Serve | None
    services: tuple[Service, ...]
    constraints: Constraints
    objective: str
    space: Space = field(default_factory=Space)
    file: str = ""


def _data_dir() -> Path:
    return package_dir("gpufabric.advise") / "data" / "scenarios"


def builtin_names() -> list[str]:
    """The built-in scenarios, by name."""
    return sorted(p.name.removesuffix(".yaml") for p in _data_dir().iterdir()
                  if p.name.endswith(".yaml"))


def builtin(name: str) -> Scenario:
    text = _data_dir().joinpath(f"{name}.yaml").read_text()
    return parse(parse_yaml(text, f"scenario {name}"), f"scenario {name}")


def load(what: str) -> Scenario:
    """A built-in scenario by name, or a scenario YAML file."""
    if what in builtin_names():
        return builtin(what)
    if not names_a_path(what) and not what.endswith((".yaml", ".yml")):
        raise InputError(f"no built-in scenario {what!r} and not a file; allowed: a YAML file "
                         f"or one of {', '.join(builtin_names())}", field="SCENARIO")
    return parse(load_yaml(what, what="a scenario YAML file"), what)


def _section(data: Any, keys: tuple[str, ...], file: str, where: str) -> dict[str, Any]:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InputError(f"expected a mapping of {', '.join(keys)}, got {data!r}", file=file,
                         field=where or None)
    for k in data:
        if k not in keys:
            raise InputError(f"unknown key {k!r}; allowed: {', '.join(keys)}", file=file,
                             field=f"{where}.{k}" if where else str(k))
    return data


def _num(d: dict[str, Any], key: str, file: str, where: str, *, integer: bool = False,
         minimum: float = 0.0, strict: bool = True, maximum: float | None = None,
         unit: str = "", default: Any = None) -> Any:
    """``d[key]`` checked to lie above ``minimum`` (at or above it unless ``strict``) and at most
    ``maximum`` (:func:`~gpufabric.errors.check_range`); ``default`` when absent."""
    if key not in d or d[key] is None:
        return default
    v = d[key]
    if isinstance(v, str) and not integer:       # YAML 1.1 reads 2.0e9 (no sign) as text
        try:
            v = float(v)
        except ValueError:
            pass
    if integer and strict:                       # "> 0" of a whole number: from 1
        minimum, strict = int(minimum) + 1, False
    return check_range(v, minimum, maximum, above=strict, integer=integer, unit=unit,
                       file=file, field=f"{where}.{key}")


def _model(d: dict[str, Any], file: str, where: str) -> str:
    """The model a workload names: a built-in's name, or ``model_file`` (a Hugging Face
    config.json or a model YAML, relative to the scenario file) as its resolved path."""
    from gpufabric.workloads.models import load_model, load_model_file, model_file_path
    if d.get("model_file") is not None:
        f = d["model_file"]
        if "model" in d or not isinstance(f, str) or not f.strip():
            raise InputError("give model (a built-in name) or model_file (a path to a "
                             "config.json or model YAML), not both", file=file,
                             field=f"{where}.model_file")
        path = model_file_path(f, file, f"{where}.model_file")
        load_model_file(path)
        return path
    name = d.get("model")
    if not isinstance(name, str):
        raise InputError(f"expected a model name, got {name!r}", file=file,
                         field=f"{where}.model")
    try:
        return load_model(name).name
    except InputError as exc:
        raise InputError(exc.message, file=file, field=f"{where}.model") from None


def _precision(d: dict[str, Any], file: str, where: str) -> str:
    p = d.get("precision", "bf16")
    if p not in PRECISIONS:
        raise InputError(f"got {p!r}; allowed: {', '.join(PRECISIONS)}", file=file,
                         field=f"{where}.precision")
    return str(p)


def _train(d: Any, file: str) -> Train | None:
    if d is None:
        return None
    w = "workloads.train"
    d = _section(d, TRAIN_KEYS, file, w)
    model = _model(d, file, w)
    gb = _num(d, "global_batch", file, w, integer=True, maximum=MAX_GLOBAL_BATCH)
    seq = _num(d, "seq_len", file, w, integer=True, maximum=MAX_SEQ_TOKENS)
    for k, v in (("global_batch", gb), ("seq_len", seq)):
        if v is None:
            raise InputError("required", file=file, field=f"{w}.{k}")
    tokens = _num(d, "tokens", file, w, maximum=MAX_TRAIN_TOKENS)
    steps = _num(d, "steps", file, w, integer=True, maximum=MAX_STEPS)
    if (tokens is None) == (steps is None):
        raise InputError("give exactly one of tokens or steps", file=file, field=f"{w}.tokens")
    total = float(tokens) if tokens is not None else float(steps * gb * seq)
    if tokens is None:
        check_range(total, 0, MAX_TRAIN_TOKENS, above=True, file=file, field=f"{w}.steps",
                    why=" tokens (steps x global_batch x seq_len)")
    return Train(model=model, tokens=total, global_batch=gb, seq_len=seq,
                 precision=_precision(d, file, w),
                 deadline_hours=_num(d, "deadline_hours", file, w, maximum=MAX_HOURS))


def _serve(d: Any, file: str) -> Serve | None:
    if d is None:
        return None
    w = "workloads.serve"
    d = _section(d, SERVE_KEYS, file, w)
    model = _model(d, file, w)
    rate = _num(d, "rate", file, w, maximum=MAX_RATE, unit=" requests/s")
    conc = _num(d, "concurrency", file, w, integer=True, maximum=MAX_USERS)
    if (rate is None) == (conc is None):
        raise InputError("give exactly one of rate (requests/s) or concurrency (users)",
                         file=file, field=f"{w}.rate")
    ttft = _num(d, "slo_ttft_ms", file, w, maximum=MAX_SLO_MS, unit=" ms")
    tpot = _num(d, "slo_tpot_ms", file, w, maximum=MAX_SLO_MS, unit=" ms")
    inter = interactivity_targets(d.get("interactivity"), file, f"{w}.interactivity")
    if inter and tpot is not None:
        raise InputError("give slo_tpot_ms or interactivity (tokens/s per user: a TPOT of "
                         "1000 / x ms), not both", file=file, field=f"{w}.interactivity")
    if inter:
        tpot = 1000.0 / inter[0]
    if ttft is None and tpot is None:
        raise InputError("give an SLO: slo_ttft_ms and/or slo_tpot_ms (or interactivity)",
                         file=file, field=f"{w}.slo_tpot_ms")
    pd = d.get("pd", False)
    if not isinstance(pd, bool):
        raise InputError(f"expected true or false, got {pd!r}", file=file, field=f"{w}.pd")
    if pd and conc is not None:
        raise InputError("disaggregated (pd) runs take a rate, not a concurrency", file=file,
                         field=f"{w}.pd")
    spec = _speculative(d.get("speculative"), model, file, f"{w}.speculative")
    if pd and spec is not None:
        raise InputError("speculative decoding is modelled for co-located serving; give "
                         "pd: false or leave speculative out", file=file,
                         field=f"{w}.speculative")
    isl = _num(d, "isl", file, w, integer=True, maximum=MAX_SEQ_TOKENS, default=1024)
    prefix = _num(d, "prefix_tokens", file, w, integer=True, maximum=MAX_SEQ_TOKENS,
                  default=0)
    dataset = _dataset(d, file, w)
    if prefix and dataset is None and prefix >= isl:
        raise InputError(f"must be below isl ({isl}): the last prompt token is always "
                         f"computed, got {prefix}", file=file, field=f"{w}.prefix_tokens")
    if pd and prefix:
        raise InputError("a shared prefix is modelled for co-located serving; give pd: false "
                         "or leave prefix_tokens out", file=file, field=f"{w}.prefix_tokens")
    return Serve(model=model, rate=rate, concurrency=conc, pd=pd, isl=isl,
                 osl=_num(d, "osl", file, w, integer=True, maximum=MAX_SEQ_TOKENS, default=256),
                 slo_ttft_ms=ttft, slo_tpot_ms=tpot, precision=_precision(d, file, w),
                 interactivity=inter, speculative=spec, dataset=dataset,
                 prefix_tokens=int(prefix or 0), engine=engine(d.get("engine", "vllm"), file,
                                                               f"{w}.engine"),
                 chunked_prefill=_chunked(d, file, w))


def _chunked(d: dict, file: str, w: str) -> bool | None:
    """A serving workload's ``chunked_prefill``: true, false or absent (the engine's default)."""
    v = d.get("chunked_prefill")
    if v is not None and not isinstance(v, bool):
        raise InputError(f"expected true or false, got {v!r}", file=file,
                         field=f"{w}.chunked_prefill")
    return v


def engine(v: Any, file: str, where: str) -> str:
    """A serving workload's ``engine``: a built-in engine profile's name or alias (as ``serve
    --engine`` takes it), as its profile's name."""
    from gpufabric.workloads.inference import engines
    if not isinstance(v, str) or engines.is_path(v):
        raise InputError(f"expected a built-in engine's name, got {v!r}; allowed: "
                         + ", ".join(n for n in engines.builtin() if n != engines.DEFAULT),
                         file=file, field=where)
    try:
        return engines.check(v, where).name
    except InputError as exc:
        raise InputError(exc.message, file=file, field=where) from None


def _dataset(d: dict[str, Any], file: str, w: str) -> str | None:
    """A serving workload's ``dataset``: a named dataset gpufabric can sample (``gpufabric
    datasets``); a published one gives the lengths, so isl and osl are refused beside it."""
    from gpufabric.workloads.inference.datasets import get
    name = d.get("dataset")
    if name is None:
        return None
    try:
        ds = get(str(name))
        if ds.missing:
            raise InputError(f"dataset {ds.name} cannot be sampled: {ds.missing}")
    except InputError as exc:
        raise InputError(exc.message, file=file, field=f"{w}.dataset") from None
    for k in ("isl", "osl"):
        if not ds.synthetic and k in d:
            raise InputError(f"cannot be used with dataset {ds.name} (the dataset gives the "
                             "lengths; only the synthetic ones centre on isl / osl)",
                             file=file, field=f"{w}.{k}")
    return ds.name


def interactivity_targets(v: Any, file: str | None, where: str) -> tuple[float, ...]:
    """Interactivity targets (output tokens/s per user): a number or a list of them, each
    above 0 and at most :data:`MAX_INTERACTIVITY`, in the order given (() when absent).

    >>> interactivity_targets([20, 50.5], "x.yaml", "workloads.serve.interactivity")
    (20.0, 50.5)
    """
    if v is None:
        return ()
    items = v if isinstance(v, list) else [v]
    if not items or len(items) > MAX_INTERACTIVITY_TARGETS:
        raise InputError(f"expected 1 to {MAX_INTERACTIVITY_TARGETS} targets (output tokens/s "
                         f"per user), got {v!r}", file=file, field=where)
    return tuple(float(check_range(x, 0, MAX_INTERACTIVITY, above=True, unit=" tokens/s",
                                   file=file, field=f"{where}[{i}]" if isinstance(v, list)
                                   else where))
                 for i, x in enumerate(items))


def _speculative(d: Any, model: str, file: str, w: str
                 ) -> tuple[str, int, tuple[float, ...], str | None] | None:
    """A serving workload's ``speculative: {method, tokens, acceptance, draft_model}``,
    checked as ``serve --spec`` checks its flags (the acceptance: the block's or the sourced
    default for the method and model)."""
    from gpufabric.workloads.inference.speculative import resolve
    if d is None:
        return None
    d = _section(d, SPECULATIVE_KEYS, file, w)
    where = {"--spec": "method", "--spec-tokens": "tokens", "--acceptance": "acceptance",
             "--draft-model": "draft_model"}
    acc = d.get("acceptance")
    try:
        s = resolve(str(d.get("method")), d.get("tokens"),
                    tuple(acc) if isinstance(acc, list) else acc, model, d.get("draft_model"))
    except InputError as exc:
        key = where.get(exc.field or "", "method")
        raise InputError(exc.message, file=file, field=f"{w}.{key}") from None
    return (s.method, s.tokens, s.acceptance, s.draft_model)


def _services(d: Any, file: str) -> tuple[Service, ...]:
    if d is None:
        return ()
    if not isinstance(d, list):
        raise InputError(f"expected a list of {{name, cores, memory_GB}}, got {d!r}", file=file,
                         field="workloads.services")
    out = []
    for i, e in enumerate(d):
        w = f"workloads.services[{i}]"
        e = _section(e, SERVICE_KEYS, file, w)
        cores = _num(e, "cores", file, w, integer=True, maximum=MAX_SERVICE_CORES)
        if cores is None:
            raise InputError("required", file=file, field=f"{w}.cores")
        out.append(Service(name=str(e.get("name", f"service{i}")), cores=cores,
                           memory_GB=float(_num(e, "memory_GB", file, w, unit=" GB",
                                                maximum=MAX_SERVICE_MEMORY_GB) or 0.0)))
    return tuple(out)


def _gpu_names(v: Any, file: str, where: str) -> tuple[str, ...]:
    if v is None:
        return ()
    if not isinstance(v, list):
        raise InputError(f"expected a list of GPU names, got {v!r}", file=file, field=where)
    return tuple(catalog.gpu(str(x), file=file, field=where).name for x in v)


def _vendors(v: Any, file: str, where: str) -> tuple[str, ...]:
    if v is None:
        return ()
    known = sorted({catalog.gpu(g).vendor for g in catalog.names("gpu")})
    if not isinstance(v, list) or any(x not in known for x in v):
        raise InputError(f"got {v!r}; allowed: a list of {', '.join(known)}", file=file,
                         field=where)
    return tuple(v)


def _constraints(d: Any, file: str) -> Constraints:
    w = "constraints"
    d = _section(d, CONSTRAINT_KEYS, file, w)
    dep = d.get("deployment", "any")
    if dep not in DEPLOYMENTS:
        raise InputError(f"got {dep!r}; allowed: {', '.join(DEPLOYMENTS)}", file=file,
                         field=f"{w}.deployment")
    eth, consumer = d.get("ethernet_only", False), d.get("consumer_gpus", False)
    for key, v in (("ethernet_only", eth), ("consumer_gpus", consumer)):
        if not isinstance(v, bool):
            raise InputError(f"expected true or false, got {v!r}", file=file,
                             field=f"{w}.{key}")
    from gpufabric.advise.prices import CLOUD_TERMS
    term = d.get("cloud_term", "on-demand")
    if term not in CLOUD_TERMS:
        raise InputError(f"got {term!r}; allowed: {', '.join(CLOUD_TERMS)}", file=file,
                         field=f"{w}.cloud_term")
    gpus = _gpu_names(d.get("gpus"), file, f"{w}.gpus")
    for g in gpus:
        if not (consumer or catalog.gpu(g).datacenter_use):
            raise InputError(f"{g}'s driver license forbids datacenter deployment "
                             f"({license_of(catalog.gpu(g))}); add consumer_gpus: true for a "
                             "deployment outside a datacenter", file=file, field=f"{w}.gpus")
    return Constraints(
        budget_capex_usd=_num(d, "budget_capex_usd", file, w, maximum=MAX_CAPEX_USD),
        budget_usd_per_hour=_num(d, "budget_usd_per_hour", file, w, maximum=MAX_USD_PER_HOUR),
        power_kW=_num(d, "power_kW", file, w, maximum=MAX_POWER_KW),
        max_gpus=_num(d, "max_gpus", file, w, integer=True, maximum=MAX_GPUS),
        gpus=gpus,
        exclude_gpus=_gpu_names(d.get("exclude_gpus"), file, f"{w}.exclude_gpus"),
        vendors=_vendors(d.get("vendors"), file, f"{w}.vendors"),
        deployment=str(dep), ethernet_only=eth, consumer_gpus=consumer,
        amortize_years=float(_num(d, "amortize_years", file, w, maximum=MAX_AMORTIZE_YEARS,
                                  default=4.0) or 4.0),
        cloud_term=str(term))


def _int_list(v: Any, file: str, where: str, default: tuple, hi: int) -> tuple:
    """A non-empty list of whole numbers from 1 to ``hi``, each checked by
    :func:`~gpufabric.errors.check_range` (``default`` when absent)."""
    if v is None:
        return default
    if not isinstance(v, list) or not v:
        raise InputError(f"expected a list of whole numbers from 1 to {hi:,}, got {v!r}",
                         file=file, field=where)
    for i, x in enumerate(v):
        check_range(x, 1, hi, integer=True, file=file, field=f"{where}[{i}]")
    return tuple(v)


def _space(d: Any, file: str) -> Space:
    w = "space"
    d = _section(d, SPACE_KEYS, file, w)
    base = Space()
    nics = d.get("nics")
    if nics is not None:
        if not isinstance(nics, list):
            raise InputError(f"expected a list of network speeds, got {nics!r}", file=file,
                             field=f"{w}.nics")
        nics = tuple(catalog.net_speed(str(x), file=file, field=f"{w}.nics").name for x in nics)
    fabrics = d.get("fabrics")
    if fabrics is not None:
        from gpufabric.topology.schema import FABRICS
        if not isinstance(fabrics, list) or any(f not in FABRICS for f in fabrics):
            raise InputError(f"got {fabrics!r}; allowed: a list of {', '.join(FABRICS)}",
                             file=file, field=f"{w}.fabrics")
    from gpufabric.topology.schema import MAX_GPUS_PER_DOMAIN, MAX_OVERSUBSCRIPTION
    over = d.get("oversubscription")
    if over is not None:
        if not isinstance(over, list):
            raise InputError(f"expected a list of numbers from 1 to {MAX_OVERSUBSCRIPTION}, "
                             f"got {over!r}", file=file, field=f"{w}.oversubscription")
        for i, x in enumerate(over):
            check_range(x, 1, MAX_OVERSUBSCRIPTION, file=file, field=f"{w}.oversubscription[{i}]",
                        why=" (downlinks per uplink)")
    cloud = d.get("cloud", True)
    if not isinstance(cloud, bool):
        raise InputError(f"expected true or false, got {cloud!r}", file=file,
                         field=f"{w}.cloud")
    pre, dec = _pd_gpus(d.get("pd_gpus"), file, f"{w}.pd_gpus")
    return Space(gpus_per_node=_int_list(d.get("gpus_per_node"), file, f"{w}.gpus_per_node",
                                         base.gpus_per_node, MAX_GPUS_PER_DOMAIN),
                 nodes=_int_list(d.get("nodes"), file, f"{w}.nodes", base.nodes,
                                 MAX_SPACE_NODES),
                 nics=nics or (), fabrics=tuple(fabrics or base.fabrics),
                 oversubscription=tuple(float(x) for x in (over or base.oversubscription)),
                 cloud=cloud, pd_prefill=pre, pd_decode=dec)


def _pd_gpus(v: Any, file: str, w: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``space.pd_gpus: {prefill: [...], decode: [...]}``: GPU kinds of each pool (1 to
    :data:`MAX_PD_KINDS` each, catalog names)."""
    if v is None:
        return (), ()
    d = _section(v, PD_GPUS_KEYS, file, w)
    out = []
    for k in PD_GPUS_KEYS:
        names = d.get(k)
        if not isinstance(names, list) or not 1 <= len(names) <= MAX_PD_KINDS:
            raise InputError(f"expected a list of 1 to {MAX_PD_KINDS} GPU names, got {names!r}",
                             file=file, field=f"{w}.{k}")
        out.append(tuple(dict.fromkeys(_gpu_names(names, file, f"{w}.{k}"))))
    return out[0], out[1]


def _check_pd_gpus(sc: Scenario) -> None:
    """Mixed pools need a disaggregated serve workload, and kinds the constraints allow."""
    sp, k, w = sc.space, sc.constraints, "space.pd_gpus"
    if not sp.pd_prefill:
        return
    if sc.serve is None or not sc.serve.pd:
        raise InputError("mixed prefill/decode pools need a serve workload with pd: true",
                         file=sc.file, field=w)
    for pool, names in (("prefill", sp.pd_prefill), ("decode", sp.pd_decode)):
        for i, g in enumerate(names):
            if not k.allows(catalog.gpu(g)):
                raise InputError(f"{g} is not allowed by the constraints (gpus, exclude_gpus, "
                                 "vendors, consumer_gpus)", file=sc.file,
                                 field=f"{w}.{pool}[{i}]")


def parse(data: Any, file: str) -> Scenario:
    """A :class:`Scenario` from parsed YAML; the first problem is an :class:`InputError`."""
    data = _section(data, TOP_KEYS, file, "")
    if not data:
        raise InputError("empty scenario; expected workloads, constraints and objective",
                         file=file)
    wl = _section(data.get("workloads"), ("train", "serve", "services"), file, "workloads")
    train, serve = _train(wl.get("train"), file), _serve(wl.get("serve"), file)
    if train is None and serve is None:
        raise InputError("expected a train and/or a serve workload", file=file,
                         field="workloads")
    obj = data.get("objective", "lowest-cost")
    if obj not in OBJECTIVES:
        raise InputError(f"got {obj!r}; allowed: {', '.join(OBJECTIVES)}", file=file,
                         field="objective")
    sc = Scenario(name=str(data.get("name", file)), description=str(data.get("description", "")),
                  train=train, serve=serve, services=_services(wl.get("services"), file),
                  constraints=_constraints(data.get("constraints"), file), objective=obj,
                  space=_space(data.get("space"), file), file=file)
    _check_pd_gpus(sc)
    return sc


def objective_shown(objective: str, value: float | None, train: bool) -> tuple[float | None, str]:
    """An objective's figure as a reader takes it, with its unit.

    The advisor ranks by ``value`` (:func:`gpufabric.advise.core.figure`), smaller is better,
    so a throughput to maximize is held negated; this undoes the sign: the tokens-per-watt
    objective of a design serving 2,000 tokens/s on 4 kW is 0.5 tokens/s per W, not -0.5.

    >>> objective_shown("tokens-per-watt", -0.5, train=False)
    (0.5, 'tokens/s per W')
    >>> objective_shown("lowest-cost", 1200.0, train=True)
    (1200.0, '$ for the run')
    """
    if objective == "lowest-cost":
        return value, "$ for the run" if train else "$/hour"
    if objective == "fastest":
        if train:
            return value, "hours to train"
        return (None if value is None else -value), "tokens/s"
    if objective == "tokens-per-watt":
        return (None if value is None else -value), "tokens/s per W"
    return value, "$ per million tokens"


__all__ = ["OBJECTIVES", "Scenario", "objective_shown", "Train", "Serve", "Service",
           "Constraints", "Space",
           "builtin", "builtin_names", "load", "parse"]

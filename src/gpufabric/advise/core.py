"""The design advisor: generate designs from the catalog, evaluate them, rank them.

1. **Space.** Every GPU kind of the catalog (less the excluded) x server design (GPUs per
   server; NVSwitch, NVLink mesh or bridge, PCIe direct or behind single- or dual-root
   switches; rack-scale NVLink domains) x network speed and NICs per server x fabric
   (rail-optimised or fat-tree, oversubscription) x server count, plus the cloud instances of
   the price table x instance count. Each server design is built once with
   :func:`gpufabric.topology.build.from_spec`, so the design rules
   (:mod:`gpufabric.topology.rules`: lanes, switch ports, NVLink links, bridges) refuse what
   cannot be built; each whole design's spec and fabric plan are checked the same way.
2. **Bounds.** Every candidate gets a sound bound before any model runs: training cannot beat
   the GPUs' dense peak (time >= FLOPs / (GPUs x peak)); serving needs at least the GPUs that
   hold the weights. Candidates whose bound already breaks a constraint are infeasible; the
   rest are evaluated best-bound first, and evaluation stops when no unevaluated bound can
   enter the top N (branch and bound).
3. **Models.** Training: :func:`gpufabric.workloads.search.search` (``train --search``: the
   best parallel layout of this very cluster). Serving: for each server design and layout
   (:func:`gpufabric.workloads.inference.supernode.default_layouts`), the highest rate (or
   concurrency) one model instance serves within the SLO
   (:func:`gpufabric.workloads.inference.supernode.max_rate`); a design with ``n`` instances
   serves ``n`` times that (arrivals split evenly over instances). Results are kept by server
   design and layout for the run (:class:`Runner`: the per-instance figures do not depend on
   the server count), and every batch of evaluations goes through :func:`gpufabric.sweep.run`
   (in-process, on worker processes with a look-ahead over the queue, or on Ray).
4. **Cost and power** from :mod:`gpufabric.advise.prices`: each design priced whole (a bill
   of materials from its own fabric plan, capex and opex on premises; a rate in the cloud),
   and the objective's figure.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any

from gpufabric import catalog, params, sweep
from gpufabric.advise.prices import Prices
from gpufabric.advise.scenario import Scenario
from gpufabric.cache import BoundedDict
from gpufabric.errors import InputError

#: Model runs kept in flight per worker process (the batch's and the look-ahead's).
LOOK_AHEAD = 2
#: Largest cluster the default space builds when the scenario sets no GPU limit.
DEFAULT_MAX_GPUS = 4096


# --------------------------------------------------------------------------------------------
# design space
# --------------------------------------------------------------------------------------------
@dataclass
class Candidate:
    gpu: str
    gpus_per_node: int          # GPUs per server (a rack-scale part: per NVLink domain)
    nodes: int
    spec: dict[str, Any]        # shorthand spec (topology.build)
    deployment: str             # on-prem | cloud
    instance: str = ""
    design: str = ""            # server design key (shared work is cached by it)
    refused: str = ""           # why the rules refuse it ("" if buildable)
    bound: dict[str, float] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    cost: dict[str, Any] = field(default_factory=dict)
    power_kW: float | None = None
    objective: float | None = None
    violations: dict[str, float] = field(default_factory=dict)
    evaluated: bool = False
    decode: Candidate | None = None     # disaggregated: the decode pool (this is the prefill)
    pd: tuple[int, int] | None = None   # (prefill, decode) instances of one unit
    equivalents: list[str] = field(default_factory=list)   # same figure, other networks

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes + (self.decode.gpus if self.decode else 0)

    @property
    def system(self) -> str:
        return spec_string(self.spec)

    @property
    def rack_scale(self) -> bool:
        return self.gpus_per_node > 8 and bool(catalog.gpu(self.gpu).gpus_per_tray)


def spec_string(spec: dict[str, Any]) -> str:
    """The inline ``key=value,...`` form of a spec (what ``show``/``train``/``serve`` take)."""
    parts = []
    for k, v in spec.items():
        if isinstance(v, dict):
            parts += [f"{k}.{kk}={vv}" for kk, vv in v.items() if vv is not None]
        elif v is not None:
            parts.append(f"{k}={v}")
    return ",".join(parts)


def _server_designs(gpu: catalog.GPU, per_node: tuple[int, ...]) -> list[dict[str, Any]]:
    """Server designs of one GPU kind, as node specs (the rules judge them later)."""
    g = gpu.name
    if gpu.gpus_per_tray:                  # rack-scale part: NVLink domains of trays
        return [{"gpu": g, "gpus_per_node": d} for d in (36, 72) if d % gpu.gpus_per_tray == 0]
    out: list[dict[str, Any]] = []
    nvlink = bool(gpu.peer_link) and (gpu.peer_link or "").startswith(("nvlink", "xgmi"))
    if gpu.form_factor in ("sxm", "oam"):
        for n in per_node:
            if n < 4:
                continue
            out.append({"gpu": g, "gpus_per_node": n})           # the baseboard's own scale-up
            if n == 4 and nvlink:
                out.append({"gpu": g, "gpus_per_node": n, "scale_up": "nvlink-mesh"})
        return out
    bridges = any(catalog.bridge(b).kind == "nvlink" for b in gpu.bridges)
    for n in per_node:
        ups = ["pcie"] + (["nvlink-bridge"] if bridges and n >= 2 else [])
        hosts: list[dict[str, Any]] = [{}]
        if n >= 4:
            hosts += [{"pcie_switches": 1, "switch_layout": "single-root"},
                      {"pcie_switches": 2, "switch_layout": "dual-root"}]
        for up in ups:
            for h in hosts:
                s: dict[str, Any] = {"gpu": g, "gpus_per_node": n, "scale_up": up}
                if h:
                    s["host"] = dict(h)
                out.append(s)
    return out


#: The design rules' verdicts on server designs, by spec string (see :func:`_refusal`).
_REFUSED: dict[str, str] = {}


def _refusal(key: str) -> str:
    """Why the design rules refuse a server design, with its NICs ("" when it can be built):
    two servers are built so that the NICs are placed and their PCIe lanes counted."""
    if key not in _REFUSED:
        _REFUSED[key] = _judge(key)
    return _REFUSED[key]


def _judge(key: str) -> str:
    from gpufabric.topology.build import from_spec, parse_inline
    try:
        from_spec(parse_inline(key), file="design", materialize_nodes=2)
    except InputError as exc:
        return exc.message
    return ""


def _judge_all(keys: list[str]) -> list[str]:
    return [_judge(k) for k in keys]


def _prejudge(keys: list[str], jobs: int) -> None:
    """Judge the server designs of ``keys`` not judged yet on ``jobs`` worker processes (a few
    chunks each), so that :func:`_refusal` finds them."""
    todo = [k for k in dict.fromkeys(keys) if k not in _REFUSED]
    if jobs <= 1 or len(todo) < 2:
        return
    size = -(-len(todo) // (4 * jobs))
    chunks = [todo[i:i + size] for i in range(0, len(todo), size)]
    for chunk, verdicts in zip(chunks, sweep.run(_judge_all, chunks, jobs=jobs), strict=True):
        _REFUSED.update(zip(chunk, verdicts, strict=True))


@cache
def _fabric_refusal(tray: int, gpn: int, nodes: int, nic: str, nics: int, topo: str,
                    over: float) -> str:
    """Why a fabric of ``nodes`` servers cannot be built ("" when it can): the same for every
    GPU kind with the same server shape, so it is judged once."""
    from gpufabric.topology import fabric
    gpu = next(g for g in catalog.names("gpu") if catalog.gpu(g).gpus_per_tray == tray)
    spec = {"gpu": gpu, "gpus_per_node": gpn, "nodes": nodes, "nic": nic, "nics_per_node": nics,
            "fabric": {"topology": topo, "oversubscription": over}}
    from gpufabric.topology.build import normalize_spec
    try:
        s = normalize_spec(spec, file="design")
        if s["nodes"] * s["gpus_per_node"] > s["nvlink_domain"]:
            fabric.plan(s, file="design")
    except InputError as exc:
        return exc.message
    return ""


def _networks(node: dict[str, Any], why: str, speeds: list[Any], sp: Any
              ) -> list[tuple[dict[str, Any], str]]:
    """The networks of the space for servers of ``node`` (NIC speed, NICs per server:
    one per GPU or one per two, fabric topology, oversubscription), each with why the rules
    refuse the servers with those NICs ("" when they can be built; ``why``: the servers'
    own refusal)."""
    gpn = node["gpus_per_node"]
    out = []
    for speed in speeds:
        for k in sorted({gpn, max(1, gpn // 2)}):
            no = why or _refusal(spec_string({**node, "nodes": 2, "nic": speed.name,
                                              "nics_per_node": k}))
            out += [({"nic": speed.name, "nics_per_node": k,
                      "fabric": {"topology": topo, "oversubscription": o}}, no)
                    for topo in sp.fabrics for o in sp.oversubscription]
    return out


def _on_prem(sc: Scenario) -> list[tuple[catalog.GPU, dict[str, Any]]]:
    """The server designs (GPU kind, node spec) of the scenario's on-premises space."""
    c = sc.constraints
    out = []
    for gname in catalog.names("gpu"):
        gpu = catalog.gpu(gname)
        if not c.allows(gpu):
            continue
        out += [(gpu, node) for node in _server_designs(gpu, sc.space.gpus_per_node)]
    return out


def generate(sc: Scenario, prices: Prices, jobs: int = 1) -> list[Candidate]:
    """Every design of the scenario's space, those the rules refuse marked ``refused``
    (the rules judge each server design once, on ``jobs`` worker processes)."""
    c = sc.constraints
    sp = sc.space
    max_gpus = c.max_gpus or DEFAULT_MAX_GPUS
    out: list[Candidate] = []
    speeds = [catalog.net_speed(n) for n in (sp.nics or catalog.names("net_speed"))]
    speeds = [s for s in speeds if s.protocol in ("ib", "roce")
              and (s.protocol == "roce" or not c.ethernet_only)]
    if c.deployment in ("any", "on-prem"):
        designs = _on_prem(sc)
        _prejudge([spec_string(node) for _, node in designs], jobs)
        _prejudge([spec_string({**node, "nodes": 2, "nic": s.name, "nics_per_node": k})
                   for _, node in designs if not _refusal(spec_string(node))
                   and any(1 < n and n * node["gpus_per_node"] <= max_gpus for n in sp.nodes)
                   for s in speeds
                   for k in sorted({node["gpus_per_node"], max(1, node["gpus_per_node"] // 2)})],
                  jobs)
        for gpu, node in designs:
            gname = gpu.name
            design = spec_string(node)
            why = _refusal(design)
            gpn = node["gpus_per_node"]
            nets = _networks(node, why, speeds, sp) if any(
                1 < n and n * gpn <= max_gpus for n in sp.nodes) else []
            for n in sp.nodes:
                if n * gpn > max_gpus:
                    continue
                for net, no in (nets if n > 1 else [({}, why)]):
                    spec = {**node, "nodes": n, **net}
                    if net and not no:
                        f = net["fabric"]
                        no = _fabric_refusal(gpu.gpus_per_tray, gpn, n, net["nic"],
                                             net["nics_per_node"], f["topology"],
                                             f["oversubscription"])
                    out.append(Candidate(gpu=gname, gpus_per_node=gpn, nodes=n, spec=spec,
                                         deployment="on-prem", design=design, refused=no))
    if c.deployment in ("any", "cloud") and sp.cloud:
        from gpufabric.topology.build import parse_inline
        for inst in prices.cloud():
            node = parse_inline(str(inst["system"]))
            g = catalog.gpu(str(node["gpu"])).name
            if not c.allows(catalog.gpu(g)):
                continue
            if c.ethernet_only and catalog.net_speed(str(node.get("nic", "ib-ndr"))).protocol \
                    == "ib":
                continue
            gpn = int(node.get("gpus_per_node", 8))
            design = spec_string(node)
            why = _refusal(design)
            for n in sp.nodes:
                if n * gpn > max_gpus:
                    continue
                spec = {**node, "nodes": n}
                out.append(Candidate(gpu=g, gpus_per_node=gpn, nodes=n, spec=spec,
                                     deployment="cloud", instance=str(inst["instance"]),
                                     design=design, refused=why))
    return out


# --------------------------------------------------------------------------------------------
# cost and power
# --------------------------------------------------------------------------------------------
def price(cand: Candidate, prices: Prices, kwh_usd: float, amortize_years: float,
          cloud_term: str = "on-demand") -> None:
    """Fill ``cand.cost`` and ``cand.power_kW`` (:func:`gpufabric.advise.prices.design_cost`:
    the design priced whole, None where the table has no number)."""
    from gpufabric.advise.prices import design_cost
    cand.cost, cand.power_kW = design_cost(
        cand.gpu, cand.gpus_per_node, cand.nodes, cand.system, prices, kwh_usd=kwh_usd,
        amortize_years=amortize_years, deployment=cand.deployment, instance=cand.instance,
        cloud_term=cloud_term)


# --------------------------------------------------------------------------------------------
# bounds and models
# --------------------------------------------------------------------------------------------
@params.cache
def _tokens_per_s_per_gpu_bound(model: str, seq_len: int, gpu: str, precision: str) -> float:
    """The most training tokens/s one GPU can reach in the model: every FLOP at the dense peak
    times the generation's GEMM ceiling (``compute.GEMM_EFF``, which bounds every GEMM's and
    attention core's efficiency in :func:`gpufabric.workloads.compute.op_time_s`); memory
    traffic, communication and bubbles only add time."""
    from gpufabric.workloads.compute import GEMM_EFF, GEMM_EFF_DEFAULT, gpu_spec
    from gpufabric.workloads.models import load_model
    from gpufabric.workloads.training import model_flops_per_token
    g = gpu_spec(gpu)
    peak = g.peak_tflops(precision) * 1e12
    ceiling = GEMM_EFF.get(g.arch, GEMM_EFF_DEFAULT).value
    return peak * ceiling / model_flops_per_token(load_model(model), seq_len)


#: Bytes of one weight at a scenario's precision, for the bounds (scales left out: a floor).
_WEIGHT_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1, "fp4": 0.5}


@cache
def _weights_gpus_floor(model: str, gpu: str, precision: str) -> int:
    """GPUs whose memory holds the model's weights at ``precision`` (a floor on any layout)."""
    from gpufabric.workloads.models import load_model
    byts = _WEIGHT_BYTES[precision]
    mem = catalog.gpu(gpu).memory_GB * 1e9
    return max(1, math.ceil(load_model(model).params() * byts / mem)) if mem else 10 ** 9


def _serve_memory_floor_GB(s: Any, gpu: str, gpus: int) -> float:
    """GB of GPU memory a serving load needs at least on ``gpus`` GPUs of ``gpu``: the weights
    at the scenario's precision and the KV cache of the sequences in flight (Little's law).

    At ``rate`` requests/s each request stays at least ``osl - 1`` decode steps, and no step
    is shorter than reading the active weights once at the HBM bandwidth of every GPU of the
    design; a sequence in flight is on average halfway through its answer, so it holds
    ``isl + (osl - 1) / 2`` tokens of KV at the least KV bytes the precision runs with (16
    bits, 8 with 8- or 4-bit weights, the engines' default). A closed loop holds its
    ``concurrency``. Speculative decoding takes several tokens a step, so no step bound is
    taken with it."""
    weights, active, kv_token = _serve_bytes(s.model, s.precision)
    g = catalog.gpu(gpu)
    isl, osl = float(s.isl), float(s.osl)
    if s.dataset:                   # (a mean: in-flight sequences are longer, so still a floor)
        from gpufabric.workloads.inference.datasets import get, mean_lengths
        isl, osl = mean_lengths(get(s.dataset), s.isl, s.osl)
    if s.concurrency:
        flight = float(s.concurrency)
    elif s.rate and not s.speculative and g.mem_bw_GBps > 0:
        step_s = active / (gpus * g.mem_bw_GBps * 1e9)
        flight = s.rate * (osl - 1) * step_s
    else:
        flight = 0.0
    kv = kv_token * (isl + (osl - 1) / 2)
    return (weights + flight * kv) / 1e9


@cache
def _serve_bytes(model: str, precision: str) -> tuple[float, float, float]:
    """(bytes of all weights, bytes of the active weights, KV bytes per token) of ``model``
    at ``precision`` for :func:`_serve_memory_floor_GB` (once per scenario, not once per
    design: looking the model up costs a file-system check of its name)."""
    from gpufabric.workloads.memory import kv_cache_bytes_per_token
    from gpufabric.workloads.models import load_model
    m = load_model(model)
    wb = _WEIGHT_BYTES[precision]
    return (m.params() * wb, m.active_params() * wb,
            kv_cache_bytes_per_token(m, elem_bytes=2 if wb == 2 else 1))


@cache
def _instance_rate_bound(s: Any, gpu: str, width: int) -> float:
    """Most requests/s one instance of ``width`` GPUs of ``gpu`` can serve of the scenario's
    requests by its memory: ``R`` bytes of KV cache at most (every GPU's memory less the
    weights at the scenario's precision, at the least KV bytes ``k`` a token the precision
    runs with), ``W`` bytes/s of HBM. A decode step reads the active weights ``A`` and the
    context of every sequence it advances, so it takes at least ``(A + k C) / W`` for ``C``
    tokens of context, and holds at most ``R / k`` tokens. Each request takes ``osl - 1``
    steps over contexts ``isl + 1 .. isl + osl - 1`` (``C1`` tokens read in all, ``H1`` held,
    a shared prefix held once); the steps needed to hold them all and the reads give, over
    ``n`` requests, a time of at least ``n k (H1 A / R + C1) / W``. Infinite where no such
    bound is sound: speculative decoding (several tokens a step), a dataset's lengths (a
    mean is no floor of a product), a part without a memory bandwidth."""
    g = catalog.gpu(gpu)
    if s.speculative or s.dataset or g.mem_bw_GBps <= 0 or s.osl < 2:
        return math.inf
    weights, active, kv_token = _serve_bytes(s.model, s.precision)
    room = width * g.memory_GB * 2**30 - weights
    if room <= 0:
        return 0.0
    steps = s.osl - 1
    read = steps * (s.isl + s.osl / 2)                               # C1
    held = steps * (max(0, s.isl - s.prefix_tokens) + s.osl / 2)     # H1
    return width * g.mem_bw_GBps * 1e9 / (kv_token * (held * active / room + read))


@cache
def _layout_widths(model: str, gpus_per_node: int, gpus: int) -> tuple[int, ...]:
    """The instance widths of a design's serving layouts (:func:`_serve_layouts`)."""
    from gpufabric.workloads.inference.supernode import default_layouts
    return tuple(lay["tp"] for lay in default_layouts(model, gpus_per_node, gpus)[0]
                 if lay["tp"] <= gpus)


def _design_rate_bound(c: Candidate, s: Any) -> float:
    """Most requests/s any serving layout of ``c`` can hold the KV cache of: its instances
    (as many as ``c`` holds) times :func:`_instance_rate_bound`."""
    return max((c.gpus // w * _instance_rate_bound(s, c.gpu, w)
                for w in _layout_widths(s.model, c.gpus_per_node, c.gpus)), default=0.0)


def bound(cand: Candidate, sc: Scenario) -> None:
    """Sound optimistic figures: the fastest training and the fewest GPUs that hold the
    weights (training in 16 bits, serving at its precision); for serving, also the memory the
    load's KV cache needs at the least (:func:`_serve_memory_floor_GB`)."""
    if sc.train:
        t = sc.train
        tps = cand.gpus * _tokens_per_s_per_gpu_bound(t.model, t.seq_len, cand.gpu, t.precision)
        cand.bound["train_hours"] = t.tokens / tps / 3600 if tps else math.inf
        cand.bound["train_min_gpus"] = _weights_gpus_floor(t.model, cand.gpu, "bf16")
    if sc.serve:
        s = sc.serve
        cand.bound["serve_min_gpus"] = _weights_gpus_floor(s.model, cand.gpu, s.precision)
        cand.bound["serve_memory_GB"] = _serve_memory_floor_GB(s, cand.gpu, cand.gpus)


@dataclass(frozen=True)
class _TrainJob:
    model: str
    system: str
    global_batch: int
    seq_len: int
    precision: str


@params.cache
def _train_eval(job: _TrainJob) -> dict[str, Any]:
    from gpufabric.workloads.search import search
    try:
        # each design's best layout with the communication overlaps a production framework
        # turns on (Megatron-Core's and NeMo's tuned recipes): designs are compared on their
        # hardware, not on a framework left at slower settings
        rs = search(job.model, job.system, global_batch=job.global_batch, seq_len=job.seq_len,
                    precision=job.precision, top=1, tp_overlap=True, dp_overlaps=(True,))
    except InputError as exc:
        return {"error": exc.message}
    r = rs[0]
    return {"tokens_per_s": r.tokens_per_s, "mfu": r.mfu, "step_time_s": r.step_time_s,
            "tokens_per_s_per_gpu": r.tokens_per_s_per_gpu, "layout": r.parallel,
            "bottleneck": r.bottleneck}


@dataclass(frozen=True)
class _ServeJob:
    model: str
    design: str                 # node spec string of one instance's servers
    layout: tuple[tuple[str, int], ...]
    width: int                  # GPUs of one instance
    isl: int
    osl: int
    ttft: float | None
    tpot: float | None
    precision: str
    closed: bool                # concurrency (closed loop) rather than a rate
    #: speculative decoding (method, draft tokens, acceptance, draft model), or None
    spec: tuple[str, int, tuple[float, ...], str | None] | None = None
    dataset: str | None = None  # the requests' lengths from a named dataset
    prefix_tokens: int = 0      # prompt tokens every request shares (prefix caching)
    engine: str = "vllm"        # the engine profile the instance runs
    chunked_prefill: bool | None = None   # None: the engine profile's default


#: Requests per serving trial and seconds of arrivals: small, for speed (the SLO percentile
#: of a few hundred requests is stable to a few per cent).
SERVE_REQUESTS, SERVE_DURATION_S = 200, 20.0


def serve_setup(job: _ServeJob) -> tuple[Any, Any]:
    """The topology of one instance's servers and the :class:`ServeConfig` of one instance
    that a serving job runs (its load left to the search)."""
    from gpufabric.topology.build import from_spec, parse_inline
    from gpufabric.workloads.inference.serve import ServeConfig
    lay = dict(job.layout)
    topo = from_spec(parse_inline(job.design), file="design")
    cfg = ServeConfig(tp=lay.get("tp", 1), ep=lay.get("ep", 1),
                      dp_attention=lay.get("dp_attention", 1), replicas=1,
                      precision=job.precision, isl=job.isl, osl=job.osl,
                      requests=SERVE_REQUESTS, slo_ttft_ms=job.ttft, slo_tpot_ms=job.tpot,
                      dataset=job.dataset, prefix_tokens=job.prefix_tokens, engine=job.engine,
                      chunked_prefill=job.chunked_prefill)
    if job.spec is not None:
        cfg = replace(cfg, spec=job.spec[0], spec_tokens=job.spec[1],
                      acceptance=job.spec[2], draft_model=job.spec[3])
    return topo, cfg


#: most capacities kept
KEEP_SERVED = 512
#: Serving capacities found in this process (:func:`_serve_eval`), by the job less its
#: servers' design, the step costs (:func:`~gpufabric.workloads.inference.serve.step_digest`),
#: the instance's GPUs and the parameter value (oldest first).
_SERVED: BoundedDict[tuple, dict[str, Any]] = BoundedDict(KEEP_SERVED)


@params.cache
def _serve_eval(job: _ServeJob) -> dict[str, Any]:
    """The highest rate one instance serves within the SLO (:func:`max_rate`, or, a closed
    loop, the highest concurrency) and the run at it. A search over the rate sees the servers
    only through the step model's costs and the instance's GPU count (the KV cache's tiers
    are HBM alone): jobs whose step models have one digest (designs that differ where an
    instance does not reach: host PCIe switches its collectives do not cross, a fabric whose
    hops cost the same) share one search (:data:`_SERVED`), as the serving model's saturated
    runs do (``serve._CAPACITIES``)."""
    from gpufabric.workloads.inference.serve import check_config, step_digest, step_model
    from gpufabric.workloads.inference.supernode import max_rate
    try:
        topo, cfg = serve_setup(job)
        if job.closed:
            best, r = _max_concurrency(job.model, topo, cfg)
            return _capacity("per_instance", best, r, "concurrency")
        check_config(cfg)           # (as max_rate checks it, before the step model)
        sm = step_model(job.model, topo, cfg)
        key = (replace(job, design=""), step_digest(sm), len(topo.gpus()), topo.scale_up(),
               params.current().key)
        hit = _SERVED.get(key)
        if hit is None:
            rate, r = max_rate(job.model, topo, cfg, duration_s=SERVE_DURATION_S, steps=3,
                               sm=sm)
            hit = _capacity("per_instance", rate, r, "rate")
            _SERVED[key] = hit
    except InputError as exc:
        return {"error": exc.message, "field": exc.field}
    return dict(hit)


def _capacity(key: str, value: float, r: dict | None, what: str) -> dict[str, Any]:
    """What a serving search found: the capacity (``key``: per instance or per PD unit) and
    the run at it, or why none meets the SLO."""
    if r is None:
        return {"error": f"the SLO is not met at any {what}"}
    return {key: value, "tokens_per_s": r["throughput_tokens_per_s"],
            "ttft_ms_p90": r["ttft_ms"]["p90"], "tpot_ms_p90": r["tpot_ms"]["p90"],
            "bottleneck": r["bottleneck"]}


def _max_concurrency(model: str, topo: Any, cfg: Any) -> tuple[int, dict | None]:
    from gpufabric.workloads.inference.serve import check_config, serve, step_model
    best, res, c = 0, None, 1
    sm = None                       # built once: the concurrency does not enter it
    while c <= 4096:
        run = replace(cfg, concurrency=c, rate=None)
        if sm is None:
            check_config(run)
            sm = step_model(model, topo, run)
        r = serve(model, topo, run, sm=sm)
        if r["slo_attainment"] < 0.9:
            break
        best, res, c = c, r, c * 2
    return best, res


def _serve_layouts(cand: Candidate, sc: Scenario) -> list[tuple[dict[str, int], str, int]]:
    """(layout, node spec of one instance, instance width) for the candidate's server design."""
    from gpufabric.workloads.inference.supernode import default_layouts
    assert sc.serve is not None
    gpn = cand.gpus_per_node
    lays, per_server = default_layouts(sc.serve.model, gpn, cand.gpus)
    out = []
    for lay in lays:
        w = lay["tp"]
        if w > cand.gpus:
            continue
        node = {k: v for k, v in cand.spec.items() if k not in ("nodes",)}
        servers = max(1, math.ceil(w / gpn))
        if servers == 1:
            node = {k: v for k, v in node.items() if k not in ("nic", "nics_per_node", "fabric")}
        else:
            node["nodes"] = servers
        out.append((lay, spec_string(node), w))
    _ = per_server
    return out


class Runner:
    """Runs the models' jobs (:class:`_TrainJob`, :class:`_ServeJob`, :class:`_PDJob`) through
    :func:`gpufabric.sweep.run`, in this process, on ``jobs`` worker processes or on Ray, and
    keeps each job's result: a job asked for again (the same server design in a design with
    more servers, a look-ahead's job) is never run twice. A job is a pure function of its
    fields, so where it runs and when changes nothing.

    >>> r = Runner()
    >>> r.jobs, r.ray, r.done
    (1, False, {})
    """

    def __init__(self, *, ray: bool = False, jobs: int = 1) -> None:
        self.ray, self.jobs = ray, max(1, jobs)
        self.done: dict[Any, dict[str, Any]] = {}

    def run(self, todo: list[Any], progress: Callable[[int, int], None] | None = None) -> None:
        """Run the jobs of ``todo`` not run yet (each kind through its own function)."""
        new = [j for j in dict.fromkeys(todo) if j not in self.done]
        for kind, fn in ((_TrainJob, _train_eval), (_ServeJob, _serve_eval),
                         (_PDJob, _pd_eval)):
            mine = [j for j in new if isinstance(j, kind)]
            if mine:
                out = sweep.run(fn, mine, ray=self.ray, jobs=self.jobs, progress=progress)
                self.done.update(zip(mine, out, strict=True))

    def __getitem__(self, job: Any) -> dict[str, Any]:
        return self.done[job]


def _jobs(c: Candidate, sc: Scenario, every: bool = False
          ) -> tuple[_TrainJob | None, list[tuple[_ServeJob, int]]]:
    """The model jobs that judge ``c``: its training search, its serving layouts (with the
    width of one instance): those whose instances, as many as ``c`` holds, can hold the
    load's KV cache (:func:`_instance_rate_bound`), or ``every`` one."""
    jt = None
    if sc.train:
        t = sc.train
        jt = _TrainJob(t.model, c.system, t.global_batch, t.seq_len, t.precision)
    mine: list[tuple[_ServeJob, int]] = []
    if sc.serve:
        s = sc.serve
        for lay, design, w in _serve_layouts(c, sc):
            if not every and s.rate and \
                    s.rate * w / c.gpus > _instance_rate_bound(s, c.gpu, w):
                continue            # its instances together cannot hold the load's KV cache
            mine.append((_ServeJob(s.model, design, tuple(sorted(lay.items())), w, s.isl, s.osl,
                                   s.slo_ttft_ms, s.slo_tpot_ms, s.precision,
                                   s.concurrency is not None, s.speculative, s.dataset,
                                   s.prefix_tokens, s.engine, s.chunked_prefill), w))
    return jt, mine


def all_jobs(cands: list[Candidate], sc: Scenario) -> list[Any]:
    """Every model job of ``cands``, each once, in their order."""
    out: list[Any] = []
    for c in cands:
        jt, js = _jobs(c, sc)
        out += ([jt] if jt else []) + [j for j, _ in js]
    return list(dict.fromkeys(out))


def evaluate(cands: list[Candidate], sc: Scenario, *, ray: bool = False,
             progress: Callable[[int, int], None] | None = None,
             runner: Runner | None = None) -> None:
    """Run the models for ``cands`` (training search, serving capacity), filling ``metrics``."""
    runner = runner or Runner(ray=ray)
    jobs_t: list[_TrainJob] = []
    per_cand_s: list[list[tuple[_ServeJob, int]]] = []
    for c in cands:
        jt, js = _jobs(c, sc)
        if jt:
            jobs_t.append(jt)
        per_cand_s.append(js)
    runner.run(all_jobs(cands, sc), progress=progress)
    for i, c in enumerate(cands):
        c.evaluated = True
        if sc.train:
            r = runner[jobs_t[i]]
            if "error" in r:
                c.metrics["train_error"] = r["error"]
            else:
                hours = sc.train.tokens / r["tokens_per_s"] / 3600
                c.metrics.update({"train_hours": hours, "train_tokens_per_s": r["tokens_per_s"],
                                  "mfu": r["mfu"], "train_layout": r["layout"],
                                  "tokens_per_s_per_gpu": r["tokens_per_s_per_gpu"],
                                  "train_bottleneck": r["bottleneck"]})
        if sc.serve:
            best = None
            for j, w in per_cand_s[i]:
                r = runner[j]
                if "error" in r:
                    continue
                inst = c.gpus // w
                cap = r["per_instance"] * inst
                row = {"layout": dict(j.layout), "instances": inst, "capacity": cap,
                       "per_instance": r["per_instance"],
                       "tokens_per_s_capacity": r["tokens_per_s"] * inst,
                       "ttft_ms_p90": r["ttft_ms_p90"], "tpot_ms_p90": r["tpot_ms_p90"],
                       "bottleneck": r["bottleneck"]}
                if best is None or cap > best["capacity"]:
                    best = row
            if best is None:
                errs = [runner[j].get("error", "") for j, _ in per_cand_s[i]]
                c.metrics["serve_error"] = errs[0] if errs else _no_layout(c, sc)
            else:
                c.metrics["serve"] = best


def _no_layout(c: Candidate, sc: Scenario) -> str:
    """Why a design has no serving layout to run (:func:`_jobs` kept none)."""
    assert sc.serve is not None
    s = sc.serve
    widths = _layout_widths(s.model, c.gpus_per_node, c.gpus)
    if not widths:
        return "no layout fits"
    most = _design_rate_bound(c, s)
    if most <= 0:
        weights = _serve_bytes(s.model, s.precision)[0]
        return (f"{s.model} in {s.precision} does not fit: {weights / 1e9:.0f} GB of weights "
                f"on {max(widths)} {c.gpu}")
    return (f"no layout's KV cache holds the load: at most {most:.3g} requests/s of "
            f"{_demand(sc):g} by memory and bandwidth")


# --------------------------------------------------------------------------------------------
# constraints, objective, ranking
# --------------------------------------------------------------------------------------------
def _demand(sc: Scenario) -> float:
    assert sc.serve is not None
    return float(sc.serve.rate if sc.serve.rate is not None else sc.serve.concurrency or 0)


def check(c: Candidate, sc: Scenario) -> dict[str, float]:
    """Constraint name -> needed / allowed (> 1: violated), for an evaluated candidate."""
    v: dict[str, float] = {}
    k = sc.constraints
    if sc.train:
        if "train_error" in c.metrics:
            v["fits"] = math.inf
        elif sc.train.deadline_hours:
            v["deadline"] = c.metrics["train_hours"] / sc.train.deadline_hours
    if sc.serve:
        if "serve_error" in c.metrics:
            v["slo"] = math.inf
        else:
            v["slo"] = _demand(sc) / max(c.metrics["serve"]["capacity"], 1e-12)
    if k.power_kW and c.power_kW is not None:
        v["power"] = c.power_kW / k.power_kW
    if k.budget_capex_usd and c.cost.get("capex_usd") is not None:
        v["capex"] = c.cost["capex_usd"] / k.budget_capex_usd
    if k.budget_usd_per_hour and c.cost.get("usd_per_hour") is not None:
        v["usd_per_hour"] = c.cost["usd_per_hour"] / k.budget_usd_per_hour
    if sc.services:
        need = sum(s.cores for s in sc.services)
        v["services_cores"] = need / max(_host_cores(c), 1)
    return v


def _host_cores(c: Candidate) -> int:
    from gpufabric.topology.build import normalize_spec
    s = normalize_spec(dict(c.spec), file="design")
    cpu = catalog.cpu(s["host"]["cpu"])
    return int(cpu.cores or 0) * int(s["host"]["sockets"]) * c.nodes


def hourly(c: Candidate) -> float | None:
    """$/hour of running the design: the cloud price, or capex amortized over the years set
    plus opex (energy at the facility's PUE and the $/kWh set, colocation, maintenance; a cloud
    price includes all of these)."""
    per_h = c.cost.get("usd_per_hour")
    if per_h is None:
        return None
    if c.deployment == "cloud":
        return float(per_h)
    return float(per_h) + float(c.cost.get("opex_usd_per_hour") or 0.0)


def run_cost(c: Candidate, sc: Scenario) -> float | None:
    """What the workload costs on this design (the lowest-cost objective's figure): the
    training run's hours x $/hour, or, serving, $/hour (both from :func:`hourly`)."""
    h = hourly(c)
    if h is None:
        return None
    if sc.train:
        return h * c.metrics["train_hours"] if "train_hours" in c.metrics else None
    return h


def figure(c: Candidate, sc: Scenario) -> float | None:
    """The objective's figure, smaller is better (throughputs are negated)."""
    obj = sc.objective
    if obj == "lowest-cost":
        return run_cost(c, sc)
    if obj == "fastest":
        if sc.train and "train_hours" in c.metrics:
            return c.metrics["train_hours"]
        if sc.serve and "serve" in c.metrics:
            return -c.metrics["serve"]["tokens_per_s_capacity"]
        return None
    tps = _tokens_per_s(c, sc)
    if obj == "tokens-per-watt":
        return -tps / (c.power_kW * 1000) if c.power_kW and tps else None
    per_h = hourly(c)
    served = _tokens_per_s(c, sc, at_load=True)
    if per_h is None or not served:
        return None
    return per_h / (served * 3600 / 1e6)


def _tokens_per_s(c: Candidate, sc: Scenario, at_load: bool = False) -> float:
    """Training tokens/s, or serving output tokens/s: what the design serves within the SLO
    (its capacity), or, ``at_load``, what it serves of the load the scenario offers."""
    if sc.train and "train_tokens_per_s" in c.metrics:
        return float(c.metrics["train_tokens_per_s"])
    if sc.serve and "serve" in c.metrics:
        cap = float(c.metrics["serve"]["tokens_per_s_capacity"])
        offered = (sc.serve.rate or 0) * sc.serve.osl
        return min(offered, cap) if at_load and offered else cap
    return 0.0


def _bound_figure(c: Candidate, sc: Scenario) -> float | None:
    """An optimistic (never worse than the real) objective figure, before any model runs."""
    if sc.objective != "lowest-cost":
        return None
    h = hourly(c)
    if h is None:
        return None
    return h * c.bound.get("train_hours", 0.0) if sc.train else h


def _bound_violations(c: Candidate, sc: Scenario) -> dict[str, float]:
    """Constraints the bounds alone already break (needed / allowed > 1)."""
    v: dict[str, float] = {}
    k = sc.constraints
    if sc.train and sc.train.deadline_hours:
        r = c.bound["train_hours"] / sc.train.deadline_hours
        if r > 1:
            v["deadline"] = r
    if sc.train and c.bound["train_min_gpus"] > c.gpus:
        v["fits"] = c.bound["train_min_gpus"] / c.gpus
    if sc.serve and c.bound["serve_min_gpus"] > c.gpus:
        v["slo"] = c.bound["serve_min_gpus"] / c.gpus
    if sc.serve and not sc.serve.pd:
        # (a disaggregated unit adds a decode pool's memory: its designs are not bounded so;
        # an "80 GB" part holds 80 GiB, as the serving model counts it)
        have = c.gpus * catalog.gpu(c.gpu).memory_GB * 2**30 / 1e9
        if c.bound["serve_memory_GB"] > have:
            v["slo"] = max(v.get("slo", 0.0), c.bound["serve_memory_GB"] / have)
        if sc.serve.rate:          # no layout's instances can hold the load's KV cache
            most = _design_rate_bound(c, sc.serve)
            if most < sc.serve.rate:
                v["slo"] = max(v.get("slo", 0.0), sc.serve.rate / most if most else math.inf)
    if k.power_kW and c.power_kW is not None and c.power_kW > k.power_kW:
        v["power"] = c.power_kW / k.power_kW
    if k.budget_capex_usd and (c.cost.get("capex_usd") or 0) > k.budget_capex_usd:
        v["capex"] = c.cost["capex_usd"] / k.budget_capex_usd
    if k.budget_usd_per_hour and (c.cost.get("usd_per_hour") or 0) > k.budget_usd_per_hour:
        v["usd_per_hour"] = c.cost["usd_per_hour"] / k.budget_usd_per_hour
    return v



# --------------------------------------------------------------------------------------------
# prefill / decode disaggregation
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _PDJob:
    model: str
    prefill: str               # node spec strings of the two pools (one server each)
    decode: str
    layout: tuple[tuple[str, int], ...]
    x: int
    y: int
    isl: int
    osl: int
    ttft: float | None
    tpot: float | None
    precision: str
    shared: bool               # both pools inside one server
    engine: str = "vllm"       # the engine profile both pools run
    chunked_prefill: bool | None = None   # None: the engine profile's default


def pd_setup(job: _PDJob) -> tuple[Any, Any, Any]:
    """The prefill pool's topology, the decode pool's (None: inside the same servers) and the
    :class:`ServeConfig` of one xPyD unit (its load left to the search)."""
    from gpufabric.topology.build import from_spec, parse_inline
    from gpufabric.workloads.inference.serve import ServeConfig
    lay = dict(job.layout)
    pt = from_spec(parse_inline(job.prefill), file="design")
    dt = None if job.shared else from_spec(parse_inline(job.decode), file="design")
    base = ServeConfig(tp=lay.get("tp", 1), ep=lay.get("ep", 1),
                       dp_attention=lay.get("dp_attention", 1), precision=job.precision,
                       isl=job.isl, osl=job.osl, slo_ttft_ms=job.ttft, slo_tpot_ms=job.tpot,
                       engine=job.engine, chunked_prefill=job.chunked_prefill)
    return pt, dt, base


@params.cache
def _pd_eval(job: _PDJob) -> dict[str, Any]:
    """The highest rate one xPyD unit serves within the SLO (doubling, then 3 bisections)."""
    from gpufabric.workloads.inference.pd import serve_pd
    from gpufabric.workloads.inference.supernode import highest_passing
    try:
        pt, dt, base = pd_setup(job)

        def ok(rate: float) -> tuple[bool, dict]:
            n = max(SERVE_REQUESTS, int(rate * SERVE_DURATION_S))
            r = serve_pd(job.model, pt, replace(base, rate=rate, requests=n), (job.x, job.y),
                         dt)
            return r["slo_attainment"] >= 0.9, r
        lo, best = highest_passing(ok, 0.05 * (job.x + job.y), steps=3)
    except InputError as exc:
        return {"error": exc.message, "field": exc.field}
    out = _capacity("per_unit", lo, best, "rate")
    if best is not None:            # the KV cache's path between the pools, as modelled
        out.update(kv_link=best["pd"]["kv_link"],
                   kv_transfer_ms_p50=best["pd"]["kv_transfer_ms"]["p50"],
                   decode_max_concurrency=best["max_concurrency"])
    return out


def disaggregated(ranked: list[Candidate], sc: Scenario, prices: Prices, kwh_usd: float,
                  *, designs: int = 3, ray: bool = False,
                  runner: Runner | None = None) -> list[Candidate]:
    """xPyD deployments on the server designs of the best co-located ones (:func:`_pd_pairs`:
    every (prefill, decode) pair of them, so prefill and decode may run on different GPUs,
    or, where the scenario names the pools' GPU kinds, each on itself and each named prefill
    kind's with each named decode kind's); one unit of x prefill and y decode servers, as many
    units as the load needs, priced whole (both pools)."""
    assert sc.serve is not None and sc.serve.rate
    jobs, meta = _pd_jobs(_pd_pairs(ranked, sc, prices, designs), sc)
    runner = runner or Runner(ray=ray)
    runner.run(jobs)
    out = []
    for job, (a, b) in zip(jobs, meta, strict=True):
        r = runner[job]
        if "error" in r or not r["per_unit"]:
            continue
        out.append(_pd_candidate(job, a, b, r, sc, prices, kwh_usd))
    return out


def _pd_pairs(ranked: list[Candidate], sc: Scenario, prices: Prices,
              designs: int) -> list[tuple[Candidate, Candidate]]:
    """(prefill, decode) design pairs of the best co-located designs of the first ``designs``
    GPU kinds: every pair of them, or, where the scenario names the pools' GPU kinds
    (``space.pd_gpus``), each on itself and then each pair of a prefill and a decode kind
    named (the best design of each); both pools in one place (on premises, or one cloud
    provider)."""
    best: dict[tuple[str, str], Candidate] = {}     # the best design of each kind and place
    for c in ranked:
        if c.decode is None and "serve" in c.metrics and c.nodes == 1:
            best.setdefault((c.gpu, c.deployment), c)
    seen: dict[str, Candidate] = {}
    for c in list(best.values())[:designs]:
        seen[c.design] = c
    sp = sc.space
    if not sp.pd_prefill:
        pairs = [(a, b) for a in seen.values() for b in seen.values()]
    else:
        pairs = [(a, a) for a in seen.values()]
        pairs += [(a, b) for a in best.values() if a.gpu in sp.pd_prefill
                  for b in best.values() if b.gpu in sp.pd_decode]
    provider = {str(i["instance"]): str(i.get("provider", "")) for i in prices.cloud()}
    ids = {(id(a), id(b)): (a, b) for a, b in pairs}          # each pair once, in order
    return [(a, b) for a, b in ids.values() if a.deployment == b.deployment
            and provider.get(a.instance) == provider.get(b.instance)]


def _pd_jobs(pairs: list[tuple[Candidate, Candidate]], sc: Scenario
             ) -> tuple[list[_PDJob], list[tuple[Candidate, Candidate]]]:
    """The xPyD units (1P1D, 1P2D, 2P1D) of each pair that fit its servers, in the layout of
    the prefill design's best co-located run (and, GPUs differing, the decode design's)."""
    s = sc.serve
    assert s is not None
    jobs: list[_PDJob] = []
    meta: list[tuple[Candidate, Candidate]] = []
    for a, b in pairs:
        lays = [a.metrics["serve"]["layout"]]
        if a.gpu != b.gpu and b.metrics["serve"]["layout"] != lays[0]:
            lays.append(b.metrics["serve"]["layout"])
        one_a, one_b = _one_server(a), _one_server(b)
        for lay in lays:
            w = lay.get("tp", 1)
            if w > a.gpus_per_node or w > b.gpus_per_node:
                continue
            for x, y in ((1, 1), (1, 2), (2, 1)):
                shared = a.design == b.design and (x + y) * w <= a.gpus_per_node
                if not shared and (x * w > a.gpus_per_node or y * w > b.gpus_per_node):
                    continue
                jobs.append(_PDJob(s.model, one_a, one_b, tuple(sorted(lay.items())), x, y,
                                   s.isl, s.osl, s.slo_ttft_ms, s.slo_tpot_ms, s.precision,
                                   shared, s.engine, s.chunked_prefill))
                meta.append((a, b))
    return jobs, meta


def _pd_candidate(job: _PDJob, a: Candidate, b: Candidate, r: dict[str, Any], sc: Scenario,
                  prices: Prices, kwh_usd: float) -> Candidate:
    """The disaggregated design of a unit's result: as many units as the load needs, each
    pool priced by :func:`price` and the design's cost their sum."""
    from gpufabric.topology.build import parse_inline
    x, y = job.x, job.y
    units = max(1, math.ceil(float(sc.serve.rate or 0 if sc.serve else 0) / r["per_unit"]))
    pre = replace(a, nodes=units, decode=None, metrics={}, cost={})
    dec = replace(b if not job.shared else a, nodes=0 if job.shared else units, decode=None,
                  metrics={}, cost={})
    pre.spec = {**parse_inline(job.prefill), "nodes": units}
    dec.spec = {**parse_inline(job.decode), "nodes": max(dec.nodes, 1)}
    for part in (pre, dec):
        if part.nodes:
            price(part, prices, kwh_usd, sc.constraints.amortize_years,
                  sc.constraints.cloud_term)
    c = replace(pre, decode=dec if dec.nodes else None, pd=(x, y), evaluated=True)
    c.cost = _sum_costs(pre, dec)
    c.power_kW = sum(p.power_kW or 0.0 for p in (pre, dec) if p.nodes) or None
    c.metrics = {"serve": {"layout": dict(job.layout), "instances": units,
                           "capacity": r["per_unit"] * units, "per_instance": r["per_unit"],
                           "tokens_per_s_capacity": r["tokens_per_s"] * units,
                           "ttft_ms_p90": r["ttft_ms_p90"], "tpot_ms_p90": r["tpot_ms_p90"],
                           "bottleneck": r["bottleneck"], "pd": f"{x}P{y}D",
                           "decode_system": spec_string(dec.spec) if dec.nodes else None,
                           "kv_link": r.get("kv_link"),
                           "kv_transfer_ms_p50": r.get("kv_transfer_ms_p50")}}
    if c.decode is not None and c.decode.gpu != c.gpu:
        c.metrics["serve"]["pools"] = pool_roles(pre, dec, sc, r.get("decode_max_concurrency"))
    c.violations = {k: v for k, v in check(c, sc).items() if v > 1}
    c.objective = figure(c, sc)
    return c


def pool_roles(pre: Candidate, dec: Candidate, sc: Scenario, held: int | None = None) -> str:
    """Which pool has which GPU and why, in the figures that bound each phase, per $/hour of
    the pool as priced: prefill is compute-bound (dense TFLOPS at the scenario's precision);
    decode reads the weights and the KV cache every token (HBM bandwidth) and holds the
    caches (HBM capacity: ``held``, the requests one decode instance's cache holds)."""
    assert sc.serve is not None
    from gpufabric.workloads.compute import gpu_spec
    prec = sc.serve.precision
    gp, gd = catalog.gpu(pre.gpu), catalog.gpu(dec.gpu)
    per_h = {p.gpu: (hourly(p) or 0.0) / max(p.gpus, 1) for p in (pre, dec)}

    def ratio(a: float, ga: catalog.GPU, b: float, gb: catalog.GPU) -> str:
        if not (per_h[ga.name] and per_h[gb.name] and b):
            return ""
        return f", {a / per_h[ga.name] / (b / per_h[gb.name]):.2f}x the {gb.name}'s per $"

    tf_p, tf_d = gpu_spec(gp.name).peak_tflops(prec), gpu_spec(gd.name).peak_tflops(prec)
    room = f"; its cache holds {held:,} requests" if held else ""
    return (f"prefill on {gp.name} (compute-bound: {tf_p:,.0f} dense {prec} TFLOPS"
            f"{ratio(tf_p, gp, tf_d, gd)}), decode on {gd.name} (memory-bound: "
            f"{gd.memory_GB:g} GB of HBM at {gd.mem_bw_GBps / 1e3:.2f} TB/s"
            f"{ratio(gd.mem_bw_GBps, gd, gp.mem_bw_GBps, gp)}{room})")


def _pd_kind_designs(ok: list[Candidate], done: list[Candidate], sc: Scenario,
                     runner: Runner) -> list[Candidate]:
    """The pool GPU kinds of ``space.pd_gpus`` that no single-server design was run for yet
    (the branch and bound stopped before them): the widest on-premises server design of each
    of the space, buildable and priced, run through the models now so that its layout is
    known. They rank as co-located designs too."""
    kinds = dict.fromkeys(sc.space.pd_prefill + sc.space.pd_decode)
    have = {c.gpu for c in done if "serve" in c.metrics and c.nodes == 1 and c.decode is None}
    new: list[Candidate] = []
    for g in kinds:
        if g in have:
            continue
        mine = [c for c in ok if c.gpu == g and c.nodes == 1 and c.deployment == "on-prem"
                and not c.evaluated and c.cost.get("usd_per_hour") is not None]
        if mine:
            new.append(max(mine, key=lambda c: c.gpus_per_node))   # the first of the widest
    if new:
        evaluate(new, sc, runner=runner)
    for c in new:
        c.violations = {k: v for k, v in check(c, sc).items() if v > 1}
        c.objective = figure(c, sc)
    return new


def _spec_one(c: Candidate) -> dict[str, Any]:
    return {k: v for k, v in c.spec.items() if k not in ("nodes", "nic", "nics_per_node",
                                                          "fabric")}


def _one_server(c: Candidate) -> str:
    """One server of ``c``'s design, with NICs (the KV cache crosses them between pools)."""
    spec = _spec_one(c)
    if c.deployment == "cloud":
        spec = {k: v for k, v in c.spec.items() if k != "nodes"}
    else:
        spec.update({"nic": "roce-400", "nics_per_node": c.gpus_per_node})
    return spec_string(spec)


def _sum_costs(a: Candidate, b: Candidate) -> dict[str, Any]:
    from gpufabric.advise.prices import sum_costs
    return sum_costs([p.cost for p in (a, b) if p.nodes])


def _net_words(c: Candidate) -> str:
    if c.nodes == 1 or c.deployment == "cloud" or "nic" not in c.spec:
        return ""
    f = c.spec.get("fabric", {})
    return (f"{c.spec['nics_per_node']}x {c.spec['nic']} {f.get('topology')} "
            f"{float(f.get('oversubscription', 1)):g}:1")


def _fold_equivalents(ranked: list[Candidate]) -> list[Candidate]:
    """Designs that differ only in their network and have the same figure become one entry
    (the fastest network), the others listed in its ``equivalents``."""
    out: list[Candidate] = []
    for c in ranked:
        twin = next((o for o in out if _group(o) == _group(c) and o.decode is None
                     and c.decode is None and o.objective is not None
                     and c.objective is not None
                     and math.isclose(o.objective, c.objective, rel_tol=1e-6)), None)
        if twin is None:
            out.append(c)
        else:
            twin.equivalents.append(_net_words(c) or describe(c))
    return out


#: Constraints a design's performance decides (a slower network cannot lift them).
PERFORMANCE = {"deadline", "fits", "slo"}


def _group(c: Candidate) -> tuple:
    """Designs that differ only in their network (NIC speed and count, fabric)."""
    return (c.deployment, c.instance, c.gpu, c.design, c.nodes)


def _net_rank(c: Candidate) -> tuple:
    """Fastest network first: most GB/s per server, least oversubscribed, rail-optimised."""
    if c.nodes == 1 or c.deployment == "cloud":
        return (0.0, 0.0, 0)
    bw = catalog.net_speed(str(c.spec["nic"])).bw_GBps * int(c.spec["nics_per_node"])
    f = c.spec.get("fabric", {})
    return (-bw, float(f.get("oversubscription", 1.0)), f.get("topology") != "rail-optimized")


def _interleave(queue: list[Candidate], strongest: dict[tuple, Candidate],
                sc: Scenario) -> list[Candidate]:
    """``queue`` with each group's fastest-network design moved just before the first of its
    group (so it is judged first; the bound order is kept otherwise)."""
    out: list[Candidate] = []
    placed: set[int] = set()
    for c in queue:
        lead = strongest[_group(c)]
        if id(lead) not in placed:
            out.append(lead)
            placed.add(id(lead))
        if id(c) not in placed:
            out.append(c)
            placed.add(id(c))
    return out


@dataclass
class Advice:
    scenario: Scenario
    ranked: list[Candidate]
    generated: int
    refused: int
    unpriced: int
    pruned: int
    evaluated: int
    elapsed_s: float
    pareto: list[Candidate]
    dominated: int = 0
    budget_left: bool = True
    infeasible: dict[str, Any] | None = None
    changes: list[str] = field(default_factory=list)
    candidates: list[Candidate] = field(default_factory=list)


def advise(sc: Scenario, prices: Prices, *, top: int = 5, kwh_usd: float = 0.10,
           ray: bool = False, jobs: int = 1, batch: int = 4, max_evaluations: int = 150,
           progress: Callable[[int, int], None] | None = None,
           designs: list[Candidate] | None = None) -> Advice:
    """Rank the scenario's designs: generate, price, bound, evaluate best-bound first.

    ``jobs`` worker processes (or Ray) run the models: each batch's jobs together with those
    of the designs next in the queue (a look-ahead), while the branch and bound takes the
    results in the queue's order; the answer is the same for any ``jobs``. ``designs``: the
    scenario's :func:`priced_designs` where the caller has them (the targets of an
    interactivity sweep share them), else made here.
    """
    from gpufabric.workloads.search import memory_verdicts
    # the training searches of one scenario share their memory verdicts (in each worker: the
    # workers start inside, with this one parameter set)
    t0 = time.perf_counter()
    here = local_jobs(jobs, ray)
    with memory_verdicts(), sweep.workers(here):
        cands = priced_designs(sc, prices, kwh_usd, here) \
            if designs is None else [_unjudged(c) for c in designs]
        return _advise(sc, cands, t0, top=top, kwh_usd=kwh_usd, prices=prices,
                       runner=Runner(ray=ray, jobs=jobs), batch=batch,
                       max_evaluations=max_evaluations, progress=progress)


def local_jobs(jobs: int, ray: bool) -> int:
    """Worker processes of this machine for the work an advice does here (judging and pricing
    the designs): ``jobs``, or one where Ray runs the models on its own workers.

    >>> local_jobs(4, False), local_jobs(4, True)
    (4, 1)
    """
    return 1 if ray else jobs


def priced_designs(sc: Scenario, prices: Prices, kwh_usd: float = 0.10,
                   jobs: int = 1) -> list[Candidate]:
    """Every design of the scenario's space (:func:`generate`: the rules' refusals marked),
    each the rules allow priced whole (:func:`price`): what every SLO target of the same
    workload, constraints and space shares."""
    cands = generate(sc, prices, jobs)
    for c in cands:
        if not c.refused:
            price(c, prices, kwh_usd, sc.constraints.amortize_years, sc.constraints.cloud_term)
    return cands


def _unjudged(c: Candidate) -> Candidate:
    """A priced design as :func:`priced_designs` made it, before any target bounds or
    evaluates it (one copy per target: those fill its bounds, metrics and verdicts)."""
    return replace(c, bound={}, metrics={}, objective=None, violations={}, evaluated=False,
                   equivalents=[])


def _advise(sc: Scenario, cands: list[Candidate], t0: float, *, top: int, kwh_usd: float,
            prices: Prices, runner: Runner, batch: int, max_evaluations: int,
            progress: Callable[[int, int], None] | None) -> Advice:
    ok, priced, live, dead = _screen(cands, sc)
    queue, strongest = _queue(live, sc)
    run = _search(queue, strongest, sc, top=top, runner=runner, batch=batch,
                  max_evaluations=max_evaluations, progress=progress)
    done, feasible = run.done, run.feasible
    pruned = len(priced) - len(done) - run.dominated
    if sc.serve and sc.serve.pd and sc.serve.rate:
        pds = _pd_kind_designs(ok, done, sc, runner)
        pool = sorted((c for c in done + pds if "serve" in c.metrics
                       and c.objective is not None), key=lambda c: c.objective or 0.0)
        pds += disaggregated(pool, sc, prices, kwh_usd, designs=4, runner=runner)
        done += pds
        feasible += [c for c in pds if not c.violations and c.objective is not None]
    feasible.sort(key=lambda c: (c.objective, c.gpus, c.cost.get("usd_per_hour") or 0,
                                 _net_rank(c)))
    feasible = _fold_equivalents(feasible)
    adv = Advice(scenario=sc, ranked=feasible, generated=len(cands),
                 refused=len(cands) - len(ok), unpriced=len(ok) - len(priced), pruned=pruned,
                 evaluated=len(done), dominated=run.dominated,
                 budget_left=len(done) < max_evaluations or run.next >= len(queue),
                 elapsed_s=time.perf_counter() - t0, pareto=pareto(feasible, sc),
                 candidates=cands)
    if not feasible:
        adv.infeasible = binding(done + dead, sc)
        if not adv.budget_left:
            adv.infeasible["message"] += (f" (after {len(done)} model runs; "
                                          f"{len(queue) - run.next} designs not run: raise "
                                          "--max-evaluations)")
    else:
        adv.changes = what_would_change(feasible, sc)
    adv.elapsed_s = time.perf_counter() - t0
    return adv


def _screen(cands: list[Candidate], sc: Scenario
            ) -> tuple[list[Candidate], list[Candidate], list[Candidate], list[Candidate]]:
    """(the candidates the rules allow, those of them priced where the objective or a budget
    needs a price, those of them whose bounds break no constraint, those whose bounds do):
    each bounded on the way (:func:`priced_designs` priced them)."""
    ok = [c for c in cands if not c.refused]
    for c in ok:
        try:
            bound(c, sc)
        except InputError as exc:           # the GPU lacks the precision asked
            c.refused = exc.message
    ok = [c for c in ok if not c.refused]
    needs_price = sc.objective in ("lowest-cost", "cost-per-million-tokens") or \
        sc.constraints.budget_capex_usd or sc.constraints.budget_usd_per_hour
    priced = [c for c in ok if c.cost.get("usd_per_hour") is not None or not needs_price]
    live: list[Candidate] = []
    dead: list[Candidate] = []
    for c in priced:
        c.violations = _bound_violations(c, sc)
        (dead if c.violations else live).append(c)
    return ok, priced, live, dead


def _queue(live: list[Candidate], sc: Scenario
           ) -> tuple[list[Candidate], dict[tuple, Candidate]]:
    """The order the models run the designs in (by bound for lowest-cost, small first
    otherwise), each group's fastest network first (:func:`_interleave`), and that network's
    design per group of designs that differ only in their network."""
    net = {id(c): _net_rank(c) for c in live}      # (each design's once: three sorts use it)
    keyed = [(_bound_figure(c, sc), c) for c in live]
    order = sorted(keyed, key=lambda x: (x[0] is None, x[0] if x[0] is not None else 0.0,
                                         -(x[1].bound.get("train_hours") or 0), x[1].gpus,
                                         net[id(x[1])]))
    queue = [c for _, c in order]
    if sc.objective != "lowest-cost":       # no sound bound on throughput objectives: take
        queue.sort(key=lambda c: (c.gpus, c.cost.get("usd_per_hour") or 0,  # small first
                                  net[id(c)]))
    # the fastest network of each group of designs that differ only in their network goes
    # first; when it misses the deadline or the SLO, so do its slower siblings
    strongest: dict[tuple, Candidate] = {}
    for c in sorted(queue, key=lambda c: net[id(c)]):
        strongest.setdefault(_group(c), c)
    return _interleave(queue, strongest, sc), strongest


@dataclass
class _Search:
    """Where the branch and bound got to: the designs run, those feasible, those skipped as
    dominated, and the queue position it stopped at."""

    done: list[Candidate] = field(default_factory=list)
    feasible: list[Candidate] = field(default_factory=list)
    failed: set[tuple] = field(default_factory=set)
    dominated: int = 0
    next: int = 0

    def limit(self, sc: Scenario, top: int) -> float | None:
        """The top-N-th feasible figure for lowest-cost once N are feasible (a design whose
        bound is not below it cannot enter), else None."""
        if sc.objective != "lowest-cost" or len(self.feasible) < top:
            return None
        return sorted(f.objective for f in self.feasible if f.objective is not None)[top - 1]


def _search(queue: list[Candidate], strongest: dict[tuple, Candidate], sc: Scenario, *,
            top: int, runner: Runner, batch: int, max_evaluations: int,
            progress: Callable[[int, int], None] | None) -> _Search:
    """Run the models on ``queue`` in batches until the bound of the next design cannot enter
    the top ``top`` (lowest-cost) or ``max_evaluations`` designs ran; a group whose fastest
    network misses a performance constraint has its other designs skipped as dominated."""
    st = _Search()
    while st.next < len(queue) and len(st.done) < max_evaluations:
        worst = st.limit(sc, top)
        nxt = _bound_figure(queue[st.next], sc) if worst is not None else None
        if nxt is not None and worst is not None and nxt >= worst:
            break                              # no later bound can enter the top N
        chunk = _chunk(queue, st, strongest, batch)
        if not chunk:
            continue
        if runner.jobs > 1 or runner.ray:
            width = LOOK_AHEAD * runner.jobs if not runner.ray else 4 * batch
            runner.run(_look_ahead(chunk, queue[st.next:st.next + batch * width], st.failed,
                                   strongest, st.limit(sc, top), sc, runner, width))
        evaluate(chunk, sc, runner=runner)
        if progress:
            progress(len(chunk), min(len(queue), max_evaluations))
        for c in chunk:
            c.violations = {k: v for k, v in check(c, sc).items() if v > 1}
            c.objective = figure(c, sc)
            st.done.append(c)
            if strongest.get(_group(c)) is c and set(c.violations) & PERFORMANCE:
                st.failed.add(_group(c))
            if not c.violations and c.objective is not None:
                st.feasible.append(c)
    return st


def _chunk(queue: list[Candidate], st: _Search, strongest: dict[tuple, Candidate],
           batch: int) -> list[Candidate]:
    """The next batch of ``queue`` to run: at most ``batch`` designs, ending at a group's
    fastest network (judged before its siblings), skipping designs of failed groups."""
    chunk: list[Candidate] = []
    while st.next < len(queue) and len(chunk) < batch:
        c = queue[st.next]
        st.next += 1
        if _group(c) in st.failed:
            st.dominated += 1
            c.violations = {"dominated": 2.0}
            continue
        chunk.append(c)
        if strongest.get(_group(c)) is c:
            break                  # judge a group's fastest network before its siblings
    return chunk


def _look_ahead(chunk: list[Candidate], rest: list[Candidate], failed: set[tuple],
                strongest: dict[tuple, Candidate], limit: float | None, sc: Scenario,
                runner: Runner, width: int) -> list[Any]:
    """The jobs of ``chunk`` and of the designs just after it in the queue (``rest``: a few
    batches) until ``width`` jobs not run yet: what the workers run while the ranking waits for
    the chunk.
    It leaves out what the ranking can already tell it will not run: a design whose group's
    fastest network has failed or is not judged yet (the siblings of a failed one are
    dominated), and, from the first design whose bound reaches ``limit`` (the worst figure of
    the top N so far) on, the rest. A look-ahead job the ranking never asks for is wasted
    work, never a different answer."""
    todo = [j for j in all_jobs(chunk, sc) if j not in runner.done]
    for c in rest:
        if len(todo) >= width:
            break
        b = _bound_figure(c, sc) if limit is not None else None
        if b is not None and limit is not None and b >= limit:
            break
        lead = strongest.get(_group(c))
        if _group(c) in failed or (lead is not None and lead is not c and not lead.evaluated):
            continue
        todo += [j for j in all_jobs([c], sc) if j not in runner.done and j not in todo]
    return todo


def pareto(cands: list[Candidate], sc: Scenario) -> list[Candidate]:
    """Designs no other beats on both cost ($/hour, :func:`hourly`) and throughput (tokens/s:
    training, or serving capacity within the SLO)."""
    pts = [(float(hourly(c) or 0.0), _tokens_per_s(c, sc), c) for c in cands
           if hourly(c) is not None]
    front: list[Candidate] = []
    seen: set[tuple[float, float]] = set()
    for cost, tps, c in pts:
        if (cost, tps) in seen:
            continue
        seen.add((cost, tps))
        if not any((o_cost <= cost and o_tps >= tps) and (o_cost < cost or o_tps > tps)
                   for o_cost, o_tps, _ in pts):
            front.append(c)
    front.sort(key=lambda c: hourly(c) or 0.0)
    return front


def what_would_change(ranked: list[Candidate], sc: Scenario) -> list[str]:
    """The next design and the price at which it overtakes the winner (cost objectives), or
    the budget at which a faster one would be chosen."""
    if len(ranked) < 2:
        return ["no other design meets the scenario"]
    w, r = ranked[0], ranked[1]
    out = []
    if sc.objective in ("lowest-cost", "cost-per-million-tokens") and w.objective and \
            r.objective and r.objective > 0 and hourly(r):
        r_h = float(hourly(r) or 0.0)
        target = r_h * w.objective / r.objective   # r's $/hour that ties
        if r.deployment == "cloud":
            k = target / r_h
            what = f"{r.instance} $/hour"
        else:
            from gpufabric.advise.prices import capex_linked_per_hour
            cap = capex_linked_per_hour(r.cost)
            energy = r_h - cap                       # what a cheaper purchase does not move
            k = (target - energy) / cap
            what = "capex"
        if abs(k - 1) < 5e-4:
            out.append(f"{describe(r)} ties with it (same figure)")
        elif k > 0:
            out.append(f"{describe(r)} overtakes when its {what} falls by "
                       f"{100 * (1 - k):.1f}% (to {k:.3f}x today's)")
        else:
            out.append(f"{describe(r)} cannot overtake on price alone (its energy costs "
                       "more than the winner's whole cost)")
    else:
        out.append(f"next: {describe(r)} ({_fmt_obj(r, sc)} against {_fmt_obj(w, sc)})")
    faster = [c for c in ranked[1:] if _tokens_per_s(c, sc) > _tokens_per_s(w, sc)]
    if faster and sc.objective == "lowest-cost":
        f = faster[0]
        out.append(f"{describe(f)} is {_tokens_per_s(f, sc) / max(_tokens_per_s(w, sc), 1e-9):.2f}x"
                   f" faster for {_fmt_obj(f, sc)}")
    return out


def _fmt_obj(c: Candidate, sc: Scenario) -> str:
    if c.objective is None:
        return "n/a"
    if sc.objective == "lowest-cost":
        return f"${c.objective:,.0f}" if sc.train else f"${c.objective:,.2f}/h"
    if sc.objective == "fastest":
        return (f"{c.objective:,.1f} h" if sc.train else f"{-c.objective:,.0f} tok/s")
    if sc.objective == "tokens-per-watt":
        return f"{-c.objective:.3f} tok/s/W"
    return f"${c.objective:.3f}/M tokens"


def describe(c: Candidate) -> str:
    if c.pd and c.decode is None:
        lay = " ".join(f"{k}{v}" for k, v in c.metrics.get("serve", {}).get("layout",
                                                                            {}).items())
        return (f"disaggregated {c.pd[0]}P{c.pd[1]}D ({lay}) inside each of "
                f"{_describe_one(replace(c, pd=None))}")
    if c.decode is not None and c.pd:
        lay = " ".join(f"{k}{v}" for k, v in c.metrics.get("serve", {}).get("layout",
                                                                            {}).items())
        return (f"disaggregated {c.pd[0]}P{c.pd[1]}D ({lay}): prefill on "
                f"{_describe_one(replace(c, decode=None, pd=None))}, decode on "
                f"{_describe_one(c.decode)}")
    return _describe_one(c)


def _describe_one(c: Candidate) -> str:
    if c.deployment == "cloud":
        return f"{c.nodes}x {c.instance} ({c.gpus}x {c.gpu})"
    up = c.spec.get("scale_up") or ("rack NVLink" if c.rack_scale else "default")
    host = c.spec.get("host", {}).get("switch_layout", "")
    f = c.spec.get("fabric") or {}        # a PD pool's servers carry NICs, no fabric plan
    # a rack-scale domain's trays are one NVLink system: no NICs between them to name
    net = (f", {c.spec['nics_per_node']}x {c.spec['nic']}" + (
        f" {f['topology']} {f['oversubscription']:g}:1" if f else "")) \
        if c.nodes > 1 and "nic" in c.spec else ""
    return (f"{c.nodes}x {c.gpus_per_node}-GPU {c.gpu} server ({up}"
            f"{', ' + host + ' PCIe switches' if host else ''}{net})")


def binding(tried: list[Candidate], sc: Scenario) -> dict[str, Any]:
    """Which constraint binds when nothing is feasible, and the closest design."""
    if not tried:
        return {"constraint": "catalog", "message": "no design of the space could be priced "
                "and built: widen the space or add prices with --prices"}
    counts: dict[str, int] = {}
    for c in tried:
        for k in c.violations:
            counts[k] = counts.get(k, 0) + 1
    closest = min(tried, key=lambda c: (max(c.violations.values()) if c.violations else 0.0))
    worst = max(closest.violations, key=lambda k: closest.violations[k]) if closest.violations \
        else "unknown"
    return {"constraint": worst, "counts": counts, "closest": closest,
            "message": _infeasible_line(closest, worst, sc)}


def _infeasible_line(c: Candidate, what: str, sc: Scenario) -> str:
    k = sc.constraints
    d = describe(c)
    if what == "power":
        return (f"no design meets the scenario under {k.power_kW:g} kW; the closest, {d}, needs "
                f"{c.power_kW:,.1f} kW")
    if what == "deadline":
        need = c.metrics.get("train_hours") or c.bound.get("train_hours", 0)
        return (f"no design trains {sc.train.model if sc.train else ''} within "
                f"{sc.train.deadline_hours if sc.train else 0:g} h; the closest, {d}, needs "
                f"{need:,.1f} h")
    if what == "slo":
        s = sc.serve
        tgt = " / ".join(x for x in (f"TTFT {s.slo_ttft_ms:g} ms" if s and s.slo_ttft_ms else "",
                                     f"TPOT {s.slo_tpot_ms:g} ms" if s and s.slo_tpot_ms else "")
                         if x)
        cap = c.metrics.get("serve", {}).get("capacity")
        have = (f"serves {cap:,.2f} of the {_demand(sc):g} asked" if cap is not None else
                c.metrics.get("serve_error", "fits no layout"))
        return (f"no design meets {tgt} for {s.model if s else ''} at the load asked; the "
                f"closest, {d}, {have}")
    if what == "capex":
        return (f"no design fits the capex budget ${k.budget_capex_usd:,.0f}; the closest, {d}, "
                f"costs ${c.cost['capex_usd']:,.0f}")
    if what == "usd_per_hour":
        return (f"no design fits ${k.budget_usd_per_hour:,.2f}/hour; the closest, {d}, costs "
                f"${c.cost['usd_per_hour']:,.2f}/hour")
    if what == "fits":
        return f"{sc.train.model if sc.train else ''} fits no layout of the designs tried ({d})"
    if what == "services_cores":
        return f"the services need more CPU cores than the closest design, {d}, has"
    return f"no design meets the scenario; the closest is {d}"


__all__ = ["Advice", "Candidate", "advise", "generate", "spec_string", "describe", "pareto"]

"""One serving run: a model on a system, a parallel layout, a request stream, an SLO.

:func:`serve` builds the iteration-time model on the system's topology, sizes the KV cache,
runs the continuous-batching simulator for one instance and scales to the whole deployment
(``replicas`` data-parallel copies and ``dp_attention`` ranks inside each, the request stream
split evenly between them), then names the bottleneck.

Examples
--------
>>> from gpufabric.topology.build import from_spec
>>> r = serve("llama3-8b", from_spec({"gpu": "H100-SXM", "gpus_per_node": 1}),
...           ServeConfig(rate=5.0, requests=200, isl=512, osl=64))
>>> r["gpus"], r["requests"], r["ttft_ms"]["p50"] < r["e2e_ms"]["p50"]
(1, 200, True)
"""

from __future__ import annotations

from collections.abc import Callable

import hashlib
import math
from dataclasses import asdict, dataclass, replace

import numpy as np

from gpufabric import params
from gpufabric.cache import BoundedDict
from gpufabric.errors import InputError, check_range
from gpufabric.topology.model import Topology
from gpufabric.workloads.inference import clients, kerneltimes
from gpufabric.workloads.inference import precisions as P
from gpufabric.workloads.inference import requests as R
from gpufabric.workloads.inference.engines import profile as engine_profile
from gpufabric.workloads.inference.itertime import ServeLayout, StepModel
from gpufabric.workloads.models import load_model
from gpufabric.workloads.inference.speculative import SpecStep
from gpufabric.workloads.inference.simulator import (GaveUp, SchedulerConfig, SimResult,
                                                     backlog_growth, check_fits, saturated,
                                                     simulate, slo_out_of_reach,
                                                     steady_window, summarize)

def engine_batched_tokens(engine: str, gpu: str) -> tuple[int, str]:
    """The engine's default prefill token budget on this GPU kind, and where it comes from:
    the first rule of its profile's ``max_batched_tokens`` that the GPU's memory meets
    (:mod:`gpufabric.workloads.inference.engines`).

    Examples
    --------
    >>> engine_batched_tokens("vllm", "H100-SXM")[0], engine_batched_tokens("vllm", "L40S")[0]
    (8192, 2048)
    >>> engine_batched_tokens("sglang", "B200")[0], engine_batched_tokens("vllm", "A100-SXM4-80GB")
    (16384, (2048, 'vLLM V1 0.9-0.11 engine/arg_utils.py, OPENAI_API_SERVER, < 70 GiB or A100'))
    """
    return engine_profile(engine).batched_tokens(gpu)

#: host link used to swap KV blocks out and back (PCIe Gen5 x16, one direction, ~50 GB/s usable)
SWAP_GBps = 50.0


@dataclass
class ServeConfig:
    """Everything a run needs besides the model and the system."""

    tp: int = 1
    ep: int = 1
    pp: int = 1
    dp_attention: int = 1
    replicas: int | None = None          # default: as many instances as the system holds
    precision: str = "bf16"
    kv_dtype: str | None = None
    engine: str = "vllm"
    rate: float | None = None            # requests/s for the whole deployment (None: offline)
    burst_cv: float | None = None        # gamma arrivals with this CV instead of Poisson
    concurrency: int | None = None       # closed loop with this many users (whole deployment)
    requests: int | None = 1000          # None: the whole trace (without one, 1000)
    isl: int = 1024
    osl: int = 256
    trace: str | None = None
    dataset: str | None = None           # a named dataset's lengths (workloads/data/datasets.yaml)
    dataset_spread: float | None = None  # synthetic datasets: stdev fraction or range ratio
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    max_num_seqs: int | None = None
    max_batched_tokens: int | None = None
    block_size: int | None = None        # None: the engine profile's
    preemption: str = "recompute"
    seed: int = 0
    eplb: bool = False                   # MoE: redundant experts balance the EP ranks
    gpu_memory_utilization: float | None = None   # None: the engine profile's
    #: prefill prompts in chunks of the token budget (True) or whole (False); None: as the
    #: benchmark client sets up the engine, else the engine profile's default
    chunked_prefill: bool | None = None
    scheduler_steps: int = 1             # multi-step scheduling (vLLM 0.6 --num-scheduler-steps)
    #: how an online run's figures are taken: ``steady`` (its steady state: warm-up and drain
    #: left out) or ``run`` (over the whole run, as a benchmark client takes them); None: the
    #: client's way, else ``steady``
    measure: str | None = None
    #: the benchmark client whose load and figures the run reproduces
    #: (:mod:`gpufabric.workloads.inference.clients`); None: the load the options describe
    client: str | None = None
    #: speculative decoding (:mod:`~gpufabric.workloads.inference.speculative`): method (mtp,
    #: eagle, draft), draft tokens per step, acceptance (one rate, a comma-separated list or a
    #: tuple, one per position; None: the sourced default), the draft model (method draft)
    spec: str | None = None
    spec_tokens: int | None = None
    acceptance: str | tuple[float, ...] | None = None
    draft_model: str | None = None
    #: KV cache tiers beyond HBM with prefix caching (``--kv-tier``, ``NAME:SIZE[@GBps]``;
    #: :mod:`~gpufabric.workloads.inference.kvcache`): needs a trace that names its prefixes
    kv_tiers: tuple[str, ...] = ()
    #: a prompt prefix every request shares (a system prompt), in tokens: with prefix caching
    #: (in HBM, or over ``kv_tiers``) a request finds its whole blocks cached once one request
    #: has computed them (``--prefix-tokens``; :func:`shared_prefix`)
    prefix_tokens: int = 0

    def layout(self) -> ServeLayout:
        return ServeLayout(tp=self.tp, ep=self.ep, pp=self.pp, dp_attention=self.dp_attention)


#: Requests of a run without a trace when ``requests`` is None (the first of the counts a
#: steady-state run tries, doubling, until its figures converge).
DEFAULT_REQUESTS = 1000
#: Most requests a steady-state run of no stated count simulates while its figures converge.
MAX_AUTO_REQUESTS = 16000
#: Full batches of each instance an offline run of no stated count simulates (at most
#: :data:`MAX_OFFLINE_REQUESTS` per instance): each instance fills its batch, runs it and
#: drains, and the throughput over the whole run approaches a long run's as the batches grow
#: (MLPerf's Mixtral 8x7B Offline runs of 896 and 3,072 sequences per engine: -9.7% and
#: -2.2% at 8 batches, -3.2% and -0.5% at 24, against every stated sample).
OFFLINE_BATCHES = 24
#: Most requests per instance an offline run of no stated count simulates.
MAX_OFFLINE_REQUESTS = 50000
#: A steady state whose requests in the system grow by more than this share of its arrivals
#: shows a queue that builds: the run's capacity is then measured (a stable queue wanders by
#: less)
QUEUE_GROWTH = 0.01
#: Relative change of the steady-state throughput and median latencies (TTFT, TPOT) between
#: two runs, the second of twice the requests, within which they count as converged; the
#: 99th percentiles (a tail a short run samples thinly) within twice as much.
CONVERGED = 0.05
#: the figures the convergence test compares, each with its tolerance, and the least change
#: of a latency (ms) that counts
_CONVERGING = (("throughput_tokens_per_s", None, CONVERGED), ("ttft_ms", "p50", CONVERGED),
               ("tpot_ms", "p50", CONVERGED), ("ttft_ms", "p99", 2 * CONVERGED),
               ("tpot_ms", "p99", 2 * CONVERGED))
_LATENCY_FLOOR_MS = 1.0


def trace_note(rows: int, used: int, asked: int | None) -> str:
    """What a trace run used of the trace, when not simply all of it ("" otherwise).

    >>> trace_note(5000, 1000, 1000)
    "using the first 1000 of the trace's 5000 requests (--requests)"
    >>> trace_note(300, 300, 1000)
    'the trace holds 300 requests, fewer than --requests 1000: using all 300'
    >>> trace_note(300, 300, None)
    ''
    """
    if used < rows:
        return f"using the first {used} of the trace's {rows} requests (--requests)"
    if asked is not None and asked > rows:
        return f"the trace holds {rows} requests, fewer than --requests {asked}: using all {rows}"
    return ""


def split_note(cfg: ServeConfig, share: int) -> str:
    """What dealing a run over ``share`` equal request streams (replicas x attention-DP ranks
    x pipeline stages, one simulated) did to ``--requests`` and ``--concurrency`` ("" when
    they divide evenly).

    >>> split_note(ServeConfig(requests=50), 8)
    'simulating 56 requests, 7 in each of 8 streams (--requests 50 rounded up)'
    >>> split_note(ServeConfig(requests=48, concurrency=3), 8)
    'simulating 8 users, 1 in each of 8 streams (--concurrency 3 rounded up)'
    """
    if cfg.trace:
        return ""
    parts = []
    asked = cfg.requests or DEFAULT_REQUESTS
    n = max(1, -(-asked // share))
    if n * share != asked:
        parts.append(f"{n * share} requests, {n} in each of {share} streams (--requests "
                     f"{asked} rounded up)")
    if cfg.concurrency:
        u = max(1, cfg.concurrency // share)
        if u * share != cfg.concurrency:
            way = "up" if u * share > cfg.concurrency else "down"
            parts.append(f"{u * share} users, {u} in each of {share} streams (--concurrency "
                         f"{cfg.concurrency} rounded {way})")
    return "simulating " + " and ".join(parts) if parts else ""


def trace_fields(cfg: ServeConfig, reqs: R.Requests) -> dict:
    """``trace_requests`` (rows of the trace) and ``note`` (:func:`trace_note`) of a trace run."""
    if not cfg.trace:
        return {}
    return {"trace_requests": reqs.rows,
            "note": trace_note(reqs.rows, reqs.total or len(reqs), cfg.requests)}


def check_config(cfg: ServeConfig) -> None:
    """Check the run's numbers (one-line errors naming the option)."""
    if cfg.requests is not None and (not isinstance(cfg.requests, int)
                                     or not 1 <= cfg.requests <= R.MAX_REQUESTS):
        raise InputError(f"must be an integer from 1 to {R.MAX_REQUESTS}, got {cfg.requests!r}",
                         field="--requests")
    if cfg.burst_cv is not None and not (math.isfinite(cfg.burst_cv)
                                         and 0 < cfg.burst_cv <= R.MAX_BURST_CV):
        raise InputError(f"must be a number above 0 and at most {R.MAX_BURST_CV:g}, got "
                         f"{cfg.burst_cv!r}", field="--burst-cv")
    if cfg.rate is not None and not (math.isfinite(cfg.rate) and cfg.rate > 0):
        raise InputError(f"must be a positive number of requests per second, got {cfg.rate!r}",
                         field="--rate")
    if cfg.concurrency is not None and cfg.concurrency < 1:
        raise InputError(f"must be a positive integer, got {cfg.concurrency!r}",
                         field="--concurrency")
    for name in ("max_num_seqs", "max_batched_tokens"):
        v = getattr(cfg, name)
        if v is not None and not (isinstance(v, int) and v >= 1):
            raise InputError(f"must be a whole number >= 1, got {v!r}",
                             field="--" + name.replace("_", "-"))
    u = cfg.gpu_memory_utilization
    if u is not None and not (math.isfinite(u) and 0 < u <= 1):
        raise InputError(f"must be a fraction above 0 and at most 1, got {u!r}",
                         field="--gpu-memory-utilization")
    if cfg.preemption not in ("recompute", "swap"):
        raise InputError(f"unknown preemption mode '{cfg.preemption}'; allowed: recompute, "
                         "swap", field="--preemption")
    for name in ("slo_ttft_ms", "slo_tpot_ms"):
        v = getattr(cfg, name)
        if v is not None and not (math.isfinite(v) and v > 0):
            raise InputError(f"must be a positive number of milliseconds, got {v!r}",
                             field="--" + name.replace("_ms", "").replace("_", "-"))
    if cfg.prefix_tokens:
        check_range(cfg.prefix_tokens, 1, R.MAX_TOKENS, integer=True, field="--prefix-tokens")
        if cfg.trace:
            raise InputError("the trace names its own shared prefixes (give --kv-tier)",
                             field="--prefix-tokens")
        if not cfg.dataset and cfg.prefix_tokens >= cfg.isl:
            raise InputError(f"must be below the prompt length (--isl {cfg.isl}): the last "
                             f"prompt token is always computed, got {cfg.prefix_tokens}",
                             field="--prefix-tokens")
    if cfg.kv_tiers:
        from gpufabric.workloads.inference.kvcache import parse_tiers
        parse_tiers(cfg.kv_tiers)
        if not cfg.trace and not cfg.prefix_tokens:
            raise InputError("applies only with --trace (a trace whose requests name their "
                             "shared prefixes: Mooncake's hash_ids, or a session_id column) "
                             "or --prefix-tokens",
                             field="--kv-tier")


def unloaded_ms(sm: StepModel, isl: int, chunk: int) -> tuple[float, float]:
    """(TTFT, TPOT) of one request alone: its prefill in chunks, then one decode step."""
    ttft, done = 0.0, 0
    while done < isl:
        c = min(chunk, isl - done)
        ttft += float(sm(c, c * (done + (c + 1) / 2), done + c, 0, 0))
        done += c
    tps = float(getattr(sm, "tokens_per_step", 1.0))
    return ttft * 1e3, float(sm(0, 0, 0, 1, isl + 1)) / tps * 1e3


def check_slo_possible(sm: StepModel, cfg: ServeConfig, isl: int) -> None:
    """Refuse an SLO that even one request alone cannot meet on this deployment."""
    if cfg.slo_ttft_ms is None and cfg.slo_tpot_ms is None:
        return
    ttft, tpot = unloaded_ms(sm, isl, sm.max_tokens)
    if cfg.slo_ttft_ms is not None and cfg.slo_ttft_ms < ttft:
        raise InputError(f"{cfg.slo_ttft_ms:g} ms is impossible: one request of {isl} input "
                         f"tokens alone takes {ttft:.1f} ms to its first token here",
                         field="--slo-ttft")
    if cfg.slo_tpot_ms is not None and cfg.slo_tpot_ms < tpot:
        raise InputError(f"{cfg.slo_tpot_ms:g} ms is impossible: one request alone takes "
                         f"{tpot:.2f} ms per output token here", field="--slo-tpot")


def build_requests(cfg: ServeConfig, share: int) -> R.Requests:
    """The request stream one of ``share`` equal instances sees (with the shared prefix of
    ``cfg.prefix_tokens``, :func:`shared_prefix`)."""
    if cfg.trace:
        return _requests(cfg, share)
    return shared_prefix(_requests(cfg, share), cfg.prefix_tokens)


def _requests(cfg: ServeConfig, share: int) -> R.Requests:
    if cfg.trace:
        full = R.load_trace(cfg.trace, limit=cfg.requests)
        keep = np.arange(len(full)) % share == 0          # round-robin over the instances
        pre = None if full.prefix is None else replace(full.prefix, mine=keep)
        return R.Requests(full.arrival[keep], full.isl[keep], full.osl[keep],
                          source=full.source, total=len(full), rows=full.rows, prefix=pre)
    n = max(1, -(-int(cfg.requests or DEFAULT_REQUESTS) // share))
    isl: int | np.ndarray = cfg.isl
    osl: int | np.ndarray = cfg.osl
    if cfg.dataset:
        from gpufabric.workloads.inference.datasets import sample
        isl, osl = sample(cfg.dataset, n, seed=cfg.seed, isl=cfg.isl, osl=cfg.osl,
                          spread=cfg.dataset_spread)
    users = max(1, (cfg.concurrency or 0) // share)
    if cfg.rate is None:
        if not cfg.concurrency:
            return R.offline(n, isl, osl)
        reqs = R.closed_loop(users, n, isl, osl)
        # a static batch, round after round; an open-loop client's requests all due at once,
        # at most --concurrency in flight; else users in their steady state's phases
        arrivals = clients.get(cfg.client).arrivals if cfg.client else "closed"
        reqs.release = {"synchronized": "round", "open": "paced"}.get(arrivals, "user")
        return reqs
    if cfg.burst_cv:
        reqs = R.bursty(cfg.rate / share, n, isl, osl, cv=cfg.burst_cv, seed=cfg.seed)
    else:
        reqs = R.poisson(cfg.rate / share, n, isl, osl, seed=cfg.seed)
    if cfg.concurrency:                   # at most --concurrency in flight (a semaphore)
        reqs.concurrency, reqs.release = users, "paced"
    return reqs


#: Tokens of a block of the shared prefix (:func:`shared_prefix`): vLLM's default KV block
#: (``--block-size 16``); a partial last block is computed, as the engines do.
PREFIX_BLOCK = 16


def shared_prefix(reqs: R.Requests, tokens: int) -> R.Requests:
    """``reqs`` with their first ``tokens`` prompt tokens one prefix all of them share (a
    system prompt): the same block ids in every request, so prefix caching finds them once
    one request has computed them (``reqs`` as they are when ``tokens`` is 0).

    >>> r = shared_prefix(R.poisson(1.0, 3, isl=100, osl=10), 40)
    >>> r.prefix.ids[0] == r.prefix.ids[2], len(r.prefix.ids[0]), r.prefix.block
    (True, 2, 16)
    """
    if not tokens:
        return reqs
    ids = tuple(("shared", j) for j in range(tokens // PREFIX_BLOCK))
    reqs.prefix = R.Prefix([ids] * len(reqs), PREFIX_BLOCK)
    return reqs


def with_client(cfg: ServeConfig, instances: int = 1, model=None,
                topo: Topology | None = None) -> ServeConfig:
    """``cfg`` as its benchmark client runs it: the client's way of taking figures where
    ``measure`` is not given, the engine's chunked prefill, batch limit and token budget as
    the client sets them up where they are not given (the last two need the ``model`` and the
    ``topo``), and the requests of its minimum duration (over ``instances`` simulated as one)
    where ``requests`` is not given (a load the client cannot apply is refused)."""
    if cfg.client is None:
        return cfg if cfg.measure else replace(cfg, measure="steady")
    c = clients.get(cfg.client)
    clients.check_load(c, cfg.rate, cfg.concurrency)
    out = replace(cfg, client=c.name, measure=cfg.measure or c.measure)
    if cfg.chunked_prefill is None:
        out.chunked_prefill = c.chunked_prefill
    if c.engine_settings == "trtllm-bench" and model is not None and topo is not None and \
            (cfg.max_num_seqs is None or cfg.max_batched_tokens is None):
        weights = P.lookup(str(cfg.precision), "weights", "--precision").name
        kv = P.lookup(str(cfg.kv_dtype), "kv", "--kv-dtype").name if cfg.kv_dtype else \
            P.default_kv(weights)
        got = clients.trtllm_bench_settings(load_model(model), weights, kv, _gpu_GiB(topo),
                                            cfg.tp, cfg.pp, cfg.isl, cfg.osl)
        if got is not None:
            out.max_num_seqs = cfg.max_num_seqs or got[0]
            out.max_batched_tokens = cfg.max_batched_tokens or got[1]
    if cfg.requests is None and not cfg.trace:
        out.requests = clients.duration_requests(cfg.rate, c.min_duration_s, instances)
    return out


def chunked_prefill(cfg: ServeConfig, profile) -> bool:
    """Whether the run's prompts are prefilled in chunks: as ``cfg`` says (the options, an
    entry, the client through :func:`with_client`), else as the engine ``profile`` does."""
    return profile.chunked_prefill if cfg.chunked_prefill is None else cfg.chunked_prefill


def _gpu_GiB(topo: Topology) -> float:
    """GiB of memory of one of the system's GPUs (the catalog's figure, as the memory
    accounting reads it)."""
    from gpufabric.workloads import compute as C
    return float(C.gpu_spec(topo.gpus()[0].model).memory_GB)


def step_model(model: str, topo: Topology, cfg: ServeConfig) -> StepModel:
    """The step cost of one instance: the :class:`StepModel`, or with ``cfg.spec`` its
    speculative step (:class:`~gpufabric.workloads.inference.speculative.SpecStep`)."""
    spec = speculative(model, cfg)
    tok, _ = engine_batched_tokens(cfg.engine, topo.gpus()[0].model)
    prof = engine_profile(cfg.engine)
    if cfg.max_batched_tokens is None and not chunked_prefill(cfg, prof):
        tok = prof.whole_budget(tok, load_model(model).seq_len)
    sm = StepModel(model, topo, cfg.layout(), precision=cfg.precision, kv_dtype=cfg.kv_dtype,
                   engine=cfg.engine, max_tokens=cfg.max_batched_tokens or tok,
                   block_size=cfg.block_size, eplb=cfg.eplb,
                   mem_utilization=cfg.gpu_memory_utilization)
    if spec is None:
        return sm
    return SpecStep(sm, spec)  # type: ignore[return-value]  # a step cost like StepModel


def speculative(model, cfg: ServeConfig):
    """``cfg``'s speculative setting checked (None without ``spec``); the flags that need
    ``--spec`` refused without it."""
    if cfg.spec is None:
        for name, v in (("--spec-tokens", cfg.spec_tokens), ("--acceptance", cfg.acceptance),
                        ("--draft-model", cfg.draft_model)):
            if v is not None:
                raise InputError("applies only with --spec (mtp, eagle or draft)", field=name)
        return None
    from gpufabric.workloads.inference.speculative import resolve
    return resolve(cfg.spec, cfg.spec_tokens, cfg.acceptance, model, cfg.draft_model)


def scheduler_config(sm: StepModel, cfg: ServeConfig) -> SchedulerConfig:
    swap = sm.kv_bytes_per_token / (SWAP_GBps * 1e9)
    seqs = cfg.max_num_seqs or sm.profile.max_num_seqs
    if sm.profile.budget_covers_batch and sm.max_tokens < seqs:
        raise InputError(f"a budget of {sm.max_tokens} tokens is below the batch limit of "
                         f"{seqs} sequences, which {sm.profile.title} refuses: raise it to "
                         f"{seqs} or lower --max-num-seqs", field="--max-batched-tokens")
    # a pipeline of pp stages runs pp batches at once (vLLM's virtual engines), each with a
    # pp-th of the KV cache
    return SchedulerConfig(num_blocks=max(1, sm.kv_blocks // cfg.pp), block_size=sm.block_size,
                           max_num_seqs=seqs,
                           max_batched_tokens=sm.max_tokens,
                           chunked_prefill=chunked_prefill(cfg, sm.profile),
                           preemption=cfg.preemption, swap_s_per_token=swap,
                           reserve_full=sm.profile.reserve_full,
                           scheduler_steps=cfg.scheduler_steps, order=sm.profile.order)


def instances(topo: Topology, cfg: ServeConfig) -> int:
    per_domain, domains = topo.scale_up()
    gpus = per_domain * domains
    per = cfg.layout().gpus
    if cfg.replicas is not None:
        if cfg.replicas < 1 or cfg.replicas * per > gpus:
            raise InputError(f"{cfg.replicas} replicas of {per} GPUs need "
                             f"{cfg.replicas * per}; the system has {gpus}", field="--replicas")
        return cfg.replicas
    return max(1, gpus // per)


def streams(topo: Topology, cfg: ServeConfig) -> int:
    """Request streams of ``cfg`` on ``topo`` that one simulated instance stands for: its
    instances times the attention data-parallel ranks and pipeline stages of each."""
    return instances(topo, cfg) * cfg.dp_attention * cfg.pp


def serve(model: str, topo: Topology, cfg: ServeConfig,
          progress: Callable[[int, int], None] | None = None, *,
          sm: StepModel | None = None, stop_below: float | None = None) -> dict:
    """Simulate ``model`` served on ``topo`` as ``cfg`` says; a JSON-ready summary.

    An offline run of no stated count simulates :data:`OFFLINE_BATCHES` full batches of each
    instance. An online run (a rate or a concurrency) reports its steady state (``cfg.measure``,
    :func:`~gpufabric.workloads.inference.simulator.summarize`); with no request count
    stated it simulates :data:`DEFAULT_REQUESTS`, then twice as many, until the figures of two
    runs agree within :data:`CONVERGED` (at most :data:`MAX_AUTO_REQUESTS`), and says so in
    ``convergence``. A run above the deployment's capacity says ``overloaded`` with the
    ``capacity_requests_per_s`` it serves.

    ``progress(n, total)`` is told as the simulated instance's requests finish. ``sm`` is
    :func:`step_model` of the same model, system and settings when the caller has it (a
    search over the load reuses one: the rate, the concurrency and the request count do not
    enter it). ``stop_below``: the caller only asks whether at least this share of the
    requests meets the SLO; an open-loop run stops as soon as it cannot
    (:func:`~gpufabric.workloads.inference.simulator.slo_out_of_reach`), and its summary is
    then only ``slo_attainment`` (the most it could have reached) and ``stopped_early``.
    Its capacity, where it needs one, is measured quickly (:func:`capacity`).
    """
    check_config(cfg)
    reps, share = instances(topo, cfg), streams(topo, cfg)
    cfg = with_client(cfg, share, model, topo)
    if cfg.prefix_tokens and not cfg.kv_tiers:      # prefix caching in HBM (the engines')
        cfg = replace(cfg, kv_tiers=("hbm",))
    if cfg.measure not in ("steady", "run"):
        raise InputError(f"unknown measure '{cfg.measure}'; allowed: steady, run",
                         field="measure")
    sm = sm or step_model(model, topo, cfg)
    sched = scheduler_config(sm, cfg)
    online = cfg.rate is not None or bool(cfg.concurrency)
    if not online and cfg.requests is None and not cfg.trace:
        # an offline run of no stated count: the deployment's sustained throughput, not one
        # batch's ramp-up and drain
        cfg = replace(cfg, requests=max(DEFAULT_REQUESTS, share * min(
            OFFLINE_BATCHES * sched.max_num_seqs, MAX_OFFLINE_REQUESTS)))
    steady = cfg.measure == "steady" and online
    auto = steady and cfg.requests is None and not cfg.trace
    try:
        reqs, res, s = _run(sm, cfg, share, sched, steady, progress, stop_below)
    except GaveUp as g:
        return {"slo_attainment": g.most, "stopped_early": True}
    # the capacity: for a run of no stated count (one prediction, where it is worth its
    # saturated run), else where the steady state shows a queue that builds or the run is
    # too short to have one (its requests still in their first answers when the last came)
    rate = cfg.rate
    # (a client that holds at most --concurrency in flight queues the rest itself: the
    # engine sees no more than that, and the run's own figures are what it serves)
    at_rate = online and rate is not None and not cfg.concurrency
    cap = capacity(sm, cfg, share, sched, quick=stop_below is not None) if at_rate and \
        (auto or _queue_builds(s, res, steady)) else {}
    over = bool(cap) and rate is not None and rate / share > cap["requests_per_s"]
    tried = [_converging(s, reqs, share)]
    # an overloaded run's latencies grow with its length: its capacity is the answer
    done = 0
    while auto and not over and len(tried[-1]) and not _converged(tried) and \
            2 * tried[-1]["requests"] <= MAX_AUTO_REQUESTS:
        more = replace(cfg, requests=2 * tried[-1]["requests"])
        # the progress goes on from the runs before: their requests count in its total
        done += int(res.osl.size)
        tell = None if progress is None else \
            (lambda n, total, d=done: progress(n, d + total))
        reqs, res, s = _run(sm, more, share, sched, steady, tell)
        tried.append(_converging(s, reqs, share))
    _deployment_figures(s, res, reqs, cfg, share, cap, over)
    if auto:
        s["convergence"] = {"tolerance": CONVERGED, "tolerance_p99": 2 * CONVERGED,
                            "converged": _converged(tried),
                            "requests": [t["requests"] for t in tried]}
    if cfg.kv_tiers and stop_below is None:    # (a search's trial needs only its verdict)
        s["kv_tiers"]["compare"] = tier_compare(sm, cfg, share, sched, steady, s, reqs)
    return _report(sm, topo, cfg, reqs, res, s, share, reps, sched, steady)


def _queue_builds(s: dict, res: SimResult, steady: bool) -> bool:
    """Whether a run's requests in the system grow over its steady state by more than
    :data:`QUEUE_GROWTH` of its arrivals there (or the run is too short to have one): a
    steady-state run's own window, else the window a steady state would have (a run whose
    client takes its figures over the whole run still says when its rate is overloaded)."""
    if steady:
        return "steady" not in s or s["steady"]["backlog_growth"] > QUEUE_GROWTH * \
            s["steady"]["requests"]
    window = steady_window(res)
    if window is None:
        return True
    arrived, growth = backlog_growth(res, *window)
    return growth > QUEUE_GROWTH * arrived


def _deployment_figures(s: dict, res: SimResult, reqs: R.Requests, cfg: ServeConfig,
                        share: int, cap: dict, over: bool) -> None:
    """``s`` (one simulated instance's summary) turned into the deployment's figures, in
    place: an overloaded steady state serves its capacity, a stable one what is offered
    (flow conservation), a run measured whole its own figures (where its rate is overloaded,
    it says so), and the rates count every instance."""
    if "steady" in s:
        s["steady"]["measured_tokens_per_s"] = s["throughput_tokens_per_s"] * share
    whole = cfg.measure == "run"        # figures over the whole run stay the run's own
    if over and not whole:
        # the queue never empties: the engine serves at its saturated rate, and the
        # latencies are those of this run, growing with its length
        s["goodput_requests_per_s"] = s["slo_attainment"] * cap["requests_per_s"]
        s.update({k: cap[k] for k in ("throughput_tokens_per_s", "total_tokens_per_s",
                                      "requests_per_s")})
    elif not whole and ("steady" in s or cap) and cfg.rate is not None and not cfg.trace \
            and not cfg.concurrency:
        # a stable deployment (by its steady state, or by its capacity where the run is too
        # short to have one) serves what is offered (flow conservation): the rate times the
        # requests' lengths, whatever this sample's arrivals in the window were
        per = cfg.rate / share
        s.update({"requests_per_s": per, "goodput_requests_per_s": s["slo_attainment"] * per,
                  "throughput_tokens_per_s": per * float(res.osl.mean()),
                  "total_tokens_per_s": per * float(res.osl.mean() + res.isl.mean())})
    gpus_inst = cfg.layout().gpus / cfg.dp_attention / cfg.pp
    for k in ("throughput_tokens_per_s", "total_tokens_per_s", "requests_per_s",
              "goodput_requests_per_s"):
        s[k] = s[k] * share
    s["throughput_tokens_per_s_per_gpu"] = s["throughput_tokens_per_s"] / (share * gpus_inst)
    s["requests"] = reqs.total or int(res.osl.size) * share
    if "steady" in s:
        s["steady"]["requests"] *= share
        s["steady"]["backlog_growth"] *= share
    if cap:
        s["capacity_requests_per_s"] = cap["requests_per_s"] * share
        s["overloaded"] = over


def _report(sm: StepModel, topo: Topology, cfg: ServeConfig, reqs: R.Requests,
            res: SimResult, s: dict, share: int, reps: int, sched: SchedulerConfig,
            steady: bool) -> dict:
    """The JSON-ready answer of :func:`serve`: the deployment, its workload, memory and
    scheduler, the figures ``s``, the iteration breakdown and the bottleneck."""
    gpus_inst = cfg.layout().gpus / cfg.dp_attention / cfg.pp
    out = {"model": sm.model.name, "system": topo.name, "gpu": sm.gpu.name,
           "gpus": int(round(share * gpus_inst)), "replicas": reps,
           "layout": asdict(cfg.layout()), "precision": sm.precision, "kv_dtype": sm.kv_dtype,
           "compute_precision": sm.compute_prec, "engine": sm.engine, "workload": {
               "source": source_text(cfg, reqs.source), "rate": cfg.rate,
               "concurrency": cfg.concurrency,
               **({"client": cfg.client} if cfg.client else {}),
               "isl": float(res.isl.mean()), "osl": float(res.osl.mean()),
               "simulated_requests": int(res.osl.size),
               **(trace_fields(cfg, reqs) if cfg.trace else
                  {"note": split_note(cfg, share)})},
           "slo": {"ttft_ms": cfg.slo_ttft_ms, "tpot_ms": cfg.slo_tpot_ms},
           "memory": sm.memory(),
           "max_concurrency": sm.max_concurrency(int(res.isl.mean()), int(res.osl.mean())),
           "scheduler": asdict(sched)}
    out.update(s)
    out["measure"] = "steady" if "steady" in s else "run"
    bd = typical_breakdown(sm, res)
    out["breakdown_ms"] = {k.removesuffix("_s"): v * 1e3 for k, v in asdict(bd).items()}
    if hasattr(sm, "spec"):
        dec = res.iter_decode
        n = float(dec[dec > 0].mean()) if (dec > 0).any() else 1.0
        ctx = float(res.isl.mean() + res.osl.mean() / 2)
        out["speculative"] = sm.summary(n, n * ctx)  # type: ignore[attr-defined]
    out["bottleneck"] = bottleneck(sm, s, bd, res)
    kt = kerneltimes.report(getattr(sm, "gemm_sources", {}), sm.gpu.name, sm.engine)
    if kt is not None:
        out["kernel_times"] = kt
    return out


def _run(sm: StepModel, cfg: ServeConfig, share: int, sched: SchedulerConfig, steady: bool,
         progress: Callable[[int, int], None] | None, stop_below: float | None = None,
         reqs: R.Requests | None = None) -> tuple[R.Requests, SimResult, dict]:
    """One simulated instance's run of ``cfg`` and its summary (figures of one stream);
    :class:`~gpufabric.workloads.inference.simulator.GaveUp` where ``stop_below`` stops it
    (see :func:`serve`). ``reqs``: the requests of ``cfg`` where the caller built them."""
    reqs = build_requests(cfg, share) if reqs is None else reqs
    check_fits(reqs, sched)           # before anything costs time in the request's length
    check_slo_possible(sm, cfg, int(reqs.isl.max()))
    if reqs.concurrency and reqs.release == "user":
        reqs.phase_seed = cfg.seed
        reqs.ramp_s = loaded_cycle_s(sm, reqs, sched)
    give_up = None
    if stop_below is not None and not reqs.concurrency:
        give_up = slo_out_of_reach(cfg.slo_ttft_ms, cfg.slo_tpot_ms, stop_below)
    plan, tiers = prefix_plan(sm, cfg, reqs) if cfg.kv_tiers else (None, None)
    res = simulate_with_front_end(reqs, sm, sched, progress=progress, give_up=give_up,
                                  prefix=None if plan is None else
                                  (plan.hit_tokens, plan.load_s))
    s = summarize(res, gpus=1, slo_ttft_ms=cfg.slo_ttft_ms, slo_tpot_ms=cfg.slo_tpot_ms,
                  steady=steady)
    if plan is not None:
        s["kv_tiers"] = tiers
    return reqs, res, s


def prefix_plan(sm: StepModel, cfg: ServeConfig, reqs: R.Requests) -> tuple:
    """Prefix caching over ``cfg.kv_tiers`` for this instance's requests: the
    :class:`~gpufabric.workloads.inference.kvcache.Plan` and its summary
    (:func:`~gpufabric.workloads.inference.kvcache.summary`). A block's bytes are its tokens'
    KV on one GPU; a prefill recomputed costs its chunks of the token budget, each alone."""
    from gpufabric.workloads.inference import kvcache as K
    pre = reqs.prefix
    if pre is None:
        raise InputError("the trace names no shared prefixes; --kv-tier needs requests with "
                         "hash_ids (Mooncake's format) or a session_id column", field="--kv-tier")
    bb = sm.kv_bytes_per_token * pre.block
    tiers = K.resolve(K.parse_tiers(cfg.kv_tiers), sm.topo,
                      float(sm.kv_blocks * sm.block_size * sm.kv_bytes_per_token))
    M = max(int(sm.max_tokens), 1)

    def recompute_s(isl: int, start: np.ndarray) -> np.ndarray:
        c = np.maximum(isl - start, 1).astype(np.float64)
        q = np.ceil(c / M)                 # chunks of the token budget
        return q * sm(c / q, c * (start + (c + 1) / 2) / q, start + c, 0, 0)
    p = K.plan(pre.ids, reqs.isl, tiers, pre.block, bb, recompute_s, pre.mine)
    return p, K.summary(p, tiers, pre.block, bb)


def tier_compare(sm: StepModel, cfg: ServeConfig, share: int, sched: SchedulerConfig,
                 steady: bool, last: dict, reqs: R.Requests) -> list[dict]:
    """The run again without prefix caching, then with HBM alone and each further tier of
    ``cfg.kv_tiers`` added in lookup order (``last``: the run with all of them), on the same
    requests ``reqs`` (the trace read once): each row's tiers, hit rate, TTFT, TPOT and
    throughput (whole deployment)."""
    from gpufabric.workloads.inference.kvcache import parse_tier, parse_tiers
    names = [t.name for t in parse_tiers(cfg.kv_tiers)]
    given = {parse_tier(t).name: t for t in cfg.kv_tiers}
    rows = []
    for k in range(len(names) + 1):
        use = tuple(given.get(n, "hbm") for n in names[:k])
        s = last if k == len(names) else _run(sm, replace(cfg, kv_tiers=use), share, sched,
                                               steady, None, reqs=reqs)[2]
        per = 1 if k == len(names) else share      # (``last`` counts the deployment already)
        rows.append({"tiers": "+".join(names[:k]) or "none",
                     "hit_rate": s["kv_tiers"]["hit_rate"] if k else 0.0,
                     "ttft_ms": s["ttft_ms"], "tpot_ms": s["tpot_ms"],
                     "throughput_tokens_per_s": s["throughput_tokens_per_s"] * per,
                     "total_tokens_per_s": s["total_tokens_per_s"] * per})
    return rows


def capacity(sm: StepModel, cfg: ServeConfig, share: int, sched: SchedulerConfig,
             quick: bool = False) -> dict:
    """What one of ``share`` streams serves at most: a saturated run of ``cfg``'s lengths
    (every request queued at once, at least eight full batches) in its middle
    (:func:`~gpufabric.workloads.inference.simulator.saturated`): its ``requests_per_s`` is
    the capacity, and an overloaded deployment's steady state.

    ``quick``: the caller only compares a rate with it (a search's verdict), and eight
    batches of what the KV cache holds at once (:func:`_quick_requests`) answer where that
    is fewer requests. Where the cache holds far fewer sequences than ``max_num_seqs`` (long
    answers), the full run's thousands of requests thrash through preemptions for minutes;
    the quick run's ``requests_per_s`` is within about 5% of the full one's on them, finer than
    a search's bisection steps (an eighth of its bracket)."""
    n = max(DEFAULT_REQUESTS, min(8 * sched.max_num_seqs, MAX_AUTO_REQUESTS))
    if quick:
        n = min(n, _quick_requests(cfg, sched))
    return _saturated(sm, cfg, share, sched, n)


#: Load (rate over capacity) from which :func:`near_capacity` shows a run's latencies at a
#: slightly lower and higher rate: as a queue nears its server's capacity its waits climb
#: steeply, so there the figures hang on the capacity more than on anything else.
NEAR_CAPACITY = 0.85
#: The relative change of the rate, each way, :func:`near_capacity` runs at.
LOAD_STEP = 0.02


def near_capacity(model: str, topo: Topology, cfg: ServeConfig, r: dict) -> dict | None:
    """How the latencies of ``r`` (:func:`serve` of ``cfg`` on ``topo``) move with the load,
    where its rate is at least :data:`NEAR_CAPACITY` of its capacity and under it: the same
    run (its request count and seed: the same arrivals, spaced by the rate) at a rate
    :data:`LOAD_STEP` lower and higher, each side's rate, TTFT and TPOT (p50, p99) and
    whether it is overloaded. None for an open-loop run further from capacity, an overloaded
    one, or a run of another load (a concurrency, a trace)."""
    cap, rate = r.get("capacity_requests_per_s"), cfg.rate
    if (not cap or rate is None or r.get("overloaded") or cfg.concurrency or cfg.trace
            or rate < NEAR_CAPACITY * cap):
        return None
    out: dict = {"load": rate / cap, "load_step": LOAD_STEP}
    for side, f in (("lower", 1 - LOAD_STEP), ("higher", 1 + LOAD_STEP)):
        # (serve builds the step model as the run did: after its client set up the engine)
        x = serve(model, topo, replace(cfg, rate=rate * f, requests=r["requests"]))
        out[side] = {"rate": rate * f, "overloaded": bool(x.get("overloaded")),
                     **{k: {p: x[k][p] for p in ("p50", "p99")}
                        for k in ("ttft_ms", "tpot_ms")}}
    return out


#: Fewest requests per stream of a quick capacity run (:func:`capacity`).
QUICK_REQUESTS = 256


def _quick_requests(cfg: ServeConfig, sched: SchedulerConfig) -> int:
    """Requests per stream of a quick capacity run: eight batches of what the KV cache holds
    at once (every sequence at its full length, at most ``max_num_seqs``), at least
    :data:`QUICK_REQUESTS`."""
    from gpufabric.workloads.inference.datasets import get as get_dataset, mean_lengths
    isl, osl = mean_lengths(get_dataset(cfg.dataset), cfg.isl, cfg.osl) if cfg.dataset else \
        (float(cfg.isl), float(cfg.osl))
    held = sched.num_blocks * sched.block_size // max(1.0, isl + osl)
    return max(QUICK_REQUESTS, 8 * int(min(sched.max_num_seqs, max(1, held))))


def _saturated(sm: StepModel, cfg: ServeConfig, share: int, sched: SchedulerConfig,
               n: int) -> dict:
    """:func:`~gpufabric.workloads.inference.simulator.saturated` of ``n`` requests per stream
    of ``cfg``'s lengths, all queued at once. Kept by the step costs (:func:`step_digest`),
    the parameter value, the lengths and the scheduler it was measured with: a search over
    the rate (which enters none of them) measures it once, and so do designs whose instances
    cost the same (they differ only where an instance does not reach: other servers, the
    network)."""
    n *= share
    sat = replace(cfg, rate=None, concurrency=None, trace=None, requests=n)
    key = (step_digest(sm), params.current().key, share, n, sat.isl, sat.osl, sat.dataset,
           sat.dataset_spread, sat.seed, sat.prefix_tokens, sat.kv_tiers,
           tuple(sorted(asdict(sched).items())))
    if key not in _CAPACITIES:
        reqs = build_requests(sat, share)
        # a shared prefix found cached saves its prefill at capacity too
        plan = prefix_plan(sm, sat, reqs)[0] if sat.prefix_tokens and sat.kv_tiers else None
        _CAPACITIES[key] = saturated(simulate_with_front_end(
            reqs, sm, sched, prefix=None if plan is None else (plan.hit_tokens, plan.load_s)))
    return dict(_CAPACITIES[key])


#: most capacities kept
KEEP_CAPACITIES = 512
#: capacities measured in this process, by step cost, parameters and run (oldest first)
_CAPACITIES: BoundedDict[tuple, dict] = BoundedDict(KEEP_CAPACITIES)
#: a step model's attributes that are not its costs
_NOT_COSTS = ("topo", "_digest")


def step_digest(sm: object) -> str:
    """A digest of what a step model's costs are made of (its tables, model, GPU, engine,
    layout and formats; not the topology they were computed on): two step models of one
    digest give every run the same times. An attribute without a faithful text (an object
    shown by its address) makes the digest its own.

    >>> from gpufabric.topology.build import from_spec
    >>> a = StepModel("llama3-8b", from_spec({"gpu": "H100-SXM", "gpus_per_node": 1}),
    ...               ServeLayout())
    >>> b = StepModel("llama3-8b", from_spec({"gpu": "H100-SXM", "gpus_per_node": 8}),
    ...               ServeLayout())
    >>> c = StepModel("llama3-8b", from_spec({"gpu": "H200-SXM", "gpus_per_node": 1}),
    ...               ServeLayout())
    >>> step_digest(a) == step_digest(b), step_digest(a) == step_digest(c)
    (True, False)
    """
    d = sm.__dict__
    if "_digest" not in d:
        h = hashlib.sha1()
        for k in sorted(d):
            if k in _NOT_COSTS:
                continue
            v = d[k]
            h.update(k.encode())
            if isinstance(v, np.ndarray):
                h.update(f"{v.dtype}{v.shape}".encode() + v.tobytes())
            elif isinstance(v, StepModel | SpecStep):
                h.update(step_digest(v).encode())
            else:
                h.update(repr(v).encode())
        d["_digest"] = h.hexdigest()
    return d["_digest"]


def _converging(s: dict, reqs: R.Requests, share: int) -> dict:
    """The figures a convergence test compares, with the run's request count (all streams);
    empty for a run without a steady state."""
    if "steady" not in s:
        return {}
    out: dict = {"requests": len(reqs) * share}
    for key, q, _tol in _CONVERGING:
        out[f"{key}.{q}" if q else key] = s[key][q] if q else s[key]
    return out


def _converged(tried: list[dict]) -> bool:
    """Whether the last two runs' figures agree within :data:`CONVERGED` (a latency within
    :data:`_LATENCY_FLOOR_MS` too).

    >>> a = {"requests": 1000, "ttft_ms.p50": 100.0}
    >>> _converged([a, a | {"requests": 2000, "ttft_ms.p50": 104.0}])
    True
    >>> _converged([a, a | {"requests": 2000, "ttft_ms.p50": 110.0}])
    False
    """
    if len(tried) < 2:
        return False
    a, b = tried[-2], tried[-1]
    tol = {f"{key}.{q}" if q else key: t for key, q, t in _CONVERGING}
    for k, v in b.items():
        if k == "requests":
            continue
        old = a[k]
        if old is None or v is None:
            if old != v:
                return False
            continue
        floor = _LATENCY_FLOOR_MS if k.endswith(("p50", "p99")) else 0.0
        if abs(v - old) > max(tol[k] * abs(old), floor):
            return False
    return True


def front_end_s(sm: StepModel, disaggregated: bool = False) -> float:
    """The engine's request handling before scheduling (its profile's ``request_s``; in a
    disaggregated deployment ``pd_request_s`` too: the PD router and handshake)."""
    return sm.profile.request_s + (sm.profile.pd_request_s if disaggregated else 0.0)


def simulate_with_front_end(reqs: R.Requests, sm: StepModel, sched: SchedulerConfig,
                            disaggregated: bool = False, **kw) -> SimResult:
    """:func:`simulate`, the requests reaching the engine after its front end (in a closed
    loop too: a user's next request passes it again); latencies are counted from the
    client's send."""
    return simulate(reqs, sm, sched, front_end_s=front_end_s(sm, disaggregated), **kw)


def user_cycle_s(sm: StepModel, reqs: R.Requests) -> float:
    """Seconds one closed-loop user's request takes alone (front end, prefill in chunks,
    decode)."""
    isl, osl = int(reqs.isl.mean()), int(reqs.osl.mean())
    ttft, tpot = unloaded_ms(sm, max(isl, 1), sm.max_tokens)
    return front_end_s(sm) + (ttft + max(osl - 1, 0) * tpot) / 1e3


def loaded_cycle_s(sm: StepModel, reqs: R.Requests, sched: SchedulerConfig) -> float:
    """Seconds one closed-loop user's request takes with the others in flight: the mean over
    the last round of a pilot run of three rounds (the users' first requests spread over the
    unloaded cycle, :func:`user_cycle_s`). The run proper spreads the users' first requests
    over it at random, so that they meet as in the steady state that closed-loop benchmarks
    measure after their warm-up, instead of arriving in one burst."""
    c = reqs.concurrency
    n = min(len(reqs), 3 * c)
    unloaded = user_cycle_s(sm, reqs)
    if n <= c:
        return unloaded
    pilot = R.Requests(reqs.arrival[:n], reqs.isl[:n], reqs.osl[:n], concurrency=c,
                       ramp_s=unloaded, phase_seed=reqs.phase_seed)
    res = simulate_with_front_end(pilot, sm, sched)
    last = slice(n - c, n)
    return max(unloaded, float(np.mean(res.finish[last] - res.arrival[last])))


def source_text(cfg: ServeConfig, src: str) -> str:
    if cfg.trace:
        return src
    ds = f", dataset {cfg.dataset}" if cfg.dataset else ""
    by = f" (client {cfg.client})" if cfg.client else ""
    kind = f"bursty (gamma, cv {cfg.burst_cv:g})" if cfg.burst_cv else "Poisson"
    arrivals = clients.get(cfg.client).arrivals if cfg.client else "closed"
    if cfg.concurrency and (cfg.rate is not None or arrivals == "open"):
        at = f"{kind} at {cfg.rate:g} requests/s" if cfg.rate is not None else "all sent at once"
        return f"{at}, at most {cfg.concurrency} in flight{ds}{by}"
    if cfg.concurrency and arrivals == "synchronized":
        return f"static batches of {cfg.concurrency} (all sent at once each round){ds}{by}"
    if cfg.concurrency:
        return f"closed loop, {cfg.concurrency} users{ds}{by}"
    if cfg.rate is None:
        return f"offline (all requests queued at once){ds}{by}"
    return f"{kind} at {cfg.rate:g} requests/s{ds}{by}"


def typical_breakdown(sm: StepModel, res):
    """The step breakdown of the run's average decode iteration (batch and context)."""
    dec = res.iter_decode
    busy = dec[dec > 0]
    n = float(busy.mean()) if busy.size else 1.0
    ctx = float(res.isl.mean() + res.osl.mean() / 2)
    pre = float(res.iter_prefill.sum()) / max(1, res.iter_time_s.size)
    return sm.breakdown(pre, pre * ctx / 2, pre, n, n * ctx)


def bottleneck(sm: StepModel, s: dict, bd, res) -> str:
    """What limits the run, in words."""
    words = {
        "weight_read_s": "reading weights from HBM (decode is memory-bound)",
        "gemm_compute_s": "tensor-core compute in the GEMMs",
        "attention_s": "attention (KV-cache reads and prefill attention FLOPs)",
        "elementwise_s": "element-wise passes over the activations (norms, activation)",
        "tp_comm_s": f"the tensor-parallel all-reduce over {sm.layout.tp} GPUs",
        "ep_comm_s": f"the expert-parallel all-to-all over {sm.layout.ep} GPUs",
        "pp_comm_s": "pipeline sends between stages",
        "overhead_s": "the engine's per-iteration overhead (scheduling, sampling)",
        "draft_s": "the speculative drafter's passes",
    }
    d = asdict(bd)
    top = max(d, key=lambda k: d[k])
    share = d[top] / bd.total_s if bd.total_s > 0 else 0.0
    first = f"{words[top]}: {share:.0%} of an average iteration"
    notes = []
    if s["preemptions"]:
        notes.append(f"the KV cache ({sm.kv_blocks * sm.block_size:,} tokens) fills and "
                     f"{s['preemptions']} requests were preempted")
    elif s["kv_cache"]["peak_use"] > 0.95:
        notes.append("the KV cache is full at peak, which caps the batch")
    mean_batch = s["mean_batch"]
    seqs = res.iter_decode.max() if res.iter_decode.size else 0
    if seqs and mean_batch < 4 and not notes:
        notes.append(f"batches are small (mean {mean_batch:.1f}): the load is light")
    ttft = s["ttft_ms"]["p50"] or 0.0
    unloaded = float(sm(float(res.isl.mean()), float(res.isl.mean()) ** 2 / 2,
                        float(res.isl.mean()), 0, 0)) * 1e3
    if ttft > 10 * unloaded and ttft > 1000:
        notes.append(f"requests queue (median TTFT {ttft:,.0f} ms against {unloaded:,.0f} ms "
                     "unloaded): the rate exceeds what the deployment serves")
    return "; ".join([first] + notes)

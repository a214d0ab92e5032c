"""Iteration time of a serving engine: one batch of prefill chunks and decode tokens on a GPU group.

Every linear layer is an operation of the shared compute model (:mod:`gpufabric.workloads.compute`)
timed by its roofline, ``max(FLOPs / (peak x GEMM efficiency), bytes / (HBM x HBM efficiency))``,
with the bytes an inference engine moves: the weights at their stored precision with their
scales (the table of formats, :mod:`gpufabric.workloads.inference.precisions`: FP16/BF16 2 B,
FP8 1 B, NVFP4 and INT4 AWQ/GPTQ half a byte plus their group scales) and the activations. A
weight-only format (W8A16, W4A16) computes at its activations' 16 bit: its decode reads the
smaller weights, its prefill runs at the 16-bit rate. Attention is
counted per phase: prefill chunks by the query-key pairs they compute, decode tokens by the KV
cache they read (GQA: ``2 x kv_heads x head_dim`` values per token and layer; MLA: the latent,
``kv_lora_rank + qk_rope_head_dim``, read once for all heads, which run absorbed). MoE layers run
``top_k`` experts per token; a decode batch of ``T`` tokens touches
``E x (1 - (1 - top_k/E)^T)`` experts, whose weights are what it reads. The element-wise steps
between them (the norms with their residual adds, the MLP's activation) are passes over the
activations in HBM, as many as the engines' fused kernels make
(:data:`gpufabric.workloads.compute.SERVE_PASSES`); they weigh in prefill, where a batch
carries thousands of tokens.

Communication per layer is timed by :func:`gpufabric.collectives.predict` on the group's real
links: the tensor-parallel all-reduce after attention and after a dense MLP (or an MoE split by
TP), the expert-parallel dispatch and combine all-to-all of MoE layers, and the pipeline send
between stages. Sizes vary with the batch, so each is tabulated over token counts once and
interpolated (the model is linear between NCCL's algorithm switch points).

A per-iteration engine overhead (scheduling, sampling, launching the CUDA graph) is added; it is
a parameter of the engine's profile (:mod:`gpufabric.workloads.inference.engines`), as are its
memory accounting (``gpu_memory_utilization`` of the total or of what the weights leave) and
KV block size. The KV cache gets what is left as the engine counts it: vLLM's
``util x total - weights - peak activations - non-torch memory``, in blocks of
``block_size x KV bytes per token``.

Examples
--------
>>> from gpufabric.topology.build import from_spec
>>> topo = from_spec({"gpu": "H100-SXM", "gpus_per_node": 8})
>>> m = StepModel("llama3-70b", topo, ServeLayout(tp=4), precision="fp8")
>>> round(float(m(0, 0, 0, 1, 1000)) * 1e3, 2)     # one decode token at 1000 tokens of context
11.19
>>> m.kv_blocks
85264
"""

from __future__ import annotations

import bisect
import copy
import math
from contextvars import ContextVar
from dataclasses import asdict, dataclass

import numpy as np

from gpufabric.errors import InputError
from gpufabric.params import Param
from gpufabric.topology.model import Topology
from gpufabric.workloads import compute as C
from gpufabric.workloads import memory as M
from gpufabric.workloads.compute import record
from gpufabric.workloads.inference import engines as E
from gpufabric.workloads.inference import kerneltimes
from gpufabric.workloads.inference import precisions as P
from gpufabric.workloads.models import ModelSpec, load_model

#: Bytes per stored weight or KV value of each format (scales per group included; per-channel
#: and per-head scales, which depend on the model, left out): ``workloads/data/precisions.yaml``.
DTYPE_BYTES = {n: f.bytes_per_value() for n, f in P.formats().items()}
#: The formats a model that does not fit is tried in (``serve --versus``'s hint).
DTYPES = tuple(n for n, f in P.formats().items() if f.fit_hint)
#: Tensor-core precision a weight format computes in, best first (a weight-only format, W8A16 or
#: W4A16, computes at its 16-bit activations).
COMPUTE_CHAIN = {n: tuple(c.prec for c in f.compute) for n, f in P.formats().items()
                 if f.compute}

#: Rows of one tensor-core MMA instruction: Hopper's wgmma and Blackwell's tcgen05 work on 64
#: rows, mma.sync (Volta to Ada) on 16 (PTX ISA, warpgroup-level and warp-level MMA shapes).
MMA_M = {"hopper": 64, "blackwell": 64, "ampere": 16, "ada": 16, "volta": 16, "turing": 16}

#: NVFP4 GEMMs against the shared model's FP8 efficiency: a scale factor per 16 values to
#: load and apply, so a lower fraction of the (2x) FP4 peak. A kernel efficiency of the
#: Blackwell generation, fitted on the Llama 3.3 70B FP4 runs on two machines, B200 and GB200
#: (the value that minimises the median error over their points; the 405B FP4 entry is held
#: out).
FP4_EFF = record("FP4_EFF", 0.84, "fraction of the FP8 efficiency", "NVFP4 GEMMs",
                 "fitted on the Llama 3.3 70B FP4 runs of the TensorRT-LLM 1.0 performance "
                 "overview on B200 and GB200 (data/fits.yaml names the entries) with the "
                 "element-wise passes of SERVE_PASSES counted, jointly with the PyTorch "
                 "backend's per-iteration overhead (engines/tensorrt-llm.yaml): median error "
                 "over their points 4.0-4.4% at 0.84 and 3-4.5 ms, 6.0% at 0.75)")

#: How unevenly a step's tokens pick the experts: the coefficient of variation of the experts'
#: shares of one step's top-k choices (0: the router spreads them uniformly, only the
#: sampling noise of :func:`rank_load_factor` remains). It sets the slowest expert-parallel
#: rank's load, which every rank waits for at the combine all-to-all.
#: No source we have publishes it for these models, so it is fitted on one entry (grid 0-3 in
#: steps of 0.5: median error 26.5 % at 0, 20.0 % at 2.5): that entry's answer. The other MoE
#: entries with EP are held out (Qwen3-235B-A22B, DeepSeek-R1 on B200 and H200). A spread this
#: wide also absorbs what the model lacks for small grouped GEMMs (several experts' few rows
#: per kernel), so read it as an upper bound on the skew.
EXPERT_LOAD_CV = record("EXPERT_LOAD_CV", 2.5, "coefficient of variation of expert shares per step",
                        "MoE serving without EPLB: the router's skew across experts",
                        "fitted on TensorRT-LLM 1.0's Llama 4 Maverick TP8 run (data/fits.yaml "
                        "names the entry)")

#: Redundant experts of an EPLB deployment (copies of the hottest experts placed so that every
#: rank's mean load is equal): DeepSeek-V3 serves with 32 (DeepSeek-V3 Technical Report,
#: section 3.4, prefilling and decoding); each costs its weights' memory on the rank it lands on.
EPLB_REDUNDANT_EXPERTS = record("EPLB_REDUNDANT_EXPERTS", 32, "experts",
                                "MoE serving with EPLB: redundant expert copies",
                                "DeepSeek-V3 Technical Report, section 3.4 (prefilling and "
                                "decoding)")

#: Per-iteration engine overhead (CPU scheduling, sampling, CUDA-graph launch), the per-request
#: front end (HTTP or gRPC server, tokenizer, queue hand-off: it adds to TTFT and end-to-end
#: latency, not to the iterations) and the per-layer launch cost of engines without CUDA graphs:
#: each engine's profile in ``workloads/data/engines/`` gives them with their sources and the
#: calibration ids they were fitted on.
ENGINE_OVERHEAD_S: dict[str, Param] = E.params_of("overhead")
ENGINE_REQUEST_S: dict[str, Param] = E.params_of("request")
ENGINE_LAYER_S: dict[str, Param] = E.params_of("layer")
engine_key = E.engine_key



def rank_load_factor(tokens, experts: int, top_k: int, ep: int, cv: float | None = None):
    """Expected load of the busiest of ``ep`` expert-parallel ranks over the mean rank's.

    ``tokens`` tokens each pick ``top_k`` of ``experts`` experts, ``experts / ep`` of them on
    each rank. A rank's load is the sum of its experts' loads: balls into bins, binomial
    sampling noise (variance ``mu (1 - top_k / experts)``) plus the spread of the experts'
    popularity (coefficient of variation ``cv``, :data:`EXPERT_LOAD_CV`). The busiest of
    ``ep`` ranks sits ``z(ep)`` standard deviations above the mean, ``z`` the expected
    maximum of ``ep`` standard normals (Blom's approximation).

    >>> round(rank_load_factor(64, 256, 8, 8, cv=0.0), 3)    # 64 decode tokens, EP8
    1.176
    >>> round(rank_load_factor(8192, 256, 8, 8, cv=0.0), 3)  # a prefill chunk: balanced
    1.016
    >>> round(rank_load_factor(8192, 256, 8, 8), 3)          # with the fitted skew
    1.634
    >>> float(rank_load_factor(64, 256, 8, 1))
    1.0
    """
    t = np.asarray(tokens, dtype=np.float64)
    if ep <= 1 or experts <= 1:
        return np.ones_like(t) if t.ndim else 1.0
    c = EXPERT_LOAD_CV.value if cv is None else cv
    share = top_k / experts
    local = experts / ep
    mu_e = np.maximum(t, 1.0) * share
    mu_r = local * mu_e
    sd = np.sqrt(mu_r * (1.0 - share) + local * (c * mu_e) ** 2)
    from statistics import NormalDist     # here: its import (decimal, fractions) costs 5 ms
    z = NormalDist().inv_cdf((ep - 0.375) / (ep + 0.25))
    f = 1.0 + z * sd / mu_r
    f = np.minimum(f, float(ep))        # at most every choice lands on one rank
    return f if t.ndim else float(f)


def check_dtype(dtype: str, field: str, use: str = "weights") -> str:
    """The canonical name of a weight (``use="weights"``) or KV-cache (``"kv"``) format given
    by its name or an alias; a one-line error naming ``field`` and the formats otherwise.

    >>> check_dtype("W4A16_AWQ", "--precision"), check_dtype("fp8_e5m2", "--kv-dtype", "kv")
    ('int4-awq', 'fp8')
    """
    return P.lookup(str(dtype), use, field).name


def linear_s(gpu: C.GPUSpec, prec: str, T: int, n: float, k: float, *, wb: float,
             ab: float, rate: float = 1.0, count: int = 1,
             weight_count: float | None = None) -> tuple[float, float]:
    """(compute-limited, memory-limited) seconds of ``count`` serving GEMMs (T x k) @ (k x n)
    on ``gpu`` computing at tensor precision ``prec`` (times ``rate``): ``wb`` bytes per stored
    weight (with its scales), ``ab`` per input activation, a 16-bit output; ``weight_count``
    weight matrices read (default ``count``). The efficiency is the better of the shared
    model's tiled GEMM and a split-K kernel over every SM (:func:`skinny_eff`).

    >>> g = C.gpu_spec("H100-SXM")
    >>> c, m = linear_s(g, "bf16", 8192, 8192, 8192, wb=2, ab=2)
    >>> round(c * 1e3, 3), c > m
    (1.421, True)
    """
    if T <= 0:
        return 0.0, 0.0
    wc = count if weight_count is None else weight_count
    flops = 2.0 * T * n * k * count
    byts = n * k * wb * wc + T * (k * ab + n * 2.0) * count
    op = C.Op("linear", "gemm", flops, byts, int(T), int(max(n, 1)), int(max(k, 1)), count)
    eff = max(C.gemm_efficiency(op, gpu, prec), skinny_eff(gpu, prec, T, k))
    if prec == "fp4":
        eff *= FP4_EFF.value
    peak = gpu.peak_tflops(prec) * rate * 1e12
    return flops / (peak * max(eff, 1e-6)), byts / (gpu.hbm_GBps * 1e9 * C.HBM_EFF.value)


#: The full-wave efficiencies :func:`skinny_eff` has computed in the step model being built
#: (by GPU, precision and depth), or None outside a build: within one build the GPU and the
#: parameters are fixed.
_WAVES: ContextVar[dict | None] = ContextVar("_WAVES", default=None)


def skinny_eff(gpu: C.GPUSpec, prec: str, T: int, k: float) -> float:
    """Efficiency of a split-K / stream-K kernel, the kind engines run for a few rows: every
    SM busy (the shared model's GEMM of one full wave, same depth ``k``), rows padded to the
    MMA instruction's M (:data:`MMA_M`). The full wave does not depend on ``T``: a step
    model's build (:data:`_WAVES`) computes it once per GPU, precision and depth."""
    depth = int(max(k, 1))
    waves = _WAVES.get()
    key = (id(gpu), prec, depth)
    wave = None if waves is None else waves.get(key)
    if wave is None:
        tm, tn = C.TILE.get(gpu.arch, (128, 128))
        full = C.Op("wave", "gemm", 0.0, 0.0, tm, tn * max(gpu.sms, 1), depth)
        wave = C.gemm_efficiency(full, gpu, prec)
        if waves is not None:
            waves[key] = wave
    mm = MMA_M.get(gpu.arch, 16)
    return wave * T / (-(-T // mm) * mm)


def attention_flops_per_s(gpu: C.GPUSpec) -> float:
    """FLOP/s of a serving engine's attention core on ``gpu`` (16-bit, the generation's GEMM
    ceiling times :data:`~gpufabric.workloads.compute.ATTN_EFF`): prefill's query-key pairs
    and decode's reads of the cache are timed against it and against HBM.

    >>> round(attention_flops_per_s(C.gpu_spec("H100-SXM")) / 1e12)
    593
    """
    prec = "bf16" if gpu.tflops.get("bf16") else "fp16"
    eff = C.GEMM_EFF.get(gpu.arch, C.GEMM_EFF_DEFAULT).value * C.ATTN_EFF.value
    return gpu.peak_tflops(prec) * 1e12 * eff


@dataclass(frozen=True)
class ServeLayout:
    """How one serving instance splits the model over ``tp x pp`` GPUs.

    ``tp``: tensor parallelism; ``ep``: expert parallelism of MoE layers inside the TP group
    (experts split over ``ep`` GPUs, each expert over ``tp / ep``, as TensorRT-LLM's
    moe_ep x moe_tp = tp); ``dp_attention``: attention data-parallel ranks inside the TP group
    (each holds its own requests and KV cache; attention then runs on ``tp / dp_attention``
    GPUs); ``pp``: pipeline stages.
    """

    tp: int = 1
    ep: int = 1
    pp: int = 1
    dp_attention: int = 1

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    @property
    def attn_tp(self) -> int:
        return self.tp // self.dp_attention

    def check(self, model: ModelSpec, gpus_available: int | None = None,
              redundant: int = 0) -> None:
        for k in ("tp", "ep", "pp", "dp_attention"):
            v = getattr(self, k)
            if not isinstance(v, int) or v < 1:
                raise InputError(f"must be a positive integer, got {v!r}", field=f"--{k}")
        if self.tp % self.ep:
            raise InputError(f"--ep {self.ep} must divide --tp {self.tp} (experts are split "
                             "over the tensor-parallel group)", field="--ep")
        if self.tp % self.dp_attention:
            raise InputError(f"--dp-attention {self.dp_attention} must divide --tp {self.tp}",
                             field="--dp-attention")
        if self.ep > 1 and not model.is_moe:
            raise InputError(f"{model.name} is dense; --ep needs an MoE model", field="--ep")
        if model.is_moe and model.experts % self.ep and (model.experts + redundant) % self.ep:
            plus = f" (or the {model.experts + redundant} with EPLB's redundant ones)" \
                if redundant else ""
            raise InputError(f"--ep {self.ep} must divide the {model.experts} experts of "
                             f"{model.name}{plus}", field="--ep")
        if model.layers % self.pp:
            raise InputError(f"--pp {self.pp} must divide the {model.layers} layers of "
                             f"{model.name}", field="--pp")
        heads_ok = model.heads % self.attn_tp == 0
        if not heads_ok:
            raise InputError(f"attention TP {self.attn_tp} must divide the {model.heads} heads "
                             f"of {model.name}", field="--tp")
        if gpus_available is not None and self.gpus > gpus_available:
            raise InputError(f"tp x pp = {self.gpus} GPUs; the system has {gpus_available}",
                             field="--tp")


def _token_grid(max_tokens: int) -> np.ndarray:
    """0..64 one by one, then 80 geometric steps up to ``max_tokens``: sorted, each once (a
    set rather than ``np.unique``, whose first call imports ``numpy.ma``: 15 ms of a run)."""
    small = range(min(max_tokens, 64) + 1)
    big = np.geomspace(64, max(max_tokens, 65), 80).astype(np.int64).tolist()
    return np.array(sorted({*small, *big, max_tokens}), np.int64)


@dataclass
class Breakdown:
    """Seconds of one iteration by cause (summed over the layers of all pipeline stages)."""

    gemm_compute_s: float = 0.0    # linear layers limited by tensor-core FLOPs
    weight_read_s: float = 0.0     # linear layers limited by reading weights from HBM
    attention_s: float = 0.0       # attention cores (prefill FLOPs, decode KV reads)
    elementwise_s: float = 0.0     # norms, residual adds, activations: passes over HBM
    tp_comm_s: float = 0.0         # tensor-parallel all-reduces
    ep_comm_s: float = 0.0         # expert-parallel all-to-alls
    pp_comm_s: float = 0.0         # pipeline sends
    overhead_s: float = 0.0        # engine per-iteration overhead

    @property
    def total_s(self) -> float:
        return sum(asdict(self).values())


class StepModel:
    """Iteration time of one serving instance: a callable ``(p_tok, p_attn, p_ctx, d_n, d_ctx)
    -> seconds`` for :func:`gpufabric.workloads.inference.simulator.simulate`.

    Parameters
    ----------
    model : str or ModelSpec
        A built-in model name or a model file.
    topo : Topology
        The system the instance runs on (its first ``tp x pp`` GPUs).
    layout : ServeLayout
    precision : str
        Weight format: a name or alias of :mod:`~gpufabric.workloads.inference.precisions`
        (fp16, bf16, fp8, fp4, int4, int4-awq, int4-gptq-g128, int8-weight-only, ...).
    kv_dtype : str, optional
        KV cache format (default: fp8 with fp8 or fp4 weights, else bf16).
    engine : str
        Serving engine: a profile name or alias, or a profile file
        (:mod:`~gpufabric.workloads.inference.engines`).
    max_tokens : int
        The token budget of an iteration (sizes the activation reserve and the tables).
    block_size : int, optional
        Tokens per KV block (default: the engine's).
    mem_utilization : float, optional
        The engine's memory fraction (default: the engine's ``gpu_memory_utilization``).
    """

    def __init__(self, model: str | ModelSpec, topo: Topology, layout: ServeLayout, *,
                 precision: str = "bf16", kv_dtype: str | None = None, engine: str = "vllm",
                 max_tokens: int = 8192, block_size: int | None = None,
                 mem_utilization: float | None = None, eplb: bool = False):
        self.model = load_model(model)
        m = self.model
        if not m.is_transformer or m.arch == "encoder":
            raise InputError(f"{m.name} is a {m.arch} model; serving needs a decoder "
                             "transformer", field="MODEL")
        self.topo = topo
        self.layout = layout
        # EPLB balances the experts' mean loads over the ranks: the popularity skew is gone,
        # the sampling noise of each step stays
        self.eplb = bool(eplb) and m.is_moe and layout.ep > 1
        self.load_cv = 0.0 if self.eplb else EXPERT_LOAD_CV.value
        gpus = topo.gpus()
        if not gpus:
            raise InputError("the system has no GPUs", field="SYSTEM")
        per, domains = topo.scale_up()
        # expert slots: an EP degree that does not divide the experts places EPLB's
        # redundant copies too (DeepSeek's EP144 decode: 288 slots, 2 per GPU)
        red = EPLB_REDUNDANT_EXPERTS.value if self.eplb else 0
        layout.check(m, len(gpus) if "nodes" not in topo.meta else per * domains, red)
        self.expert_slots = m.experts if not m.is_moe or m.experts % layout.ep == 0 \
            else m.experts + red
        self.gpu = C.gpu_spec(gpus[0].model)
        self.format = P.lookup(str(precision), "weights", "--precision")
        self.precision = self.format.name
        kvd = kv_dtype or P.default_kv(self.precision)
        self.kv_format = P.lookup(str(kvd), "kv", "--kv-dtype")
        self.kv_dtype = self.kv_format.name
        comp = self._compute_precision()
        self.compute_prec = comp.prec
        self.compute_rate = comp.rate
        self.profile = E.profile(engine)
        self.engine = self.profile.name
        self.overhead_s = self.profile.overhead_s + self.profile.layer_s * self.model.layers
        self.max_tokens = int(max_tokens)
        self.block_size = int(block_size or self.profile.block_size)
        # bytes per weight with its scales (per-channel scales over the GEMM depth, the hidden
        # size) and per KV element (per-head scales over head_dim)
        self.wb = self.format.bytes_per_value(k=m.hidden)
        self.kvb = self.kv_format.bytes_per_value(head_dim=m.head_dim or None)
        self.ab = comp.act_bytes                           # GEMM input activations
        self.mem_util = self.profile.mem_utilization if mem_utilization is None \
            else mem_utilization
        self._memory()
        #: GEMM seconds over the tables by where they came from: ``measured`` (a kernel
        #: database, :mod:`gpufabric.kerneldb.timing`) or ``model`` (gpufabric's roofline)
        self.gemm_sources: dict[str, float] = {}
        self._tables()

    # -- set-up --------------------------------------------------------------------------------
    def _per_node(self) -> int:
        """GPUs per NVLink domain (a server, or a rack-scale domain of trays)."""
        return self.topo.scale_up()[0]

    def _compute_precision(self) -> P.Compute:
        for c in self.format.compute:
            if self.gpu.tflops.get(c.prec):
                return c
        raise InputError(f"{self.gpu.name} has no tensor rate for {self.precision} weights",
                         field="--precision")

    def _memory(self) -> None:
        m, lay = self.model, self.layout
        # experts are split over the whole TP group (EP x expert-TP), the memory model counts
        # them split by its ep alone
        self.weights_bytes = M.weight_bytes(m, tp=lay.tp, pp=lay.pp,
                                            ep=lay.tp if m.is_moe else lay.ep,
                                            elem_bytes=self.wb)
        if self.eplb:
            g = 3 if m.gated else 2
            per_expert = g * m.hidden * m.expert_ffn * self.wb / (lay.tp // lay.ep) / lay.pp
            self.weights_bytes += (math.ceil(EPLB_REDUNDANT_EXPERTS.value / lay.ep) * m.moe_layers
                                   * per_expert)
        # KV per token on one GPU: a pipeline stage holds its layers, attention TP its heads
        self.kv_bytes_per_token = M.kv_cache_bytes_per_token(
            m, tp=lay.attn_tp, elem_bytes=self.kvb) / lay.pp
        # an "80 GB" part has 80 GiB (nvidia-smi: 81,559 MiB on H100), as memory.capacity_GiB
        cap = self.gpu.memory_GB * M.GiB
        # activations of a full token budget: the widest intermediate, in 16 bit, plus logits
        width = max(m.ffn // lay.tp, m.expert_ffn * max(m.top_k, 1), m.hidden) * 2
        act = self.max_tokens * (width * 2 * 2 + 4 * m.hidden * 2)
        act += min(self.max_tokens, 256) * (m.vocab // lay.tp) * 4
        self.activation_bytes = float(act)
        # CUDA context, NCCL and cuBLAS buffers: what vLLM counts as non-torch memory
        self.reserve_bytes = M.reserve_GiB() * M.GiB
        taken = self.weights_bytes + act + self.reserve_bytes
        if self.profile.mem_of == "free":
            # a fraction of what the weights and activations leave (kv_cache_free_gpu_mem_fraction)
            room = cap - self.weights_bytes - act - self.reserve_bytes
            usable = room * self.mem_util
            budget = (f"kv_cache_free_gpu_mem_fraction {self.mem_util:g} of the "
                      f"{room / M.GiB:.1f} GiB left")
        else:   # a fraction of the whole GPU (vLLM gpu_memory_utilization)
            room = cap * self.mem_util
            usable = room - taken
            budget = (f"gpu_memory_utilization {self.mem_util:g} x {cap / M.GiB:.1f} GiB = "
                      f"{room / M.GiB:.1f} GiB")
        self.mem_budget_bytes = float(room)
        self.kv_bytes_free = usable
        self.kv_blocks = int(usable // (self.kv_bytes_per_token * self.block_size)) \
            if usable > 0 else 0
        if self.kv_blocks < 1:
            raise InputError(
                f"{m.name} in {self.precision} does not fit on {lay.gpus} {self.gpu.name} "
                f"({self.engine}, {budget}): per GPU the weights take "
                f"{self.weights_bytes / M.GiB:.1f} GiB, activations and workspace "
                f"{act / M.GiB:.1f} GiB, non-torch memory {self.reserve_bytes / M.GiB:.1f} "
                f"GiB, leaving {usable / M.GiB:.1f} GiB for a KV cache of "
                f"{self.kv_bytes_per_token / 1024:.1f} KiB per token (one block of "
                f"{self.block_size} tokens: {self.kv_bytes_per_token * self.block_size / 2**20:.2f}"
                " MiB); use more GPUs (--tp/--pp/--ep) or a smaller --precision",
                field="MODEL")

    def _linear(self, name: str, T: int, n: float, k: float) -> tuple[float, float]:
        """(compute-limited, memory-limited) seconds of one GEMM (T x k) @ (k x n):
        gpufabric's roofline, or its measured time where a measured timing source is in use
        and covers it (:mod:`gpufabric.kerneldb.timing`)."""
        c, mem = linear_s(self.gpu, self.compute_prec, T, n, k, wb=self.wb, ab=self.ab,
                          rate=self.compute_rate)
        src, t = kerneltimes.current(), None
        if src is not None and self.compute_rate == 1:
            t = src.gemm_s(self.gpu.name, self.engine, self.compute_prec, T, n, k)
        return self._timed([(c, mem)], t)[0]

    def _timed(self, parts: list[tuple[float, float]],
               measured_s: float | None) -> list[tuple[float, float]]:
        """``parts`` (the roofline's (compute-limited, memory-limited) seconds of a kernel),
        or the ``measured_s`` seconds of the same kernel split in the roofline's proportions
        so the bottleneck keeps its name; tallied in :attr:`gemm_sources` by source."""
        model_s = sum(max(c, b) for c, b in parts)
        sources = self.gemm_sources
        if measured_s is None or model_s <= 0:
            sources["model"] = sources.get("model", 0.0) + model_s
            return parts
        sources["measured"] = sources.get("measured", 0.0) + measured_s
        return [(c * measured_s / model_s, b * measured_s / model_s) for c, b in parts]

    def _layer_gemms(self, T: int, moe: bool) -> tuple[float, float]:
        """(time, of which memory-bound) of one block's linear layers for ``T`` tokens."""
        m, lay = self.model, self.layout
        a = m.heads // lay.attn_tp
        parts: list[tuple[float, float]] = []
        if m.attention == "mla":
            qd = m.q_head_dim
            if m.q_lora_rank:
                parts.append(self._linear("q_down", T, m.q_lora_rank, m.hidden))
                parts.append(self._linear("q_up", T, a * qd, m.q_lora_rank))
            else:
                parts.append(self._linear("q_proj", T, a * qd, m.hidden))
            parts.append(self._linear("kv_down", T, m.kv_lora_rank + m.qk_rope_head_dim,
                                      m.hidden))
            parts.append(self._linear("kv_up", T, a * (m.qk_nope_head_dim + m.v_head_dim),
                                      m.kv_lora_rank))
            parts.append(self._linear("attn_out", T, m.hidden, a * m.v_head_dim))
        else:
            kvh = max(m.kv_heads // lay.attn_tp, 1)
            parts.append(self._linear("qkv", T, (a + 2 * kvh) * m.head_dim, m.hidden))
            parts.append(self._linear("attn_out", T, m.hidden, a * m.head_dim))
        g = 2 if m.gated else 1
        if moe:
            E, k = m.experts, m.top_k
            moe_tp = lay.tp // lay.ep
            Tm = T * lay.dp_attention           # tokens from every attention-DP rank
            S = getattr(self, "expert_slots", E)   # experts and redundant copies placed
            local = S // lay.ep
            # the slowest EP rank's tokens per expert (routing imbalance)
            per_expert = Tm * k / S * rank_load_factor(Tm, E, k, lay.ep, self.load_cv)
            touched = local * (1.0 - (1.0 - k / E) ** Tm)
            fe = m.expert_ffn / moe_tp
            parts.append(self._linear("router", Tm, E, m.hidden))
            parts.extend(self._experts(per_expert, fe, g, local, touched))
            if m.shared_experts:
                fs = m.expert_ffn * m.shared_experts / lay.tp
                parts.append(self._linear("shared_up", Tm, fs * g, m.hidden))
                parts.append(self._linear("shared_down", Tm, m.hidden, fs))
        else:
            f = m.ffn / lay.tp
            Tm = T * lay.dp_attention if lay.dp_attention > 1 else T
            parts.append(self._linear("mlp_up", Tm, f * g, m.hidden))
            parts.append(self._linear("mlp_down", Tm, m.hidden, f))
        tot = sum(max(c, b) for c, b in parts)
        mem = sum(b for c, b in parts if b >= c)
        return tot, mem

    def _experts(self, per_expert: float, fe: float, g: int, local: int,
                 touched: float) -> list[tuple[float, float]]:
        """The routed experts' up and down GEMMs of one MoE layer on the busiest rank, whose
        experts get ``per_expert`` rows each: gpufabric's roofline, or the measured MoE
        kernel of the same shape and layout where a measured timing source covers it, at the
        tokens that give each expert as many rows balanced, split in the roofline's
        proportions."""
        m, lay = self.model, self.layout
        rows = max(math.ceil(per_expert), 1)
        parts = [linear_s(self.gpu, self.compute_prec, rows, n, k, wb=self.wb, ab=self.ab,
                          rate=self.compute_rate, count=local, weight_count=touched)
                 for n, k in ((fe * g, m.hidden), (m.hidden, fe))]
        src, t = kerneltimes.current(), None
        if (src is not None and self.compute_rate == 1
                and getattr(self, "expert_slots", m.experts) == m.experts):
            busiest = per_expert * m.experts / m.top_k
            shape = kerneltimes.MoeShape(m.hidden, m.expert_ffn, m.top_k, m.experts,
                                         lay.tp // lay.ep, lay.ep, m.gated)
            t = src.moe_s(self.gpu.name, self.engine, self.compute_prec, busiest, shape)
        return self._timed(parts, t)

    @property
    def elementwise_bytes_per_token(self) -> float:
        """Bytes one token of the batch moves through HBM in the element-wise steps of all
        layers on one GPU (:data:`gpufabric.workloads.compute.SERVE_PASSES`, 16-bit): the two
        fused residual-add + RMSNorm kernels over the hidden state (every attention-TP rank
        holds it whole) and the activation over the MLP's width on this GPU (its share of the
        routed and shared experts' in an MoE layer).

        >>> from gpufabric.topology.build import from_spec
        >>> m = StepModel("llama3-8b", from_spec({"gpu": "H100-SXM", "gpus_per_node": 1}),
        ...               ServeLayout())
        >>> m.elementwise_bytes_per_token    # 32 x (2 x 4 x 4096 + 3 x 14336) x 2 B
        4849664.0
        """
        m, lay = self.model, self.layout
        ps = C.SERVE_PASSES
        hidden = ps["norms"] * ps["add_norm"] * m.hidden
        act = ps["act_gated" if m.gated else "act"]
        mlp_tokens = lay.dp_attention        # MLP tokens per attention token on this GPU
        dense = act * m.ffn / lay.tp * mlp_tokens
        moe = act * m.expert_ffn * (m.top_k + m.shared_experts) / lay.tp * mlp_tokens \
            if m.moe_layers else 0.0
        return 2.0 * (m.layers * hidden + (m.layers - m.moe_layers) * dense
                      + m.moe_layers * moe)

    def _comm_s(self, op: str, ranks: int, size_bytes: np.ndarray) -> np.ndarray:
        if ranks <= 1:
            return np.zeros_like(size_bytes, dtype=np.float64)
        from gpufabric import collectives     # a one-GPU instance runs without the network
        per_node = min(ranks, self._per_node())
        out = np.empty(size_bytes.shape, np.float64)
        for i, s in enumerate(size_bytes.tolist()):
            out[i] = collectives.predict(self.topo, op, int(max(s, 1)), ranks,
                                         per_node=per_node).time_us * 1e-6 if s > 0 else 0.0
        return out

    def _tables(self) -> None:
        m, lay = self.model, self.layout
        grid = _token_grid(self.max_tokens)
        self._grid = grid.astype(np.float64)
        n_moe = m.moe_layers
        n_dense = m.layers - n_moe
        token = _WAVES.set({})      # skinny_eff's full waves, for this build only
        try:
            dense = [self._layer_gemms(int(T), False) for T in grid]
            moe = ([self._layer_gemms(int(T), True) for T in grid] if n_moe
                   else [(0.0, 0.0)] * len(grid))
            # logits for the sampled tokens, over the vocabulary split by TP
            lg = [self._linear("logits", int(T), m.vocab / lay.tp, m.hidden) for T in grid]
        finally:
            _WAVES.reset(token)
        self._gemm = np.array([n_dense * d[0] + n_moe * e[0]
                               for d, e in zip(dense, moe, strict=True)])
        self._gemm_mem = np.array([n_dense * d[1] + n_moe * e[1]
                                   for d, e in zip(dense, moe, strict=True)])
        self._logit = np.array([max(c, b) for c, b in lg])
        self._logit_mem = np.array([b if b >= c else 0.0 for c, b in lg])
        # communication per layer, per token count
        act = grid * m.hidden * 2.0
        tp_ar = np.zeros(grid.shape)
        mlp_ranks = lay.tp
        # a parallel block sums attention and MLP before one reduction over the same group
        merged = (m.parallel_block and not n_moe and lay.attn_tp == mlp_ranks
                  and lay.dp_attention == 1)
        if lay.attn_tp > 1 and not merged:
            tp_ar += m.layers * self._comm_s("all_reduce", lay.attn_tp, act)
        Tm = act * lay.dp_attention
        if n_dense and mlp_ranks > 1:
            tp_ar += n_dense * self._comm_s("all_reduce", mlp_ranks, Tm)
        ep_a2a = np.zeros(grid.shape)
        if n_moe:
            if lay.ep > 1:
                # the busiest rank's messages set the all-to-all's time
                f = rank_load_factor(grid * lay.dp_attention, m.experts, m.top_k, lay.ep,
                                     self.load_cv)
                disp = grid * m.top_k * m.hidden * self.ab * f
                comb = grid * m.top_k * m.hidden * 2.0 * f
                ep_a2a += n_moe * (self._comm_s("all_to_all", lay.ep, disp)
                                   + self._comm_s("all_to_all", lay.ep, comb))
            if lay.tp // lay.ep > 1:
                tp_ar += n_moe * self._comm_s("all_reduce", lay.tp, Tm)
        self._tp_comm = tp_ar
        self._ep_comm = ep_a2a
        self._pp_comm = np.zeros(grid.shape)
        if lay.pp > 1:
            self._pp_comm = (lay.pp - 1) * self._comm_s("send_recv", 2, act)
        # attention: FLOPs per query-key pair and bytes per cached token, one GPU, all layers
        a = m.heads // lay.attn_tp
        if m.attention == "mla":
            self._pre_flops_pair = 2.0 * a * (m.q_head_dim + m.v_head_dim)
            self._dec_flops_tok = 2.0 * a * (2 * m.kv_lora_rank + m.qk_rope_head_dim)
        else:
            self._pre_flops_pair = self._dec_flops_tok = 2.0 * a * 2 * m.head_dim
        self._kv_layer_bytes = self.kv_bytes_per_token * lay.pp / m.layers
        self._attn_flops_s = 1.0 / attention_flops_per_s(self.gpu)
        self._hbm_s = 1.0 / (self.gpu.hbm_GBps * 1e9 * C.HBM_EFF.value)
        self._elem = self._grid * self.elementwise_bytes_per_token * self._hbm_s

    # -- the step cost -------------------------------------------------------------------------
    def parts(self, p_tok, p_attn, p_ctx, d_n, d_ctx) -> dict[str, np.ndarray]:
        """Seconds of one iteration by cause (arrays broadcast like the arguments)."""
        m = self.model
        T = np.asarray(p_tok, dtype=np.float64) + np.asarray(d_n, dtype=np.float64)
        g = self._grid
        gemm = np.interp(T, g, self._gemm)
        gemm_mem = np.interp(T, g, self._gemm_mem)
        n_logit = np.asarray(d_n, dtype=np.float64) + (np.asarray(p_tok) > 0)
        logits = np.interp(n_logit, g, self._logit)
        logits_mem = np.interp(n_logit, g, self._logit_mem)
        L = m.layers
        pre = L * np.maximum(np.asarray(p_attn, dtype=np.float64) * self._pre_flops_pair
                             * self._attn_flops_s,
                             np.asarray(p_ctx, dtype=np.float64) * self._kv_layer_bytes
                             * self._hbm_s)
        dec = L * np.maximum(np.asarray(d_ctx, dtype=np.float64) * self._dec_flops_tok
                             * self._attn_flops_s,
                             np.asarray(d_ctx, dtype=np.float64) * self._kv_layer_bytes
                             * self._hbm_s)
        return {"gemm_compute_s": gemm - gemm_mem + logits - logits_mem,
                "weight_read_s": gemm_mem + logits_mem,
                "attention_s": pre + dec, "elementwise_s": np.interp(T, g, self._elem),
                "tp_comm_s": np.interp(T, g, self._tp_comm),
                "ep_comm_s": np.interp(T, g, self._ep_comm),
                "pp_comm_s": np.interp(T, g, self._pp_comm),
                "overhead_s": np.full(np.shape(T), self.overhead_s)}

    def _fuse(self) -> None:
        """One table of everything that depends on the batch's token count, one of the logits,
        and the attention coefficients: the same sum as :meth:`parts`, fewer operations."""
        m = self.model
        self._fixed = (self._gemm + self._elem + self._tp_comm + self._ep_comm + self._pp_comm
                       + self.overhead_s)
        self._grid_l = self._grid.tolist()
        self._fixed_l = self._fixed.tolist()
        self._logit_l = self._logit.tolist()
        L = m.layers
        self._c_pair = L * self._pre_flops_pair * self._attn_flops_s
        self._c_pctx = L * self._kv_layer_bytes * self._hbm_s
        self._c_dctx = L * max(self._dec_flops_tok * self._attn_flops_s,
                               self._kv_layer_bytes * self._hbm_s)

    def _interp(self, x: float, ys: list[float]) -> float:
        g = self._grid_l
        if x <= 0:
            return ys[0]
        if x >= g[-1]:    # the table spans the token budget; as np.interp, hold the end
            return ys[-1]
        i = bisect.bisect_right(g, x)
        x0, x1 = g[i - 1], g[i]
        return ys[i - 1] + (ys[i] - ys[i - 1]) * (x - x0) / (x1 - x0)

    def __call__(self, p_tok, p_attn, p_ctx, d_n, d_ctx):
        if "_fixed" not in self.__dict__:
            self._fuse()
        if (isinstance(d_ctx, (int, float)) and isinstance(p_tok, (int, float))
                and isinstance(d_n, (int, float))):
            T = float(p_tok) + float(d_n)
            nl = float(d_n) + (1.0 if p_tok > 0 else 0.0)
            return (self._interp(T, self._fixed_l) + self._interp(nl, self._logit_l)
                    + max(self._c_pair * float(p_attn), self._c_pctx * float(p_ctx))
                    + self._c_dctx * float(d_ctx))
        T = np.asarray(p_tok, dtype=np.float64) + np.asarray(d_n, dtype=np.float64)
        nl = np.asarray(d_n, dtype=np.float64) + (np.asarray(p_tok) > 0)
        return (np.interp(T, self._grid, self._fixed) + np.interp(nl, self._grid, self._logit)
                + np.maximum(self._c_pair * np.asarray(p_attn, dtype=np.float64),
                             self._c_pctx * np.asarray(p_ctx, dtype=np.float64))
                + self._c_dctx * np.asarray(d_ctx, dtype=np.float64))

    def decode_line(self, d_n: int) -> tuple[float, float]:
        """A decode-only iteration of ``d_n`` requests reading ``d_ctx`` KV tokens costs
        ``a + b * d_ctx`` seconds: (a, b), so the simulator sums a run of them in closed form."""
        if "_fixed" not in self.__dict__:
            self._fuse()
        n = float(d_n)
        return self._interp(n, self._fixed_l) + self._interp(n, self._logit_l), self._c_dctx

    def with_shared_links(self, tp_s_per_token: float, ep_s_per_token: float) -> StepModel:
        """A copy whose collectives take this much longer per token of the batch: their links
        carry other traffic part of the time (a disaggregated decode pool receiving KV caches).

        >>> from gpufabric.topology.build import from_spec
        >>> m = StepModel("llama3-8b", from_spec({"gpu": "H100-SXM", "gpus_per_node": 8}),
        ...               ServeLayout(tp=2))
        >>> s = m.with_shared_links(1e-6, 0.0)
        >>> round((s(0, 0, 0, 100, 100) - m(0, 0, 0, 100, 100)) * 1e6, 6)
        100.0
        """
        c = copy.copy(self)
        c._tp_comm = self._tp_comm + tp_s_per_token * self._grid
        c._ep_comm = self._ep_comm + ep_s_per_token * self._grid
        for k in ("_fixed", "_fixed_l", "_grid_l", "_logit_l"):
            c.__dict__.pop(k, None)
        return c

    def breakdown(self, p_tok: float, p_attn: float, p_ctx: float, d_n: float,
                  d_ctx: float) -> Breakdown:
        """One iteration's :class:`Breakdown`."""
        return Breakdown(**{k: float(v) for k, v in
                            self.parts(p_tok, p_attn, p_ctx, d_n, d_ctx).items()})

    def memory(self) -> dict:
        """Memory per GPU (GB): weights, activations, reserve, KV cache; blocks and tokens."""
        return {"gpu_GB": self.gpu.memory_GB, "usable_GB": self.mem_budget_bytes / 1e9,
                "memory_utilization": self.mem_util, "utilization_of": self.profile.mem_of,
                "weights_GB": self.weights_bytes / 1e9,
                "activations_GB": self.activation_bytes / 1e9,
                "reserve_GB": self.reserve_bytes / 1e9, "kv_cache_GB": self.kv_bytes_free / 1e9,
                "kv_bytes_per_token": self.kv_bytes_per_token, "kv_blocks": self.kv_blocks,
                "kv_tokens": self.kv_blocks * self.block_size}

    def max_concurrency(self, isl: int, osl: int) -> int:
        """Requests of ``isl + osl`` tokens the KV cache holds at once.

        >>> from gpufabric.topology.build import from_spec
        >>> m = StepModel("llama3-8b", from_spec({"gpu": "H100-SXM", "gpus_per_node": 1}),
        ...               ServeLayout())
        >>> m.max_concurrency(1000, 1000)
        218
        """
        per = -(-(isl + osl) // self.block_size)
        return int(self.kv_blocks // per)

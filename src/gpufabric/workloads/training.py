"""Step time of a parallel training layout on a real topology.

Per micro-batch and pipeline stage: forward and backward compute from the compute model
(:mod:`gpufabric.workloads.compute`), plus the communication on the critical path -- tensor
parallel all-reduce (or reduce-scatter + all-gather with sequence parallelism), context-parallel
K/V exchange (hidden under the attention core where it can be), expert-parallel all-to-all
(dispatch and combine). Per step: the pipeline schedule (1F1B, or interleaved with ``vpp``
virtual stages: the bubble is ``(pp-1)/vpp`` micro-batch times), pipeline send/recv, the
data-parallel gradient reduction (all-reduce, or reduce-scatter + parameter all-gather with a
distributed optimizer / ZeRO), ZeRO-3/FSDP parameter all-gathers, and the optimizer step.

Every collective is timed by :func:`gpufabric.collectives.predict` on the real groups: each
group's ranks, how many sit on one node and how many such groups run at once on the same nodes
(``per_node`` / ``concurrent``), from Megatron's rank order. Overlap is what frameworks do:
gradient reduction under the backward pass of the last micro-batch, parameter gathers ahead of
use (layer by layer for ZeRO-3/FSDP); what does not fit under compute stays exposed.

Examples
--------
>>> from gpufabric.workloads.parallel import Parallel
>>> r = predict_step("llama3-8b", "gpu=H100-SXM,gpus_per_node=8,nodes=2,nic=ib-ndr",
...                  Parallel(tp=1, dp=16, micro_batch=1, global_batch=64, zero=1), 4096)
>>> r.fits, r.bottleneck.split(":")[0]
(True, 'compute')
>>> round(r.mfu, 2)
0.63
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from gpufabric import collectives as C
from gpufabric.collectives import versions
from gpufabric import params as _params
from gpufabric.errors import InputError
from gpufabric.topology.model import Topology
from gpufabric.workloads.compute import (
    ACT_BYTES, GPUSpec, check_precision, gpu_spec, head_ops, layer_ops, op_time_s, optimizer_op,
    Split, power_capped, record,
)
from gpufabric.workloads.memory import (
    MemoryBreakdown, check_fits, expert_shard, fit_hint, params_per_gpu, stage_layers,
    training_memory,
)
from gpufabric.workloads.models import ModelSpec, load_model
from gpufabric.workloads.parallel import Group, Parallel

#: backward / forward time of a GEMM (data and weight gradients: two GEMMs of the same size)
BWD_GEMM = record("BWD_GEMM", 2.0, "x forward time", "training: backward of a GEMM",
                  "physical: the data and the weight gradient, two GEMMs of the forward's "
                  "size")
#: backward / forward time of a flash-attention core: 2.5x the FLOPs (five matmuls against two:
#: the scores are recomputed, FA2 paper Sec. 3.1) at 0.86 of the forward's FLOP rate
#: (FlashAttention-3 paper, arXiv 2407.08608, Fig. 5, H100 SXM5, head dim 128, 8k tokens:
#: backward / forward 318/370 for FA2, 518/600 for cuDNN, 559/646 for FA3, 0.86 for all three)
BWD_ATTN = record("BWD_ATTN", 2.9, "x forward time",
                  "training: backward of a flash-attention core",
                  "FlashAttention-2 paper (Dao 2023), Sec. 3.1: 2.5x the forward's FLOPs; "
                  "FlashAttention-3 paper Fig. 5: the backward runs at 0.86 of the forward's "
                  "rate on H100 for FA2, cuDNN and FA3 alike (2.5 / 0.86); not fitted")
#: per-layer framework cost per micro-batch pass (Python, hooks, launches not in the op list)
LAYER_OVERHEAD_US = record("LAYER_OVERHEAD_US", 40.0, "us per block per pass",
                           "training: framework cost per transformer block and pass",
                           "fitted on the Megatron-LM 2021 A100 and Megatron-Core H100 GPT rows "
                           "(the small models weigh it), with the 2021 runs' unfused attention "
                           "modelled (data/fits.yaml names the entries)")
#: fraction of a backward pass under which the data-parallel gradient reduction hides
DP_OVERLAP = record("DP_OVERLAP", 0.9, "fraction of the last micro-batch's backward",
                    "training: data-parallel gradient reduction under the backward",
                    "physical: buckets "
                    "start reducing once filled; the last bucket cannot overlap")
#: fraction of the TP collective time that stays exposed with TP comm overlap (userbuffers /
#: async TP); without it all of it is exposed
TP_OVERLAP_EXPOSED = record("TP_OVERLAP_EXPOSED", 0.4, "fraction",
                            "training: TP collectives with TP comm overlap",
                            "prior: Megatron-Core/TE tp-comm-overlap and "
                            "torch AsyncTP hide ~half to two thirds of TP communication")

#: bytes per parameter the optimizer step moves each way over the host link with optimizer-state
#: offload: it reads the FP32 master weight and both Adam moments from host memory and writes
#: them back (memory.OPT_B); the two directions run at once on a full-duplex PCIe / C2C link
OFFLOAD_B = record("OFFLOAD_B", 12, "B per parameter each way over the host link",
                   "training: optimizer step with optimizer-state offload",
                   "physical: FP32 master weight + two FP32 Adam moments (4+4+4 B, the "
                   "Megatron-LM distributed-optimizer count) read from and written back to host "
                   "memory per step, as Megatron-Core --optimizer-cpu-offload and ZeRO-Offload "
                   "(Ren et al. 2021, arXiv 2101.06840) keep them in host memory; not fitted")


#: HBM passes over a CNN's activations per step: written in forward, read in backward, the
#: gradient written and read, batch-norm statistics read once more
CNN_ACT_PASSES = record("CNN_ACT_PASSES", 5, "HBM passes per step",
                        "training CNNs: traffic over the activations",
                        "physical: written in forward, read in backward, the gradient written "
                        "and read, batch-norm statistics read once more")


@dataclass
class StepResult:
    """One predicted training step (all times in seconds, per step)."""

    model: str
    system: str
    gpu: str
    gpus: int
    parallel: dict[str, Any]
    seq_len: int
    precision: str
    step_time_s: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    tflops_per_gpu: float
    mfu: float
    memory_GiB_per_gpu: float
    fits: bool
    breakdown_s: dict[str, float]
    comm_s: dict[str, float]            # each kind's total collective time (exposed or not)
    groups: dict[str, dict[str, int]]
    memory: dict[str, Any]
    bottleneck: str
    model_flops_per_step: float
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def model_flops_per_token(m: ModelSpec, seq_len: int) -> float:
    """Training FLOPs per token as MFU counts them: 6 x active parameters (less the input
    embedding lookup) + attention, 6 x layers x seq x (q/k + v width) x heads, halved for
    causal decoders.

    >>> round(model_flops_per_token(load_model("llama3-8b"), 8192) / 1e9, 1)
    51.5
    """
    if not m.is_transformer:
        return 3 * m.flops_per_sample / max(seq_len, 1)
    emb_in = m.vocab * m.hidden + m.positions * m.hidden
    dense = 6 * (m.active_params() - emb_in)
    attn = 6 * m.layers * seq_len * m.heads * (m.q_head_dim + m.v_dim) / 2
    if m.arch == "encoder":        # bidirectional: every query sees every key
        attn *= 2
    return dense + attn


#: the NCCL algorithm and protocol a job forces (``NCCL_ALGO`` / ``NCCL_PROTO``) for the
#: collectives that take one (all-reduce, all-gather, reduce-scatter); set per predict_step call
_NCCL: ContextVar[tuple[str | None, str | None]] = ContextVar("_NCCL", default=(None, None))
_NCCL_OPS = ("all_reduce", "all_gather", "reduce_scatter")


#: collective times already predicted on one topology, when a caller (the layout search) sets
#: a dict here for the duration of many predict_step calls on the same system (keyed on the
#: parameters in use as well)
COLL_CACHE: ContextVar[dict | None] = ContextVar("COLL_CACHE", default=None)


def _coll_time(topo: Topology, op: str, size: float, g: Group) -> float:
    if g.ranks <= 1 or size <= 0:
        return 0.0
    algo, proto = _NCCL.get() if op in _NCCL_OPS else (None, None)
    memo = COLL_CACHE.get()
    key = (_params.current().key, versions.release(), op, int(size), g, algo, proto)
    if memo is not None and key in memo:
        return memo[key]
    p = C.predict(topo, op, int(size), g.ranks, algo, proto, per_node=g.per_node,
                  concurrent=g.concurrent)
    if memo is not None:
        memo[key] = p.time_us * 1e-6
    return p.time_us * 1e-6


#: selective-recomputation policies: ``attention`` recomputes the attention core (Megatron,
#: Korthikanti et al. 2022); ``op`` is torchtitan's op-level policy: inside each checkpointed
#: block it saves the outputs of every other matmul (1st, 3rd, ...) and of the attention
#: kernel, and recomputes everything else in the backward pass -- the element-wise work and
#: every second matmul (in a Llama block, in call order wq wk wv wo w1 w3 w2: wk, wo and w3)
#: (torchtitan ``selective_ac_option = 'op'``, the default of its Llama train configs)
SAC_POLICIES = ("attention", "op")

#: Megatron-Core's ``--recompute-modules`` (selective recomputation of named submodules) -> the
#: ops of :func:`gpufabric.workloads.compute.layer_ops` each recomputes in the backward pass
#: (megatron/core/transformer/transformer_config.py, ``recompute_modules``)
RECOMPUTE_MODULES: dict[str, tuple[str, ...]] = {
    "core_attn": ("attn_core",),
    "mlp": ("mlp_up", "mlp_act", "mlp_down_cast", "mlp_down"),
    "moe_act": ("expert_act",),
    "moe": ("router", "expert_up", "expert_down", "expert_act", "permute", "expert_cast",
            "shared_up", "shared_down"),
    "shared_experts": ("shared_up", "shared_down"),
    "mla_up_proj": ("q_up", "kv_up"),
    "layernorm": ("norm1", "residual_norm2"),
}


def _matmul_parts(m: ModelSpec, op_names: list[str], tp: int) -> list[tuple[int, float]]:
    """The block's matmuls as the framework calls them, in forward order: (index into the op
    list, share of that op's FLOPs). Fused GEMMs of the op list split back into the separate
    projections a PyTorch module runs (q, k, v; the gated MLP's w1 and w3)."""
    parts: list[tuple[int, float]] = []
    for j, name in enumerate(op_names):
        if name in ("qkv", "qkv_mlp_up"):
            a = max(m.heads // tp, 1)
            kvh = max(m.kv_heads // tp, 1)
            # widths: q, k, v (and a parallel block's fused MLP input: w1, w3)
            w = [a * m.head_dim, kvh * m.head_dim, kvh * m.head_dim]
            if name == "qkv_mlp_up":
                f = max(m.ffn // tp, 1)
                w += [f, f] if m.gated else [f]
            parts += [(j, x / sum(w)) for x in w]
        elif name in ("mlp_up", "shared_up") and m.gated:
            parts += [(j, 0.5), (j, 0.5)]
        else:
            parts.append((j, 1.0))
    return parts


def op_sac_recompute_s(m: ModelSpec, ops: list[Any], times: list[float], tp: int) -> float:
    """Backward-pass recomputation of one block under torchtitan's op-level selective
    checkpointing (:data:`SAC_POLICIES`): all element-wise ops and every second matmul.

    >>> from gpufabric.workloads.compute import gemm, elementwise
    >>> m = load_model("llama3-8b")
    >>> ops = [elementwise("norm1", 1, 1, 2), gemm("qkv", 1, 6144, 4096, 2),
    ...        gemm("attn_out", 1, 4096, 4096, 2), gemm("mlp_up", 1, 28672, 4096, 2),
    ...        gemm("mlp_down", 1, 4096, 14336, 2)]
    >>> op_sac_recompute_s(m, ops, [1.0, 6.0, 4.0, 28.0, 14.0], 1)   # norm + wk + wo + w3
    20.0
    """
    gemm_idx = [j for j, o in enumerate(ops) if o.kind == "gemm"]
    parts = _matmul_parts(m, [ops[j].name for j in gemm_idx], tp)
    t = sum(times[j] for j, o in enumerate(ops) if o.kind == "elem")
    for n, (k, share) in enumerate(parts):
        if n % 2 == 1:            # the 2nd, 4th, ... matmul of the block is not saved
            t += share * times[gemm_idx[k]]
    return t


@dataclass
class _Pass:
    fwd: float = 0.0
    bwd: float = 0.0
    tp: float = 0.0
    cp: float = 0.0
    ep: float = 0.0


@dataclass(frozen=True)
class Software:
    """How the job's software runs it, beyond its layout (:class:`Parallel`): precision,
    kernels, overlaps, recomputation policy, forced NCCL algorithm, power cap (see
    :func:`predict_step` for each). Framework profiles (``workloads/data/frameworks/``) and
    ``train``'s flags set them."""

    precision: str = "bf16"
    flash: bool = True
    tp_overlap: bool = False
    tp_bwd_overlap: bool = False
    pp_scatter_gather: bool = False
    dp_overlap: bool = True
    fused: bool = True
    attn_kernel: str = "native"
    ep_overlap: bool = False
    sac: str = "attention"
    cross_entropy: str = "vocab_parallel"
    loss_parallel: bool = True
    master_weights: bool = True
    grad_accum_no_sync: bool = False
    recompute_modules: tuple[str, ...] = ()
    zero3_overlap: bool = True
    nccl_algo: str | None = None
    nccl_proto: str | None = None
    power_cap_W: float | None = None
    check_memory: bool = False


@dataclass
class _Step:
    """One step's inputs, resolved: the model, layout, sequence, precision, GPU, system, the
    layout's groups, the options, and the communication totals the passes add to."""

    m: ModelSpec
    par: Parallel
    seq: int
    prec: str
    g: GPUSpec
    topo: Topology
    groups: dict[str, Group]
    o: Software
    comm: dict[str, float] = field(default_factory=lambda: {
        k: 0.0 for k in ("tp", "cp", "ep", "pp", "dp", "zero3")})


def _layer_pass(c: _Step, i: int, comm: dict[str, float]) -> _Pass:
    """Forward and backward time of block ``i`` for one micro-batch, and its exposed TP, CP
    and EP communication (each collective's whole time is added to ``comm``)."""
    m, par, seq, prec, g, topo, groups = c.m, c.par, c.seq, c.prec, c.g, c.topo, c.groups
    attn_kernel, sac, modules = c.o.attn_kernel, c.o.sac, c.o.recompute_modules
    ops = layer_ops(m, i, par.micro_batch, seq, seq,
                    split=Split(par.tp, par.ep, par.cp, par.expert_tp), precision=prec,
                    flash=c.o.flash, fused=c.o.fused)
    fwd = bwd = attn_f = 0.0
    times: list[float] = []
    for o in ops:
        t = op_time_s(o, g, prec, attn_kernel)
        times.append(t)
        fwd += t
        if o.kind == "attn":
            attn_f += t
            bwd += BWD_ATTN.value * t
        else:
            bwd += (BWD_GEMM.value if o.kind == "gemm" else 2.0) * t
    over = LAYER_OVERHEAD_US.value * 1e-6
    fwd += over
    bwd += over
    if par.recompute == "full":
        bwd += fwd
    elif par.recompute == "selective" and modules:
        names = {n for mod in modules for n in RECOMPUTE_MODULES[mod]}
        bwd += sum(t for o, t in zip(ops, times, strict=True) if o.name in names)
    elif par.recompute == "selective" and sac == "op":
        bwd += op_sac_recompute_s(m, ops, times, par.tp)
    elif par.recompute == "selective":
        bwd += attn_f
    res = _Pass(fwd, bwd)
    eb = ACT_BYTES[prec]
    tokens = par.micro_batch * seq / par.cp
    act = tokens * m.hidden * eb
    if par.tp > 1:
        tp_all, res.tp = _tp_times(c, act, ops, times)
        comm["tp"] += tp_all
    if par.cp > 1:
        kvw = (m.kv_lora_rank + m.qk_rope_head_dim if m.attention == "mla"
               else 2 * max(m.kv_heads // par.tp, 1) * m.head_dim)
        kv = tokens * kvw * eb * par.cp
        t_kv = _coll_time(topo, "all_gather", kv, groups["cp"])
        t_all = t_kv * 3                               # gather forward, gather + reduce back
        comm["cp"] += t_all
        res.cp = max(0.0, t_all - (1 + BWD_ATTN.value) * attn_f)
    if m.moe_layer(i) and par.ep > 1:
        # each GPU dispatches the tokens it holds (1/tp of the block's, sequence parallel) to
        # the etp shards of each of their top-k experts
        a2a = tokens / par.tp * par.expert_tp * m.top_k * m.hidden * eb
        t_a = _coll_time(topo, "all_to_all", a2a, groups["ep"])
        n = 4 + (2 if par.recompute == "full" else 0)    # dispatch + combine, fwd and bwd
        comm["ep"] += t_a * n
        res.ep = t_a * n
    return res


#: the column-parallel GEMMs of a block, per tensor-parallel synchronisation (attention, MLP):
#: their backward hides the input-gradient collective with ``tp_bwd_overlap``
COLUMN_GEMMS = (("qkv", "qkv_mlp_up", "q_proj", "q_down", "kv_down"),
                ("mlp_up", "shared_up"))


def _tp_times(c: _Step, act: float, ops: list[Any], times: list[float]) -> tuple[float, float]:
    """(every TP collective of one block's passes, the part of it exposed).

    Two synchronisations per block and pass (after attention, after the MLP; one where the
    two run side by side): an all-reduce, or with sequence parallelism an all-gather and a
    reduce-scatter, in the forward, the backward and a recomputed forward. With TP overlap
    (userbuffers / AsyncTP) ``TP_OVERLAP_EXPOSED`` of all of it stays exposed. With
    ``tp_bwd_overlap`` (Megatron's asynchronous column-parallel backward) the backward's
    input-gradient all-reduce runs under the weight-gradient GEMM of the same linear (as long
    as the forward GEMM); with sequence parallelism the backward re-gathers the linear's input
    under its input-gradient GEMM and reduce-scatters under the weight-gradient GEMM, while the
    all-gather that is the row-parallel output's backward stays exposed.
    """
    m, par, topo, g = c.m, c.par, c.topo, c.groups["tp"]
    if par.sp:
        ag = _coll_time(topo, "all_gather", act, g)
        rs = _coll_time(topo, "reduce_scatter", act, g)
        t1 = ag + rs
    else:
        t1 = _coll_time(topo, "all_reduce", act, g)
    syncs = 1 if m.parallel_block else 2
    fwd_passes = 1 if par.recompute != "full" else 2
    if c.o.tp_overlap or not c.o.tp_bwd_overlap:
        tp_all = syncs * t1 * (fwd_passes + 1)
        return tp_all, tp_all * (TP_OVERLAP_EXPOSED.value if c.o.tp_overlap else 1.0)
    names = [o.name for o in ops]
    windows = [sum(t for n, t in zip(names, times, strict=True) if n in grp)
               for grp in COLUMN_GEMMS]
    windows = [sum(windows)] if m.parallel_block else windows
    if par.sp:
        bwd_all = syncs * (2 * ag + rs)
        bwd_e = sum(ag + max(0.0, ag - w) + max(0.0, rs - w) for w in windows)
    else:
        bwd_all = syncs * t1
        bwd_e = sum(max(0.0, t1 - w) for w in windows)
    fwd_all = syncs * t1 * fwd_passes
    return fwd_all + bwd_all, fwd_all + bwd_e


def check_seq_len(seq_len: int | None, m: ModelSpec) -> int:
    """Tokens per sequence: the model's own when ``seq_len`` is None, else at least 1.

    >>> check_seq_len(None, load_model("llama2-7b")), check_seq_len(8192, load_model("llama2-7b"))
    (4096, 8192)
    """
    if seq_len is None:
        return m.seq_len
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
        raise InputError(f"must be a whole number of tokens >= 1, got {seq_len!r}",
                         field="--seq-len")
    return seq_len


def predict_step(model: ModelSpec | str, system: Topology | str, par: Parallel,
                 seq_len: int | None = None, options: Software | None = None,
                 **kw: Any) -> StepResult:
    """Predict one optimizer step of ``model`` on ``system`` with layout ``par``.

    How the job's software runs beyond its layout is ``options`` (a :class:`Software`), or
    its fields as keywords (``precision="fp8", tp_overlap=True``), which override ``options``.

    ``system`` is a Topology or anything :func:`gpufabric.topology.build.load` takes. With
    ``check_memory`` a layout that does not fit raises :class:`InputError`; otherwise the
    result says ``fits: False``. ``fused=False``: PyTorch eager as torchtitan runs it without
    torch.compile, no element-wise fusion (:data:`gpufabric.workloads.compute.PASSES`);
    ``attn_kernel="fa2"``: PyTorch SDPA's FlashAttention-2 (slower on Hopper than the native
    cuDNN / FA3 kernels). ``ep_overlap``: the expert all-to-all runs under another
    micro-batch's compute (DeepSeek's DualPipe, Megatron's EP-communication overlap); only
    what is longer than that compute stays exposed. ``sac``: what ``recompute="selective"``
    recomputes (:data:`SAC_POLICIES`: ``attention``, Megatron's; ``op``, torchtitan's);
    ``recompute_modules``: Megatron-Core's ``--recompute-modules`` instead (the forward of
    those submodules, :data:`RECOMPUTE_MODULES`, runs again in the backward pass).
    ``dp_overlap=False``: the data-parallel gradient reduction (and a distributed optimizer's
    parameter gather) runs after the backward pass instead of under it (Megatron without
    ``--overlap-grad-reduce``). ``zero3_overlap=False``: the ZeRO-3 parameter gathers and the
    gradient reduce-scatter run between the kernels instead of under them (DeepSpeed with
    ``overlap_comm`` off). ``power_cap_W``: the GPUs run under this board power limit, below
    their TDP (:func:`gpufabric.workloads.compute.power_capped`). ``nccl_algo`` /
    ``nccl_proto``: the algorithm and protocol the job forces (``NCCL_ALGO`` / ``NCCL_PROTO``)
    for its all-reduces, all-gathers and reduce-scatters; None: NCCL's own choice.
    """
    o = replace(options or Software(), **kw)
    token = _NCCL.set((o.nccl_algo, o.nccl_proto))
    try:
        return _predict_step(model, system, par, seq_len, o)
    finally:
        _NCCL.reset(token)


def _resolve(model: ModelSpec | str, system: Topology | str, par: Parallel,
             seq_len: int | None, o: Software) -> _Step:
    """The step's inputs checked and resolved: options, model, system, GPU (power-capped),
    sequence length, a layout that fits the system and divides the model."""
    if o.sac not in SAC_POLICIES:
        raise InputError(f"got {o.sac!r}; allowed: {', '.join(SAC_POLICIES)}", field="sac")
    for mod in o.recompute_modules:
        if mod not in RECOMPUTE_MODULES:
            raise InputError(f"got {mod!r}; allowed: {', '.join(RECOMPUTE_MODULES)}",
                             field="recompute_modules")
    o = replace(o, recompute_modules=tuple(o.recompute_modules))
    m = load_model(model)
    topo = _topology(system)
    prec = check_precision(o.precision)
    g = gpu_spec(topo.gpus()[0].model)
    if o.power_cap_W is not None:
        g = power_capped(g, o.power_cap_W)
    g.peak_tflops(prec)            # refuses a precision the part lacks
    gpn, domains = topo.scale_up()      # groups are laid out per NVLink domain
    total = gpn * domains
    seq = check_seq_len(seq_len or None, m)      # 0: the model's own, as None
    if par.world > total:
        raise InputError(f"layout needs {par.world} GPUs (tp {par.tp} x cp {par.cp} x pp "
                         f"{par.pp} x dp {par.dp}), the system has {total}", field="dp")
    if m.is_transformer:
        _check_divisible(m, par, seq)
    elif max(par.tp, par.pp, par.cp, par.ep) > 1:
        raise InputError(f"{m.name} is a {m.arch}: data parallelism only (tp, pp, cp and ep "
                         "must be 1)", field="tp")
    groups = {k: par.group(k, gpn) for k in ("tp", "cp", "ep", "dp", "pp", "dp_cp", "edp")}
    return _Step(m, par, seq, prec, g, topo, groups, o)


def step_memory(model: ModelSpec | str, system: Topology | str, par: Parallel,
                seq_len: int | None = None, options: Software | None = None, *,
                stage: str = "max", **kw: Any) -> MemoryBreakdown:
    """The memory :func:`predict_step` reports for the same inputs (``StepResult.memory``):
    of the most loaded pipeline stage, or of the ``first`` or ``last`` (a source that reads
    one rank's memory, :func:`gpufabric.workloads.memory.training_memory`)."""
    return _memory(_resolve(model, system, par, seq_len, replace(options or Software(), **kw)),
                   stage)


def _accounting(o: Software) -> dict[str, Any]:
    """How the job's framework holds its memory (:class:`gpufabric.workloads.memory.Accounting`
    as :func:`training_memory` keywords)."""
    return {"sac": o.sac, "cross_entropy": o.cross_entropy, "loss_parallel": o.loss_parallel,
            "master_weights": o.master_weights, "grad_accum_no_sync": o.grad_accum_no_sync}


def _memory(c: _Step, stage: str = "max") -> MemoryBreakdown:
    o, topo = c.o, c.topo
    return training_memory(c.m, c.par, c.seq, topo.gpus()[0].model, precision=c.prec,
                           flash=o.flash, gpus_per_node=topo.scale_up()[0], stage=stage,
                           **_accounting(o))


def _predict_step(model: ModelSpec | str, system: Topology | str, par: Parallel,
                  seq_len: int | None, o: Software) -> StepResult:
    c = _resolve(model, system, par, seq_len, o)
    m, seq, prec, g, topo, groups = c.m, c.seq, c.prec, c.g, c.topo, c.groups
    gname, gpn = topo.gpus()[0].model, topo.scale_up()[0]
    mem = _memory(c)
    if o.check_memory and not mem.fits:
        check_fits(mem, fit_hint(m, par, seq, gname, precision=prec, flash=o.flash,
                                 gpus_per_node=gpn, **_accounting(o)))
    if m.is_transformer:
        fwd, bwd, tp_e, cp_e, ep_e = _stage_times(c)
    else:
        fwd, bwd, tp_e, cp_e, ep_e = _cnn_times(m, par, g, prec)
    mbs, v = par.micro_batches, par.vpp
    if o.ep_overlap:
        ep_e = max(0.0, ep_e - (fwd + bwd))
    per_mb = fwd + bwd + tp_e + cp_e + ep_e
    bubble = (par.pp - 1) / v * per_mb if par.pp > 1 else 0.0
    dp_e, z3_e, opt = _data_parallel(c, fwd, bwd, tp_e + ep_e)
    breakdown = {
        "compute": mbs * (fwd + bwd),
        "tp_comm": mbs * tp_e,
        "cp_comm": mbs * cp_e,
        "ep_comm": mbs * ep_e,
        "pp_comm": _pipeline_send(c),
        "dp_comm": dp_e,
        "zero3_gather": z3_e,
        "pipeline_bubble": bubble,
        "optimizer": opt,
    }
    step = sum(breakdown.values())
    tokens = par.batch * seq
    flops = model_flops_per_token(m, seq) * tokens
    world = par.world
    peak = g.peak_tflops(prec) * 1e12
    mfu = flops / (step * world * peak)
    notes: list[str] = []
    res = StepResult(
        m.name, str(topo.meta.get("source") or topo.name), g.name, world, par.to_dict(), seq,
        prec, step, tokens / step, tokens / step / world, flops / step / world / 1e12, mfu,
        round(mem.total_GiB, 2), mem.fits, breakdown, c.comm,
        {k: asdict(x) for k, x in groups.items() if x.ranks > 1}, mem.to_dict(), "", flops,
        notes)
    res.bottleneck = bottleneck(res, topo, groups)
    if not mem.fits:
        notes.append(f"does not fit: needs {mem.total_GiB:.1f} GiB per GPU, {g.name} has "
                     f"{mem.capacity_GiB:g}")
    return res


def _pipeline_send(c: _Step) -> float:
    """Exposed pipeline send/recv of the boundary activations, forward and backward
    (interleaving overlaps it with compute except on the fill/drain chain)."""
    par, m = c.par, c.m
    if par.pp <= 1:
        return 0.0
    act = par.micro_batch * c.seq / par.cp * m.hidden * ACT_BYTES[c.prec]
    if par.sp or par.tp == 1:
        t_p2p = _coll_time(c.topo, "send_recv", act / par.tp, c.groups["pp"])
    elif c.o.pp_scatter_gather:     # 1/tp slice per rank, gathered over the TP group
        t_p2p = (_coll_time(c.topo, "send_recv", act / par.tp, c.groups["pp"])
                 + _coll_time(c.topo, "all_gather", act, c.groups["tp"]))
    else:
        t_p2p = _coll_time(c.topo, "send_recv", act, c.groups["pp"])
    mbs, v = par.micro_batches, par.vpp
    c.comm["pp"] = 2 * t_p2p * mbs * v
    return 2 * t_p2p * ((par.pp - 1) * v if v > 1 else mbs + par.pp - 1)


def _data_parallel(c: _Step, fwd: float, bwd: float, exposed: float
                   ) -> tuple[float, float, float]:
    """(exposed data-parallel reduction, exposed ZeRO-3 gathers, optimizer step): gradients
    (and parameters with a distributed optimizer / ZeRO) reduced over the data-parallel
    groups, under the last micro-batch's backward (its compute and ``exposed`` TP/EP time)
    and the next step's first forward, chunk by chunk with virtual stages."""
    m, par, topo, groups, o = c.m, c.par, c.topo, c.groups, c.o
    gpn = topo.scale_up()[0]
    eb = ACT_BYTES[c.prec]
    dense, expert = params_per_gpu(m, par, 0)
    z = par.zero_stage
    grad_b = 4 if c.prec in ("fp32", "tf32") else 2
    dp_t = dp_ag = 0.0
    shard_grp = groups["dp_cp"]
    if par.fsdp == "hybrid":     # HSDP: shard inside a node, replicate across nodes
        shard_grp, rep_grp = _hybrid_groups(par, gpn)
        groups["dp_shard"], groups["dp_replica"] = shard_grp, rep_grp
        dp_t += _coll_time(topo, "all_reduce", (dense + expert) / shard_grp.ranks * grad_b,
                           rep_grp)
    for n_par, grp in ((dense, shard_grp), (expert, groups["edp"])):
        if grp.ranks <= 1 or n_par <= 0:
            continue
        if z == 0:
            dp_t += _coll_time(topo, "all_reduce", n_par * grad_b, grp)
        else:
            dp_t += _coll_time(topo, "reduce_scatter", n_par * grad_b, grp)
            if z < 3:     # updated parameters gathered back (distributed optimizer)
                dp_ag += _coll_time(topo, "all_gather", n_par * eb, grp)
    c.comm["dp"] = dp_t + dp_ag
    mbs, v = par.micro_batches, par.vpp
    # (ZeRO-3/FSDP: the reduce-scatter rides the same prefetching streams as the gathers)
    if (o.zero3_overlap if z >= 3 else o.dp_overlap):
        group = min(par.pp, mbs)
        dp_e = (chunked_exposure(dp_t, v, (bwd + exposed) / v, group)
                + chunked_exposure(dp_ag, v, fwd / v, group))
    else:
        dp_e = dp_t + dp_ag
    # ZeRO-3 / FSDP: parameters gathered before each use, every micro-batch (fwd and bwd)
    z3_e = 0.0
    if z >= 3:
        t_ag = _coll_time(topo, "all_gather", (dense + expert) * eb, shard_grp)
        c.comm["zero3"] = 2 * t_ag * mbs
        z3_e = (mbs * (max(0.0, t_ag - fwd) + max(0.0, t_ag - bwd)) if o.zero3_overlap
                else c.comm["zero3"])
    # optimizer step on this GPU's shard
    shard = (shard_grp.ranks if par.fsdp == "hybrid" else par.dp * par.cp) if z >= 1 else 1
    eshard = expert_shard(par, shard) if z >= 1 else 1
    opt = op_time_s(optimizer_op(dense / shard + expert / eshard), c.g, c.prec)
    if par.offload:   # states streamed over the host link while the GPU updates them
        opt = max(opt, OFFLOAD_B.value * (dense / shard + expert / eshard)
                  / (host_link_GBps(topo) * 1e9))
    return dp_e, z3_e, opt


def chunked_exposure(total: float, chunks: int, unit: float, group: int) -> float:
    """Exposed part of a data-parallel collective of ``total`` seconds split over ``chunks``
    model chunks (virtual pipeline stages) that overlap the pipeline's passes.

    Megatron-Core launches each chunk's gradient reduction once that chunk's last backward is
    done (``overlap_grad_reduce``), and gathers each chunk's parameters ahead of its first
    forward (``overlap_param_gather``). In the interleaved schedule a device runs a chunk for
    ``group`` micro-batches (the pipeline depth) before the next, so successive chunks finish
    ``group x unit`` apart, ``unit`` being one micro-batch's pass of one chunk. Each chunk's
    collective (``total / chunks``, one after another on the network) also hides under
    ``DP_OVERLAP`` of its own last pass, bucket by bucket. The last chunk's share is exposed
    less that window, plus any backlog when a chunk's collective outlasts the spacing:

        exposed = max(0, d - w + (chunks - 1) x max(0, d - group x unit)),
        d = total / chunks, w = DP_OVERLAP x unit

    With one chunk it is ``total - DP_OVERLAP x pass``, the reduction under the last
    micro-batch's backward.

    >>> chunked_exposure(1.0, 1, 1.0, 4)     # one chunk: 1 - 0.9 x 1
    0.09999999999999998
    >>> round(chunked_exposure(1.0, 4, 0.25, 4), 3)   # four chunks a full second apart
    0.025
    >>> round(chunked_exposure(4.0, 2, 0.25, 2), 3)   # backlog: 2 - 0.225 + (2 - 0.5)
    3.275
    """
    if total <= 0:
        return 0.0
    d = total / max(1, chunks)
    return max(0.0, d - DP_OVERLAP.value * unit
               + (chunks - 1) * max(0.0, d - group * unit))


def host_link_GBps(topo: Topology) -> float:
    """Per-direction rate of the first GPU's link to its host (PCIe to a root port or switch,
    or NVLink-C2C to a Grace CPU), from the catalog through the built topology.

    >>> host_link_GBps(_topology("gpu=H100-SXM,gpus_per_node=8,nodes=1"))
    63.0
    """
    gid = topo.gpus()[0].id
    rates = [ln.bw_GBps for _, ln in topo.neighbors(gid) if ln.kind in ("pcie", "c2c")]
    if not rates:
        raise InputError("the system gives its GPUs no PCIe or C2C link to a host, which "
                         "optimizer-state offload needs", field="offload")
    return max(rates)


def _hybrid_groups(par: Parallel, gpn: int) -> tuple[Group, Group]:
    """HSDP's groups: the data-parallel ranks of one node (sharding) and the ranks holding the
    same shard on the other nodes (replication)."""
    from gpufabric.workloads.parallel import group_shape
    n = par.dp * par.cp
    stride = min(par.stride("dp"), par.stride("cp"))
    shard = max(1, min(n, gpn // stride))
    while n % shard:
        shard -= 1
    return (group_shape("dp_shard", shard, stride, gpn),
            group_shape("dp_replica", n // shard, stride * shard, gpn))


def _topology(system: Topology | str) -> Topology:
    if isinstance(system, Topology):
        return system
    from gpufabric.topology.build import load
    return load(system, materialize_nodes=C.Model.SAMPLE_NODES)


def _check_divisible(m: ModelSpec, par: Parallel, seq: int) -> None:
    if m.heads % par.tp:
        raise InputError(f"tp {par.tp} must divide the {m.heads} attention heads", field="tp")
    if m.attention != "mla" and par.tp > m.kv_heads and par.tp % m.kv_heads:
        raise InputError(f"tp {par.tp} and the {m.kv_heads} KV heads: one must divide the "
                         "other", field="tp")
    if m.is_moe and m.experts % par.ep:
        raise InputError(f"ep {par.ep} must divide the {m.experts} experts", field="ep")
    if seq % (2 * par.cp) and par.cp > 1:
        raise InputError(f"seq_len {seq} must be a multiple of 2 x cp = {2 * par.cp} "
                         "(load-balanced causal chunks)", field="cp")
    if par.sp and par.tp > 1 and (par.micro_batch * seq // par.cp) % par.tp:
        raise InputError(f"tokens per micro-batch must be a multiple of tp {par.tp}",
                         field="seq_len")


def _stage_times(c: _Step) -> tuple[float, float, float, float, float]:
    """Forward, backward and exposed TP/CP/EP time of one micro-batch on the slowest stage."""
    m, par, seq, prec, g, comm = c.m, c.par, c.seq, c.prec, c.g, c.comm
    cache: dict[bool, _Pass] = {}
    scratch = {k: 0.0 for k in comm}
    best: tuple[float, float, float, float, float] | None = None
    best_comm: dict[str, float] = {}
    for st in sorted({0, par.pp - 1}):
        f = b = tp_e = cp_e = ep_e = 0.0
        local = {k: 0.0 for k in comm}
        for i in stage_layers(m, par, st):
            key = m.moe_layer(i)
            if key not in cache:
                c0 = dict(scratch)
                cache[key] = _layer_pass(c, i, scratch)
                cache[key].__dict__["_comm"] = {k: scratch[k] - c0[k] for k in scratch}
            p = cache[key]
            f, b, tp_e, cp_e, ep_e = f + p.fwd, b + p.bwd, tp_e + p.tp, cp_e + p.cp, ep_e + p.ep
            for k, val in p.__dict__["_comm"].items():
                local[k] += val
        heads = head_ops(m, par.micro_batch, seq, tp=par.tp, cp=par.cp, precision=prec)
        if st == 0:
            t = op_time_s(heads[0], g, prec)
            f, b = f + t, b + 2 * t
        if st == par.pp - 1:
            t = sum(op_time_s(o, g, prec) for o in heads[1:])
            f, b = f + t, b + BWD_GEMM.value * t
        cur = (f, b, tp_e, cp_e, ep_e)
        if best is None or sum(cur) > sum(best):
            best, best_comm = cur, local
    assert best is not None
    mbs = par.micro_batches
    for k, val in best_comm.items():
        comm[k] += val * mbs
    return best


def _cnn_times(m: ModelSpec, par: Parallel, g: GPUSpec, prec: str
               ) -> tuple[float, float, float, float, float]:
    """A CNN as one convolution-shaped GEMM stream at the GEMM ceiling, plus its activations
    moved ``CNN_ACT_PASSES`` times (memory-bound batch norm and activations)."""
    from gpufabric.workloads.compute import GEMM_EFF, GEMM_EFF_DEFAULT, Op
    flops = m.flops_per_sample * par.micro_batch
    peak = g.peak_tflops(prec) * 1e12 * GEMM_EFF.get(g.arch, GEMM_EFF_DEFAULT).value
    scale = ACT_BYTES[prec] / 2          # the file gives 16-bit activation bytes
    elem = Op("bn_act", "elem", 0.0, m.activation_bytes_per_sample * par.micro_batch * scale)
    t_mem = op_time_s(elem, g, prec) * CNN_ACT_PASSES.value
    t_flop = flops / peak
    return t_flop + t_mem / 3, 2 * t_flop + 2 * t_mem / 3, 0.0, 0.0, 0.0


_LABEL = {"compute": "compute", "tp_comm": "tensor-parallel", "cp_comm": "context-parallel",
          "ep_comm": "expert-parallel all-to-all", "pp_comm": "pipeline send/recv",
          "dp_comm": "data-parallel gradient reduction", "zero3_gather":
          "ZeRO-3/FSDP parameter all-gather", "pipeline_bubble": "pipeline bubble",
          "optimizer": "optimizer step"}


def bottleneck(r: StepResult, topo: Topology, groups: dict[str, Group]) -> str:
    """The largest part of the step in words, with what would hide a communication part."""
    parts = {k: v for k, v in r.breakdown_s.items() if k != "compute"}
    top = max(parts, key=lambda k: parts[k]) if parts else "compute"
    share = parts.get(top, 0.0) / r.step_time_s if r.step_time_s else 0.0
    comp = r.breakdown_s["compute"] / r.step_time_s if r.step_time_s else 0.0
    if share < 0.05:
        return (f"compute: {comp:.0%} of the step is GEMMs, attention and element-wise work "
                f"on {r.gpu}; communication is hidden")
    words = f"{_LABEL[top]} is {share:.0%} of the step"
    kind = {"tp_comm": "tp", "cp_comm": "cp", "ep_comm": "ep", "pp_comm": "pp",
            "dp_comm": "dp_cp", "zero3_gather": "dp_cp"}.get(top)
    if kind and kind in groups:
        grp = groups[kind]
        over = _link_words(topo, grp)
        total = r.comm_s.get({"dp_cp": "dp", "zero3_gather": "zero3"}.get(
            kind, kind), 0.0) if top != "zero3_gather" else r.comm_s.get("zero3", 0.0)
        hidden = total - parts[top]
        if total > 0 and parts[top] > 0 and top in ("dp_comm", "zero3_gather"):
            need = total / max(hidden, 1e-12) if hidden > 0 else float("inf")
            more = (f": {need:.1f}x more bandwidth would hide it" if need != float("inf")
                    else ": nothing overlaps it")
            return f"{words} over {over}{more}"
        return f"{words} over {over}"
    if top == "pipeline_bubble":
        return f"{words}: more micro-batches per step or interleaving (--vpp) shrink it"
    return words


def _link_words(topo: Topology, grp: Group) -> str:
    spec = topo.meta.get("spec") or {}
    if grp.per_node == grp.ranks:
        return f"{spec.get('scale_up', 'the scale-up links')} inside a node"
    nics = topo.meta.get("nics_per_node") or spec.get("nics_per_node")
    nic = topo.meta.get("nic") or spec.get("nic")
    return f"{nics}x {nic} per node" if nics and nic else "the scale-out network"


__all__ = ["StepResult", "predict_step", "step_memory", "SAC_POLICIES", "RECOMPUTE_MODULES",
           "op_sac_recompute_s",
           "model_flops_per_token", "bottleneck", "LAYER_OVERHEAD_US", "DP_OVERLAP",
           "TP_OVERLAP_EXPOSED", "OFFLOAD_B", "host_link_GBps", "MemoryBreakdown"]

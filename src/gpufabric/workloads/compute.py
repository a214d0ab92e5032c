"""Compute model: FLOPs and bytes per operation, GPU peaks, a roofline with achieved efficiency.

An operation (:class:`Op`) is a GEMM, an attention core, or a memory-bound element-wise pass.
Its time on a GPU is the roofline

    time = max(flops / (peak x efficiency), bytes / (HBM bandwidth x HBM efficiency)) + launch

where the GEMM efficiency follows the operation's shape: output tiles fill the SMs in waves (a
last, partial wave wastes the idle SMs) and a short reduction dimension cannot hide the tile's
load and store (``k / (k + K_HALF_PER_BALANCE x machine balance)``). The ceiling
(``GEMM_EFF``) is a physical parameter per GPU generation; every such parameter is a
:class:`~gpufabric.params.Param` record naming what it was fitted on.

Examples
--------
>>> g = gpu_spec("H100-SXM")
>>> g.peak_tflops("bf16"), g.peak_tflops("fp8"), g.hbm_GBps
(989.0, 1979.0, 3350.0)
>>> big = gemm("mlp", 8192, 8192, 8192, 2)
>>> round(big.flops / 1e12, 3)
1.1
>>> 0.6 < achieved_tflops(big, g, "bf16") / 989 < 0.9
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from gpufabric import catalog
from gpufabric import params as _params
from gpufabric.errors import InputError, check_range
from gpufabric.params import Param
from gpufabric.workloads.models import ModelSpec

PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8", "mxfp8", "fp4")
#: bytes per element of activations / weights as frameworks keep them at each training precision
#: (FP8 and FP4 training keep 16-bit master activations and weights; only GEMM inputs are cast)
ACT_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 2, "mxfp8": 2, "fp4": 2}


#: the layer the workloads' constants are recorded under in :mod:`gpufabric.params`
LAYER = "workloads"


def record(name: str, value: Any, unit: str, applies_to: str, source: str,
           *fitted_on: str, answer: str = "") -> Param:
    """Record one constant of the workloads' models (:func:`gpufabric.params.record`): a fitted
    value names the calibration ids (or ``prefix-*`` patterns) it was fitted on, a prior only
    its ``source`` text; ``answer`` marks a value fitted on a single entry as that entry's
    answer (why no second entry)."""
    return _params.record(LAYER, name, value, unit, applies_to, source, fitted_on=fitted_on,
                          answer=answer)


#: Achieved fraction of the dense tensor peak on large, well-shaped GEMMs (cuBLAS / cuBLASLt),
#: per GPU generation. Fitted on the calibration ids named (training step times); see
#: docs/training.md for the procedure.
GEMM_EFF: dict[str, Param] = {
    "volta": record("GEMM_EFF[volta]", 0.70, "fraction of peak", "GEMMs on volta",
                    "prior: cuBLAS HGEMM on V100 reaches ~0.70-0.80 "
                    "of 125 TFLOPS at large sizes (NVIDIA CUTLASS / cuBLAS profiler figures)"),
    "ampere": record("GEMM_EFF[ampere]", 0.74, "fraction of peak", "GEMMs on ampere",
                     "fitted on Megatron-LM's 2021 A100 GPT runs (Narayanan et al., SC'21, "
                     "Table 1 rows 1.7B-1T) and MegaScale's Megatron-LM 175B baseline at "
                     "batch 768 (data/fits.yaml names the entries)"),
    "hopper": record("GEMM_EFF[hopper]", 0.80, "fraction of peak", "GEMMs on hopper",
                     "fitted on Megatron-Core's H100 GPT table (9 rows) and NVIDIA's MLPerf "
                     "Training v4.0 GPT-3 run on 512 GPUs (data/fits.yaml names the entries)"),
    "ada": record("GEMM_EFF[ada]", 0.70, "fraction of peak", "GEMMs on ada",
    "prior: as hopper less its TMA/wgmma (not fitted)"),
    "blackwell": record("GEMM_EFF[blackwell]", 0.70, "fraction of peak", "GEMMs on blackwell",
                        "prior: as hopper (not fitted; the GB200 "
                        "entries are MoE runs with large software effects)"),
    "cdna3": record("GEMM_EFF[cdna3]", 0.55, "fraction of peak", "GEMMs on cdna3",
                    "prior: hipBLASLt BF16 GEMM on MI300X reaches "
                    "~0.5-0.6 of 1307 TFLOPS (AMD ROCm blog figures); not fitted"),
}
GEMM_EFF_DEFAULT = record("GEMM_EFF_DEFAULT", 0.60, "fraction of peak",
                          "GEMMs on GPUs of other generations",
                          "prior for parts with no generation entry")

#: FP8 GEMMs reach a lower fraction of their (2x) peak: per-tensor scaling and shapes sized for
#: 16-bit tiles (the input casts are their own operations, FP8_CAST_PASSES). Fitted on the
#: three MLPerf v4.0 GPT-3 runs of NVIDIA's Transformer Engine FP8 recipe (512, 10,752 and
#: 11,616 GPUs, evaluation time counted) and two torchtitan Float8 runs on another H100
#: cluster (Llama 3.1 70B on 256 GPUs, 405B on 512): the value that minimises the median error
#: over their points.
FP8_EFF = record("FP8_EFF", 0.77, "fraction of the 16-bit efficiency", "FP8 GEMMs",
                 "fitted on NVIDIA's MLPerf Training v4.0 GPT-3 runs (512, 10752 and 11616 "
                 "GPUs; time to train with its evaluation passes and the FP8 input casts) and "
                 "torchtitan's Float8 Llama 3.1 70B and 405B runs (torchtitan paper, "
                 "arXiv 2410.06511); median over their points (data/fits.yaml names the "
                 "entries)")
#: reduction depth at which a GEMM reaches half its ceiling, per FLOP/byte of the GPU's machine
#: balance (peak / HBM bandwidth): a tile's prologue and epilogue move a fixed number of bytes
#: while its k-loop does MMAs, so the faster the tensor cores relative to memory, the deeper
#: the GEMM must be to hide them (A100 BF16: 153 FLOP/B, H100: 295, H100 FP8: 591)
K_HALF_PER_BALANCE = record("K_HALF_PER_BALANCE", 0.63, "elements per FLOP/B",
                            "GEMMs: the reduction depth of half the ceiling",
                            "fitted on the Megatron-Core H100 and Megatron-LM 2021 A100 GPT rows "
                            "(small hidden sizes; data/fits.yaml names the entries)")
#: precisions whose GEMMs take quantized inputs (the activations stay 16-bit in between)
QUANTIZED = ("fp8", "mxfp8", "fp4")
#: 2-byte passes to quantize a GEMM input: read the 16-bit tensor, write the 8-bit copy and its
#: transpose for the backward's weight gradient (1 + 1 byte). Transformer Engine fuses the cast
#: of a normalised input into the norm (LayerNormLinear: QKV and the MLP's up-projection), so
#: only the other inputs pay it: the attention output, the MLP activation, the experts' inputs
FP8_CAST_PASSES = record("FP8_CAST_PASSES", 2, "2-byte passes per element",
                         "FP8/FP4 training: casting a GEMM input",
                         "physical: Transformer Engine reads the 16-bit input and writes the "
                         "8-bit copy and its transpose (1 + 1 byte); not fitted")

#: CUDA streams over which Transformer Engine's GroupedLinear (Megatron-Core's grouped GEMM for
#: the local experts) spreads its GEMMs: one cuBLAS GEMM per expert, round-robin over the
#: library's compute streams (transformer_engine/common/util/multi_stream.cpp:
#: num_compute_streams = 4)
GROUPED_STREAMS = record("GROUPED_STREAMS", 4, "CUDA streams",
                         "MoE training: the local experts' GEMMs",
                         "Transformer Engine transformer_engine/common/util/multi_stream.cpp "
                         "(num_compute_streams = 4); not fitted")

#: output tile per SM (M x N) that cuBLAS picks for large 16-bit GEMMs
TILE = {"volta": (128, 128), "ampere": (128, 256), "hopper": (128, 256), "ada": (128, 128),
        "blackwell": (256, 256), "cdna3": (256, 256)}


def tile_shapes(arch: str) -> list[tuple[int, int]]:
    """Output tiles (M x N) the GEMM library chooses among: the generation's large tile
    (``TILE``), its transpose, and the tile with its longer side halved (both sides of a square
    tile). cuBLAS / CUTLASS ship all of these and pick per shape, so a GEMM whose tile count
    falls just past a whole number of waves on the large tile runs on a smaller one instead.

    >>> tile_shapes("hopper")
    [(128, 256), (256, 128), (128, 128)]
    >>> tile_shapes("blackwell")
    [(256, 256), (128, 256), (256, 128)]
    """
    tm, tn = TILE.get(arch, (128, 128))
    out = [(tm, tn)]
    if tn != tm:
        out.append((tn, tm))
    if tm >= tn:
        out.append((tm // 2, tn))
    if tn >= tm:
        out.append((tm, tn // 2))
    return list(dict.fromkeys(out))


#: flash-attention cores relative to the GEMM ceiling (softmax, masking, online rescaling)
ATTN_EFF = record("ATTN_EFF", 0.75, "fraction of the GEMM ceiling", "flash-attention cores",
                  "prior: FlashAttention-2 reaches "
                  "~0.7 of A100 GEMM throughput forward (Dao 2023, Fig. 4), FA3 similar on H100")
#: FlashAttention-2 on Hopper and later: it does not use the asynchronous tensor-core path
#: (wgmma/TMA), reaching ~350 of 989 TFLOP/s forward on H100 (Shah et al., FlashAttention-3,
#: arXiv 2407.08608, Fig. 1) -> 0.35 / (0.78 x 0.75) of the ceiling used for native kernels
FA2_ON_HOPPER = record("FA2_ON_HOPPER", 0.6, "fraction of the native attention rate",
                       "FlashAttention-2 on hopper and later", "prior from the "
                       "FlashAttention-3 paper's FA2 figures on H100 (not fitted)")
#: FlashAttention-2's rate per SM on Hopper: it issues Ampere's synchronous mma instructions,
#: not Hopper's asynchronous wgmma, so each SM is held to a fraction of its tensor rate
#: (Shah et al., FlashAttention-3, arXiv 2407.08608, Sec. 1 and Fig. 1: ~350 TFLOP/s forward
#: on the 132 SMs of an H100). A Hopper part whose tensor cores are cut below that per-SM rate
#: (the H20: 148 TFLOP/s on 78 SMs) is not held back by it and runs FA2 at the native rate.
FA2_SM_TFLOPS = record("FA2_SM_TFLOPS", 350 / 132, "TFLOP/s per SM",
                       "FlashAttention-2 on hopper (attn_kernel fa2-sm)",
                       "prior from the FlashAttention-3 paper's FA2 figure on H100 "
                       "(arXiv 2407.08608, Fig. 1: ~350 TFLOP/s on 132 SMs); not fitted")
#: achieved fraction of HBM bandwidth for streaming element-wise kernels
HBM_EFF = record("HBM_EFF", 0.80, "fraction of HBM bandwidth", "memory-bound kernels",
                 "prior: STREAM-like copy kernels reach "
                 "~0.8-0.9 of the datasheet HBM rate on A100/H100")
#: fixed cost per kernel (launch + tail), microseconds
KERNEL_US = record("KERNEL_US", 4.0, "us", "each kernel launch",
                   "prior: CUDA kernel launch and tail ~3-5 us without CUDA graphs")


#: sustained clock under a board power limit below the TDP: dynamic power ~ f V^2 with the
#: voltage following the clock over the DVFS range, so power ~ f^3 and the clock scales as
#: (cap / TDP)^(1/3) when dense GEMMs hold the part at its limit. Physics, not fitted; on the
#: 500 W H100-SXM it gives 0.89 x 989 = 884 TFLOP/s BF16, between the 700 W SXM and the
#: 400 W H100 NVL, where torchtitan's H100 benchmark (footnote) places that part's true peak
POWER_CLOCK_EXP = record("POWER_CLOCK_EXP", 1 / 3, "clock ~ (power cap / TDP)^x",
                         "GPUs under a power cap below their TDP", "prior: CMOS dynamic power "
                         "~ f V^2 with V ~ f over the DVFS range (not fitted)")


@dataclass(frozen=True)
class GPUSpec:
    """What the compute and memory models need of a GPU (read from the catalog)."""

    name: str
    arch: str
    sms: int
    memory_GB: float
    hbm_GBps: float
    tflops: dict[str, float] = field(hash=False, compare=False, default_factory=dict)
    tdp_W: float = 0.0

    @property
    def memory_GiB(self) -> float:
        return self.memory_GB * 1e9 / 2**30

    def peak_tflops(self, precision: str) -> float:
        """Dense peak for ``precision``; an :class:`InputError` when the part has none."""
        p = check_precision(precision)
        v = self.tflops.get(p, 0.0)
        if not v:
            have = [k for k in PRECISIONS if self.tflops.get(k)]
            raise InputError(f"{self.name} has no {p} tensor rate; allowed: {', '.join(have)}",
                             field="precision")
        return v


def check_precision(precision: str) -> str:
    p = str(precision).strip().lower()
    if p not in PRECISIONS:
        raise InputError(f"unknown precision {precision!r}; allowed: {', '.join(PRECISIONS)}",
                         field="precision")
    return p


def gpu_spec(name: str) -> GPUSpec:
    """The :class:`GPUSpec` of a catalog GPU.

    >>> gpu_spec("A100-SXM4-80GB").tflops["tf32"]
    156.0
    """
    g = catalog.gpu(name, field="gpu")
    bf16 = g.fp16_tflops if g.bf16_tflops is None else g.bf16_tflops
    tf = {"fp32": g.fp32_tflops, "tf32": g.tf32_tflops, "fp16": g.fp16_tflops, "bf16": bf16,
          "fp8": g.fp8_tflops, "mxfp8": g.fp8_tflops if g.arch == "blackwell" else 0.0,
          "fp4": g.fp4_tflops}
    spec = GPUSpec(g.name, g.arch, g.sms, float(g.memory_GB), float(g.mem_bw_GBps),
                   {k: float(v) for k, v in tf.items()}, float(g.tdp_W))
    if g.power_limit_W and g.power_limit_W < g.tdp_W:     # as the part ships: capped
        spec = power_capped(spec, g.power_limit_W, field="power_limit_W")
    return spec


def power_capped(spec: GPUSpec, cap_W: float, *, field: str = "power_cap_W") -> GPUSpec:
    """``spec`` run under a board power limit of ``cap_W``: every compute peak scaled by the
    sustained clock ``(cap / TDP) ** POWER_CLOCK_EXP`` (HBM keeps its own clock), and the cap
    its board power (``tdp_W``: a part that ships capped, as the catalog's ``power_limit_W``
    says, is capped further from its limit). A cap must be above 0 and at most that board
    power (a cap at it changes nothing); a part without a recorded TDP cannot be capped.
    ``field`` names the cap in errors.

    >>> g = power_capped(gpu_spec("H100-SXM"), 500)
    >>> round(g.tflops["bf16"])
    884
    >>> try:
    ...     power_capped(gpu_spec("H100-SXM"), 1e9, field="--power-cap")
    ... except InputError as e:
    ...     print(e)
    --power-cap: must be a number above 0 and at most 700 W (H100-SXM's TDP), got 1e+09
    """
    if not spec.tdp_W:
        raise InputError(f"{spec.name} has no TDP in the catalog; cannot apply a power cap",
                         field=field)
    limited = spec.tdp_W < catalog.gpu(spec.name).tdp_W
    check_range(cap_W, 0, spec.tdp_W, above=True, unit=" W",
                why=f" ({spec.name}'s {'power limit' if limited else 'TDP'})", field=field)
    f = min(1.0, cap_W / spec.tdp_W) ** POWER_CLOCK_EXP.value
    return replace(spec, tflops={k: v * f for k, v in spec.tflops.items()},
                   tdp_W=float(cap_W))


# -- operations ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Op:
    """One kernel (or ``count`` identical kernels): FLOPs, bytes moved, and a GEMM's shape."""

    name: str
    kind: str                 # gemm | attn | elem
    flops: float
    bytes: float
    m: int = 0
    n: int = 0
    k: int = 0
    count: int = 1
    streams: int = 0          # 0: one batched kernel; n: separate kernels on n streams

    def scaled(self, factor: float, name: str | None = None) -> Op:
        return Op(name or self.name, self.kind, self.flops * factor, self.bytes * factor,
                  self.m, self.n, self.k, self.count, self.streams)


def gemm(name: str, m: int, n: int, k: int, elem_bytes: float, count: int = 1,
         streams: int = 0) -> Op:
    """``count`` GEMMs of (m x k) @ (k x n): 2mnk FLOPs each, inputs and output read/written once.
    ``streams``: 0 when the ``count`` run as one batched kernel, else as separate kernels
    spread over that many CUDA streams (at most that many share the SMs at a time).

    >>> gemm("qkv", 4096, 6144, 4096, 2).flops
    206158430208
    """
    m, n, k = max(int(m), 0), max(int(n), 0), max(int(k), 0)
    return Op(name, "gemm", 2 * m * n * k * count,
              (m * k + k * n + m * n) * elem_bytes * count, m, n, k, count, streams)


class Heads(NamedTuple):
    """The attention heads on one GPU: query and key/value heads, and their dimensions."""

    heads: int
    kv_heads: int
    qk_dim: int
    v_dim: int


#: HBM bytes per attention score without flash-attention, as Megatron-LM runs it: QK^T writes
#: the 16-bit scores (2), the fused scale-mask-softmax kernel reads them and writes the 16-bit
#: probabilities (2 + 2; FP32 only in registers), attention dropout reads them and writes the
#: dropped probabilities and a 1-byte mask (2 + 2 + 1), the PV GEMM reads them (2)
UNFUSED_SCORE_BYTES = record(
    "UNFUSED_SCORE_BYTES", 13, "B per score", "attention without flash-attention",
    "physical: Megatron-LM megatron/model/fused_softmax.py (FusedScaleMaskSoftmax: "
    "scaled_upper_triang_masked_softmax_cuda takes and returns fp16/bf16) and "
    "megatron/model/transformer.py (attention dropout, 0.1 by default) at commit 285068c8; "
    "2 + 2 + 2 + 2 + 2 + 1 + 2 bytes; not fitted")


def attention(name: str, batch: int, q_len: int, kv_len: int, shape: Heads,
              elem_bytes: float, *, causal: bool = True, flash: bool = True,
              balanced_chunks: bool = False) -> Op:
    """The attention core (QK^T, softmax, PV) for ``shape.heads`` query heads on one GPU.

    With flash-attention the score matrix never reaches HBM and masked blocks are skipped;
    without it the scores are written and read back (softmax, dropout, PV) in 16/32-bit.
    ``balanced_chunks``: the ``q_len`` queries are this GPU's share of a causal sequence of
    ``kv_len`` tokens cut into load-balanced chunks (context parallelism: chunk ``i`` and
    ``2 cp - 1 - i`` on rank ``i``), so they see half the keys on average, as a whole sequence
    does.
    """
    heads, kv_heads, qk_dim, v_dim = shape
    frac = 0.5 if causal and (q_len == kv_len or balanced_chunks) and q_len > 1 else 1.0
    flops = 2.0 * batch * heads * q_len * kv_len * (qk_dim + v_dim)
    io = batch * (q_len * heads * (qk_dim + v_dim) + kv_len * kv_heads * (qk_dim + v_dim))
    if flash:
        return Op(name, "attn", flops * frac, io * elem_bytes, q_len, kv_len, qk_dim)
    scores = batch * heads * q_len * kv_len
    # one (q_len x kv_len) GEMM per sequence and head, run as a batched GEMM, with the scores
    # through HBM in between (UNFUSED_SCORE_BYTES per score)
    return Op(name, "gemm", flops, io * elem_bytes + scores * UNFUSED_SCORE_BYTES.value, q_len,
              kv_len, qk_dim, count=max(batch * heads, 1))


def elementwise(name: str, elems: float, passes: float, elem_bytes: float) -> Op:
    """A memory-bound pass over ``elems`` values, read or written ``passes`` times in all."""
    return Op(name, "elem", 0.0, elems * passes * elem_bytes)


def gemm_efficiency(op: Op, gpu: GPUSpec, precision: str = "bf16") -> float:
    """Achieved fraction of the dense peak for a GEMM of this shape.

    >>> g = gpu_spec("H100-SXM")
    >>> small, big = gemm("s", 128, 128, 128, 2), gemm("b", 8192, 8192, 8192, 2)
    >>> gemm_efficiency(small, g) < 0.05 < 0.6 < gemm_efficiency(big, g)
    True
    """
    ceiling = GEMM_EFF.get(gpu.arch, GEMM_EFF_DEFAULT).value
    if precision in QUANTIZED:
        ceiling *= FP8_EFF.value
    if op.m <= 0 or op.n <= 0 or op.k <= 0:
        return ceiling
    sms = max(gpu.sms, 1)
    # separate kernels on ``streams`` streams: at most that many share the SMs at a time
    together = min(op.streams, op.count) if op.streams else op.count
    rounds = math.ceil(op.count / together)
    fill = 0.0
    for tm, tn in tile_shapes(gpu.arch):
        tiles = math.ceil(op.m / tm) * math.ceil(op.n / tn) * together
        waves = math.ceil(tiles / sms) * rounds
        # useful work over the SM-slots of the waves (padded tiles, a part-filled last wave);
        # the library's heuristic picks the tile shape that wastes least
        fill = max(fill, (op.m * op.n * op.count) / (waves * sms * tm * tn))
    balance = gpu.peak_tflops(precision) * 1e12 / (gpu.hbm_GBps * 1e9)
    depth = op.k / (op.k + K_HALF_PER_BALANCE.value * balance)
    return ceiling * fill * depth


def op_time_s(op: Op, gpu: GPUSpec, precision: str, attn_kernel: str = "native") -> float:
    """Roofline time of one operation (all ``count`` kernels) on ``gpu``.

    ``attn_kernel``: ``native`` (the generation's best fused attention: FA2 on Ampere,
    cuDNN / FA3 on Hopper and later) or ``fa2`` (FlashAttention-2 everywhere, as PyTorch's
    SDPA runs it) or ``fa2-sm`` (FlashAttention-2 with its Hopper rate as a per-SM cap,
    :data:`FA2_SM_TFLOPS`, below the native rate: the same kernel as ``fa2`` on the H100 (350
    against 356 TFLOP/s), and right on parts whose tensor rate per SM differs from the H100's;
    the video model's)."""
    kernels = op.count if (op.kind != "gemm" or op.streams) else 1
    launch = KERNEL_US.value * 1e-6 * kernels
    mem = op.bytes / (gpu.hbm_GBps * 1e9 * HBM_EFF.value)
    if op.kind == "elem" or op.flops == 0:
        return mem + launch
    prec = precision if op.kind == "gemm" else _attn_precision(precision)
    peak = gpu.peak_tflops(prec) * 1e12
    if op.kind == "attn":
        eff = GEMM_EFF.get(gpu.arch, GEMM_EFF_DEFAULT).value * ATTN_EFF.value
        if attn_kernel == "fa2" and gpu.arch in ("hopper", "blackwell"):
            eff *= FA2_ON_HOPPER.value
    else:
        eff = gemm_efficiency(op, gpu, prec)
    rate = peak * max(eff, 1e-6)
    if op.kind == "attn" and attn_kernel == "fa2-sm":
        if gpu.arch == "hopper":
            rate = min(rate, FA2_SM_TFLOPS.value * 1e12 * gpu.sms)
        elif gpu.arch == "blackwell":
            rate *= FA2_ON_HOPPER.value
    return max(op.flops / rate, mem) + launch


def _attn_precision(precision: str) -> str:
    """Attention cores run in 16-bit under FP8/FP4 training recipes."""
    return {"fp8": "bf16", "mxfp8": "bf16", "fp4": "bf16"}.get(precision, precision)


def achieved_tflops(op: Op, gpu: GPUSpec, precision: str) -> float:
    """FLOP rate of ``op`` in TFLOP/s (1e12)."""
    return op.flops / op_time_s(op, gpu, precision) / 1e12


# -- a transformer block as operations ----------------------------------------------------------

#: 2-byte passes over the tensor per element-wise step: fused kernels (Megatron-Core /
#: Transformer Engine, torch.compile) against PyTorch eager as the reference Llama block runs
#: it (RMSNorm upcast to FP32 with pow, mean, rsqrt and two multiplies as separate kernels;
#: RoPE through FP32 complex views; SiLU then multiply; each kernel reads and writes HBM)
PASSES = {True: {"norm": 2, "residual_norm": 5, "act_gated": 3, "act": 2, "residual": 3,
                 "rope": 0},
          False: {"norm": 20, "residual_norm": 23, "act_gated": 5, "act": 4, "residual": 3,
                  "rope": 10}}
#: 2-byte passes per element of a serving engine's forward (no activations kept for a
#: backward): the residual add fused into each of a block's two RMSNorms (read the block's
#: output and the residual, write the new residual and the normalised input: 4 passes over the
#: hidden state; vLLM csrc/layernorm_kernels.cu fused_add_rms_norm, SGLang's
#: fused_add_rmsnorm, TensorRT-LLM's RmsNorm plugin with residual), the activation (SiLU-and-
#: multiply reads both halves and writes one: 3 passes over the MLP width; vLLM
#: csrc/activation_kernels.cu silu_and_mul), RoPE inside the attention kernel
SERVE_PASSES = {"add_norm": 4, "norms": 2, "act_gated": 3, "act": 2}


class Split(NamedTuple):
    """How a block's work is split over GPUs: tensor, expert and context parallel sizes, and
    the expert tensor parallelism (None: ``tp``)."""

    tp: int = 1
    ep: int = 1
    cp: int = 1
    etp: int | None = None


def layer_ops(model: ModelSpec, layer: int, batch: int, q_len: int, kv_len: int | None = None,
              *, split: Split = Split(), precision: str = "bf16", flash: bool = True,
              fused: bool = True) -> list[Op]:
    """Forward operations of block ``layer`` on one GPU.

    ``batch`` sequences of ``q_len`` new tokens attend to ``kv_len`` keys (default ``q_len``;
    inference decode: ``q_len=1`` and the cached length). ``split``: tensor parallelism ``tp``
    splits heads and MLP width; context parallelism ``cp`` splits the sequence (each rank holds
    ``q_len/cp`` queries against the whole ``kv_len``); expert parallelism ``ep`` spreads the
    routed experts and ``etp`` (default ``tp``) splits each one: an expert-model-parallel group
    of ``ep x etp`` GPUs serves the tokens its GPUs hold outside the tensor-parallel regions
    (``1/tp`` of the block's, sequence parallel), so each GPU runs ``top_k / tp`` experts' worth
    of its block's tokens (balanced routing).

    >>> m = load_model("llama3-8b")
    >>> ops = layer_ops(m, 0, 1, 8192)
    >>> sorted({o.kind for o in ops})
    ['attn', 'elem', 'gemm']
    >>> round(sum(o.flops for o in ops if o.kind == "gemm") / 1e12, 3)   # 2 x params x tokens
    3.573
    """
    if not model.is_transformer:
        raise InputError(f"{model.name} is a {model.arch}; layer_ops needs a transformer",
                         field="model")
    kv_len = q_len if kv_len is None else kv_len
    tp, ep, cp, etp = split
    prec = check_precision(precision)
    eb = ACT_BYTES[prec]
    q_loc = max(q_len // cp, 1) if cp > 1 else q_len
    T = batch * q_loc
    h = model.hidden
    a = max(model.heads // tp, 1)
    kvh = max(model.kv_heads // tp, 1) if model.attention != "mla" else a
    ps = PASSES[fused]
    quant = prec in QUANTIZED      # GEMM inputs cast on the way in
    f = max(model.ffn // tp, 1)
    up = f * (2 if model.gated else 1)
    # a parallel block's attention and dense MLP read the same normalised input, so their input
    # projections run as one GEMM
    fuse_up = model.parallel_block and not model.moe_layer(layer) and model.attention != "mla"
    ops: list[Op] = [elementwise("norm1", T * h, ps["norm"], eb)]
    qd, vd = _qkv_ops(ops, model, T, a, kvh, eb, up if fuse_up else 0)
    if ps["rope"]:
        ops.append(elementwise("rope", T * (a + kvh) * qd, ps["rope"], eb))
    ops.append(attention("attn_core", batch, q_loc, kv_len, Heads(a, kvh, qd, vd), eb,
                         causal=model.arch != "encoder",
                         flash=flash, balanced_chunks=cp > 1 and q_len == kv_len))
    if quant:
        ops.append(elementwise("attn_out_cast", T * a * vd, FP8_CAST_PASSES.value, eb))
    ops.append(gemm("attn_out", T, h, a * vd, eb))
    if model.parallel_block:      # the MLP reads norm1's output: a residual add, no norm
        ops.append(elementwise("residual2", T * h, ps["residual"], eb))
    else:
        ops.append(elementwise("residual_norm2", T * h, ps["residual_norm"], eb))
    if model.moe_layer(layer):
        _moe_ops(ops, model, T, split, eb, ps, quant)
    else:
        if not fuse_up:
            ops.append(gemm("mlp_up", T, up, h, eb))
        ops.append(elementwise("mlp_act", T * f, ps["act_gated"] if model.gated else ps["act"],
                               eb))
        if quant:
            ops.append(elementwise("mlp_down_cast", T * f, FP8_CAST_PASSES.value, eb))
        ops.append(gemm("mlp_down", T, h, f, eb))
    ops.append(elementwise("residual", T * h, ps["residual"], eb))
    return ops


def _qkv_ops(ops: list[Op], model: ModelSpec, T: int, a: int, kvh: int, eb: float,
             fused_up: int) -> tuple[int, int]:
    """Append the attention's input projections for ``T`` tokens and ``a`` query heads (``kvh``
    KV heads) on one GPU: MLA's low-rank down and up projections, else one QKV GEMM (with the
    MLP's ``fused_up`` columns where a parallel block fuses them); the query/key and value head
    dimensions."""
    h = model.hidden
    if model.attention == "mla":
        qd, vd = model.q_head_dim, model.v_head_dim
        if model.q_lora_rank:
            ops.append(gemm("q_down", T, model.q_lora_rank, h, eb))
            ops.append(gemm("q_up", T, a * qd, model.q_lora_rank, eb))
        else:
            ops.append(gemm("q_proj", T, a * qd, h, eb))
        ops.append(gemm("kv_down", T, model.kv_lora_rank + model.qk_rope_head_dim, h, eb))
        ops.append(gemm("kv_up", T, a * (model.qk_nope_head_dim + vd), model.kv_lora_rank, eb))
        return qd, vd
    qd = model.head_dim
    if fused_up:      # PaLM (Chowdhery et al. 2022, Sec. 2): one GEMM for both inputs
        ops.append(gemm("qkv_mlp_up", T, (a + 2 * kvh) * qd + fused_up, h, eb))
    else:
        ops.append(gemm("qkv", T, (a + 2 * kvh) * qd, h, eb))
    return qd, qd


def _moe_ops(ops: list[Op], model: ModelSpec, T: int, split: Split, eb: float,
             ps: dict, quant: bool) -> None:
    """Append an MoE block's operations on one GPU: the router over the tokens it holds, the
    local experts' grouped GEMMs (balanced routing), activation, permutation, casts and the
    shared experts."""
    tp, ep, _, etp = split
    h = model.hidden
    E, k = model.experts, model.top_k
    fe = model.expert_ffn
    fe_up = fe * (2 if model.gated else 1)
    et = tp if etp is None else etp
    held = T / tp                 # tokens this GPU routes (sequence parallel)
    ops.append(gemm("router", math.ceil(held), E, h, eb))
    local = max(E // ep, 1)
    tok = held * k * ep * et / E  # tokens per local expert, balanced routing
    ops.append(gemm("expert_up", math.ceil(tok), max(fe_up // et, 1), h, eb, count=local,
                    streams=GROUPED_STREAMS.value))
    ops.append(gemm("expert_down", math.ceil(tok), h, max(fe // et, 1), eb, count=local,
                    streams=GROUPED_STREAMS.value))
    ops.append(elementwise("expert_act", tok * local * fe / et,
                           ps["act_gated"] if model.gated else ps["act"], eb))
    ops.append(elementwise("permute", tok * local * h, 4, eb))
    if quant:
        ops.append(elementwise("expert_cast", tok * local * (h + fe / et),
                               FP8_CAST_PASSES.value, eb))
    if model.shared_experts:
        fs = fe * model.shared_experts // tp
        ops.append(gemm("shared_up", T, fs * (2 if model.gated else 1), h, eb))
        ops.append(gemm("shared_down", T, h, fs, eb))


def head_ops(model: ModelSpec, batch: int, q_len: int, *, tp: int = 1, cp: int = 1,
             precision: str = "bf16") -> list[Op]:
    """Forward operations outside the blocks: embedding lookup, final norm, logits, loss."""
    eb = ACT_BYTES[check_precision(precision)]
    T = batch * (max(q_len // cp, 1) if cp > 1 else q_len)
    v = max(model.vocab // tp, 1)
    return [elementwise("embedding", T * model.hidden, 2, eb),
            elementwise("final_norm", T * model.hidden, 2, eb),
            gemm("logits", T, v, model.hidden, eb),
            elementwise("loss", T * v, 3, 4)]


def optimizer_op(params: float, *, master_bytes: int = 4, grad_bytes: int = 4) -> Op:
    """Adam(W) step over ``params`` parameters held on one GPU: read parameter, gradient and
    both moments, write parameter, moments and the 16-bit working copy."""
    per = master_bytes * 2 + grad_bytes + 4 * 2 * 2 + 2
    return Op("optimizer", "elem", 0.0, params * per)


from gpufabric.workloads.models import load_model  # noqa: E402  (doctest convenience)

__all__ = ["PRECISIONS", "ACT_BYTES", "LAYER", "record", "GEMM_EFF", "FP8_EFF",
           "K_HALF_PER_BALANCE", "ATTN_EFF", "HBM_EFF", "KERNEL_US", "FA2_ON_HOPPER",
           "FA2_SM_TFLOPS", "GPUSpec",
           "gpu_spec",
           "POWER_CLOCK_EXP", "power_capped", "tile_shapes",
           "check_precision", "Op", "gemm", "attention", "elementwise", "gemm_efficiency",
           "PASSES", "op_time_s", "achieved_tflops", "layer_ops", "head_ops", "optimizer_op",
           "load_model"]

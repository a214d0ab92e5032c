"""gpufabric's compute model against measured kernels, per kernel family and GPU.

Each measured row is timed by the functions the serving model uses
(:func:`gpufabric.workloads.inference.itertime.linear_s` for GEMMs and the MoE layer's expert
GEMMs, :func:`~gpufabric.workloads.inference.itertime.attention_flops_per_s` and the HBM rate for
attention, :func:`gpufabric.collectives.predict` on an NVLink server for all-reduce) as a list
of parts, each ``(compute-limited, memory-limited)`` seconds; the kernel's time is the sum of
their maxima, as :class:`~gpufabric.workloads.inference.itertime.StepModel` sums its GEMMs.

The error of a row is ``predicted / measured - 1``. :func:`fit` scales one physical efficiency
per family, GPU and precision (the GEMM ceiling for GEMMs and MoE, the attention fraction for
prefill, the HBM fraction for decode): fitted on half the shapes (every other distinct weight
or head shape), its error reported on the other half, beside the shipped value's on the same
half.

Examples
--------
>>> from pathlib import Path
>>> fx = Path(__file__).parents[3] / "tests" / "data" / "kerneldb"
>>> r = compare(fx, family="gemm")[0]
>>> r["gpu"], r["family"], r["backend"], r["rows"]
('H100-SXM', 'gemm', 'vllm', 6)
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable
from statistics import median
from typing import Any

from gpufabric.errors import InputError
from gpufabric.kerneldb import db as D
from gpufabric.workloads import compute as C
from gpufabric.workloads.inference import itertime as IT
from gpufabric.workloads.inference import precisions as P

Parts = list[tuple[float, float]]

#: The database's names of weight formats that gpufabric's format table spells otherwise
#: (block-scaled FP8 is FP8 with a scale per 128 x 128 block: its scales are negligible bytes);
#: a name neither here nor in the table is left out of the comparison.
DTYPE_ALIASES = {"fp8_block": "fp8", "int8_wo": "int8-weight-only", "int4_wo": "int4",
                 "sq": "w8a8-int8", "w4a16_mxfp4": "mxfp4"}
#: Bytes per element of a KV cache or collective buffer by the database's dtype name.
ELEM_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "fp8": 1, "int8": 1, "float": 4,
              "float32": 4}
#: Rows compared per table by default: evenly spaced over the table (deterministic).
MAX_ROWS = 3000
#: Kernels at least this long (seconds) are "large": their time is set by the tensor-core or
#: HBM rate the model's efficiencies describe, not by the few microseconds every kernel takes
#: to start and drain (which the serving model counts in the engine's per-iteration overhead,
#: not per kernel). :func:`fit` fits on them; ``compare`` reports them apart.
LARGE_S = 0.1e-3


def _compute(fmt_name: str, gpu: C.GPUSpec) -> tuple[P.Format, P.Compute] | None:
    try:
        fmt = P.lookup(DTYPE_ALIASES.get(fmt_name, fmt_name), "weights", "dtype")
    except InputError:
        return None
    for c in fmt.compute:
        if gpu.tflops.get(c.prec):
            return fmt, c
    return None


def _linear(gpu: C.GPUSpec, fc: tuple[P.Format, P.Compute], T: float, n: float, k: float,
            **kw: Any) -> tuple[float, float]:
    fmt, c = fc
    return IT.linear_s(gpu, c.prec, int(T), n, k, wb=fmt.bytes_per_value(k=int(k)),
                       ab=c.act_bytes, rate=c.rate, **kw)


def gemm_parts(row: dict, gpu: C.GPUSpec) -> Parts | None:
    """One GEMM (m x k) @ (k x n) with weights in ``gemm_dtype``."""
    fc = _compute(str(row["gemm_dtype"]), gpu)
    if fc is None:
        return None
    return [_linear(gpu, fc, row["m"], row["n"], row["k"])]


def _heads(row: dict) -> tuple[int, int, int, float] | None:
    kvb = ELEM_BYTES.get(str(row.get("kv_cache_dtype", "bfloat16")))
    if kvb is None or row.get("window_size", 0) or row.get("beam_width", 1) != 1:
        return None
    return int(row["num_heads"]), int(row["num_key_value_heads"]), int(row["head_dim"]), kvb


def prefill_parts(row: dict, gpu: C.GPUSpec) -> Parts | None:
    """Causal attention of ``batch_size`` sequences of ``isl`` tokens, no cached prefix: the
    query-key pairs at the attention rate against writing the cache at the HBM rate."""
    hd = _heads(row)
    if hd is None:
        return None
    h, kvh, d, kvb = hd
    b, s = row["batch_size"], row["isl"]
    pairs = b * s * (s + 1) / 2.0
    hbm = gpu.hbm_GBps * 1e9 * C.HBM_EFF.value
    return [(pairs * 2.0 * h * 2 * d / IT.attention_flops_per_s(gpu),
             b * s * 2.0 * kvh * d * kvb / hbm)]


def decode_parts(row: dict, gpu: C.GPUSpec) -> Parts | None:
    """One new token for each of ``batch_size`` sequences with ``isl + step`` cached tokens:
    the FLOPs at the attention rate against reading the cache at the HBM rate."""
    hd = _heads(row)
    if hd is None:
        return None
    h, kvh, d, kvb = hd
    ctx = row["batch_size"] * (row["isl"] + row["step"])
    hbm = gpu.hbm_GBps * 1e9 * C.HBM_EFF.value
    return [(ctx * 2.0 * h * 2 * d / IT.attention_flops_per_s(gpu),
             ctx * 2.0 * kvh * d * kvb / hbm)]


def moe_parts(row: dict, gpu: C.GPUSpec) -> Parts | None:
    """The routed experts' up and down GEMMs of ``num_tokens`` tokens on one rank of
    ``moe_tp_size x moe_ep_size``, balanced routing (the rows with another distribution are
    left out): each local expert gets ``tokens x topk / experts`` rows and the step reads the
    weights of the experts it touches, as the serving model counts them. The up GEMM is
    gated (gate and up projections, twice the width) unless the kernel is a non-gated one
    (``kernel_source`` ``..._nongated``)."""
    if row.get("distribution", "balanced") != "balanced":
        return None
    fc = _compute(str(row["moe_dtype"]), gpu)
    if fc is None:
        return None
    T, E, k = row["num_tokens"], row["num_experts"], row["topk"]
    h, fe = row["hidden_size"], row["inter_size"] / row["moe_tp_size"]
    g = 1 if "nongated" in str(row.get("kernel_source", "")) else 2
    local = max(E // row["moe_ep_size"], 1)
    rows = max(math.ceil(T * k / E), 1)
    touched = local * (1.0 - (1.0 - k / E) ** T)
    return [_linear(gpu, fc, rows, g * fe, h, count=local, weight_count=touched),
            _linear(gpu, fc, rows, h, fe, count=local, weight_count=touched)]


_TOPOLOGIES: dict[str, Any] = {}


def allreduce_parts(row: dict, gpu: C.GPUSpec) -> Parts | None:
    """An all-reduce of ``message_size`` elements over ``num_gpus`` GPUs of one server (eight
    on the GPU's scale-up fabric), as NCCL runs it in gpufabric's collective model."""
    size = ELEM_BYTES.get(str(row.get("nccl_dtype", row.get("allreduce_dtype"))))
    if row.get("op_name") != "all_reduce" or size is None or row["num_gpus"] > 8:
        return None
    if gpu.name not in _TOPOLOGIES:
        from gpufabric.topology.build import from_spec
        try:
            _TOPOLOGIES[gpu.name] = from_spec({"gpu": gpu.name, "gpus_per_node": 8})
        except InputError:
            _TOPOLOGIES[gpu.name] = None
    topo = _TOPOLOGIES[gpu.name]
    if topo is None:
        return None
    from gpufabric import collectives
    p = collectives.predict(topo, "all_reduce", int(row["message_size"] * size),
                            int(row["num_gpus"]), per_node=int(row["num_gpus"]))
    return [(0.0, p.time_us * 1e-6)]


#: Each family's timing, the column naming its precision, the columns of a shape (the unit
#: held out), and the efficiency :func:`fit` scales (``compute`` or ``memory``; None: none).
FAMILY = {
    "gemm": (gemm_parts, "gemm_dtype", ("n", "k"), "compute"),
    "attention-prefill": (prefill_parts, "kv_cache_dtype",
                          ("num_heads", "num_key_value_heads", "head_dim"), "compute"),
    "attention-decode": (decode_parts, "kv_cache_dtype",
                         ("num_heads", "num_key_value_heads", "head_dim"), "memory"),
    "moe": (moe_parts, "moe_dtype", ("hidden_size", "inter_size", "num_experts", "topk"),
            "compute"),
    "allreduce": (allreduce_parts, "op_name", ("num_gpus",), None),
}


def time_s(parts: Parts, compute: float = 1.0, memory: float = 1.0) -> float:
    """A kernel's seconds from its parts, each efficiency scaled by ``compute`` / ``memory``.

    >>> time_s([(2.0, 1.0), (1.0, 3.0)]), time_s([(2.0, 1.0)], compute=2.0)
    (5.0, 1.0)
    """
    return sum(max(c / compute, m / memory) for c, m in parts)


def _sample(rows: list[dict], max_rows: int | None) -> list[dict]:
    if not max_rows or len(rows) <= max_rows:
        return rows
    step = len(rows) / max_rows
    return [rows[int(i * step)] for i in range(max_rows)]


def points(table: D.Table, max_rows: int | None = MAX_ROWS) -> list[dict[str, Any]]:
    """Every row of ``table`` gpufabric can time: its precision, shape, measured seconds and
    gpufabric's parts (rows of a format, window or distribution it does not model are left
    out)."""
    if table.gpu is None:
        return []
    gpu = C.gpu_spec(table.gpu)
    parts_of, prec_col, shape_cols, _ = FAMILY[table.family]
    out = []
    for row in _sample(D.read(table), max_rows):
        lat = row.get("latency")
        if not isinstance(lat, int | float) or not lat > 0:
            continue
        parts = parts_of(row, gpu)
        if parts is not None:
            out.append({"precision": str(row.get(prec_col, "")),
                        "shape": tuple(row.get(c) for c in shape_cols),
                        "measured_s": lat * 1e-3, "parts": parts})
    return out


def errors(pts: Iterable[dict], compute: float = 1.0, memory: float = 1.0) -> list[float]:
    """``predicted / measured - 1`` of each point."""
    return [time_s(p["parts"], compute, memory) / p["measured_s"] - 1.0 for p in pts]


def summary(errs: list[float]) -> dict[str, Any]:
    """Count, median |error|, median signed error (the bias) and 90th percentile |error|.

    >>> summary([0.1, -0.2, 0.3])
    {'rows': 3, 'median_err': 0.2, 'bias': 0.1, 'p90_err': 0.3}
    """
    if not errs:
        return {"rows": 0, "median_err": None, "bias": None, "p90_err": None}
    a = sorted(abs(e) for e in errs)
    return {"rows": len(errs), "median_err": round(median(a), 4),
            "bias": round(median(errs), 4),
            "p90_err": round(a[min(len(a) - 1, math.ceil(0.9 * len(a)) - 1)], 4)}


def compare(db: str | os.PathLike[str] | None = None, *, gpu: str | None = None,
            family: str | None = None, backend: str | None = None,
            max_rows: int | None = MAX_ROWS,
            progress: Callable[[int, int], None] | None = None) -> list[dict[str, Any]]:
    """Per measured table (each backend's newest version, GPUs of gpufabric's catalog): the
    error of gpufabric's time against every row it can time (:func:`summary`)."""
    tabs = [t for t in D.tables(db, gpu=gpu, family=family, backend=backend) if t.gpu]
    out = []
    for t in tabs:
        pts = points(t, max_rows)
        large = summary(errors(p for p in pts if p["measured_s"] >= LARGE_S))
        out.append({"system": t.system, "gpu": t.gpu, "family": t.family,
                    "backend": t.backend, "version": t.version, "table": t.path.stem,
                    **summary(errors(pts)), **{f"large_{k}": v for k, v in large.items()}})
        if progress:
            progress(1, len(tabs))
    return out


#: Multipliers of the shipped efficiency :func:`fit` tries (a grid: the median error is a step
#: function of the value, so a grid finds its least as well as a solver)
GRID = tuple(round(0.30 + 0.01 * i, 2) for i in range(171))


def shipped(family: str, precision: str, gpu: C.GPUSpec) -> tuple[str, float]:
    """The physical parameter :func:`fit` scales for ``family`` and its shipped value: the
    GEMM ceiling (the generation's ``GEMM_EFF``, times ``FP8_EFF`` and ``FP4_EFF`` for a
    quantised GEMM), the attention fraction (``ATTN_EFF``) or the HBM fraction (``HBM_EFF``).

    >>> shipped("gemm", "fp8", C.gpu_spec("H100-SXM"))
    ('GEMM ceiling (GEMM_EFF[hopper] x FP8_EFF), fraction of peak', 0.616)
    """
    if family == "attention-prefill":
        return "ATTN_EFF, fraction of the GEMM ceiling", C.ATTN_EFF.value
    if family == "attention-decode":
        return "HBM_EFF, fraction of HBM bandwidth", C.HBM_EFF.value
    arch = gpu.arch
    v = C.GEMM_EFF.get(arch, C.GEMM_EFF_DEFAULT).value
    name = f"GEMM_EFF[{arch}]"
    fc = _compute(DTYPE_ALIASES.get(precision, precision), gpu)
    prec = fc[1].prec if fc else "bf16"
    if prec in C.QUANTIZED:
        v, name = v * C.FP8_EFF.value, name + " x FP8_EFF"
    if prec == "fp4":
        v, name = v * IT.FP4_EFF.value, name + " x FP4_EFF"
    return f"GEMM ceiling ({name}), fraction of peak", round(v, 4)


def split_by_shape(pts: list[dict]) -> tuple[list[dict], list[dict]]:
    """(fit, held-out): the distinct shapes in order, every other one held out (with a single
    shape, nothing is held out and the fit reports on its own points)."""
    shapes = sorted({p["shape"] for p in pts}, key=str)
    held = set(shapes[1::2])
    return [p for p in pts if p["shape"] not in held], [p for p in pts if p["shape"] in held]


def fit(db: str | os.PathLike[str] | None = None, *, gpu: str | None = None,
        family: str | None = None, backend: str | None = None,
        max_rows: int | None = MAX_ROWS,
        progress: Callable[[int, int], None] | None = None) -> list[dict[str, Any]]:
    """Per table and precision: the multiple of the family's physical efficiency
    (:func:`shipped`) of least median error on half the shapes of its large kernels
    (:data:`LARGE_S`), and the median error on the other half at the shipped and at the fitted
    value (the held-out error, first). A fitted fraction of a peak is kept at or below 1."""
    out: list[dict[str, Any]] = []
    tabs = [t for t in D.tables(db, gpu=gpu, family=family, backend=backend)
            if t.gpu and FAMILY[t.family][3]]
    for t in tabs:
        if progress:
            progress(1, len(tabs))
        side = str(FAMILY[t.family][3])
        g = C.gpu_spec(str(t.gpu))
        by_prec: dict[str, list[dict]] = {}
        for p in points(t, max_rows):
            if p["measured_s"] < LARGE_S:
                continue
            by_prec.setdefault(p["precision"], []).append(p)
        for prec, pts in sorted(by_prec.items()):
            name, value = shipped(t.family, prec, g)
            train, held = split_by_shape(pts)
            held = held or train
            best = min((s for s in GRID if value * s <= 1.0),
                       key=lambda s: median(abs(e) for e in errors(
                           train, **{side: s})))
            before, after = errors(held), errors(held, **{side: best})
            out.append({"gpu": t.gpu, "family": t.family, "backend": t.backend,
                        "version": t.version, "precision": prec, "parameter": name,
                        "shipped": value, "fitted": round(value * best, 4),
                        "fit_rows": len(train), "held_out_rows": len(held),
                        "held_out_err_shipped": summary(before)["median_err"],
                        "held_out_err_fitted": summary(after)["median_err"]})
    return out

"""Measured GEMM times as an optional timing source of the serving model.

With AIConfigurator's database installed (``pip install 'gpufabric[aic]'``), ``serve
--kernel-times aic`` (and ``validate --kernel-times aic``) takes the time of each dense GEMM
of a serving iteration (the attention projections, the MLP, a MoE model's router and shared
experts, the logits) from the kernels measured on the same GPU by the engine's own backend
and runtime (:data:`RUNTIMES`: TensorRT-LLM's tables are its PyTorch flow's kernels, so the
TensorRT backend's engines are not covered by them), where the database covers them, and each
MoE layer's routed experts from the MoE kernels it measured at the same shape and expert
layout, and keeps gpufabric's roofline everywhere else (other GPUs and vendors, runtimes,
formats, shapes or layouts the database did not measure). Each run says how much of its GEMM
time came from which source.

How a GEMM ``(T x k) @ (k x n)`` is read from a table of measured ``(m, n, k, latency)``
rows of its weight format:

- the same ``(n, k)`` measured: the latency interpolated linearly in ``m`` between the
  measured row counts on either side of ``T`` (beyond the largest, scaled by ``T / m``: the
  kernel is compute-bound there);
- otherwise the nearest measured ``(n, k)`` within a factor :data:`MAX_SHAPE_RATIO` in each
  dimension, its latency at ``T`` scaled by ``n k / (n' k')`` (the same efficiency at a
  neighbouring shape: the weight bytes read and the FLOPs both scale so);
- farther than that, or a format or GPU the database lacks: gpufabric's own model;
- a measured kernel shorter than :data:`MIN_KERNEL_S` (0.1 ms) is left to the model too: its
  time is mostly its launch and drain, which the engine profiles count per iteration.

The engine profiles' per-iteration overheads stay as they were fitted (with gpufabric's
roofline), so the measured source is a different model, not a refined one: its end-to-end
error is reported beside the default's in docs/kernels.md.

Examples
--------
>>> from pathlib import Path
>>> fx = Path(__file__).parents[3] / "tests" / "data" / "kerneldb"
>>> src = Source(fx)
>>> round(src.gemm_s("H100-SXM", "vllm", "bf16", 2048, 4096, 4096) * 1e6, 1)
106.0
>>> src.gemm_s("H100-SXM", "vllm", "bf16", 8, 4096, 4096)    # 12 us: a launch, left to the model
>>> src.gemm_s("H100-SXM", "vllm", "fp4", 2048, 4096, 4096)  # a format it did not measure
"""

from __future__ import annotations

import bisect
import contextlib
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from gpufabric.errors import InputError
from gpufabric.kerneldb import db as D
from gpufabric.workloads.inference import kerneltimes

#: A neighbouring measured shape stands in for an unmeasured one within this factor in each of
#: ``n`` and ``k`` (beyond it the tiling, and so the efficiency, can differ a lot).
MAX_SHAPE_RATIO = 2.0
#: Measured kernels shorter than this are left to gpufabric's model: their time is mostly the
#: kernel's launch and drain, which the engine profiles count per iteration (fitted on
#: end-to-end runs), not the tensor-core or HBM rate (the database's large kernels:
#: :data:`gpufabric.kerneldb.compare.LARGE_S`).
MIN_KERNEL_S = 0.1e-3
#: Serving engine profiles (their family, before any ``-backend`` suffix; the longest that
#: matches wins) and what measured their kernels: the database's backend folder and the runtime
#: its rows must come from (None: any). TensorRT-LLM's tables hold the kernels of its PyTorch
#: flow (``kernel_source`` torch_flow, moe_torch_flow_*, deepgemm: the ``tensorrt-llm``
#: profile) and, on the A100, a few TensorRT-flow plugin GEMMs (``trt_flow_...``: smooth-quant
#: and weight-only); engines built by trtllm-build (the ``tensorrt-llm-tensorrt`` profile)
#: run TensorRT's own kernels, so only the latter stand for them.
TRT_FLOW, TORCH_FLOW = "trt_flow", "torch_flow"
RUNTIMES: dict[str, tuple[str, str | None]] = {
    "vllm": ("vllm", None), "sglang": ("sglang", None),
    "tensorrt-llm-tensorrt": ("trtllm", TRT_FLOW), "tensorrt-llm": ("trtllm", TORCH_FLOW)}
#: gpufabric's tensor precision of a GEMM and the database's weight format of the same kernel.
DTYPES = {"bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8", "fp4": "nvfp4"}
#: The database's GEMM weight formats the source times (a table of only other formats, as the
#: A100's TensorRT-flow smooth-quant and weight-only plugins, covers nothing).
TIMED_DTYPES = frozenset(DTYPES.values())
#: The names ``--kernel-times`` takes.
CHOICES = ("model", "aic")
#: The database's MoE weight formats for gpufabric's tensor precision, in order of preference
#: (FP8 per-tensor where measured, else block-scaled: DeepSeek's checkpoints are block-scaled
#: and the database measured their shapes so).
MOE_DTYPES = {"bf16": ("bfloat16",), "fp16": ("bfloat16",), "fp8": ("fp8", "fp8_block"),
              "fp4": ("nvfp4",)}
#: The MoE kernels an engine runs by default, by the database's ``kernel_source``, first
#: found first: TensorRT-LLM's CUTLASS MoE backend (its default), DeepGEMM for block-scaled
#: FP8 on Blackwell; the min-latency kernels are an opt-in backend and are not read. Other
#: backends: the kernel source with the most measured rows of the shape.
MOE_KERNELS = {"trtllm": ("moe_torch_flow_cutlass", "deepgemm", "moe_torch_flow")}

_Curve = tuple[list[int], list[float]]
#: a MoE table's curves: (dtype, hidden, inter, top_k, experts, moe_tp, moe_ep, gated) ->
#: kernel source -> curve over the tokens entering the layer
_MoeKey = tuple[str, int, int, int, int, int, int, bool]
_TableKey = tuple[str, str, str | None]


@dataclass
class Source:
    """Measured GEMM times, read from the database at ``db`` (see :func:`db.root`) once per
    GPU and backend; :attr:`used` tallies the seconds each source timed."""

    db: str | os.PathLike[str] | None = None
    name: str = "aic"
    # each keyed by (GPU, database backend, runtime): see :data:`RUNTIMES`
    _tables: dict[_TableKey, dict[tuple[str, int, int], _Curve] | None] = \
        field(default_factory=dict)
    versions: dict[_TableKey, str] = field(default_factory=dict)
    _moe: dict[_TableKey, dict[_MoeKey, dict[str, _Curve]] | None] = \
        field(default_factory=dict)

    def _curves(self, gpu: str, engine: str) -> dict[tuple[str, int, int], _Curve] | None:
        key = _table_key(gpu, engine)
        if key is None:
            return None
        _, backend, flow = key
        if key not in self._tables:
            tabs = D.tables(self.db, gpu=gpu, family="gemm", backend=backend)
            curves: dict[tuple[str, int, int], _Curve] | None = None
            if tabs:
                t = tabs[-1]
                raw: dict[tuple[str, int, int], dict[int, float]] = {}
                for r in D.read(t, ["gemm_dtype", "m", "n", "k", "latency", "kernel_source"]):
                    lat = r.get("latency")
                    if (isinstance(lat, int | float) and lat > 0 and of_runtime(r, flow)
                            and r.get("gemm_dtype") in TIMED_DTYPES):
                        raw.setdefault((str(r["gemm_dtype"]), int(r["n"]), int(r["k"])),
                                       {})[int(r["m"])] = float(lat) * 1e-3
                curves = {k: (sorted(v), [v[m] for m in sorted(v)]) for k, v in raw.items()}
                if curves:
                    self.versions[key] = f"{t.system} {t.backend} {t.version}"
            self._tables[key] = curves or None
        return self._tables[key]

    def gemm_s(self, gpu: str, engine: str, prec: str, T: int, n: float,
               k: float) -> float | None:
        """Seconds of one GEMM ``(T x k) @ (k x n)`` at tensor precision ``prec`` as the
        database measured it on ``gpu`` through ``engine``'s backend (None: not covered)."""
        dtype = DTYPES.get(prec)
        curves = self._curves(gpu, engine) if dtype else None
        if dtype is None or not curves or T <= 0:
            return None
        n, k = int(round(n)), int(round(k))
        exact = curves.get((dtype, n, k))
        if exact is not None:
            t = _at(exact, T)
        else:
            near = _nearest(curves, dtype, n, k)
            if near is None:
                return None
            (_, n2, k2), curve = near
            t = _at(curve, T) * (n * k) / (n2 * k2)
        return t if t >= MIN_KERNEL_S else None

    def _moe_curves(self, gpu: str, engine: str) -> dict[_MoeKey, dict[str, _Curve]] | None:
        key = _table_key(gpu, engine)
        if key is None:
            return None
        _, backend, flow = key
        if key not in self._moe:
            # every version, oldest first: a shape's newest measurement wins (TensorRT-LLM
            # 1.3.0rc23 re-measured only non-gated kernels on the H100 and H200)
            tabs = D.tables(self.db, gpu=gpu, family="moe", backend=backend, latest=False)
            # a version another one declares it reuses is read with that one, not again
            inside = {r.version for r in map(D.reused, tabs) if r is not None}
            curves: dict[_MoeKey, dict[str, _Curve]] | None = None
            if tabs:
                raw: dict[_MoeKey, dict[str, dict[int, float]]] = {}
                rows = (r for t in tabs if t.version not in inside for r in D.read(t))
                for r in rows:
                    lat = r.get("latency")
                    if r.get("distribution") != "balanced" or not (
                            isinstance(lat, int | float) and lat > 0) or not of_runtime(r, flow):
                        continue
                    src = str(r.get("kernel_source", ""))
                    k = (str(r["moe_dtype"]), int(r["hidden_size"]), int(r["inter_size"]),
                         int(r["topk"]), int(r["num_experts"]), int(r["moe_tp_size"]),
                         int(r["moe_ep_size"]), "nongated" not in src)
                    raw.setdefault(k, {}).setdefault(src, {})[int(r["num_tokens"])] = \
                        float(lat) * 1e-3
                curves = {k: {src: (sorted(v), [v[t] for t in sorted(v)])
                              for src, v in by_src.items()} for k, by_src in raw.items()}
            self._moe[key] = curves or None
        return self._moe[key]

    def moe_s(self, gpu: str, engine: str, prec: str, tokens: float,
              shape: kerneltimes.MoeShape) -> float | None:
        """Seconds of one MoE layer's routed experts on one rank, as the database measured
        the same shape and layout (its ``moe_tp_size x moe_ep_size``) with balanced routing
        through ``engine``'s backend, interpolated over the tokens entering the layer (None:
        not covered: another shape or layout, a format or kernel not measured, or a kernel
        under :data:`MIN_KERNEL_S`)."""
        backend = backend_of(engine)
        curves = self._moe_curves(gpu, engine)
        if not curves or tokens <= 0:
            return None
        for dtype in MOE_DTYPES.get(prec, ()):
            by_src = curves.get((dtype, int(shape.hidden), int(shape.inter), int(shape.top_k),
                                 int(shape.experts), int(shape.moe_tp), int(shape.moe_ep),
                                 bool(shape.gated)))
            if not by_src:
                continue
            pref = [s for s in MOE_KERNELS.get(str(backend), ()) if s in by_src]
            if MOE_KERNELS.get(str(backend)) and not pref:
                continue
            src = pref[0] if pref else max(sorted(by_src), key=lambda s: len(by_src[s][0]))
            t = _at(by_src[src], max(int(round(tokens)), 1))
            return t if t >= MIN_KERNEL_S else None
        return None

    def table(self, gpu: str, engine: str) -> str:
        """The GEMM table read for ``gpu`` and ``engine`` ('' if none)."""
        key = _table_key(gpu, engine)
        if key is None or self._curves(gpu, engine) is None:
            return ""
        return self.versions.get(key, "")

    def missing(self, gpu: str, engine: str) -> str:
        """Why there is no table for ``gpu`` and ``engine``."""
        run = runtime_of(engine)
        if run is None:
            return f"the database measured no kernels of the {engine} engine"
        if run[1] == TRT_FLOW:
            return (f"the database measured no {gpu} GEMMs of TensorRT-LLM's TensorRT backend "
                    "(its TensorRT-LLM kernels are the PyTorch flow's)")
        return f"the database has no GEMM table of {gpu}"


def _at(curve: _Curve, T: int) -> float:
    """The curve's seconds at ``T`` rows: linear between the measured counts either side,
    proportional beyond the last, the first's below the first."""
    ms, ts = curve
    i = bisect.bisect_left(ms, T)
    if i < len(ms) and ms[i] == T:
        return ts[i]
    if i == 0:
        return ts[0]
    if i == len(ms):
        return ts[-1] * T / ms[-1]
    m0, m1, t0, t1 = ms[i - 1], ms[i], ts[i - 1], ts[i]
    return t0 + (t1 - t0) * (T - m0) / (m1 - m0)


def _nearest(curves: dict, dtype: str, n: int, k: int) -> tuple[Any, _Curve] | None:
    best, dist = None, math.inf
    lim = math.log(MAX_SHAPE_RATIO)
    for key, curve in curves.items():
        if key[0] != dtype or key[1] <= 0 or key[2] <= 0 or n <= 0 or k <= 0:
            continue
        dn, dk = abs(math.log(key[1] / n)), abs(math.log(key[2] / k))
        if dn <= lim and dk <= lim and dn + dk < dist:
            best, dist = (key, curve), dn + dk
    return best


@contextlib.contextmanager
def use(name: str | None, db: str | os.PathLike[str] | None = None,
        field_name: str = "--kernel-times") -> Iterator[Source | None]:
    """Time GEMMs from ``name``'s source for the ``with`` block: ``aic`` (the database at
    ``db``, see :func:`db.root`), ``model`` or None (gpufabric's own roofline)."""
    if name not in (None, *CHOICES):
        raise InputError(f"got {name!r}; allowed: {', '.join(CHOICES)}", field=field_name)
    src = None
    if name == "aic":
        D.root(db, field=field_name)            # installed, or one line saying how
        src = Source(db)
    with kerneltimes.use(src):
        yield src


def runtime_of(engine: str) -> tuple[str, str | None] | None:
    """The database backend and runtime that measured an engine profile's kernels (None:
    none), the longest profile family that names it first.

    >>> runtime_of("tensorrt-llm-tensorrt"), runtime_of("tensorrt-llm")
    (('trtllm', 'trt_flow'), ('trtllm', 'torch_flow'))
    >>> runtime_of("vllm-v0"), runtime_of("lmdeploy")
    (('vllm', None), None)
    """
    for fam in sorted(RUNTIMES, key=len, reverse=True):
        if engine == fam or engine.startswith(fam + "-"):
            return RUNTIMES[fam]
    return None


def _table_key(gpu: str, engine: str) -> _TableKey | None:
    """(GPU, database backend, runtime) of ``engine``'s tables on ``gpu`` (None: none)."""
    run = runtime_of(engine)
    return None if run is None else (gpu, *run)


def backend_of(engine: str) -> str | None:
    """The database backend that measured an engine profile's kernels (None: none).

    >>> backend_of("tensorrt-llm-tensorrt"), backend_of("vllm-v0"), backend_of("lmdeploy")
    ('trtllm', 'vllm', None)
    """
    run = runtime_of(engine)
    return run[0] if run else None


def of_runtime(row: dict[str, Any], flow: str | None) -> bool:
    """Whether a measured row comes from ``flow``: TensorRT-LLM's TensorRT flow
    (``kernel_source`` starting ``trt_flow``), any other (the PyTorch flow), or, for None,
    either.

    >>> of_runtime({"kernel_source": "trt_flow_/gemm_L1/PLUGIN"}, "trt_flow")
    True
    >>> of_runtime({"kernel_source": "deepgemm"}, "trt_flow"), of_runtime({}, "torch_flow")
    (False, True)
    """
    if flow is None:
        return True
    trt = str(row.get("kernel_source", "")).startswith(TRT_FLOW)
    return trt if flow == TRT_FLOW else not trt

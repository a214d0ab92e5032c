"""Search the parallel layouts of a training job: branch and bound over every axis, rank by
throughput.

A layout is a *shape* -- tensor (``tp``, dividing the heads, inside a node), context (``cp``),
pipeline (``pp``), data (``dp``, the rest of the GPUs) and expert (``ep``, with the experts
split by ``tp`` or whole, ``etp`` 1, folded over ``tp x cp x dp``) sizes, virtual stages
(``vpp``) and the micro-batch -- with its *settings*: recomputation none / selective / full,
sequence parallelism on or off (with ``tp > 1``: the TP collectives as all-reduces or as
all-gathers and reduce-scatters), ZeRO stage 0-3 or hybrid FSDP (ZeRO-3 and HSDP without
pipelining), optimizer-state offload to host memory, TP overlap full (userbuffers / AsyncTP),
of the backward only (Megatron's asynchronous column-parallel backward) or none, DP
communication overlap on or off, and, where pipeline and data parallelism share a node with
room left by ``tp x cp``, which of the two runs inside the node (the rank order: the other
one crosses the network). Every combination that divides evenly is *considered*:

1. Shapes are ordered by a lower bound on their step time from compute alone (forward and
   backward of the slowest pipeline stage without recomputation, times the micro-batches,
   plus the pipeline bubble it implies): communication, recomputation, the optimizer and
   offload only add to it.
2. A layout is *pruned by bound* when its bound -- that compute bound (with the recomputation
   its setting adds), or the step time of a layout it cannot beat (the same with overlap on,
   without offload, with less recomputation) -- is above the ``top``-th best step time found
   so far; since shapes come in bound order, the first shape above it ends the search.
3. A layout is *pruned by memory* when it does not fit
   (:func:`gpufabric.workloads.memory.training_memory`).
4. The rest are *timed* by :func:`gpufabric.workloads.training.predict_step`.

Nothing is cut by a shortlist: the ``top`` layouts are those a brute-force enumeration of the
same axes (:func:`brute_force`) ranks first, ties broken the same way (:func:`_rank_key`).

Examples
--------
>>> rs = search("llama3-8b", "gpu=H100-SXM,gpus_per_node=8,nodes=2,nic=ib-ndr",
...             global_batch=32, seq_len=4096, top=3)
>>> len(rs), rs[0].tokens_per_s >= rs[1].tokens_per_s >= rs[2].tokens_per_s
(3, True)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from contextlib import contextmanager
from contextvars import ContextVar
from functools import cache
from math import prod
from collections.abc import Callable, Iterator
from typing import Any

from gpufabric import params as _params
from gpufabric import sweep
from gpufabric.errors import InputError
from gpufabric.topology.model import Topology
from gpufabric.workloads.compute import (
    ACT_BYTES, GPUSpec, Split, check_precision, gpu_spec, head_ops, layer_ops, op_time_s,
)
from gpufabric.workloads.memory import stage_layers, training_memory
from gpufabric.workloads.models import ModelSpec, load_model
from gpufabric.workloads.parallel import DEFAULT_ORDER, RECOMPUTE, Parallel

from gpufabric.workloads.training import (
    BWD_ATTN, BWD_GEMM, COLL_CACHE, LAYER_OVERHEAD_US, TP_OVERLAP_EXPOSED, StepResult,
    _check_divisible, _coll_time, check_seq_len, predict_step,
)

#: the other rank order the search tries: pipeline stages inside a node before data-parallel
#: ranks (Megatron's ``--use-tp-pp-dp-mapping``), where the default puts data parallel inside
PP_INSIDE = "tp-cp-ep-pp-dp"

#: relative slack on the bounds: a bound is only used to prune above ``(1 + SLACK) x`` the
#: threshold, so that floating-point summation order never prunes a layout that ties
SLACK = 1e-9


def _divisors(n: int, cap: int | None = None) -> list[int]:
    return [d for d in range(1, (cap or n) + 1) if n % d == 0]


@dataclass(frozen=True)
class Shape:
    """The sizes of a layout (what fixes its compute per GPU)."""

    tp: int
    cp: int
    pp: int
    dp: int
    ep: int
    etp: int
    vpp: int
    micro_batch: int


@dataclass(frozen=True)
class Setting:
    """How a shape runs: recomputation, sequence parallelism, sharding, offload, overlaps."""

    recompute: str
    sp: bool
    zero: int
    fsdp: str
    offload: bool
    tp_overlap: bool
    dp_overlap: bool
    tp_bwd_overlap: bool = False
    order: str = DEFAULT_ORDER


@dataclass
class SearchCounts:
    """What the search did with the layouts it considered (each counted once)."""

    considered: int = 0
    pruned_memory: int = 0
    pruned_bound: int = 0
    timed: int = 0
    shapes: int = 0

    @property
    def pruned(self) -> int:
        return self.pruned_memory + self.pruned_bound

    def to_dict(self) -> dict[str, int]:
        return asdict(self) | {"pruned": self.pruned}


@dataclass(frozen=True)
class _Job:
    model: ModelSpec
    system: str
    par: Parallel
    seq: int
    precision: str
    tp_overlap: bool
    dp_overlap: bool = True
    tp_bwd_overlap: bool = False


@cache
def _topology(system: str) -> Topology:
    from gpufabric.collectives import Model
    from gpufabric.topology.build import load
    return load(system, materialize_nodes=Model.SAMPLE_NODES)


def _evaluate(job: _Job) -> StepResult | None:
    try:
        r = predict_step(job.model, _topology(job.system), job.par, job.seq,
                         precision=job.precision, tp_overlap=job.tp_overlap,
                         tp_bwd_overlap=job.tp_bwd_overlap, dp_overlap=job.dp_overlap,
                         zero3_overlap=job.dp_overlap)
    except InputError:
        return None
    r.parallel["tp_overlap"], r.parallel["dp_overlap"] = job.tp_overlap, job.dp_overlap
    r.parallel["tp_bwd_overlap"] = job.tp_bwd_overlap
    return r


@dataclass
class Axes:
    """The values each axis takes (None: every value that divides evenly)."""

    max_pp: int = 64
    max_cp: int = 32
    cps: tuple[int, ...] | None = None
    micro_batches: tuple[int, ...] = (1, 2, 4, 8)
    max_vpp: int = 8
    recomputes: tuple[str, ...] = RECOMPUTE
    sps: tuple[bool, ...] = (True, False)
    zeros: tuple[int, ...] = (0, 1, 2, 3)
    hybrid: bool = True
    offloads: tuple[bool, ...] = (False, True)
    tp_overlaps: tuple[bool, ...] = (True, False)
    tp_bwd_overlaps: tuple[bool, ...] = (True, False)
    dp_overlaps: tuple[bool, ...] = (True, False)
    orders: tuple[str, ...] = (DEFAULT_ORDER, PP_INSIDE)
    extra: dict[str, Any] = field(default_factory=dict)


def shapes(m: ModelSpec, gpus: int, gpn: int, *, global_batch: int, seq: int,
           axes: Axes) -> Iterator[Shape]:
    """Every shape that divides evenly (heads, KV heads, layers, experts, batch, sequence)."""
    tps = [t for t in _divisors(gpn) if m.heads % t == 0] if m.is_transformer else [1]
    for tp in tps:
        cps = axes.cps or tuple(_divisors(gpus // tp, axes.max_cp))
        for cp in cps if m.is_transformer else (1,):
            if (gpus // tp) % cp:
                continue
            for pp in _divisors(gpus // (tp * cp), axes.max_pp):
                if m.is_transformer and m.layers < pp:
                    continue
                if not m.is_transformer and pp > 1:
                    continue
                dp = gpus // (tp * cp * pp)
                if global_batch % dp:
                    continue
                # expert layouts: EP carved out of dp x cp with the experts split by tp
                # (Megatron-Core's default), and, with tp > 1, MoE parallel folding with
                # the experts split by a smaller etp (whole experts at etp 1) over tp x cp x dp
                eps = [(e, 0) for e in _divisors(dp * cp) if m.experts % e == 0] \
                    if m.is_moe else [(1, 0)]
                if m.is_moe and tp > 1:    # expert TP: any divisor of tp below it
                    eps += [(e, et) for et in _divisors(tp) if et < tp
                            for e in _divisors(tp * cp * dp // et)
                            if e > 1 and m.experts % e == 0]
                vpps = [1] if pp == 1 or m.layers % pp else \
                    _divisors(m.layers // pp, axes.max_vpp)
                for ep, etp in eps:
                    for mb in axes.micro_batches:
                        if (global_batch // dp) % mb:
                            continue
                        for vpp in vpps:
                            yield Shape(tp, cp, pp, dp, ep, etp, vpp, mb)


def _factors(shape: Shape, gpn: int, axes: Axes, seq: int) -> tuple[Any, ...]:
    """The values of each setting axis for ``shape`` (see :func:`settings`)."""
    s = shape
    world = s.tp * s.cp * s.pp * s.dp
    edp = s.tp * s.cp * s.dp // (s.ep * (s.etp or s.tp))
    has_dp = s.dp * s.cp > 1 or edp > 1
    sps = axes.sps if s.tp > 1 else axes.sps[:1]
    if seq and (s.micro_batch * seq // s.cp) % s.tp:   # sequence parallel splits the tokens
        sps = tuple(x for x in sps if not x)
    shards: list[tuple[int, str]] = [(z, "") for z in axes.zeros if z < 3 or s.pp == 1]
    if axes.hybrid and s.pp == 1 and world > gpn and 3 in axes.zeros:
        shards.append((3, "hybrid"))
    if not has_dp:
        shards = shards[:1]
    # TP overlap: full (userbuffers), backward only (Megatron's asynchronous column-parallel
    # backward) or none
    tpo = [(True, False)] if True in axes.tp_overlaps else []
    if False in axes.tp_overlaps:
        tpo += [(False, b) for b in axes.tp_bwd_overlaps]
    tpo = tpo if s.tp > 1 else tpo[:1]
    dpo = axes.dp_overlaps if has_dp else axes.dp_overlaps[:1]
    # which network the pipeline and the data-parallel groups use: the data-parallel ranks
    # next to each other (inside a node where tp x cp leaves room) or the pipeline stages
    orders = [o for o in axes.orders if o == axes.orders[0] or (
        s.pp > 1 and s.dp > 1 and s.tp * s.cp < gpn and s.etp in (0, s.tp))]
    return (axes.recomputes, sps, shards, axes.offloads, tpo, dpo, orders)


def settings(shape: Shape, gpn: int, axes: Axes, seq: int = 0) -> list[Setting]:
    """The settings of a shape, each dominating ones come first (less recomputation, no
    offload, overlap on). Axes a shape cannot tell apart take one value: sequence parallelism
    at tp 1, sharding and DP overlap with no data-parallel group, TP overlap at tp 1. With
    ``seq``, sequence parallelism only where tp divides a micro-batch's tokens."""
    rcs, sps, shards, offs, tpo, dpo, orders = _factors(shape, gpn, axes, seq)
    return [Setting(rc, sp, z, f, off, t, d, tb, o) for rc in rcs for sp in sps
            for z, f in shards for off in offs for t, tb in tpo for d in dpo for o in orders]


def _parallel(shape: Shape, st: Setting, global_batch: int) -> Parallel:
    return Parallel(tp=shape.tp, pp=shape.pp, dp=shape.dp, cp=shape.cp, ep=shape.ep,
                    etp=shape.etp, vpp=shape.vpp, micro_batch=shape.micro_batch,
                    global_batch=global_batch, recompute=st.recompute, sp=st.sp,
                    zero=st.zero, fsdp=st.fsdp, offload=st.offload, order=st.order)


def _rank_key(r: StepResult) -> tuple:
    """Total order of results: step time, then fewer GPUs per replica, smaller micro-batches
    and fewer virtual stages, then every axis in a fixed order (so ties rank the same way
    whatever order the layouts were timed in)."""
    p = r.parallel
    return (r.step_time_s, p["tp"] * p["pp"], p["micro_batch"], p["vpp"], p["tp"], p["pp"],
            p["dp"], p["cp"], p["ep"], p["etp"], RECOMPUTE.index(p["recompute"]), not p["sp"],
            p["zero"], p["fsdp"], p["offload"], not p["tp_overlap"], not p["dp_overlap"],
            not p.get("tp_bwd_overlap"), p["order"] != DEFAULT_ORDER)


class _Bounds:
    """Compute-only step time of a shape (a lower bound on its step time) per recomputation:
    the forward and backward of every block of a pipeline stage as :mod:`training` times them
    with no communication, the less loaded of the first and last stages, times the
    micro-batches plus the pipeline bubble."""

    def __init__(self, m: ModelSpec, g: GPUSpec, seq: int, prec: str, topo: Topology,
                 gpn: int, axes: Axes) -> None:
        self.m, self.g, self.seq, self.prec = m, g, seq, prec
        self.topo, self.gpn, self.axes = topo, gpn, axes
        self._layer: dict[tuple, tuple[float, float, float]] = {}

    def _tp(self, par: Parallel) -> tuple[float, float]:
        """Least exposed TP time per block and pass (with the recomputed forward: full), and
        least pipeline send/recv time of one boundary, over the sequence-parallel and overlap
        choices the axes allow."""
        m, eb = self.m, ACT_BYTES[self.prec]
        act = par.micro_batch * self.seq / par.cp * m.hidden * eb
        sps = list(self.axes.sps)
        if par.tp == 1:
            t1, sps = 0.0, [False]
        else:
            g = par.group("tp", self.gpn)
            opts = []
            if True in sps and (par.micro_batch * self.seq // par.cp) % par.tp == 0:
                opts.append(_coll_time(self.topo, "all_gather", act, g)
                            + _coll_time(self.topo, "reduce_scatter", act, g))
            if False in sps:
                opts.append(_coll_time(self.topo, "all_reduce", act, g))
            t1 = min(opts) if opts else 0.0
            if True in self.axes.tp_overlaps:
                t1 *= TP_OVERLAP_EXPOSED.value
        t1 *= 1 if m.parallel_block else 2
        p2p = 0.0
        if par.pp > 1:       # over the rank orders the axes allow (the pipeline's network)
            gps = []
            for o in self.axes.orders:
                try:
                    gps.append(par.with_(order=o).group("pp", self.gpn))
                except InputError:
                    continue
            p2p = min(_coll_time(self.topo, "send_recv", act / (par.tp if sp else 1), gp)
                      for sp in sps for gp in gps)
        return t1, p2p

    @property
    def bwd_free(self) -> bool:
        """Whether the backward's TP collectives may all hide (Megatron's asynchronous
        backward searched without userbuffers overlap): the bound then counts only the
        forward passes' TP time."""
        ax = self.axes
        return True not in ax.tp_overlaps and False in ax.tp_overlaps and \
            True in ax.tp_bwd_overlaps

    def _pass(self, moe: bool, i: int, par: Parallel) -> tuple[float, float, float]:
        key = (moe, par.tp, par.cp, par.ep, par.expert_tp, par.micro_batch)
        if key not in self._layer:
            ops = layer_ops(self.m, i, par.micro_batch, self.seq, self.seq,
                            split=Split(par.tp, par.ep, par.cp, par.expert_tp),
                            precision=self.prec)
            f = b = a = 0.0
            for o in ops:
                t = op_time_s(o, self.g, self.prec)
                f += t
                if o.kind == "attn":
                    a += t
                    b += BWD_ATTN.value * t
                else:
                    b += (BWD_GEMM.value if o.kind == "gemm" else 2.0) * t
            over = LAYER_OVERHEAD_US.value * 1e-6
            self._layer[key] = (f + over, b + over, a)
        return self._layer[key]

    def step(self, par: Parallel) -> dict[str, float]:
        m = self.m
        if not m.is_transformer:
            return {rc: 0.0 for rc in RECOMPUTE}
        out: dict[str, float] = {}
        per_stage: dict[str, list[float]] = {rc: [] for rc in RECOMPUTE}
        per_stage_n: list[int] = []
        per_stage_moe: list[int] = []
        for st in sorted({0, par.pp - 1}):
            f = b = a = 0.0
            layers = stage_layers(m, par, st)
            per_stage_n.append(len(layers))
            per_stage_moe.append(sum(1 for i in layers if m.moe_layer(i)))
            for i in layers:
                lf, lb, la = self._pass(m.moe_layer(i), i, par)
                f, b, a = f + lf, b + lb, a + la
            heads = head_ops(m, par.micro_batch, self.seq, tp=par.tp, cp=par.cp,
                             precision=self.prec)
            hf = hb = 0.0
            if st == 0:
                t = op_time_s(heads[0], self.g, self.prec)
                hf, hb = hf + t, hb + 2 * t
            if st == par.pp - 1:
                t = sum(op_time_s(o, self.g, self.prec) for o in heads[1:])
                hf, hb = hf + t, hb + BWD_GEMM.value * t
            per_stage["none"].append(f + b + hf + hb)
            per_stage["selective"].append(f + b + a + hf + hb)
            per_stage["full"].append(2 * f + b + hf + hb)
        tp1, p2p = self._tp(par)
        a2a = 0.0
        if m.is_moe and par.ep > 1:
            size = (par.micro_batch * self.seq / par.cp / par.tp * par.expert_tp * m.top_k
                    * m.hidden * ACT_BYTES[self.prec])
            a2a = _coll_time(self.topo, "all_to_all", size, par.group("ep", self.gpn))
        v_ = par.vpp
        pp_e = 2 * p2p * ((par.pp - 1) * v_ if v_ > 1 else par.micro_batches + par.pp - 1)
        for rc, v in per_stage.items():
            # per micro-batch: compute and the exposed TP time of the stage's blocks
            # (+ the expert all-to-alls, dispatch and combine forward and backward, never
            # overlapped in the search: it does not try --ep-overlap)
            passes = (3 if rc == "full" else 2) - (1 if self.bwd_free else 0)
            fb = min(x + tp1 * n * passes
                     + a2a * k * (6 if rc == "full" else 4)
                     for x, n, k in zip(v, per_stage_n, per_stage_moe, strict=True))
            out[rc] = par.micro_batches * fb + ((par.pp - 1) / par.vpp * fb if par.pp > 1
                                                else 0.0) + pp_e
        return out


def _dominators(st: Setting) -> list[Setting]:
    """Settings of the same shape whose step time is no longer than ``st``'s: overlap on
    instead of off, no offload instead of offload, less recomputation."""
    out = []
    if not st.tp_overlap:
        out.append(replace(st, tp_overlap=True, tp_bwd_overlap=False))
    if not st.tp_overlap and not st.tp_bwd_overlap and not st.sp:
        out.append(replace(st, tp_bwd_overlap=True))
    if not st.dp_overlap:
        out.append(replace(st, dp_overlap=True))
    if st.offload:
        out.append(replace(st, offload=False))
    for rc in RECOMPUTE[:RECOMPUTE.index(st.recompute)]:
        out.append(replace(st, recompute=rc))
    return out


class _Fits:
    """Whether a shape's settings fit, from the memory model, skipping the calls the model's
    order already answers: with the same recomputation, ZeRO 0 -> 1 -> 2, sequence parallelism
    and optimizer offload each need no more memory, so a setting fits when one needing at
    least as much does, and does not when one needing no more does not."""

    def __init__(self, fn: Callable[[Parallel], bool]) -> None:
        self.fn = fn
        self.known: dict[tuple, bool] = {}

    def __call__(self, st: Setting, par: Parallel) -> bool:
        key = (st.recompute, st.sp, st.zero, st.fsdp, st.offload)
        if key in self.known:
            return self.known[key]
        for (rc, sp, z, f, off), v in self.known.items():
            if rc != st.recompute or not ((f == st.fsdp and z == st.zero)
                                          or (not f and not st.fsdp and z < 3 and st.zero < 3)):
                continue
            if v and z <= st.zero and sp <= st.sp and off <= st.offload:
                self.known[key] = True
                return True
            if not v and z >= st.zero and sp >= st.sp and off >= st.offload:
                self.known[key] = False
                return False
        self.known[key] = self.fn(par)
        return self.known[key]


def _prepare(model: ModelSpec | str, system: str, global_batch: int, seq_len: int | None,
             top: int) -> tuple[ModelSpec, int, int, int, str]:
    m = load_model(model)
    seq = check_seq_len(seq_len, m)
    for name, v in (("--top", top), ("--global-batch", global_batch)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InputError(f"must be a whole number >= 1, got {v!r}", field=name)
    topo = _topology(system)
    gpn, domains = topo.scale_up()      # GPUs per NVLink domain
    return m, seq, gpn, gpn * domains, topo.gpus()[0].model


def _axes(tp_overlap: bool | None, kw: dict[str, Any]) -> Axes:
    unknown = set(kw) - set(Axes.__dataclass_fields__)
    if unknown:
        raise TypeError(f"unknown search axes: {', '.join(sorted(unknown))}")
    ax = Axes(**kw)
    if tp_overlap is not None:
        ax.tp_overlaps = (tp_overlap,)
    return ax


def _valid(m: ModelSpec, shape: Shape, seq: int, gb: int) -> bool:
    try:
        par = _parallel(shape, Setting("none", False, 0, "", False, False, True), gb)
        if m.is_transformer:
            _check_divisible(m, par, seq)
            stage_layers(m, par, 0)
        return True
    except InputError:
        return False


#: Memory verdicts (does a layout fit?) shared by the searches inside :func:`memory_verdicts`.
FITS_CACHE: ContextVar[dict | None] = ContextVar("FITS_CACHE", default=None)


@contextmanager
def memory_verdicts() -> Iterator[None]:
    """Searches inside share their memory verdicts: whether a layout of a model fits a GPU kind
    does not depend on the network, so searches of one cluster shape over many networks (the
    design advisor's) ask the memory model once (per parameter value: a verdict is kept
    under the current :attr:`gpufabric.params.Params.key`).

    >>> with memory_verdicts():
    ...     FITS_CACHE.get() == {}
    True
    """
    token = FITS_CACHE.set({})
    try:
        yield
    finally:
        FITS_CACHE.reset(token)


@contextmanager
def _memo() -> Iterator[None]:
    """Collective times memoised for the calls inside (one system throughout)."""
    token = COLL_CACHE.set({})
    try:
        yield
    finally:
        COLL_CACHE.reset(token)


def search_layouts(model: ModelSpec | str, system: str, *, global_batch: int,
                   seq_len: int | None = None, precision: str = "bf16", top: int = 5,
                   tp_overlap: bool | None = None, ray: bool = False,
                   ray_address: str | None = None,
                   progress: Callable[[int, int], None] | None = None, **kw: Any
                   ) -> tuple[list[StepResult], SearchCounts]:
    """The ``top`` layouts by throughput and the counts of the search (branch and bound).

    ``tp_overlap``: None searches TP overlap on and off; True or False fixes it. ``kw`` narrows
    the axes (:class:`Axes`: ``max_pp``, ``cps``, ``micro_batches``, ``recomputes``, ``zeros``,
    ...). ``progress(n, total)`` is told shape by shape. With ``ray``, each shape's layouts
    that survive the bounds are timed together on Ray (same ranking, fewer pruned by bound).

    Raises
    ------
    InputError
        When no layout divides evenly and fits.
    """
    ax = _axes(tp_overlap, kw)
    with _memo():
        return _search(model, system, global_batch, seq_len, precision, top, ax,
                       (ray, ray_address), progress)


def _fits(m: ModelSpec, par: Parallel, seq: int, gpu: str, prec: str, gpn: int) -> bool:
    """Whether the layout fits in memory (from the shared verdicts inside
    :func:`memory_verdicts`)."""
    memo = FITS_CACHE.get()
    if memo is None:
        return training_memory(m, par, seq, gpu, precision=prec, gpus_per_node=gpn).fits
    key = (_params.current().key, m, par, seq, gpu, prec, gpn)
    if key not in memo:
        memo[key] = training_memory(m, par, seq, gpu, precision=prec, gpus_per_node=gpn).fits
    return bool(memo[key])


def _search(model: ModelSpec | str, system: str, global_batch: int, seq_len: int | None,
            precision: str, top: int, ax: Axes, ray_at: tuple[bool, str | None],
            progress: Callable[[int, int], None] | None
            ) -> tuple[list[StepResult], SearchCounts]:
    m, seq, gpn, gpus, gpu = _prepare(model, system, global_batch, seq_len, top)
    prec = check_precision(precision)
    ray, ray_address = ray_at
    bounds = _Bounds(m, gpu_spec(gpu), seq, prec, _topology(system), gpn, ax)
    counts = SearchCounts()
    todo: list[tuple[float, Shape, dict[str, float], int]] = []
    for sh in shapes(m, gpus, gpn, global_batch=global_batch, seq=seq, axes=ax):
        if not _valid(m, sh, seq, global_batch):
            continue
        fac = _factors(sh, gpn, ax, seq)
        n_set = prod(len(f) for f in fac)
        if not n_set:
            continue
        lb = bounds.step(_parallel(sh, Setting("none", fac[1][0], 0, "", False, True, True),
                                   global_batch))
        counts.considered += n_set
        counts.shapes += 1
        todo.append((min(lb[rc] for rc in fac[0]), sh, lb, n_set))
    todo.sort(key=lambda t: (t[0], t[1].tp * t[1].pp, t[1].micro_batch, t[1].vpp))
    best: list[StepResult] = []

    def threshold() -> float:
        return best[top - 1].step_time_s * (1 + SLACK) if len(best) >= top else float("inf")

    def keep(r: StepResult) -> None:
        best.append(r)
        best.sort(key=_rank_key)
        del best[top:]

    for n, (lb0, sh, lb, _) in enumerate(todo):
        if lb0 > threshold():        # shapes come in bound order: none after this can place
            counts.pruned_bound += sum(t[3] for t in todo[n:])
            if progress is not None:      # the rest are done too: pruned
                progress(len(todo) - n, len(todo))
            break
        sts = settings(sh, gpn, ax, seq)
        fits = _Fits(lambda par: _fits(m, par, seq, gpu, prec, gpn))
        timed: dict[Setting, float] = {}
        batch: list[tuple[Setting, _Job]] = []
        for st in sts:
            bound = max([lb[st.recompute]] + [timed[d] for d in _dominators(st) if d in timed])
            if bound > threshold():
                counts.pruned_bound += 1
                continue
            par = _parallel(sh, st, global_batch)
            if not fits(st, par):
                counts.pruned_memory += 1
                continue
            job = _Job(m, system, par, seq, prec, st.tp_overlap, st.dp_overlap,
                       st.tp_bwd_overlap)
            if ray or ray_address:
                batch.append((st, job))
                continue
            r = _evaluate(job)
            counts.timed += 1
            if r is not None:
                timed[st] = r.step_time_s
                keep(r)
        if batch:
            rs = sweep.run(_evaluate, [j for _, j in batch], ray=ray, address=ray_address)
            counts.timed += len(batch)
            for r in rs:
                if r is not None:
                    keep(r)
        if progress is not None:
            progress(1, len(todo))
    if not best:
        raise InputError(f"no parallel layout of {m.name} on {gpus} x {gpu} divides evenly "
                         f"and fits in memory at global batch {global_batch}, seq {seq}",
                         field="--search")
    return best, counts


def search(model: ModelSpec | str, system: str, *, global_batch: int,
           seq_len: int | None = None, precision: str = "bf16", top: int = 5,
           tp_overlap: bool | None = None, ray: bool = False, ray_address: str | None = None,
           progress: Callable[[int, int], None] | None = None, **kw: Any) -> list[StepResult]:
    """The ``top`` layouts by throughput (:func:`search_layouts` without the counts)."""
    return search_layouts(model, system, global_batch=global_batch, seq_len=seq_len,
                          precision=precision, top=top, tp_overlap=tp_overlap, ray=ray,
                          ray_address=ray_address, progress=progress, **kw)[0]


def brute_force(model: ModelSpec | str, system: str, *, global_batch: int,
                seq_len: int | None = None, precision: str = "bf16", top: int = 5,
                tp_overlap: bool | None = None, **kw: Any) -> list[StepResult]:
    """Every layout of the same axes that fits, timed, ranked as :func:`search_layouts` ranks
    them: the reference the pruned search must agree with (slow: for small cases)."""
    m, seq, gpn, gpus, gpu = _prepare(model, system, global_batch, seq_len, top)
    prec = check_precision(precision)
    ax = _axes(tp_overlap, kw)
    out: list[StepResult] = []
    with _memo():
        for sh in shapes(m, gpus, gpn, global_batch=global_batch, seq=seq, axes=ax):
            if not _valid(m, sh, seq, global_batch):
                continue
            for st in settings(sh, gpn, ax, seq):
                par = _parallel(sh, st, global_batch)
                if not training_memory(m, par, seq, gpu, precision=prec,
                                       gpus_per_node=gpn).fits:
                    continue
                r = _evaluate(_Job(m, system, par, seq, prec, st.tp_overlap, st.dp_overlap,
                                   st.tp_bwd_overlap))
                if r is not None:
                    out.append(r)
    out.sort(key=_rank_key)
    return out[:top]


def candidates(model: ModelSpec | str, gpus: int, gpus_per_node: int, gpu: str, *,
               global_batch: int, seq_len: int, precision: str = "bf16", **kw: Any
               ) -> list[Parallel]:
    """Every layout (shape x sharding, sequence parallelism, offload) that divides evenly and
    fits in memory, with the least recomputation that makes it fit."""
    m = load_model(model)
    prec = check_precision(precision)
    ax = _axes(None, kw)
    out: list[Parallel] = []
    for sh in shapes(m, gpus, gpus_per_node, global_batch=global_batch, seq=seq_len, axes=ax):
        if not _valid(m, sh, seq_len, global_batch):
            continue
        seen: set[tuple] = set()
        for st in settings(sh, gpus_per_node, ax, seq_len):
            key = (st.sp, st.zero, st.fsdp, st.offload)
            if key in seen:
                continue
            par = _parallel(sh, st, global_batch)
            if training_memory(m, par, seq_len, gpu, precision=prec,
                               gpus_per_node=gpus_per_node).fits:
                seen.add(key)
                out.append(par)
    return out


__all__ = ["search", "search_layouts", "brute_force", "candidates", "memory_verdicts",
           "SearchCounts", "Axes", "Shape", "Setting", "shapes", "settings"]

"""Search the parallel layouts of a training job: enumerate the valid ones, rank by throughput.

Valid means: tensor parallelism divides the heads (and stays inside a node), pipeline stages
split the layers, experts split over expert parallelism, micro-batches divide the per-rank
batch, and the layout fits in memory -- with the least activation recomputation that makes it
fit (none, then selective, then full). Every candidate is predicted by
:func:`gpufabric.workloads.training.predict_step` through :func:`gpufabric.sweep.run`
(in-process, or on Ray), and the ranking is by tokens per second. ZeRO-3 / FSDP without
pipelining is tried only when nothing else fits: the validation shows the model least sure of
it.

Examples
--------
>>> rs = search("llama3-8b", "gpu=H100-SXM,gpus_per_node=8,nodes=2,nic=ib-ndr",
...             global_batch=32, seq_len=4096, top=3)
>>> len(rs), rs[0].tokens_per_s >= rs[1].tokens_per_s >= rs[2].tokens_per_s
(3, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from collections.abc import Callable
from typing import Any

from gpufabric import sweep
from gpufabric.errors import InputError
from gpufabric.topology.model import Topology
from gpufabric.workloads.memory import training_memory
from gpufabric.workloads.models import ModelSpec, load_model
from gpufabric.workloads.parallel import RECOMPUTE, Parallel
from gpufabric.workloads.training import StepResult, check_seq_len, predict_step


def _divisors(n: int, cap: int | None = None) -> list[int]:
    return [d for d in range(1, (cap or n) + 1) if n % d == 0]


@dataclass(frozen=True)
class _Job:
    model: ModelSpec
    system: str
    par: Parallel
    seq: int
    precision: str
    tp_overlap: bool


@cache
def _topology(system: str) -> Topology:
    from gpufabric.collectives import Model
    from gpufabric.topology.build import load
    return load(system, materialize_nodes=Model.SAMPLE_NODES)


def _evaluate(job: _Job) -> StepResult | None:
    try:
        return predict_step(job.model, _topology(job.system), job.par, job.seq,
                            precision=job.precision, tp_overlap=job.tp_overlap)
    except InputError:
        return None


def candidates(model: ModelSpec | str, gpus: int, gpus_per_node: int, gpu: str, *,
               global_batch: int, seq_len: int, precision: str = "bf16",
               max_pp: int = 64, cps: tuple[int, ...] = (1,), zeros: tuple[int, ...] = (1,),
               micro_batches: tuple[int, ...] = (1, 2, 4)) -> list[Parallel]:
    """Layouts that divide evenly and fit in memory (least recomputation that fits)."""
    m = load_model(model)
    out: list[Parallel] = []
    tps = [t for t in _divisors(gpus_per_node) if not m.is_transformer or m.heads % t == 0]
    if not m.is_transformer:
        tps = [1]
    for tp in tps:
        for cp in cps:
            for pp in _divisors(gpus // (tp * cp), max_pp):
                if m.is_transformer and m.layers < pp:
                    continue
                dp = gpus // (tp * cp * pp)
                if dp * tp * cp * pp != gpus or global_batch % dp:
                    continue
                # expert layouts: EP carved out of dp x cp with the experts split by tp
                # (Megatron-Core's default), and, with tp > 1, MoE parallel folding with
                # whole experts (etp 1) over tp x cp x dp
                eps = [(e, 0) for e in _divisors(dp * cp) if m.experts % e == 0] \
                    if m.is_moe else [(1, 0)]
                if m.is_moe and tp > 1:
                    eps += [(e, 1) for e in _divisors(tp * cp * dp)
                            if e > 1 and m.experts % e == 0]
                vpps = [1] if pp == 1 else [v for v in (1, 2, 4)
                                            if m.layers % (pp * v) == 0]
                for ep, etp in eps:
                    for mb in micro_batches:
                        if (global_batch // dp) % mb:
                            continue
                        for vpp in vpps:
                            # ZeRO-3 / FSDP shards parameters instead of pipelining them
                            for zero in (zeros if pp == 1 else tuple(z for z in zeros
                                                                     if z < 3) or (1,)):
                                par = _fitting(m, gpu, gpus_per_node, seq_len, precision,
                                               tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vpp=vpp,
                                               zero=zero, micro_batch=mb,
                                               global_batch=global_batch, etp=etp)
                                if par is not None:
                                    out.append(par)
    return out


def _fitting(m: ModelSpec, gpu: str, gpn: int, seq: int, precision: str, **kw: Any
             ) -> Parallel | None:
    for rc in RECOMPUTE:
        try:
            par = Parallel(recompute=rc, **kw)
            mem = training_memory(m, par, seq, gpu, precision=precision, gpus_per_node=gpn)
        except InputError:
            return None
        if mem.fits:
            return par
    return None


def search(model: ModelSpec | str, system: str, *, global_batch: int,
           seq_len: int | None = None, precision: str = "bf16", top: int = 5,
           tp_overlap: bool = False, ray: bool = False, ray_address: str | None = None,
           progress: Callable[[int, int], None] | None = None, **kw: Any) -> list[StepResult]:
    """The ``top`` layouts by throughput (ties: fewer GPUs per model replica first).

    ``progress(n, total)`` is told as layouts are timed (see :func:`gpufabric.sweep.run`).

    Raises
    ------
    InputError
        When no layout divides evenly and fits.
    """
    m = load_model(model)
    seq = check_seq_len(seq_len, m)
    for name, v in (("--top", top), ("--global-batch", global_batch)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InputError(f"must be a whole number >= 1, got {v!r}", field=name)
    topo = _topology(system)
    gpn, domains = topo.scale_up()      # GPUs per NVLink domain
    gpus = gpn * domains
    gpu = topo.gpus()[0].model
    cands = candidates(m, gpus, gpn, gpu, global_batch=global_batch, seq_len=seq,
                       precision=precision, **kw)
    if not cands and "zeros" not in kw:   # ZeRO-3 / FSDP only when nothing else fits: the
        cands = candidates(m, gpus, gpn, gpu, global_batch=global_batch, seq_len=seq,
                           precision=precision, zeros=(3,), **kw)   # model is least sure of it
    if not cands:
        raise InputError(f"no parallel layout of {m.name} on {gpus} x {gpu} divides evenly "
                         f"and fits in memory at global batch {global_batch}, seq {seq}",
                         field="--search")
    jobs = [_Job(m, system, p, seq, precision, tp_overlap) for p in cands]
    results = sweep.run(_evaluate, jobs, ray=ray, address=ray_address, progress=progress)
    ok = [r for r in results if r is not None]
    ok.sort(key=lambda r: (-r.tokens_per_s, r.parallel["tp"] * r.parallel["pp"],
                           r.parallel["micro_batch"], r.parallel["vpp"]))
    return ok[:top]


__all__ = ["search", "candidates"]

"""One rank of ``gpufabric bench``: times collectives and, on rank 0, appends one JSON line per
(op, size) to the result file as soon as it is measured (a run killed at its time limit keeps
what was written).

Started by :mod:`gpufabric.measure.bench`, never by hand:

* MPI (mpi4py): ``mpiexec -n N python -m gpufabric.measure.bench_worker mpi PLAN.json``;
* torch.distributed: N processes ``python -m gpufabric.measure.bench_worker torch PLAN.json``
  with ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` set (Gloo on CPUs, NCCL on
  GPUs).

The plan (JSON) holds ``ops``, ``sizes`` (bytes), ``iters``, ``warmup``, ``stat`` and ``out``
(the result file). Sizes are counted as nccl-tests counts them, on float32 elements: all_reduce and
broadcast move ``size`` bytes on every rank; all_gather's ``size`` is the gathered buffer,
reduce_scatter's the buffer reduced, all_to_all's each rank's send buffer (each rank's share is
``size / ranks``, the element count rounded down to a multiple of the ranks). The time is the
slowest rank's mean over ``iters`` calls after ``warmup`` calls (``stat: mean``, as nccl-tests
times them), or with ``stat: median`` (MPI only) the median over the calls of the slowest
rank's time of each call: a machine shared with other work preempts a rank now and then, and
the median leaves those calls out.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

DTYPE = "float32"
WORD = 4


def elements(op: str, size: int, n: int) -> int:
    """Elements of the whole buffer for ``size`` bytes on ``n`` ranks (nccl-tests' rounding).

    >>> elements("all_reduce", 8, 2), elements("all_gather", 8, 4), elements("all_to_all", 64, 3)
    (2, 0, 15)
    """
    count = size // WORD
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        count = count // n * n
    return count


def _emit(out: str, rec: dict[str, Any]) -> None:
    with open(out, "a", encoding="utf-8") as f:
        f.write(json.dumps(rec) + "\n")
        f.flush()


def _run_mpi(plan: dict[str, Any]) -> None:
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    n, rank = comm.Get_size(), comm.Get_rank()
    if rank == 0:
        import mpi4py
        _emit(plan["out"], {"software": {
            "mpi4py": mpi4py.__version__,
            "mpi_library": " ".join(MPI.Get_library_version().split("\n")[0].split()),
            "mpi_standard": "{}.{}".format(*MPI.Get_version())}})
    for op, count, share in _cases(plan, n):
        send = np.ones(share if op == "all_gather" else count, np.float32)
        recv = np.empty(share if op == "reduce_scatter" else count, np.float32)
        call: Callable[[], Any]
        if op == "all_reduce":
            call = partial(comm.Allreduce, send, recv, op=MPI.SUM)
        elif op == "all_gather":
            call = partial(comm.Allgather, send, recv)
        elif op == "reduce_scatter":
            call = partial(comm.Reduce_scatter_block, send, recv, op=MPI.SUM)
        elif op == "broadcast":
            call = partial(comm.Bcast, send, root=0)
        else:   # all_to_all
            call = partial(comm.Alltoall, send, recv)
        for _ in range(plan["warmup"]):
            call()
        comm.Barrier()
        if plan.get("stat", "mean") == "median":
            # each call timed alone; the slowest rank's time of each call, then their median
            times = np.empty(plan["iters"], np.float64)
            for i in range(plan["iters"]):
                t0 = MPI.Wtime()
                call()
                times[i] = MPI.Wtime() - t0
            slowest = np.empty_like(times) if rank == 0 else None
            comm.Reduce(times, slowest, op=MPI.MAX, root=0)
            worst = float(np.median(slowest)) if rank == 0 and slowest is not None else None
        else:
            t0 = MPI.Wtime()
            for _ in range(plan["iters"]):
                call()
            dt = (MPI.Wtime() - t0) / plan["iters"]
            worst = comm.reduce(dt, op=MPI.MAX, root=0)
        if rank == 0 and worst is not None:
            _emit(plan["out"], {"op": op, "size": count * WORD, "count": count,
                                "time_us": worst * 1e6})
        del send, recv
    comm.Barrier()


def _cases(plan: dict[str, Any], n: int) -> Any:
    """(op, elements, elements per rank) of every measurement of the plan on ``n`` ranks."""
    for op in plan["ops"]:
        for size in plan["sizes"]:
            count = elements(op, size, n)
            if count:
                yield op, count, count // n


def _run_torch(plan: dict[str, Any]) -> None:   # pragma: no cover - needs torch
    import torch
    import torch.distributed as dist
    gpu = torch.cuda.is_available()
    backend = "nccl" if gpu else "gloo"
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dev = torch.device(f"cuda:{rank % torch.cuda.device_count()}" if gpu else "cpu")
    if gpu:
        torch.cuda.set_device(dev)
    dist.init_process_group(backend, rank=rank, world_size=n)
    if rank == 0:
        sw: dict[str, Any] = {"torch": torch.__version__, "process_group": backend}
        if gpu:
            v = torch.cuda.nccl.version()
            sw["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
            sw["cuda"] = torch.version.cuda
        _emit(plan["out"], {"software": sw})

    def sync() -> None:
        if gpu:
            torch.cuda.synchronize()
    lacking: set[str] = set()
    for op, count, share in _cases(plan, n):
        if op in lacking:
            continue
        buf = torch.ones(count, dtype=torch.float32, device=dev)
        part = torch.ones(share, dtype=torch.float32, device=dev)
        out = torch.empty_like(buf)
        tcall: Callable[[], Any]
        if op == "all_reduce":
            tcall = partial(dist.all_reduce, buf)
        elif op == "all_gather":
            tcall = partial(dist.all_gather_into_tensor, out, part)
        elif op == "reduce_scatter":
            tcall = partial(dist.reduce_scatter_tensor, part, buf)
        elif op == "broadcast":
            tcall = partial(dist.broadcast, buf, src=0)
        else:
            tcall = partial(dist.all_to_all_single, out, buf)
        try:
            tcall()      # a collective this process group lacks (Gloo's reduce_scatter)
        except RuntimeError as exc:
            if rank == 0:
                why = " ".join(str(exc).split())[:200]
                _emit(plan["out"], {"note": f"torch {backend}: {op} not measured: {why}"})
            lacking.add(op)      # its other sizes too; the next collective goes on
            continue
        for _ in range(plan["warmup"]):
            tcall()
        sync()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(plan["iters"]):
            tcall()
        sync()
        dt = torch.tensor([(time.perf_counter() - t0) / plan["iters"]], dtype=torch.float64,
                          device=dev)
        dist.reduce(dt, dst=0, op=dist.ReduceOp.MAX)
        if rank == 0:
            _emit(plan["out"], {"op": op, "size": count * WORD, "count": count,
                                "time_us": float(dt.item()) * 1e6})
    dist.barrier()
    dist.destroy_process_group()


def main(argv: list[str]) -> int:
    backend, plan_path = argv
    with open(plan_path, encoding="utf-8") as f:
        plan = json.load(f)
    if backend == "mpi":
        _run_mpi(plan)
    else:
        _run_torch(plan)
    return 0


if __name__ == "__main__":   # pragma: no cover - run by mpiexec or the torch launcher
    sys.exit(main(sys.argv[1:]))

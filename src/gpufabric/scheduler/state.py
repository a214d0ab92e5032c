"""What is free on every node: the mutable state placement policies look at.

GPU capacity is kept per GPU in milli (1000 = a whole free GPU), in a nodes x max-GPUs array;
GPUs a node does not have stay at 0 and are never free. Derived columns (GPUs wholly free, the
largest free share, total free milli) are kept up to date on every change so that feasibility is
a handful of vectorized comparisons.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpufabric.scheduler.cluster import Cluster

MILLI = 1000


@dataclass(frozen=True)
class Request:
    """One member's request: CPU milli, memory MiB, accelerators, milli per accelerator."""

    cpu: int
    mem: int
    num_gpu: int
    gpu_milli: int

    @property
    def share(self) -> bool:
        """A fraction of one GPU (GPU sharing)."""
        return self.num_gpu == 1 and self.gpu_milli < MILLI

    @property
    def gpu_total(self) -> int:
        return self.num_gpu * self.gpu_milli


class State:
    """Free CPU, memory and per-GPU milli of every node, plus which nodes are up.

    Examples
    --------
    >>> from gpufabric.scheduler.cluster import load_nodes
    >>> s = State(load_nodes("T4x2*2"))
    >>> r = Request(4000, 1024, 1, 500)
    >>> bool(s.feasible(r)[0]), s.place(0, r, (1,)), s.gpu_left[0].tolist()
    (True, None, [1000, 500])
    """

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        n = len(cluster)
        g = max(1, cluster.max_gpus)
        self.cpu_free = cluster.cpu.astype(np.int64).copy()
        self.mem_free = cluster.mem.astype(np.int64).copy()
        self.gpu_left = np.zeros((n, g), dtype=np.int64)
        for k in range(g):
            self.gpu_left[cluster.num_gpu > k, k] = MILLI
        self.up = np.ones(n, dtype=bool)
        self.full = cluster.num_gpu.astype(np.int64).copy()
        self.max_left = np.where(cluster.num_gpu > 0, MILLI, 0).astype(np.int64)
        self.left_total = cluster.num_gpu.astype(np.int64) * MILLI
        self.version = np.zeros(n, dtype=np.int64)  # bumped on every change of a node
        self.allocated_milli = 0

    # -- queries ------------------------------------------------------------------------
    def feasible(self, r: Request, base: np.ndarray | None = None) -> np.ndarray:
        """Nodes that can host ``r`` now (up, enough CPU, memory and GPU)."""
        ok = self.up & (self.cpu_free >= r.cpu) & (self.mem_free >= r.mem)
        if base is not None:
            ok &= base
        if r.num_gpu == 0:
            return ok
        if r.share:
            return ok & (self.max_left >= r.gpu_milli)
        return ok & (self.full >= r.num_gpu)

    def fits_empty(self, r: Request, base: np.ndarray | None = None,
                   only_up: bool = False) -> np.ndarray:
        """Nodes that could host ``r`` if they were empty."""
        c = self.cluster
        ok = (c.cpu >= r.cpu) & (c.mem >= r.mem) & (c.num_gpu >= r.num_gpu)
        if only_up:
            ok &= self.up
        return ok if base is None else ok & base

    def gpu_util(self) -> float:
        """Allocated / total milli-GPU of the nodes that are up (0..1)."""
        cap = int(self.cluster.num_gpu[self.up].sum()) * MILLI
        used = cap - int(self.left_total[self.up].sum())
        return used / cap if cap else 0.0

    # -- changes ------------------------------------------------------------------------
    def _refresh(self, node: int) -> None:
        row = self.gpu_left[node]
        self.full[node] = int((row == MILLI).sum())
        self.max_left[node] = int(row.max())
        self.left_total[node] = int(row.sum())
        self.version[node] += 1

    def pick_gpus(self, node: int, r: Request) -> tuple[int, ...]:
        """Default GPU choice: best-fit GPU for a share, the first wholly free GPUs otherwise."""
        if r.num_gpu == 0:
            return ()
        row = self.gpu_left[node]
        if r.share:
            cand = np.where(row >= r.gpu_milli, row, MILLI + 1)
            return (int(np.argmin(cand)),)
        return tuple(int(i) for i in np.flatnonzero(row == MILLI)[: r.num_gpu])

    def place(self, node: int, r: Request, gpus: tuple[int, ...]) -> None:
        """Take ``r`` on ``node`` using GPUs ``gpus``; raises if anything would go negative."""
        if not self.up[node]:
            raise RuntimeError(f"node {node} is down")
        if self.cpu_free[node] < r.cpu or self.mem_free[node] < r.mem:
            raise RuntimeError(f"node {node}: CPU or memory over-allocated")
        if len(gpus) != r.num_gpu or len(set(gpus)) != len(gpus):
            raise RuntimeError(f"node {node}: wrong GPU set {gpus} for {r}")
        row = self.gpu_left[node]
        for gi in gpus:
            need = r.gpu_milli if r.share else MILLI
            if gi >= self.cluster.num_gpu[node] or row[gi] < need:
                raise RuntimeError(f"node {node}: GPU {gi} over-allocated")
        self.cpu_free[node] -= r.cpu
        self.mem_free[node] -= r.mem
        for gi in gpus:
            row[gi] -= r.gpu_milli
        self.allocated_milli += r.gpu_total
        self._refresh(node)

    def release(self, node: int, r: Request, gpus: tuple[int, ...]) -> None:
        """Give back what :meth:`place` took."""
        self.cpu_free[node] += r.cpu
        self.mem_free[node] += r.mem
        for gi in gpus:
            self.gpu_left[node, gi] += r.gpu_milli
        self.allocated_milli -= r.gpu_total
        if (self.cpu_free[node] > self.cluster.cpu[node]
                or self.mem_free[node] > self.cluster.mem[node]
                or (self.gpu_left[node] > MILLI).any()):
            raise RuntimeError(f"node {node}: released more than was placed")
        self._refresh(node)

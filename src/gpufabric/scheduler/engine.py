"""Pieces both evaluation modes share: per-job eligibility masks and gang placement."""

from __future__ import annotations

import numpy as np

from gpufabric.errors import InputError
from gpufabric.scheduler.cluster import Cluster
from gpufabric.scheduler.decide import pool_tiers
from gpufabric.scheduler.jobs import KINDS, JobSet
from gpufabric.scheduler.registry import REGISTRY
from gpufabric.scheduler.state import MILLI, Request, State


def check_seed(seed: int) -> None:
    """Seeds are whole numbers, 0 or more (numpy's generators refuse negative ones)."""
    if not 0 <= seed < 2**63:
        raise InputError(f"{seed} is not a seed; seeds are whole numbers 0..2^63-1",
                         field="--seed")


def check_ratio(ratio: float) -> None:
    """Arrival mode packs ``ratio`` x the GPU capacity: a number in (0, 10]."""
    if not 0 < ratio <= 10:
        raise InputError(f"{ratio:g}; must be in (0, 10] (times the GPU capacity)",
                         field="--ratio")


def check_load(load: float) -> None:
    """Replay divides arrival times by ``load``: a positive, finite number."""
    if not 0 < load < float("inf"):
        raise InputError(f"{load:g}; must be a positive number (arrival times are divided "
                         "by it)", field="--load")


class BaseMasks:
    """Nodes each job may ever use: its routing (by kind) and, for GPU jobs, its GPU models.

    Masks are cached per (allowed models, kind, asks GPUs) combination.
    """

    def __init__(self, cluster: Cluster, jobs: JobSet, routing: str = "kind"):
        self.cluster = cluster
        self.jobs = jobs
        self.route = REGISTRY.get("routing", routing)
        self._cache: dict[tuple, list[np.ndarray]] = {}
        self._spec = jobs.spec.tolist()
        self._kind = jobs.kind.tolist()
        self._gpu = (jobs.num_gpu > 0).tolist()

    def of(self, i: int) -> np.ndarray:
        """Every node job ``i`` may use."""
        return self.tiers(i)[0]

    def tiers(self, i: int) -> list[np.ndarray]:
        """[all allowed nodes, then each pool in the order the routing prefers] for job ``i``."""
        key = (self._spec[i] if self._gpu[i] else 0, self._kind[i], self._gpu[i])
        t = self._cache.get(key)
        if t is None:
            t = pool_tiers(self.cluster, self.route, KINDS[key[1]], self.jobs.specs[key[0]], key[2])
            self._cache[key] = t
        return t


def place_gang(state: State, policy, r: Request, base, gang: int = 1
               ) -> list[tuple[int, tuple[int, ...]]] | None:
    """Place ``gang`` members of request ``r`` all together, or none (state unchanged).

    ``base`` is the mask of allowed nodes, or a list from :meth:`BaseMasks.tiers`: then the
    preferred pools are tried first, one after the other. Returns the (node, GPUs) of each
    member, or None.
    """
    if isinstance(base, list):
        for tier in (base[1:] or base[:1]):
            got = place_gang(state, policy, r, tier, gang)
            if got is not None:
                return got
        return None
    done: list[tuple[int, tuple[int, ...]]] = []
    for _ in range(gang):
        sel = policy.select(state, r, state.feasible(r, base))
        if sel is None:
            for node, gpus in reversed(done):
                state.release(node, r, gpus)
            return None
        state.place(sel[0], r, sel[1])
        done.append(sel)
    return done


def fits_when_empty(state: State, tiers: list[np.ndarray], r: Request, gang: int = 1,
                    only_up: bool = False) -> bool:
    """Could all ``gang`` members of ``r`` run at once in one of the pools ``tiers`` (as
    :meth:`BaseMasks.tiers` gives them; healthy nodes only when ``only_up``) if every node were
    empty? A job for which this is False is unplaceable: larger than any node it may use, in
    GPUs, CPU or memory. Members never span pools (as :func:`place_gang` places them).

    Examples
    --------
    >>> from gpufabric.scheduler.cluster import load_nodes
    >>> st = State(load_nodes("T4x2*2"))
    >>> every = [np.ones(2, dtype=bool)]
    >>> fits_when_empty(st, every, Request(1000, 1024, 2, 1000), gang=2)
    True
    >>> fits_when_empty(st, every, Request(1000, 1024, 4, 1000))
    False
    """
    cluster = state.cluster
    for base in (tiers[1:] or tiers):
        ok = state.fits_empty(r, base, only_up)
        if gang == 1 or not ok.any():
            if ok.any():
                return True
            continue
        big = np.iinfo(np.int64).max
        per = np.full(len(cluster), big)
        if r.cpu:
            per = np.minimum(per, cluster.cpu // r.cpu)
        if r.mem:
            per = np.minimum(per, cluster.mem // r.mem)
        if r.num_gpu:
            slots = cluster.num_gpu * (MILLI // r.gpu_milli) if r.share else cluster.num_gpu
            per = np.minimum(per, slots // (1 if r.share else r.num_gpu))
        per = np.minimum(per, gang)
        if int(per[ok].sum()) >= gang:
            return True
    return False


def unplaceable(cluster: Cluster, jobs: JobSet, routing: str = "kind") -> np.ndarray:
    """Which jobs fit no node they may use even when the cluster is empty
    (:func:`fits_when_empty` of each distinct request, kind and accepted models).

    Examples
    --------
    >>> from gpufabric.scheduler.cluster import load_nodes
    >>> from gpufabric.scheduler.jobs import Job
    >>> js = JobSet.from_jobs([Job("ok", 1000, 1024, 2), Job("huge", 1000, 1024, 16)])
    >>> unplaceable(load_nodes("T4x2*2"), js).tolist()
    [False, True]
    """
    masks, state = BaseMasks(cluster, jobs, routing), State(cluster)
    out = np.zeros(len(jobs), dtype=bool)
    seen: dict[tuple, bool] = {}
    cols = (jobs.cpu.tolist(), jobs.mem.tolist(), jobs.num_gpu.tolist(),
            jobs.gpu_milli.tolist(), jobs.gang.tolist(), jobs.spec.tolist(), jobs.kind.tolist())
    for i, key in enumerate(zip(*cols, strict=True)):
        bad = seen.get(key)
        if bad is None:
            r = Request(key[0], key[1], key[2], key[3])
            bad = seen[key] = not fits_when_empty(state, masks.tiers(i), r, key[4])
        out[i] = bad
    return out

"""Pieces both evaluation modes share: per-job eligibility masks and gang placement."""

from __future__ import annotations

import numpy as np

from gpufabric.scheduler.cluster import Cluster
from gpufabric.scheduler.jobs import KINDS, JobSet
from gpufabric.scheduler.registry import REGISTRY
from gpufabric.scheduler.state import Request, State


class BaseMasks:
    """Nodes each job may ever use: its routing (by kind) and, for GPU jobs, its GPU models.

    Masks are cached per (allowed models, kind, asks GPUs) combination.
    """

    def __init__(self, cluster: Cluster, jobs: JobSet, routing: str = "kind"):
        self.cluster = cluster
        self.jobs = jobs
        self.route = REGISTRY.get("routing", routing)
        self._cache: dict[tuple, np.ndarray] = {}
        self._spec = jobs.spec.tolist()
        self._kind = jobs.kind.tolist()
        self._gpu = (jobs.num_gpu > 0).tolist()

    def of(self, i: int) -> np.ndarray:
        key = (self._spec[i] if self._gpu[i] else 0, self._kind[i], self._gpu[i])
        m = self._cache.get(key)
        if m is None:
            m = self.route(self.cluster, KINDS[key[1]]).copy()
            if key[2]:
                m &= self.cluster.model_mask(self.jobs.specs[key[0]])
                m &= self.cluster.num_gpu > 0
            self._cache[key] = m
        return m


def place_gang(state: State, policy, r: Request, base: np.ndarray, gang: int = 1
               ) -> list[tuple[int, tuple[int, ...]]] | None:
    """Place ``gang`` members of request ``r`` all together, or none (state unchanged).

    Returns the (node, GPUs) of each member, or None.
    """
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

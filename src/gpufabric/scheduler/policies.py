"""Placement, queue and routing policies, registered by name in one registry.

Placement (which node, which GPUs), all vectorized over nodes with numpy:

- ``random``: a node drawn uniformly among those that fit.
- ``spread``: load balancing; the least loaded node (most free GPU and CPU, as fractions).
- ``best-fit``: the node left with the least free resources, as the FGD paper's baseline scores
  it: ``0.5 * cpu_free / 128 cores + 0.5 * gpu_free / 8 GPUs`` after placement, lowest wins.
- ``dot-product``: the node whose free (CPU, GPU) vector, normalized the same way, has the
  smallest dot product with the request (the FGD paper's DotProd baseline, after Tetris).
- ``fgd``: fragmentation gradient descent: the node (and, for a GPU share, the GPU) whose
  fragmentation grows least; see :class:`FragModel`.
- ``topology``: for a multi-GPU job, the node and GPU set with the widest bottleneck bandwidth
  between the chosen GPUs (one NVSwitch island, one PCIe switch, one socket, ...) from the node's
  topology; then best-fit. Single-GPU and CPU jobs are placed best-fit.
- ``topology-fgd``: ``topology`` for multi-GPU jobs, ``fgd`` for the rest.

Every policy also gives ``scores(state, request, nodes)``: higher is better, and ``select``
takes the highest (ties as described below). The Kubernetes extender ranks nodes with it.

Ties are broken uniformly at random, as the Kubernetes scheduler does (``fgd`` excepted: it breaks
them as the FGD paper's simulator does, see :class:`FGDPlacement`). For a GPU share, every policy
but ``fgd`` takes the fullest GPU that still fits it (best fit); for whole GPUs, the first free
ones (``topology`` excepted).

Queue orders: ``fifo`` (arrival order) and ``priority`` (higher priority first, preempting
lower-priority jobs when a job fits nowhere). Routing: ``kind`` (training to GPU servers,
inference to TPU or GPU, services to CPU nodes; see
:data:`gpufabric.scheduler.cluster.ROUTES`) and ``none``.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from gpufabric.scheduler import gpuset, nodetopo
from gpufabric.scheduler.cluster import Cluster
from gpufabric.scheduler.jobs import JobSet
from gpufabric.scheduler.registry import REGISTRY, register
from gpufabric.scheduler.state import MILLI, Request, State

#: Normalization of the FGD paper's baselines: the largest node (128 cores, 8 GPUs).
MAX_CPU = 128000.0
MAX_GPU = 8000.0


def _pick(idx: np.ndarray, score: np.ndarray, rng: np.random.Generator) -> int:
    """The index in ``idx`` with the highest score; ties at random."""
    best = score.max()
    ties = idx[score >= best]
    if len(ties) == 1:
        return int(ties[0])
    return int(ties[rng.integers(len(ties))])


class Placement:
    """Base class: choose a node among ``mask`` and the GPUs on it.

    Parameters
    ----------
    cluster : Cluster
    jobs : JobSet
        The workload (FGD learns its target distribution from it).
    rng : numpy.random.Generator
    """

    name = ""

    def __init__(self, cluster: Cluster, jobs: JobSet | None, rng: np.random.Generator):
        self.cluster = cluster
        self.rng = rng

    def scores(self, state: State, r: Request, idx: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def select(self, state: State, r: Request, mask: np.ndarray
               ) -> tuple[int, tuple[int, ...]] | None:
        idx = np.flatnonzero(mask)
        if len(idx) == 0:
            return None
        node = _pick(idx, self.scores(state, r, idx), self.rng)
        return node, state.pick_gpus(node, r)


@register("placement", "random")
class RandomPlacement(Placement):
    name = "random"

    def scores(self, state, r, idx):
        """Every node alike."""
        return np.zeros(len(idx))

    def select(self, state, r, mask):
        idx = np.flatnonzero(mask)
        if len(idx) == 0:
            return None
        node = int(idx[self.rng.integers(len(idx))])
        if r.share:  # a random GPU among those the share fits on, as the paper's Random
            fits = np.flatnonzero(state.gpu_left[node] >= r.gpu_milli)
            return node, (int(fits[self.rng.integers(len(fits))]),)
        return node, state.pick_gpus(node, r)


@register("placement", "spread")
class SpreadPlacement(Placement):
    """Least loaded first: most free GPU and CPU as fractions of the node."""

    name = "spread"

    def scores(self, state, r, idx):
        c = self.cluster
        g = np.maximum(c.num_gpu[idx], 1) * MILLI
        return (state.left_total[idx] / g + state.cpu_free[idx] / np.maximum(c.cpu[idx], 1))


@register("placement", "best-fit")
class BestFitPlacement(Placement):
    name = "best-fit"

    def scores(self, state, r, idx):
        left = (0.5 * (state.cpu_free[idx] - r.cpu) / MAX_CPU
                + 0.5 * (state.left_total[idx] - r.gpu_total) / MAX_GPU)
        return -left


@register("placement", "dot-product")
class DotProductPlacement(Placement):
    name = "dot-product"

    def scores(self, state, r, idx):
        dot = ((state.cpu_free[idx] / MAX_CPU) * (r.cpu / MAX_CPU)
               + (state.left_total[idx] / MAX_GPU) * (r.gpu_total / MAX_GPU))
        return -dot


class FragModel:
    """Fragmentation of a node measured against a target workload, after the FGD paper.

    The target workload is the popular request shapes of the trace: shapes (CPU, GPUs, milli per
    GPU, allowed models) sorted by how many jobs ask for them (equal counts: larger CPU, share,
    GPU count first, as the paper's simulator orders them), taken until they cover ``threshold``
    of all jobs, with their frequencies renormalized (CPU-only jobs included).

    For one shape, the node's free GPU milli counts as fragment when the shape cannot run on
    the node (wrong model, too little CPU, not enough GPUs with its share free) or asks no GPU;
    when it can run, only the GPUs with less free than the shape's per-GPU share count. The
    node's fragmentation is the frequency-weighted sum over shapes. In closed form::

        frag = free_total - sum_t p_t * runs_t * (free milli on GPUs with free >= m_t)

    Examples
    --------
    >>> from gpufabric.scheduler.cluster import load_nodes
    >>> from gpufabric.scheduler.jobs import JobSet, Job
    >>> c = load_nodes("T4x2*1")
    >>> fm = FragModel(c, JobSet.from_jobs([Job("a", 1000, 1, 1, 500)]))
    >>> float(fm.frag(np.array([8000]), c.model_id[:1], np.array([[1000, 300]]))[0])
    300.0

    :meth:`frag_scaled` gives the same times the shapes' job count (``cum``), in integers:
    exact, whatever the order of the sums.
    """

    def __init__(self, cluster: Cluster, jobs: JobSet, threshold: float = 0.95):
        # a CPU-only job's accepted models do not matter (the simulator keys it without them)
        spec = np.where(jobs.num_gpu > 0, jobs.spec, 0)
        keys = Counter(zip(jobs.cpu.tolist(), jobs.num_gpu.tolist(), jobs.gpu_milli.tolist(),
                           spec.tolist(), strict=True))
        # most frequent first; equal counts: larger CPU, share, GPU count, model list first
        # (the simulator's order, which decides the shapes at the cut)
        ordered = sorted(keys.items(), reverse=True,
                         key=lambda kv: (kv[1], kv[0][0], kv[0][2], kv[0][1],
                                         "|".join(jobs.specs[kv[0][3]])))
        total = sum(keys.values())
        chosen, cum = [], 0
        for k, v in ordered:
            if cum >= threshold * total:
                break
            chosen.append((k, v))
            cum += v
        gpu = [(k, v) for k, v in chosen if k[1] > 0]
        self.shapes = [(k, v / cum) for k, v in chosen]
        self.cum = cum
        self.p = np.array([v / cum for _, v in gpu])
        self.jobs_of = np.array([v for _, v in gpu], dtype=np.int64)   # p times cum
        self.cpu = np.array([k[0] for k, _ in gpu], dtype=np.int64)
        self.num = np.array([k[1] for k, _ in gpu], dtype=np.int64)
        self.milli = np.array([k[2] for k, _ in gpu], dtype=np.int64)
        # acc[t, model]: shape t may use accelerators of that model
        self.acc = np.array(
            [[(not jobs.specs[k[3]]) or m in jobs.specs[k[3]] for m in cluster.models]
             for k, _ in gpu], dtype=bool).reshape(len(gpu), len(cluster.models))
        self.mvals, self.midx = np.unique(self.milli, return_inverse=True)
        # the same as columns, for broadcasting over states
        self._m = self.mvals[:, None, None]
        self._num, self._cpu = self.num[:, None], self.cpu[:, None]

    def frag(self, cpu: np.ndarray, model: np.ndarray, left: np.ndarray) -> np.ndarray:
        """Fragmentation (milli-GPU) of states given as arrays: CPU free, model id, GPU free."""
        return self.frag_scaled(cpu, model, left) / self.cum

    def frag_scaled(self, cpu: np.ndarray, model: np.ndarray, left: np.ndarray) -> np.ndarray:
        """:meth:`frag` times ``cum`` (the target workload's job count), exact in integers."""
        left = np.asarray(left, dtype=np.int64)
        total = np.add.reduce(left, axis=1) * self.cum
        if len(self.jobs_of) == 0:
            return total
        ge = left >= self._m                                          # M x U x G
        cnt = np.add.reduce(ge, axis=2)                               # M x U
        sge = np.add.reduce(left * ge, axis=2)                        # M x U
        ok = self.acc[:, model]                                       # T x U
        ok &= cnt[self.midx] >= self._num
        ok &= cpu >= self._cpu
        return total - self.jobs_of @ (ok * sge[self.midx])


@register("placement", "fgd")
class FGDPlacement(Placement):
    """Fragmentation gradient descent: least growth of :class:`FragModel` fragmentation.

    As the FGD paper's simulator does it:

    - a node's score is ``int(100 * sigmoid(-increase / 1000 milli))`` (an integer 0..100);
      for a GPU share, the best score over the GPUs the share fits on;
    - a share goes to the GPU with the best score, the lowest-numbered GPU on ties;
    - equally scored nodes: the one first in a random order of the nodes drawn once per run.
      The simulator prefixes every node name with its place in a random permutation drawn from
      the run's seed; its Kubernetes fork (source not obtained) then evidently picks among
      equal scores by that order: a per-decision random pick gives 90.1% on the default trace,
      this order 95.21% at 100% arrived and 95.40% at 130% (the paper: 95.23 and 95.39).

    Node states are deduplicated (CPU free, model, sorted GPU free) and the score of each
    (state, request shape) pair is computed once, vectorized, and cached; fragmentation is
    compared in exact integers (:meth:`FragModel.frag_scaled`).
    """

    name = "fgd"

    def __init__(self, cluster, jobs, rng, threshold: float = 0.95):
        super().__init__(cluster, jobs, rng)
        self.fm = FragModel(cluster, jobs, threshold)
        n, g = len(cluster), max(1, cluster.max_gpus)
        self.g = g
        # tie-break order: rank of each node in a random permutation drawn once per run
        self.rank = rng.permutation(n).astype(float) / (n + 1)
        self.sid_of: dict[tuple, int] = {}
        cap = 1024
        self.st_cpu = np.zeros(cap, np.int64)
        self.st_model = np.zeros(cap, np.int64)
        self.st_left = np.zeros((cap, g), np.int64)
        self.st_frag = np.full(cap, -1, np.int64)    # frag_scaled; -1: not computed yet
        self.n_states = 0
        self.node_sid = np.full(n, -1, np.int64)
        self.seen = np.full(n, -1, np.int64)
        self.cache: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
        # bit k marks position k of a state's sorted GPUs (for a node of at most 62 GPUs)
        self.bit = np.left_shift(1, np.arange(g), dtype=np.int64) if g <= 62 else None

    def _state_id(self, cpu: int, model: int, left: np.ndarray) -> int:
        srt = np.sort(left)
        key = (cpu, model, srt.tobytes())
        sid = self.sid_of.get(key)
        if sid is None:
            sid = self.n_states
            if sid == len(self.st_cpu):
                self.st_cpu = np.resize(self.st_cpu, 2 * sid)
                self.st_model = np.resize(self.st_model, 2 * sid)
                self.st_left = np.resize(self.st_left, (2 * sid, self.g))
                self.st_frag = np.resize(self.st_frag, 2 * sid)
            self.st_cpu[sid], self.st_model[sid], self.st_left[sid] = cpu, model, srt
            self.st_frag[sid] = -1        # computed with the state's first scores (_frags)
            self.sid_of[key] = sid
            self.n_states += 1
        return sid

    def _sync(self, state: State) -> None:
        changed = np.flatnonzero(state.version != self.seen)
        mid = self.cluster.model_id
        for i in changed.tolist():
            self.node_sid[i] = self._state_id(int(state.cpu_free[i]), int(mid[i]),
                                              state.gpu_left[i])
            self.seen[i] = state.version[i]

    def _frags(self, sids: np.ndarray, cpu: np.ndarray, model: np.ndarray,
               left: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``frag_scaled`` of the given rows, and of the states ``sids`` (distinct): those not
        yet known are computed in the same call and kept."""
        before = self.st_frag[sids]
        new = np.flatnonzero(before < 0)
        if len(new) == 0:
            return self.fm.frag_scaled(cpu, model, left), before
        ns = sids[new]
        f = self.fm.frag_scaled(np.concatenate([cpu, self.st_cpu[ns]]),
                                np.concatenate([model, self.st_model[ns]]),
                                np.concatenate([left, self.st_left[ns]]))
        k = len(f) - len(new)
        self.st_frag[ns] = before[new] = f[k:]
        return f[:k], before

    def _compute(self, sids: np.ndarray, r: Request) -> tuple[np.ndarray, np.ndarray]:
        """Integer score of each state for ``r``, and for a share which GPUs reach it.

        The second array is, for a share, a bitmask over the state's sorted GPU positions of
        the GPUs whose choice gives the node's score (zeros otherwise).
        """
        cpu = self.st_cpu[sids] - r.cpu
        model = self.st_model[sids]
        left = self.st_left[sids]
        none = np.zeros(len(sids), np.int64)
        if r.num_gpu == 0:
            f, before = self._frags(sids, cpu, model, left)
            return self._score(f - before), none
        if not r.share:
            after = left.copy()
            # sorted ascending: the wholly free GPUs are last; take r.num_gpu of them
            after[:, self.g - r.num_gpu:] -= MILLI
            after = np.where(after < 0, after + MILLI, after)  # guard (never for feasible)
            f, before = self._frags(sids, cpu, model, after)
            return self._score(f - before), none
        u, g = left.shape
        cand = np.repeat(left[:, None, :], g, axis=1)                 # U x G(option) x G
        diag = np.arange(g)
        cand[:, diag, diag] -= r.gpu_milli
        valid = left >= r.gpu_milli                                   # U x G
        f, before = self._frags(sids, np.repeat(cpu, g), np.repeat(model, g),
                                np.where(cand < 0, 0, cand).reshape(u * g, g))
        sc = np.where(valid, self._score(f.reshape(u, g) - before[:, None]), -1.0)
        best = sc.max(axis=1)
        hit = valid & (sc == best[:, None])
        bits = (hit * self.bit).sum(axis=1) if self.bit is not None else none
        return best, bits

    def _score(self, grown: np.ndarray) -> np.ndarray:
        """The FGD node score: int(100 * sigmoid(-delta / 1 GPU)) for a growth ``delta`` of
        fragmentation (milli-GPU), given as ``grown`` = delta times ``cum`` (exact integers)."""
        delta = np.round(grown / self.fm.cum, 6)
        # past 700 GPUs of growth the score is 0 either way; exp stays finite
        return np.floor(100.0 / (1.0 + np.exp(np.minimum(delta, 7e5) / 1000.0)))

    def _share_gpu(self, state: State, node: int, r: Request, bits: int) -> int:
        """The lowest-numbered GPU of ``node`` whose choice gives the node's best score."""
        row = state.gpu_left[node]
        sid = self.node_sid[node]
        if self.bit is not None:
            good = {v for k, v in enumerate(self.st_left[sid].tolist()) if bits >> k & 1}
            for gi, v in enumerate(row.tolist()):
                if v >= r.gpu_milli and v in good:
                    return gi
        # more than 62 GPUs on a node: score each GPU directly
        cpu, model = np.array([state.cpu_free[node] - r.cpu]), self.cluster.model_id[node:node + 1]
        sids = np.array([sid])
        best, pick = -2.0, -1
        for gi in np.flatnonzero(row >= r.gpu_milli).tolist():
            after = row.copy()
            after[gi] -= r.gpu_milli
            f, before = self._frags(sids, cpu, model, after[None, :])
            s = float(self._score(f - before)[0])
            if s > best:
                best, pick = s, gi
        return pick

    def _vals(self, state: State, r: Request, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Integer FGD score of each node in ``idx`` and the share-GPU bits (cached per state)."""
        self._sync(state)
        sids = self.node_sid[idx]
        key = (r.cpu, r.num_gpu, r.gpu_milli)
        ent = self.cache.get(key)
        if ent is None or len(ent[0]) < self.n_states:
            size = max(1024, 2 * self.n_states)
            sc = np.full(size, np.nan)
            ch = np.zeros(size, np.int64)
            if ent is not None:
                sc[:len(ent[0])] = ent[0]
                ch[:len(ent[1])] = ent[1]
            ent = (sc, ch)
            self.cache[key] = ent
        score, choice = ent
        vals = score[sids]
        miss = np.isnan(vals)
        if miss.any():
            ms = sids[miss]
            if len(ms) > 1:
                ms = np.unique(ms)
            score[ms], choice[ms] = self._compute(ms, r)
            vals = score[sids]
        return vals, choice

    def scores(self, state, r, idx):
        """The FGD score of each node, less its tie-break rank (the highest is chosen)."""
        return self._vals(state, r, idx)[0] - self.rank[idx]

    def select(self, state, r, mask):
        idx = np.flatnonzero(mask)
        if len(idx) == 0:
            return None
        vals, choice = self._vals(state, r, idx)
        # highest integer score; among equal scores the node ranked first this run
        node = int(idx[np.argmax(vals - self.rank[idx])])
        if r.share:
            return node, (self._share_gpu(state, node, r, int(choice[self.node_sid[node]])),)
        return node, state.pick_gpus(node, r)


@register("placement", "topology")
class TopologyPlacement(Placement):
    """Widest bottleneck bandwidth among the chosen GPUs, then best fit."""

    name = "topology"

    def __init__(self, cluster, jobs, rng):
        super().__init__(cluster, jobs, rng)
        self.cache: dict[tuple, tuple] = {}
        self.bits = 1 << np.arange(max(1, cluster.max_gpus), dtype=np.int64)
        self._types: np.ndarray | None = None
        self._memo_key: tuple | None = None
        self._memo: tuple = ()

    def best_set(self, node: int, free_bits: int, k: int) -> tuple:
        c = self.cluster
        key = (c.model_id[node], int(c.num_gpu[node]), c.presets.get(node), free_bits, k)
        hit = self.cache.get(key)
        if hit is None:
            bw, hops = c.gpu_tables(node)
            nics = c.gpu_nics(node)
            free = [i for i in range(int(c.num_gpu[node])) if free_bits >> i & 1]
            got = nodetopo.best_gpu_set(free, k, bw, hops, nics)
            hit = got + gpuset.nic_counts(got[0], nics)
            self.cache[key] = hit
        return hit

    def _node_types(self) -> np.ndarray:
        """Per node, an id of its (model, GPU count, system): nodes alike share best sets."""
        t = self._types
        if t is None:
            c = self.cluster
            seen: dict[tuple, int] = {}
            t = np.array([seen.setdefault((int(c.model_id[i]), int(c.num_gpu[i]),
                                           c.presets.get(i)), len(seen))
                          for i in range(len(c))], dtype=np.int64)
            self._types = t
        return t

    def _keys(self, state: State, r: Request, idx: np.ndarray) -> tuple:
        """Per node of ``idx``: the key of its best set (bottleneck GB/s, -hops, NICs by
        GPUDirect RDMA, NICs on its NUMA nodes) then the best-fit score, as one array of
        rows; the distinct best sets and which one each node has.

        Nodes of one type with the same free GPUs share one search.
        """
        memo = (r, idx.tobytes(), state.version[idx].tobytes())
        if self._memo_key == memo:       # select and scores ask about one state
            return self._memo
        fit = -(0.5 * (state.cpu_free[idx] - r.cpu) / MAX_CPU
                + 0.5 * (state.left_total[idx] - r.gpu_total) / MAX_GPU)
        freebits = ((state.gpu_left[idx] == MILLI) * self.bits).sum(axis=1)
        types = self._node_types()[idx]
        g = len(self.bits)
        if g <= 40:
            _, first, inv = np.unique((types << g) | freebits, return_index=True,
                                      return_inverse=True)
        else:
            _, first, inv = np.unique(np.stack([types, freebits], axis=1), axis=0,
                                      return_index=True, return_inverse=True)
        sets, keys = [], np.empty((len(first), 4))
        for u, at in enumerate(first.tolist()):
            gpus, bw, h, gdr, local = self.best_set(int(idx[at]), int(freebits[at]), r.num_gpu)
            sets.append(gpus)
            keys[u] = (bw, -h, gdr, local)
        inv = inv.reshape(-1)
        out = (np.column_stack([keys[inv], fit]), sets, inv)
        self._memo_key, self._memo = memo, out
        return out

    def scores(self, state, r, idx):
        """Rank of each node's (bottleneck, -hops, best fit) key: higher is better.

        Single-GPU and CPU requests: the best-fit score alone.
        """
        if r.num_gpu < 2:
            return -(0.5 * (state.cpu_free[idx] - r.cpu) / MAX_CPU
                     + 0.5 * (state.left_total[idx] - r.gpu_total) / MAX_GPU)
        key, _, _ = self._keys(state, r, idx)
        order = np.lexsort(key.T[::-1])
        key = key[order]
        new = np.ones(len(order), dtype=bool)
        new[1:] = (key[1:] != key[:-1]).any(axis=1)
        rank = np.maximum.accumulate(np.where(new, np.arange(len(order)), 0))
        out = np.empty(len(order))
        out[order] = rank
        return out

    def select(self, state, r, mask):
        idx = np.flatnonzero(mask)
        if len(idx) == 0:
            return None
        if r.num_gpu < 2:
            node = _pick(idx, self.scores(state, r, idx), self.rng)
            return node, state.pick_gpus(node, r)
        key, sets, inv = self._keys(state, r, idx)
        # the largest (bw, -hops, NICs, fit), the first node among equals
        pos = int(np.lexsort((-np.arange(len(idx)), *key.T[::-1]))[-1])
        return int(idx[pos]), tuple(sets[inv[pos]])


@register("placement", "topology-fgd")
class TopologyFGDPlacement(Placement):
    """Multi-GPU requests by ``topology``, everything else (shares, one GPU, CPU) by ``fgd``.

    What the issue of a real cluster asks: NVLink locality where a job spans GPUs, and little
    fragmentation where GPUs are shared.
    """

    name = "topology-fgd"

    def __init__(self, cluster, jobs, rng):
        super().__init__(cluster, jobs, rng)
        self.fgd = FGDPlacement(cluster, jobs, rng)
        self.topo = TopologyPlacement(cluster, jobs, rng)

    def _of(self, r: Request) -> Placement:
        return self.topo if r.num_gpu >= 2 else self.fgd

    def scores(self, state, r, idx):
        return self._of(r).scores(state, r, idx)

    def select(self, state, r, mask):
        return self._of(r).select(state, r, mask)


# -- queue orders -----------------------------------------------------------------------
@register("queue", "fifo")
class FifoQueue:
    """Arrival order; no preemption."""

    preempt = False

    @staticmethod
    def key(jobs: JobSet, i: int) -> tuple:
        return (float(jobs.creation[i]), i)


@register("queue", "priority")
class PriorityQueue:
    """Higher priority first (then arrival); a job that fits nowhere may preempt lower ones."""

    preempt = True

    @staticmethod
    def key(jobs: JobSet, i: int) -> tuple:
        return (-int(jobs.priority[i]), float(jobs.creation[i]), i)


# -- routing ----------------------------------------------------------------------------
@register("routing", "kind")
def route_by_kind(cluster: Cluster, kind: str) -> np.ndarray:
    """Nodes of the pools :data:`~gpufabric.scheduler.cluster.ROUTES` gives the kind."""
    return cluster.route_mask(kind)


@register("routing", "none")
def route_none(cluster: Cluster, kind: str) -> np.ndarray:
    """Every node."""
    return np.ones(len(cluster), dtype=bool)


def make_placement(name: str, cluster: Cluster, jobs: JobSet | None,
                   rng: np.random.Generator) -> Placement:
    """Instantiate the placement policy ``name`` (InputError if unknown)."""
    return REGISTRY.get("placement", name)(cluster, jobs, rng)

"""``replay`` mode: jobs arrive at their creation time, wait in a queue, run, and leave.

An event loop over one heap (arrivals, completions, node failures and repairs, samples):

- an arriving job is placed at once if it fits (the queue order decides who goes first when
  several wait); otherwise it waits. A job that fits on no node of its pools even when the
  cluster is empty is ``unschedulable`` at once, with the reason;
- when a job ends or a node comes back, the waiting jobs are tried again in queue order
  (``fifo`` or ``priority``; identical requests that failed in a pass are not retried in it);
- with the ``priority`` queue, a job that fits nowhere may preempt jobs of lower priority on one
  node; they go back to the queue and resume from their last checkpoint;
- a node failure stops every job with a member on it; each resumes elsewhere from its last
  checkpoint (the work since then is redone and counted in GPU-hours), or is ``failed`` with the
  reason when no healthy node could ever host it. A gang restarts as a whole.

Every job ends in exactly one state: ``completed``, ``failed`` or ``unscheduled`` (never
started, with the reason). The summary's ``unplaceable`` counts the unscheduled jobs that fit
no node of their pools even when the cluster is empty (larger than any node in GPUs, CPU or
memory); the others were still waiting when the trace ended. Results: job completion time
(submit to end), queueing delay, time-averaged GPU utilization, fragmentation over time
(share of free GPU milli the trace's typical jobs cannot use,
:class:`~gpufabric.scheduler.policies.FragModel`), GPU-hours redone and each job's
availability (useful work done / time from its first start to its end: lost work and time
spent waiting after a failure or preemption lower it).

Examples
--------
>>> from gpufabric.scheduler.cluster import load_nodes
>>> from gpufabric.scheduler.jobs import Job, JobSet
>>> jobs = JobSet.from_jobs([Job("a", 1000, 1024, 1, creation_s=0, duration_s=10),
...                          Job("b", 1000, 1024, 1, creation_s=1, duration_s=10)])
>>> r = run_replay(load_nodes("T4x1*1"), jobs, "best-fit")
>>> r.jobs[1]["wait_s"], r.jobs[1]["jct_s"], r.summary["completed"]
(9.0, 19.0, 2)
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from gpufabric.errors import InputError
from gpufabric.scheduler.cluster import Cluster
from gpufabric.scheduler.engine import (BaseMasks, check_load, check_seed, fits_when_empty,
                                        place_gang)
from gpufabric.scheduler.failures import FailureSpec
from gpufabric.scheduler.jobs import JobSet
from gpufabric.scheduler.policies import FragModel, make_placement
from gpufabric.scheduler.registry import REGISTRY
from gpufabric.scheduler.state import MILLI, Request, State

STATES = ("completed", "failed", "unscheduled")

# event kinds, in the order they are handled at one instant
_FINISH, _REPAIR, _FAIL, _ARRIVE, _SAMPLE = range(5)


@dataclass
class ReplayResult:
    """Summary, timeline and per-job records of one replay."""

    mode: str
    policy: str
    queue: str
    trace: str
    nodes: str
    seed: int
    summary: dict
    timeline: list[dict] = field(default_factory=list)
    jobs: list[dict] = field(default_factory=list)
    time_s: float = 0.0


def _pct(a: np.ndarray, q: float) -> float:
    return float(np.percentile(a, q)) if len(a) else 0.0


@dataclass(frozen=True)
class ReplayOptions:
    """How a replay runs: the queue order, the seed, how jobs are routed to node pools, the
    checkpoint interval of jobs that state none, how many utilisation samples the timeline
    keeps, and the load factor (creation times divided by it)."""

    queue: str = "fifo"
    seed: int = 42
    routing: str = "kind"
    default_checkpoint_s: float = 0.0
    samples: int = 200
    load: float = 1.0


class Replay:
    """One replay: the cluster state, the jobs' bookkeeping and one handler per event kind.

    Build it with the arguments of :func:`run_replay`, then call :meth:`run` once. The event
    loop pops ``(time, kind, seq, a, b)`` tuples from one heap and hands them to
    :meth:`on_arrive`, :meth:`on_finish`, :meth:`on_fail`, :meth:`on_repair` or
    :meth:`on_sample`; everything else is a helper those handlers share.

    Examples
    --------
    >>> from gpufabric.scheduler.cluster import load_nodes
    >>> from gpufabric.scheduler.jobs import Job, JobSet
    >>> jobs = JobSet.from_jobs([Job("a", 1000, 1024, 1, creation_s=5, duration_s=10)])
    >>> Replay(load_nodes("T4x1*1"), jobs, "best-fit").run().jobs[0]["jct_s"]
    10.0
    """

    def __init__(self, cluster: Cluster, jobs: JobSet, policy: str,
                 options: ReplayOptions | None = None, *, failures: FailureSpec | None = None,
                 tick: Callable[[float], None] | None = None, **kw: Any):
        o = replace(options or ReplayOptions(), **kw)
        queue, seed, routing, load = o.queue, o.seed, o.routing, o.load
        default_checkpoint_s, samples = o.default_checkpoint_s, o.samples
        if not jobs.meta.get("has_times", True):
            raise InputError("replay needs the creation_time and deletion_time columns; this "
                             "trace has none (use --mode arrival)", file=jobs.source or None,
                             field="header")
        check_load(load)
        check_seed(seed)
        self.t_start = time.perf_counter()
        self.cluster, self.jobs, self.policy, self.queue, self.seed = (cluster, jobs, policy,
                                                                       queue, seed)
        self.tick = tick
        rng = np.random.default_rng(seed)
        self.place = make_placement(policy, cluster, jobs, rng)
        self.qpol = REGISTRY.get("queue", queue)
        self.state = State(cluster)
        self.masks = BaseMasks(cluster, jobs, routing)
        self.fm = FragModel(cluster, jobs)
        n = len(jobs)
        self.cpu, self.mem, self.ng, self.gm = (jobs.cpu.tolist(), jobs.mem.tolist(),
                                                jobs.num_gpu.tolist(), jobs.gpu_milli.tolist())
        self.gang = jobs.gang.tolist()
        self.prio = jobs.priority.tolist()
        self.ckpt = [c if c > 0 else default_checkpoint_s for c in jobs.checkpoint.tolist()]
        self.req = [Request(self.cpu[i], self.mem[i], self.ng[i], self.gm[i]) for i in range(n)]
        self.qkey = [self.qpol.key(jobs, i) for i in range(n)]

        self.status = ["pending"] * n
        self.reason = [""] * n
        self.remaining = jobs.duration.astype(float).tolist()
        self.work = list(self.remaining)  # useful work each job asks for
        self.epoch = [0] * n
        self.started = [math.nan] * n     # start of the current run
        self.first = [math.nan] * n
        self.end = [math.nan] * n
        self.ran = [0.0] * n              # seconds spent running (redone work included)
        self.restarts = [0] * n
        self.redo_h = [0.0] * n           # GPU-hours redone
        self.placed: list[list[tuple[int, tuple[int, ...]]]] = [[] for _ in range(n)]
        self.on_node: list[set[int]] = [set() for _ in range(len(cluster))]
        self.waiting: set[int] = set()
        self.repair_pending = 0
        #: priority -> (cpu, mem, gpu milli) x nodes in use by jobs of that priority
        self.used: dict[int, np.ndarray] = {}

        self.events: list[tuple] = []
        self.seq = 0
        self.creation = (jobs.creation / load).tolist()
        self.t0 = min(self.creation) if n else 0.0
        self.nfail = self._seed_events(failures, samples)

        self.preemptions = 0
        self.never = [False] * n          # fits no node of its pools even when empty
        self.timeline: list[dict] = []
        self.util_area = 0.0
        self.util_t = self.t0
        self.util_now = 0.0
        self.now = self.t0
        self.t_arr = max(self.creation, default=self.t0)
        self.arr_area = 0.0
        self.handlers: dict[int, Callable[[int, int], None]] = {
            _ARRIVE: self.on_arrive, _FINISH: self.on_finish, _FAIL: self.on_fail,
            _REPAIR: self.on_repair, _SAMPLE: self.on_sample}

    def _seed_events(self, failures: FailureSpec | None, samples: int) -> int:
        """Queue every arrival, the failures and repairs ``failures`` draws over the trace's
        span, and ``samples`` evenly spaced utilisation samples; the number of failures."""
        for i, c in enumerate(self.creation):
            self.push(c, _ARRIVE, i)
        t_last = max((c + d for c, d in zip(self.creation, self.remaining, strict=True)),
                     default=self.t0)
        nfail = 0
        if failures is not None:
            for f in failures.events(self.t0, t_last, len(self.cluster), self.seed):
                self.push(f.time_s, _FAIL, f.node, 0 if math.isinf(f.repair_s) else 1)
                if not math.isinf(f.repair_s):
                    self.push(f.time_s + f.repair_s, _REPAIR, f.node)
                nfail += 1
        step = (t_last - self.t0) / samples if t_last > self.t0 else 0.0
        if step > 0:
            for k in range(samples + 1):
                self.push(self.t0 + k * step, _SAMPLE, k)
        return nfail

    # -- the loop ----------------------------------------------------------------------------
    def run(self) -> ReplayResult:
        """Handle every event in time order, then close the books."""
        while self.events:
            self.now, kind, _, a, b = heapq.heappop(self.events)
            self.handlers[kind](a, b)
            self.record_util()
        return self.result()

    def push(self, t: float, kind: int, a: int, b: int = 0) -> None:
        heapq.heappush(self.events, (t, kind, self.seq, a, b))
        self.seq += 1

    # -- handlers, one per event kind --------------------------------------------------------
    def on_arrive(self, i: int, _: int) -> None:
        """A job arrives: unschedulable at once, placed, or waiting (maybe preempting)."""
        if not self.could_ever_fit(i, only_up=False):
            self.status[i] = "unscheduled"
            self.reason[i] = self.unfit_reason(i)
            self.never[i] = True
            return
        self.status[i] = "waiting"
        self.waiting.add(i)
        if not self.try_place(i) and self.qpol.preempt:
            self.try_preempt(i)

    def on_finish(self, i: int, epoch: int) -> None:
        """A run ends (ignored when stale: the job was interrupted since it started)."""
        if self.status[i] != "running" or self.epoch[i] != epoch:
            return
        self.ran[i] += self.now - self.started[i]
        self.remaining[i] = 0.0
        self.stop(i)
        self.status[i] = "completed"
        self.end[i] = self.now
        self.schedule_waiting()

    def on_fail(self, node: int, repairable: int) -> None:
        """A node fails: its jobs resume elsewhere from their last checkpoint, or fail."""
        if not self.state.up[node]:
            return
        hit = sorted(self.on_node[node])
        for i in hit:
            self.interrupt(i, f"node {self.cluster.names[node]} failed at {self.now:.0f}s")
        self.state.up[node] = False
        if repairable:
            self.repair_pending += 1
        for i in hit:
            if (not repairable and self.repair_pending == 0
                    and not self.could_ever_fit(i, only_up=True)):
                self.status[i] = "failed"
                self.reason[i] += "; no healthy node can host it"
                self.end[i] = self.now
            else:
                self.waiting.add(i)
        self.schedule_waiting()

    def on_repair(self, node: int, _: int) -> None:
        """A node comes back: the waiting jobs are tried again."""
        self.state.up[node] = True
        self.repair_pending -= 1
        self.schedule_waiting()

    def on_sample(self, k: int, _: int) -> None:
        """A point of the timeline: utilization, fragmentation, queue, nodes down."""
        state, cluster = self.state, self.cluster
        up = state.up
        free = state.left_total[up]
        frag = self.fm.frag(state.cpu_free[up], cluster.model_id[up], state.gpu_left[up])
        tot = float(free.sum())
        self.timeline.append({
            "t_s": round(self.now - self.t0, 3),
            "gpu_util_pct": round(100 * state.gpu_util(), 3),
            "frag_pct_of_free": round(100 * float(frag.sum()) / tot, 3) if tot else 0.0,
            "running": sum(1 for s in self.status if s == "running") if k % 10 == 0 else None,
            "waiting": len(self.waiting), "nodes_down": int((~up).sum())})
        if self.tick:
            self.tick(self.now - self.t0)

    # -- helpers the handlers share ----------------------------------------------------------
    def gpus_of(self, i: int) -> int:
        return self.req[i].gpu_total * self.gang[i]

    def account(self, i: int, sign: int) -> None:
        u = self.used.get(self.prio[i])
        if u is None:
            u = self.used[self.prio[i]] = np.zeros((3, len(self.cluster)), dtype=np.int64)
        r = self.req[i]
        for node, _ in self.placed[i]:
            u[0, node] += sign * r.cpu
            u[1, node] += sign * r.mem
            u[2, node] += sign * r.gpu_total

    def start(self, i: int, where: list) -> None:
        assert not self.placed[i] and self.status[i] != "running", "a job placed twice"
        self.placed[i] = where
        self.account(i, +1)
        for node, _ in where:
            self.on_node[node].add(i)
        self.status[i] = "running"
        self.started[i] = self.now
        if math.isnan(self.first[i]):
            self.first[i] = self.now
        self.epoch[i] += 1
        self.push(self.now + self.remaining[i], _FINISH, i, self.epoch[i])

    def stop(self, i: int) -> None:
        """Release a running job's members."""
        self.account(i, -1)
        for node, g in self.placed[i]:
            self.state.release(node, self.req[i], g)
            self.on_node[node].discard(i)
        self.placed[i] = []
        self.epoch[i] += 1

    def interrupt(self, i: int, why: str) -> None:
        """Stop a running job; it keeps the work up to its last checkpoint."""
        elapsed = self.now - self.started[i]
        c = self.ckpt[i]
        saved = math.floor(elapsed / c) * c if 0 < c < math.inf else 0.0  # inf: never saved
        saved = min(saved, self.remaining[i])
        lost = elapsed - saved
        self.remaining[i] -= saved
        self.ran[i] += elapsed
        self.redo_h[i] += lost * self.gpus_of(i) / MILLI / 3600.0
        self.restarts[i] += 1
        self.stop(i)
        self.status[i] = "waiting"
        self.reason[i] = why

    def could_ever_fit(self, i: int, only_up: bool) -> bool:
        """Could all members of job ``i`` run at once in one of its pools (healthy nodes only
        when ``only_up``) if the nodes were empty? (:func:`~gpufabric.scheduler.engine.
        fits_when_empty`)"""
        return fits_when_empty(self.state, self.masks.tiers(i), self.req[i], self.gang[i],
                               only_up)

    def unfit_reason(self, i: int) -> str:
        g, spec = self.gang[i], self.jobs.specs[self.jobs.spec[i]]
        return ("fits no node of its pools even when empty (needs "
                + (f"{g} x " if g > 1 else "")
                + f"{self.cpu[i]} mCPU, {self.mem[i]} MiB, {self.ng[i]} x {self.gm[i]} mGPU"
                + (f", models {'|'.join(spec)}" if self.ng[i] and spec else "")
                + (", all in one pool" if g > 1 else "") + ")")

    def try_place(self, i: int) -> bool:
        where = place_gang(self.state, self.place, self.req[i], self.masks.tiers(i),
                           self.gang[i])
        if where is None:
            return False
        self.waiting.discard(i)
        self.start(i, where)
        return True

    def try_preempt(self, i: int) -> bool:
        """Free one node of lower-priority jobs so that job ``i`` fits (single-member jobs)."""
        if self.gang[i] != 1:
            return False
        state, prio, req = self.state, self.prio, self.req
        r = req[i]
        base = self.masks.of(i) & state.up & state.fits_empty(r)
        lower = [u for q, u in self.used.items() if q < prio[i]]
        if not lower:
            return False
        free = np.sum(lower, axis=0)  # what the lower-priority jobs hold, per node
        base &= ((state.cpu_free + free[0] >= r.cpu) & (state.mem_free + free[1] >= r.mem)
                 & (state.left_total + free[2] >= r.gpu_total) & (free[2] + free[0] > 0))
        cand = np.flatnonzero(base)
        cand = cand[np.argsort(free[2][cand], kind="stable")][:64]  # cheapest first
        best = None
        for node in cand.tolist():
            victims = sorted((j for j in self.on_node[node] if prio[j] < prio[i]),
                             key=lambda j: (prio[j], self.gpus_of(j)))
            if not victims:
                continue
            cpu_f, mem_f = int(state.cpu_free[node]), int(state.mem_free[node])
            row = state.gpu_left[node].copy()
            chosen = []
            for j in victims:
                chosen.append(j)
                for nd, g in self.placed[j]:
                    if nd == node:
                        cpu_f += req[j].cpu
                        mem_f += req[j].mem
                        for gi in g:
                            row[gi] += req[j].gpu_milli
                fits = cpu_f >= r.cpu and mem_f >= r.mem and (
                    r.num_gpu == 0
                    or (r.share and row.max() >= r.gpu_milli)
                    or (not r.share and int((row == MILLI).sum()) >= r.num_gpu))
                if fits:
                    cost = (sum(self.gpus_of(j) for j in chosen), len(chosen))
                    if best is None or cost < best[0]:
                        best = (cost, chosen)
                    break
        if best is None:
            return False
        for j in best[1]:
            self.interrupt(j, f"preempted by {self.jobs.names[i]}")
            self.waiting.add(j)
            self.preemptions += 1
        return self.try_place(i)

    def schedule_waiting(self) -> None:
        """Try the waiting jobs in queue order (a shape that failed is not retried now)."""
        if not self.waiting:
            return
        failed_shapes = set()
        jobs = self.jobs
        for i in sorted(self.waiting, key=lambda j: self.qkey[j]):
            shape = (self.cpu[i], self.mem[i], self.ng[i], self.gm[i], self.gang[i],
                     jobs.spec[i], jobs.kind[i])
            if shape in failed_shapes:
                continue
            if self.try_place(i):
                continue
            if self.qpol.preempt and self.try_preempt(i):
                continue
            failed_shapes.add(shape)

    def record_util(self) -> None:
        now = self.now
        self.util_area += self.util_now * (now - self.util_t)
        if self.util_t < self.t_arr:
            self.arr_area += self.util_now * (min(now, self.t_arr) - self.util_t)
        self.util_t = now
        self.util_now = self.state.gpu_util()

    # -- the books ---------------------------------------------------------------------------
    def result(self) -> ReplayResult:
        """Close the jobs still waiting, check the invariants, and summarize."""
        status, reason, now, t0 = self.status, self.reason, self.now, self.t0
        for i in sorted(self.waiting):
            if self.restarts[i]:
                status[i] = "failed"
                reason[i] = f"{reason[i]}; could not restart before the trace ended"
            else:
                status[i] = "unscheduled"
                reason[i] = "still waiting when the trace ended"
            self.end[i] = now
        self.waiting.clear()
        assert all(s in STATES for s in status), "a job ended in no final state"
        assert self.state.allocated_milli == 0, "resources leaked"

        records = []
        jct, wait = [], []
        for i in range(len(self.jobs)):
            rec = {"name": self.jobs.names[i], "state": status[i], "reason": reason[i],
                   "submit_s": self.creation[i], "priority": self.prio[i],
                   "gpus": self.gpus_of(i) / MILLI, "restarts": self.restarts[i],
                   "gpu_hours_redone": round(self.redo_h[i], 6)}
            if self.never[i]:
                rec["unplaceable"] = True
            if not math.isnan(self.first[i]):
                rec["start_s"] = self.first[i]
                rec["wait_s"] = self.first[i] - self.creation[i]
                wait.append(rec["wait_s"])
                span = self.end[i] - self.first[i]
                useful = self.work[i] - self.remaining[i]
                rec["availability"] = round(min(1.0, useful / span), 6) if span > 0 else 1.0
            if status[i] == "completed":
                rec["end_s"] = self.end[i]
                rec["jct_s"] = self.end[i] - self.creation[i]
                jct.append(rec["jct_s"])
            records.append(rec)
        jct_a, wait_a = np.array(jct), np.array(wait)
        horizon = max(now - t0, 1e-9)
        counts = {s: status.count(s) for s in STATES}
        avail = np.array([r["availability"] for r in records if "availability" in r])
        timeline = self.timeline
        summary = {
            "jobs": len(self.jobs), **counts, "unplaceable": sum(self.never),
            "jct_mean_s": float(jct_a.mean()) if len(jct_a) else 0.0,
            "jct_p50_s": _pct(jct_a, 50), "jct_p95_s": _pct(jct_a, 95),
            "wait_mean_s": float(wait_a.mean()) if len(wait_a) else 0.0,
            "wait_p50_s": _pct(wait_a, 50), "wait_p95_s": _pct(wait_a, 95),
            "wait_max_s": float(wait_a.max()) if len(wait_a) else 0.0,
            "gpu_util_mean_pct": 100 * self.util_area / horizon,
            "gpu_util_mean_pct_while_arriving":
                100 * self.arr_area / max(self.t_arr - t0, 1e-9),
            "frag_mean_pct_of_free": float(np.mean([p["frag_pct_of_free"] for p in timeline]))
            if timeline else 0.0,
            "node_failures": self.nfail, "preemptions": self.preemptions,
            "restarts": sum(self.restarts), "gpu_hours_redone": float(sum(self.redo_h)),
            "availability_mean": float(avail.mean()) if len(avail) else 1.0,
            "availability_min": float(avail.min()) if len(avail) else 1.0,
            "horizon_s": horizon,
        }
        return ReplayResult("replay", self.policy, self.queue, self.jobs.source,
                            self.cluster.source, self.seed, summary, timeline, records,
                            time.perf_counter() - self.t_start)


def run_replay(cluster: Cluster, jobs: JobSet, policy: str,
               options: ReplayOptions | None = None, *, failures: FailureSpec | None = None,
               tick: Callable[[float], None] | None = None, **kw: Any) -> ReplayResult:
    """Replay ``jobs`` on ``cluster`` (see the module doc and :class:`Replay`); ``options``
    (a :class:`ReplayOptions`) or its fields as keywords (``queue="priority", samples=20``).

    ``load`` > 1 compresses the arrival times (creation times divided by ``load``, durations
    kept), to study the same jobs under more pressure.
    """
    return Replay(cluster, jobs, policy, options, failures=failures, tick=tick, **kw).run()

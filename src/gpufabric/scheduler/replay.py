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
started, with the reason). Results: job completion time (submit to end), queueing delay,
time-averaged GPU utilization, fragmentation over time (share of free GPU milli the trace's
typical jobs cannot use, :class:`~gpufabric.scheduler.policies.FragModel`), GPU-hours redone and
each job's availability (useful work done / time from its first start to its end: lost work
and time spent waiting after a failure or preemption lower it).

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
from dataclasses import dataclass, field

import numpy as np

from gpufabric.errors import InputError
from gpufabric.scheduler.cluster import Cluster
from gpufabric.scheduler.engine import BaseMasks, place_gang
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


def run_replay(cluster: Cluster, jobs: JobSet, policy: str, *, queue: str = "fifo",
           seed: int = 42, failures: FailureSpec | None = None, routing: str = "kind",
           default_checkpoint_s: float = 0.0, samples: int = 200, load: float = 1.0,
           tick: Callable[[float], None] | None = None) -> ReplayResult:
    """Replay ``jobs`` on ``cluster`` (see the module doc).

    ``load`` > 1 compresses the arrival times (creation times divided by ``load``, durations
    kept), to study the same jobs under more pressure.
    """
    if not jobs.meta.get("has_times", True):
        raise InputError("replay needs the creation_time and deletion_time columns; this "
                         "trace has none (use --mode arrival)", file=jobs.source or None,
                         field="header")
    t_start = time.perf_counter()
    rng = np.random.default_rng(seed)
    place = make_placement(policy, cluster, jobs, rng)
    qpol = REGISTRY.get("queue", queue)
    state = State(cluster)
    masks = BaseMasks(cluster, jobs, routing)
    fm = FragModel(cluster, jobs)
    n = len(jobs)
    cpu, mem, ng, gm = (jobs.cpu.tolist(), jobs.mem.tolist(), jobs.num_gpu.tolist(),
                        jobs.gpu_milli.tolist())
    gang = jobs.gang.tolist()
    prio = jobs.priority.tolist()
    ckpt = [c if c > 0 else default_checkpoint_s for c in jobs.checkpoint.tolist()]
    req = [Request(cpu[i], mem[i], ng[i], gm[i]) for i in range(n)]
    qkey = [qpol.key(jobs, i) for i in range(n)]

    status = ["pending"] * n
    reason = [""] * n
    remaining = jobs.duration.astype(float).tolist()
    work = list(remaining)       # useful work each job asks for
    epoch = [0] * n
    started = [math.nan] * n     # start of the current run
    first = [math.nan] * n
    end = [math.nan] * n
    ran = [0.0] * n              # seconds spent running (redone work included)
    restarts = [0] * n
    redo_h = [0.0] * n           # GPU-hours redone
    placed: list[list[tuple[int, tuple[int, ...]]]] = [[] for _ in range(n)]
    on_node: list[set[int]] = [set() for _ in range(len(cluster))]
    waiting: set[int] = set()
    repair_pending = 0

    events: list[tuple] = []
    seq = 0

    def push(t: float, kind: int, a: int, b: int = 0) -> None:
        nonlocal seq
        heapq.heappush(events, (t, kind, seq, a, b))
        seq += 1

    if load <= 0:
        raise InputError("must be positive", field="--load")
    creation = (jobs.creation / load).tolist()
    for i in range(n):
        push(creation[i], _ARRIVE, i)
    t0 = min(creation) if n else 0.0
    t_last = max((c + d for c, d in zip(creation, remaining, strict=True)), default=t0)
    nfail = 0
    if failures is not None:
        for f in failures.events(t0, t_last, len(cluster), seed):
            push(f.time_s, _FAIL, f.node, 0 if math.isinf(f.repair_s) else 1)
            if not math.isinf(f.repair_s):
                push(f.time_s + f.repair_s, _REPAIR, f.node)
            nfail += 1
    step = (t_last - t0) / samples if t_last > t0 else 0.0
    if step > 0:
        for k in range(samples + 1):
            push(t0 + k * step, _SAMPLE, k)

    preemptions = 0
    timeline: list[dict] = []
    util_area = 0.0
    util_t = t0
    util_now = 0.0
    now = t0

    def gpus_of(i: int) -> int:
        return req[i].gpu_total * gang[i]

    used: dict[int, np.ndarray] = {}  # priority -> (cpu, mem, gpu milli) x nodes in use

    def account(i: int, sign: int) -> None:
        u = used.get(prio[i])
        if u is None:
            u = used[prio[i]] = np.zeros((3, len(cluster)), dtype=np.int64)
        for node, _ in placed[i]:
            u[0, node] += sign * req[i].cpu
            u[1, node] += sign * req[i].mem
            u[2, node] += sign * req[i].gpu_total

    def start(i: int, where: list) -> None:
        assert not placed[i] and status[i] != "running", "a job placed twice"
        placed[i] = where
        account(i, +1)
        for node, _ in where:
            on_node[node].add(i)
        status[i] = "running"
        started[i] = now
        if math.isnan(first[i]):
            first[i] = now
        epoch[i] += 1
        push(now + remaining[i], _FINISH, i, epoch[i])

    def stop(i: int) -> None:
        """Release a running job's members."""
        account(i, -1)
        for node, g in placed[i]:
            state.release(node, req[i], g)
            on_node[node].discard(i)
        placed[i] = []
        epoch[i] += 1

    def interrupt(i: int, why: str) -> None:
        """Stop a running job; it keeps the work up to its last checkpoint."""
        elapsed = now - started[i]
        c = ckpt[i]
        saved = math.floor(elapsed / c) * c if c > 0 else 0.0
        saved = min(saved, remaining[i])
        lost = elapsed - saved
        remaining[i] -= saved
        ran[i] += elapsed
        redo_h[i] += lost * gpus_of(i) / MILLI / 3600.0
        restarts[i] += 1
        stop(i)
        status[i] = "waiting"
        reason[i] = why

    def could_ever_fit(i: int, only_up: bool) -> bool:
        """Could all members of job ``i`` run at once on the (healthy) nodes when empty?"""
        r = req[i]
        ok = state.fits_empty(r, masks.of(i), only_up)
        if gang[i] == 1 or not ok.any():
            return bool(ok.any())
        big = np.iinfo(np.int64).max
        per = np.full(len(cluster), big)
        if r.cpu:
            per = np.minimum(per, cluster.cpu // r.cpu)
        if r.mem:
            per = np.minimum(per, cluster.mem // r.mem)
        if r.num_gpu:
            slots = cluster.num_gpu * (MILLI // r.gpu_milli) if r.share else cluster.num_gpu
            per = np.minimum(per, slots // (1 if r.share else r.num_gpu))
        per = np.minimum(per, gang[i])
        return int(per[ok].sum()) >= gang[i]

    def try_place(i: int) -> bool:
        where = place_gang(state, place, req[i], masks.tiers(i), gang[i])
        if where is None:
            return False
        waiting.discard(i)
        start(i, where)
        return True

    def try_preempt(i: int) -> bool:
        """Free one node of lower-priority jobs so that job ``i`` fits (single-member jobs)."""
        nonlocal preemptions
        if gang[i] != 1:
            return False
        r = req[i]
        base = masks.of(i) & state.up & state.fits_empty(r)
        lower = [u for q, u in used.items() if q < prio[i]]
        if not lower:
            return False
        free = np.sum(lower, axis=0)  # what the lower-priority jobs hold, per node
        base &= ((state.cpu_free + free[0] >= r.cpu) & (state.mem_free + free[1] >= r.mem)
                 & (state.left_total + free[2] >= r.gpu_total) & (free[2] + free[0] > 0))
        cand = np.flatnonzero(base)
        cand = cand[np.argsort(free[2][cand], kind="stable")][:64]  # cheapest first
        best = None
        for node in cand.tolist():
            victims = sorted((j for j in on_node[node] if prio[j] < prio[i]),
                             key=lambda j: (prio[j], gpus_of(j)))
            if not victims:
                continue
            cpu_f, mem_f = int(state.cpu_free[node]), int(state.mem_free[node])
            row = state.gpu_left[node].copy()
            chosen = []
            for j in victims:
                chosen.append(j)
                for nd, g in placed[j]:
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
                    cost = (sum(gpus_of(j) for j in chosen), len(chosen))
                    if best is None or cost < best[0]:
                        best = (cost, chosen)
                    break
        if best is None:
            return False
        for j in best[1]:
            interrupt(j, f"preempted by {jobs.names[i]}")
            waiting.add(j)
            preemptions += 1
        return try_place(i)

    def schedule_waiting() -> None:
        if not waiting:
            return
        failed_shapes = set()
        for i in sorted(waiting, key=lambda j: qkey[j]):
            shape = (cpu[i], mem[i], ng[i], gm[i], gang[i], jobs.spec[i], jobs.kind[i])
            if shape in failed_shapes:
                continue
            if try_place(i):
                continue
            if qpol.preempt and try_preempt(i):
                continue
            failed_shapes.add(shape)

    t_arr = max(creation, default=t0)
    arr_area = 0.0

    def record_util() -> None:
        nonlocal util_area, util_t, util_now, arr_area
        util_area += util_now * (now - util_t)
        if util_t < t_arr:
            arr_area += util_now * (min(now, t_arr) - util_t)
        util_t = now
        util_now = state.gpu_util()

    while events:
        now, kind, _, a, b = heapq.heappop(events)
        if kind == _ARRIVE:
            i = a
            if not could_ever_fit(i, only_up=False):
                status[i] = "unscheduled"
                reason[i] = ("fits no node of its pools even when empty (needs "
                             + (f"{gang[i]} x " if gang[i] > 1 else "")
                             + f"{cpu[i]} mCPU, {mem[i]} MiB, {ng[i]} x {gm[i]} mGPU"
                             + (f", models {'|'.join(jobs.specs[jobs.spec[i]])}"
                                if ng[i] and jobs.specs[jobs.spec[i]] else "") + ")")
                continue
            status[i] = "waiting"
            waiting.add(i)
            if not try_place(i) and qpol.preempt:
                try_preempt(i)
        elif kind == _FINISH:
            i = a
            if status[i] != "running" or epoch[i] != b:
                continue  # stale: the job was interrupted
            ran[i] += now - started[i]
            remaining[i] = 0.0
            stop(i)
            status[i] = "completed"
            end[i] = now
            schedule_waiting()
        elif kind == _FAIL:
            node = a
            if not state.up[node]:
                continue
            hit = sorted(on_node[node])
            for i in hit:
                interrupt(i, f"node {cluster.names[node]} failed at {now:.0f}s")
            state.up[node] = False
            if b:
                repair_pending += 1
            for i in hit:
                if not b and repair_pending == 0 and not could_ever_fit(i, only_up=True):
                    status[i] = "failed"
                    reason[i] += "; no healthy node can host it"
                    end[i] = now
                else:
                    waiting.add(i)
            schedule_waiting()
        elif kind == _REPAIR:
            node = a
            state.up[node] = True
            repair_pending -= 1
            schedule_waiting()
        elif kind == _SAMPLE:
            up = state.up
            free = state.left_total[up]
            frag = fm.frag(state.cpu_free[up], cluster.model_id[up], state.gpu_left[up])
            tot = float(free.sum())
            timeline.append({"t_s": round(now - t0, 3), "gpu_util_pct":
                             round(100 * state.gpu_util(), 3),
                             "frag_pct_of_free": round(100 * float(frag.sum()) / tot, 3)
                             if tot else 0.0,
                             "running": sum(1 for s in status if s == "running") if a % 10 == 0
                             else None,
                             "waiting": len(waiting), "nodes_down": int((~up).sum())})
            if tick:
                tick(now - t0)
        record_util()

    for i in sorted(waiting):
        if restarts[i]:
            status[i] = "failed"
            reason[i] = f"{reason[i]}; could not restart before the trace ended"
        else:
            status[i] = "unscheduled"
            reason[i] = "still waiting when the trace ended"
        end[i] = now
    waiting.clear()
    assert all(s in STATES for s in status), "a job ended in no final state"
    assert state.allocated_milli == 0, "resources leaked"

    records = []
    jct, wait = [], []
    for i in range(n):
        rec = {"name": jobs.names[i], "state": status[i], "reason": reason[i],
               "submit_s": creation[i], "priority": prio[i], "gpus": gpus_of(i) / MILLI,
               "restarts": restarts[i], "gpu_hours_redone": round(redo_h[i], 6)}
        if not math.isnan(first[i]):
            rec["start_s"] = first[i]
            rec["wait_s"] = first[i] - creation[i]
            wait.append(rec["wait_s"])
            span = end[i] - first[i]
            useful = work[i] - remaining[i]
            rec["availability"] = round(min(1.0, useful / span), 6) if span > 0 else 1.0
        if status[i] == "completed":
            rec["end_s"] = end[i]
            rec["jct_s"] = end[i] - creation[i]
            jct.append(rec["jct_s"])
        records.append(rec)
    jct_a, wait_a = np.array(jct), np.array(wait)
    horizon = max(now - t0, 1e-9)
    counts = {s: status.count(s) for s in STATES}
    avail = np.array([r["availability"] for r in records if "availability" in r])
    summary = {
        "jobs": n, **counts,
        "jct_mean_s": float(jct_a.mean()) if len(jct_a) else 0.0,
        "jct_p50_s": _pct(jct_a, 50), "jct_p95_s": _pct(jct_a, 95),
        "wait_mean_s": float(wait_a.mean()) if len(wait_a) else 0.0,
        "wait_p50_s": _pct(wait_a, 50), "wait_p95_s": _pct(wait_a, 95),
        "wait_max_s": float(wait_a.max()) if len(wait_a) else 0.0,
        "gpu_util_mean_pct": 100 * util_area / horizon,
        "gpu_util_mean_pct_while_arriving": 100 * arr_area / max(t_arr - t0, 1e-9),
        "frag_mean_pct_of_free": float(np.mean([p["frag_pct_of_free"] for p in timeline]))
        if timeline else 0.0,
        "node_failures": nfail, "preemptions": preemptions,
        "restarts": sum(restarts), "gpu_hours_redone": float(sum(redo_h)),
        "availability_mean": float(avail.mean()) if len(avail) else 1.0,
        "availability_min": float(avail.min()) if len(avail) else 1.0,
        "horizon_s": horizon,
    }
    return ReplayResult("replay", policy, queue, jobs.source, cluster.source, seed, summary,
                        timeline, records, time.perf_counter() - t_start)

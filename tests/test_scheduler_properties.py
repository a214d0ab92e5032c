"""Properties of the scheduler that must hold for any cluster, workload and policy.

- no node's CPU, memory or any GPU's share is ever over-allocated (checked against a ledger);
- a gang is placed all or nothing;
- in replay every job ends in exactly one state, none is lost or running twice, and node
  failures lose no job.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufabric.scheduler import REGISTRY, Job, JobSet
from gpufabric.scheduler.cluster import Cluster
from gpufabric.scheduler.engine import place_gang
from gpufabric.scheduler.failures import Failure, FailureSpec
from gpufabric.scheduler.policies import make_placement
from gpufabric.scheduler.replay import STATES, run_replay
from gpufabric.scheduler.state import MILLI, Request, State

POLICIES = REGISTRY.names("placement")
MODELS = ["T4", "V100M32", "G2", "TPU-v4"]


@st.composite
def clusters(draw):
    n = draw(st.integers(1, 5))
    rows = []
    for k in range(n):
        g = draw(st.sampled_from([0, 1, 2, 4, 8]))
        model = draw(st.sampled_from(MODELS[:3])) if g else ""
        rows.append((f"n{k}", draw(st.integers(1, 64)) * 1000, draw(st.integers(1, 64)) * 1024,
                     g, model, "gpu" if g else "cpu"))
    return Cluster.from_rows(rows, "hypothesis")


@st.composite
def jobs(draw, max_jobs=14):
    out = []
    for k in range(draw(st.integers(1, max_jobs))):
        ng = draw(st.sampled_from([0, 1, 1, 2, 4, 8]))
        milli = draw(st.sampled_from([100, 250, 500, 1000])) if ng == 1 else 1000
        out.append(Job(f"j{k}", draw(st.integers(0, 16)) * 1000, draw(st.integers(0, 16)) * 1024,
                       ng, milli, tuple(draw(st.sets(st.sampled_from(MODELS[:3]), max_size=2))),
                       kind=draw(st.sampled_from(["training", "batch", "service"])),
                       priority=draw(st.integers(0, 2)), gang=draw(st.integers(1, 3)),
                       creation_s=draw(st.integers(0, 50)), duration_s=draw(st.integers(1, 40)),
                       checkpoint_s=draw(st.sampled_from([0, 5]))))
    return JobSet.from_jobs(out, "hypothesis")


def _check_ledger(cluster, state, ledger):
    """Free capacity equals capacity minus what the ledger says is placed; nothing negative."""
    n, g = state.gpu_left.shape
    cpu = cluster.cpu.copy()
    mem = cluster.mem.copy()
    gpu = np.zeros((n, g), np.int64)
    for k in range(g):
        gpu[cluster.num_gpu > k, k] = MILLI
    for node, r, gpus in ledger:
        cpu[node] -= r.cpu
        mem[node] -= r.mem
        for gi in gpus:
            gpu[node, gi] -= r.gpu_milli
    assert (cpu >= 0).all() and (mem >= 0).all() and (gpu >= 0).all()
    assert (state.cpu_free == cpu).all() and (state.mem_free == mem).all()
    assert (state.gpu_left == gpu).all()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=clusters(), work=jobs(), policy=st.sampled_from(POLICIES), seed=st.integers(0, 9))
def test_placement_never_over_allocates_and_gangs_are_all_or_nothing(cluster, work, policy, seed):
    state = State(cluster)
    place = make_placement(policy, cluster, work, np.random.default_rng(seed))
    ledger = []
    for i in range(len(work)):
        j = work.job(i)
        r = Request(j.cpu_milli, j.memory_mib, j.num_gpu, j.gpu_milli if j.num_gpu else 0)
        base = cluster.model_mask(j.gpu_models) if j.num_gpu else np.ones(len(cluster), bool)
        before = (state.cpu_free.copy(), state.mem_free.copy(), state.gpu_left.copy())
        got = place_gang(state, place, r, base, j.gang)
        if got is None:
            assert (state.cpu_free == before[0]).all() and (state.mem_free == before[1]).all()
            assert (state.gpu_left == before[2]).all()
        else:
            assert len(got) == j.gang
            for node, gpus in got:
                assert base[node] and len(set(gpus)) == j.num_gpu
                ledger.append((node, r, gpus))
        _check_ledger(cluster, state, ledger)
    # and everything comes back
    for node, r, gpus in reversed(ledger):
        state.release(node, r, gpus)
    _check_ledger(cluster, state, [])


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=clusters(), work=jobs(), policy=st.sampled_from(POLICIES),
       queue=st.sampled_from(["fifo", "priority"]),
       fails=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 80),
                                st.sampled_from([5.0, 30.0, float("inf")])), max_size=4))
def test_replay_ends_every_job_in_one_state_and_failures_lose_none(cluster, work, policy,
                                                                    queue, fails):
    spec = FailureSpec(listed=[Failure(n % len(cluster), float(t), rep) for n, t, rep in fails])
    r = run_replay(cluster, work, policy, queue=queue, failures=spec, samples=5)
    assert len(r.jobs) == len(work)
    assert sorted(j["name"] for j in r.jobs) == sorted(work.names)  # none lost, none doubled
    assert all(j["state"] in STATES for j in r.jobs)
    assert sum(r.summary[s] for s in STATES) == len(work)
    for j in r.jobs:
        if j["state"] != "completed":
            assert j["reason"], j
        if j["state"] == "completed":
            assert j["jct_s"] >= 0 and 0 < j.get("availability", 1.0) <= 1.0 + 1e-9
        if j["restarts"]:
            assert "start_s" in j

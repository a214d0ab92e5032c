"""The cluster scheduler: openb data, cluster and job models, policies, both modes, the CLI.

Tests marked ``openb`` read the real trace from ../shared/traces/openb (see conftest.py).

These tests double as examples of use:

>>> from gpufabric.scheduler import load_jobs, load_nodes, run_arrival
>>> run = run_arrival(load_nodes("synthetic-openb"), load_jobs("synthetic-openb"), "best-fit",
...                   seed=42)
>>> len(run.allocation_pct)
131
"""

from __future__ import annotations

import json
import math
from itertools import pairwise

import numpy as np
import pytest

from gpufabric.errors import InputError
from gpufabric.scheduler import REGISTRY, Job, JobSet, load_jobs, load_nodes, run_arrival
from gpufabric.scheduler.arrival import scale_to_capacity
from gpufabric.scheduler.failures import parse_failures
from gpufabric.scheduler.nodetopo import best_gpu_set, build_node, widest_paths
from gpufabric.scheduler.policies import FragModel, make_placement
from gpufabric.scheduler.registry import Registry
from gpufabric.scheduler.replay import run_replay
from gpufabric.scheduler.state import Request, State
from gpufabric.topology.model import CPU, GPU, PCIE_SWITCH, Device, Link, Topology


# -- data -------------------------------------------------------------------------------------

@pytest.mark.openb
def test_bundled_openb_node_lists_match_the_readme():
    gpu = load_nodes("gpu_node")
    assert (len(gpu), int(gpu.num_gpu.sum())) == (1213, 6212)
    assert gpu.summary()["gpu:G2x8"] == 549
    every = load_nodes("all_node")
    assert len(every) == 1523 and every.pools() == ["gpu", "cpu"]
    assert int((every.num_gpu == 0).sum()) == 310


@pytest.mark.openb
@pytest.mark.parametrize("name,count", [("default", 8152), ("cpu050", 7439),
                                        ("gpushare40", 8152), ("multigpu20", 8324),
                                        ("gpuspec10", 8152)])
def test_every_bundled_trace_loads(name, count):
    js = load_jobs(name)
    assert len(js) == count
    share = (js.num_gpu == 1) & (js.gpu_milli < 1000)
    assert share.any() and (js.num_gpu[js.gpu_milli < 1000] <= 1).all()


@pytest.mark.openb
def test_trace_fields_become_job_fields():
    js = load_jobs("gpuspec10")
    t4 = [js.job(i) for i in range(len(js)) if js.specs[js.spec[i]] == ("T4",)]
    assert t4 and t4[0].gpu_models == ("T4",)
    d = load_jobs("default")
    j = d.job(0)
    assert (j.cpu_milli, j.memory_mib, j.num_gpu, j.gpu_milli, j.qos, j.kind) == (
        12000, 16384, 1, 1000, "LS", "training")
    assert j.duration_s == 12537496 and j.priority > d.job(
        int(np.flatnonzero(np.array(d.qos) == "BE")[0])).priority
    assert load_jobs("multigpu20").meta["has_times"] is False


def test_a_csv_without_the_openb_columns_is_one_clear_error(tmp_path):
    bad = tmp_path / "pods.csv"
    bad.write_text("name,cpu,memory_mib,num_gpu,gpu_milli\np,1,2,0,0\n")
    with pytest.raises(InputError) as e:
        load_jobs(str(bad))
    assert str(bad) in str(e.value) and "cpu_milli" in str(e.value)
    bad.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,lots,2,0,0\n")
    with pytest.raises(InputError, match="line 2.cpu_milli"):
        load_jobs(str(bad))
    bad.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,2,2,500\n")
    with pytest.raises(InputError, match="gpu_milli"):
        load_jobs(str(bad))
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu\nn0,1,1,1\n")
    with pytest.raises(InputError, match="missing column 'model'"):
        load_nodes(str(nodes))
    with pytest.raises(InputError, match="unknown trace 'defualt'; did you mean 'default'"):
        load_jobs("defualt")


def test_synthetic_heterogeneous_cluster_has_gpu_tpu_and_cpu_pools():
    c = load_nodes("V100M32x8*2+tpu-v4-8*1+cpu-32*3")
    assert c.pools() == ["gpu", "tpu", "cpu"]
    assert c.num_gpu.tolist() == [8, 8, 4, 0, 0, 0]
    assert c.model(2) == "TPU-v4" and c.cpu[3] == 32000
    assert len(c.topology(0).gpus()) == 8
    with pytest.raises(InputError, match="unknown node type"):
        load_nodes("warp-drive*2")
    dgx = load_nodes("dgx1-v100*2")  # a system preset keeps the preset's own topology
    bw, _ = dgx.gpu_tables(1)
    assert dgx.num_gpu.tolist() == [8, 8] and bw[0, 3] == 50.0 and math.isinf(bw[0, 0])
    inline = load_nodes("gpu=H100-SXM,gpus_per_node=8*2+cpu*1")  # an inline topology spec
    assert inline.num_gpu.tolist() == [8, 8, 0] and inline.gpu_tables(0)[0][0, 7] == 450.0


# -- policies ---------------------------------------------------------------------------------

def test_registry_rejects_a_duplicate_name_and_names_the_known_ones():
    r = Registry()
    r.register("placement", "x")(object)
    with pytest.raises(ValueError, match="already registered"):
        r.register("placement", "x")(object)
    assert {"random", "spread", "best-fit", "dot-product", "fgd", "topology"} <= set(
        REGISTRY.names("placement"))
    assert REGISTRY.names("queue") == ["fifo", "priority"]
    with pytest.raises(InputError, match="unknown placement policy 'bestfit'; did you mean"):
        REGISTRY.get("placement", "bestfit")


def test_best_fit_packs_and_spread_balances():
    c = load_nodes("T4x4*2")
    jobs = JobSet.from_jobs([Job("a", 1000, 1024, 1)])
    rng = np.random.default_rng(0)
    for name, second in (("best-fit", 0), ("spread", 1)):
        s = State(c)
        p = make_placement(name, c, jobs, rng)
        r = Request(1000, 1024, 1, 1000)
        for _ in range(2):
            node, gpus = p.select(s, r, s.feasible(r))
            s.place(node, r, gpus)
        assert int(s.full[0] < 4) + int(s.full[1] < 4) == (1 if second == 0 else 2)


def test_gpu_share_goes_to_the_fullest_gpu_that_fits():
    c = load_nodes("T4x2*1")
    s = State(c)
    s.place(0, Request(0, 0, 1, 600), (1,))
    r = Request(0, 0, 1, 300)
    assert s.pick_gpus(0, r) == (1,)
    assert s.pick_gpus(0, Request(0, 0, 1, 500)) == (0,)


def test_frag_model_counts_gpus_the_typical_job_cannot_use():
    c = load_nodes("T4x2*1")
    fm = FragModel(c, JobSet.from_jobs([Job("half", 1000, 1, 1, 500)] * 3
                                       + [Job("cpu", 1000, 1)]))
    frag = lambda cpu, left: float(fm.frag(np.array([cpu]), c.model_id[:1],  # noqa: E731
                                           np.array([left]))[0])
    # a half-GPU job fits on GPU 0 only: GPU 1's 200 is fragment; CPU jobs see all 1200 as idle
    assert frag(8000, [1000, 200]) == pytest.approx(0.75 * 200 + 0.25 * 1200)
    assert frag(0, [1000, 200]) == pytest.approx(1200)  # no CPU left: all of it is stranded


def test_fgd_keeps_whole_gpus_whole():
    c = load_nodes("T4x2*2")
    jobs = JobSet.from_jobs([Job("q", 100, 1, 1, 250)] * 8 + [Job("w", 100, 1, 1)] * 2)
    s = State(c)
    p = make_placement("fgd", c, jobs, np.random.default_rng(1))
    r = Request(100, 1, 1, 250)
    for _ in range(4):
        node, gpus = p.select(s, r, s.feasible(r))
        s.place(node, r, gpus)
    assert int(s.full.sum()) == 3  # four quarter-GPU jobs fill one GPU, not four


def test_fgd_breaks_ties_as_the_paper_simulator_does():
    c = load_nodes("T4x2*4")
    jobs = JobSet.from_jobs([Job("half", 1000, 1, 1, 500)] * 3 + [Job("cpu", 1000, 1)])
    s = State(c)
    p = make_placement("fgd", c, jobs, np.random.default_rng(7))
    # CPU jobs that change no node's fragmentation score equally everywhere: they all go to
    # the node ranked first in this run's random order (not a new random node each time)
    cpu = Request(1000, 1, 0, 0)
    where = set()
    for _ in range(5):
        node, gpus = p.select(s, cpu, s.feasible(cpu))
        s.place(node, cpu, gpus)
        where.add(node)
    assert len(where) == 1
    # a share whose every GPU choice scores the same goes to the lowest-numbered GPU, not
    # the fullest one (here: 900/600 or 1000/500 free both leave each GPU usable by a half)
    node = where.pop()
    s.place(node, Request(0, 0, 1, 400), (1,))
    r = Request(0, 0, 1, 100)
    assert p.select(s, r, s.feasible(r) & (np.arange(4) == node)) == (node, (0,))


def test_widest_path_prefers_nvlink_and_never_routes_through_a_gpu():
    t = Topology("box")
    t.add_device(Device("n0.cpu0", CPU))
    t.add_device(Device("n0.sw0", PCIE_SWITCH))
    for i in range(3):
        t.add_device(Device(f"n0.gpu{i}", GPU, "T4", index=i))
        t.add_link(Link("n0.sw0", f"n0.gpu{i}", "pcie", 16.0))
    t.add_link(Link("n0.cpu0", "n0.sw0", "pcie", 16.0))
    t.add_link(Link("n0.gpu0", "n0.gpu1", "nvlink", 50.0))
    t.add_link(Link("n0.gpu1", "n0.gpu2", "nvlink", 50.0))
    bw, hops = widest_paths(t)
    assert bw[0, 1] == 50.0 and bw[0, 2] == 16.0  # 0->1->2 over NVLink would forward via a GPU
    assert best_gpu_set([0, 1, 2], 2, bw, hops)[0] in ((0, 1), (1, 2))


def test_topology_policy_picks_the_best_connected_gpus_and_node():
    bw, hops = widest_paths(build_node("V100M32", 8))
    assert best_gpu_set(list(range(8)), 4, bw, hops)[1] == 25.0  # one NVLink quad
    assert best_gpu_set([0, 4, 5, 6], 2, bw, hops)[0] == (0, 4)   # the NV2 pair
    c = load_nodes("G2x8*1+V100M32x8*1")
    s = State(c)
    p = make_placement("topology", c, None, np.random.default_rng(0))
    r = Request(1000, 1024, 2, 1000)
    node, gpus = p.select(s, r, s.feasible(r))
    assert c.model(node) == "V100M32" and bw[gpus[0], gpus[1]] == 50.0


def test_routing_sends_each_kind_to_its_pool():
    c = load_nodes("V100M32x8*1+tpu-v4-8*1+cpu*1")
    jobs = JobSet.from_jobs([
        Job("train", 1000, 1024, 1, kind="training", creation_s=0, duration_s=5),
        Job("serve", 1000, 1024, 1, kind="inference", creation_s=0, duration_s=5),
        Job("web", 1000, 1024, 0, kind="service", creation_s=0, duration_s=5)])
    from gpufabric.scheduler.engine import BaseMasks, place_gang
    m = BaseMasks(c, jobs)
    assert [np.flatnonzero(m.of(i)).tolist() for i in range(3)] == [[0], [0, 1], [2]]
    s = State(c)
    p = make_placement("spread", c, jobs, np.random.default_rng(0))
    where = [place_gang(s, p, Request(1000, 1024, jobs.job(i).num_gpu, 1000), m.tiers(i))
             for i in range(3)]
    assert [w[0][0] for w in where] == [0, 1, 2]  # inference prefers the TPU slice
    assert run_replay(c, jobs, "best-fit").summary["completed"] == 3


# -- arrival ----------------------------------------------------------------------------------

@pytest.mark.openb
def test_scaling_reaches_but_never_exceeds_the_target():
    js = load_jobs("default")
    for seed in (1, 2):
        idx = scale_to_capacity(js, 6212000, 1.3, np.random.default_rng(seed))
        total = int(js.gpu_request[idx].sum())
        assert 1.3 * 6212000 - 8000 < total <= 1.3 * 6212000
    idx = scale_to_capacity(js, 6212000, 0.5, np.random.default_rng(3))
    assert int(js.gpu_request[idx].sum()) <= 0.5 * 6212000 < int(js.gpu_request.sum())


@pytest.mark.slow
@pytest.mark.openb
def test_arrival_on_the_real_trace_reproduces_the_paper_ordering():
    c, js = load_nodes("gpu_node"), load_jobs("default")
    got = {p: run_arrival(c, js, p, seed=42) for p in ("random", "best-fit", "fgd")}
    for r in got.values():
        assert len(r.allocation_pct) == 131 and r.allocation_pct[0] == 0.0
        assert all(a <= b + 1e-9 for a, b in pairwise(r.allocation_pct))
        assert r.pods == r.scheduled + r.skipped
    at100 = {p: r.allocation_pct[100] for p, r in got.items()}
    # fixed seed, exact values (a change here changes the published figures)
    assert at100 == {"random": 86.0676, "best-fit": 92.9816, "fgd": 95.2471}
    # below 100% arrived everything fits: allocation tracks arrival
    assert got["best-fit"].allocation_pct[50] == pytest.approx(50, abs=0.2)


# -- replay -----------------------------------------------------------------------------------

def _jobs(*specs):
    return JobSet.from_jobs([Job(*s[:3], **s[3]) for s in specs])


def test_replay_queues_when_full_and_reports_delay():
    jobs = _jobs(("a", 1000, 1, dict(num_gpu=2, creation_s=0, duration_s=100)),
                 ("b", 1000, 1, dict(num_gpu=1, creation_s=10, duration_s=50)),
                 ("huge", 1000, 1, dict(num_gpu=8, creation_s=0, duration_s=1)))
    r = run_replay(load_nodes("T4x2*1"), jobs, "fgd")
    by = {j["name"]: j for j in r.jobs}
    assert by["b"]["wait_s"] == 90 and by["b"]["jct_s"] == 140
    assert by["huge"]["state"] == "unscheduled" and "even when empty" in by["huge"]["reason"]
    assert r.summary["completed"] == 2


def test_failover_restarts_from_the_last_checkpoint_and_counts_redone_work():
    jobs = _jobs(("t", 1000, 1, dict(num_gpu=2, creation_s=0, duration_s=10000,
                                     checkpoint_s=3000)))
    c = load_nodes("T4x2*2")
    r = run_replay(c, jobs, "best-fit", failures=parse_failures("0@4000,1@4000", c.names))
    j = r.jobs[0]
    # one of the two nodes held the job; it lost 1000 s of 2 GPUs and restarted on the other
    # node... which failed too, permanently: nothing can host it any more
    assert j["state"] == "failed" and "no healthy node" in j["reason"]
    r = run_replay(c, jobs, "best-fit", failures=parse_failures("0@4000+1h", c.names))
    j = r.jobs[0]
    assert j["state"] == "completed" and j["restarts"] == 1
    assert j["gpu_hours_redone"] == pytest.approx(1000 * 2 / 3600, abs=1e-6)
    assert j["end_s"] == pytest.approx(4000 + 7000)
    assert j["availability"] == pytest.approx(10000 / 11000, abs=1e-6)
    # no other node: it waits for the repair, and its availability shows it
    r = run_replay(load_nodes("T4x2*1"), jobs, "best-fit",
                   failures=parse_failures("0@4000+1h", ["n0"]))
    j = r.jobs[0]
    assert j["state"] == "completed" and j["end_s"] == pytest.approx(4000 + 3600 + 7000)
    assert j["availability"] == pytest.approx(10000 / 14600, abs=1e-6)


def test_priority_queue_preempts_lower_priority_jobs():
    jobs = _jobs(("be", 1000, 1, dict(num_gpu=2, creation_s=0, duration_s=1000, priority=0,
                                      checkpoint_s=100)),
                 ("ls", 1000, 1, dict(num_gpu=1, creation_s=250, duration_s=10, priority=2)))
    c = load_nodes("T4x2*1")
    fifo = {j["name"]: j for j in run_replay(c, jobs, "best-fit", queue="fifo").jobs}
    prio = run_replay(c, jobs, "best-fit", queue="priority")
    by = {j["name"]: j for j in prio.jobs}
    assert fifo["ls"]["wait_s"] == 750 and by["ls"]["wait_s"] == 0
    assert prio.summary["preemptions"] == 1 and by["be"]["state"] == "completed"
    assert by["be"]["gpu_hours_redone"] == pytest.approx(50 * 2 / 3600, abs=1e-6)


@pytest.mark.openb
def test_replay_of_the_default_trace_completes_every_job():
    r = run_replay(load_nodes("gpu_node"), load_jobs("default"), "best-fit", samples=20)
    s = r.summary
    assert s["completed"] == 8152 and s["wait_max_s"] == 0
    assert len(r.timeline) == 21 and 0 <= s["frag_mean_pct_of_free"] <= 100


def test_failure_spec_errors_are_clear():
    names = ["n0", "n1"]
    with pytest.raises(InputError, match="no node 'n9'"):
        parse_failures("n9@10", names)
    with pytest.raises(InputError, match="not a duration"):
        parse_failures("mtbf=often", names)
    spec = parse_failures("mtbf=10h,repair=1h,seed=3", names)
    ev = spec.events(0, 100 * 3600, 2, None)
    assert ev and all(e.repair_s == 3600 for e in ev) and ev == sorted(
        ev, key=lambda e: e.time_s)
    assert math.isinf(parse_failures("1@5", names).listed[0].repair_s)


# -- CLI --------------------------------------------------------------------------------------

@pytest.mark.openb
def test_cli_arrival_json_has_131_points(cli):
    code, out, _ = cli("schedule", "default", "--nodes", "gpu_node", "--policy",
                       "best-fit", "--mode", "arrival", "--runs", "1", "--json")
    data = json.loads(out)
    assert code == 0 and len(data["allocation_pct"]) == 131
    assert data["allocation_pct"][100] == 92.9816 and data["seeds"] == [42]


def test_cli_replay_with_failures_and_policy_table(cli, tmp_path):
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
                    "creation_time,deletion_time,scheduled_time\n"
                    "p0,1000,1024,1,1000,,LS,Running,0,100,0\n"
                    "p1,1000,1024,1,500,,BE,Running,5,50,5\n")
    code, out, _ = cli("schedule", str(pods), "--nodes", "T4x2*2", "--mode", "replay",
                       "--policy", "all", "--failures", "0@10+5", "--json")
    data = json.loads(out)
    assert code == 0 and len(data["runs"]) == len(REGISTRY.names("placement"))
    assert all(r["summary"]["completed"] == 2 for r in data["runs"])
    code, out, _ = cli("schedule", str(pods), "--nodes", "T4x2*2", "--mode", "replay")
    assert code == 0 and "replay" in out


@pytest.mark.parametrize("args,needle", [
    (("--policy", "first-fit"), "unknown placement policy 'first-fit'"),
    (("--mode", "sideways"), "--mode: unknown mode 'sideways'"),
    (("--nodes", "nowhere.csv"), "nowhere.csv: no such file"),
    (("--mode", "replay", "--failures", "mtbf=soon"), "not a duration"),
    (("--nodes", "cpu*4"), "--nodes: the cluster has no GPUs"),
])
def test_cli_bad_input_is_one_line_and_exit_2(cli, args, needle):
    code, out, err = cli("schedule", "synthetic-openb", "--runs", "1", *args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and needle in err


@pytest.mark.openb
def test_cli_replay_of_a_trace_without_times_exits_2(cli):
    code, _, err = cli("schedule", "multigpu20", "--mode", "replay")
    assert code == 2 and "creation_time" in err and "multigpu20" in err


def test_cli_csv_without_openb_columns_exits_2(cli, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    code, _, err = cli("schedule", str(bad))
    assert code == 2 and err.count("\n") == 1
    assert str(bad) in err and "missing column 'name'" in err


def test_a_gang_starts_all_together_across_nodes_or_not_at_all():
    jobs = _jobs(("solo", 1000, 1, dict(num_gpu=1, creation_s=0, duration_s=30)),
                 ("gang", 1000, 1, dict(num_gpu=1, gang=2, creation_s=1, duration_s=10)),
                 ("too-big", 1000, 1, dict(num_gpu=1, gang=3, creation_s=2, duration_s=10)))
    r = run_replay(load_nodes("T4x1*2"), jobs, "spread")
    by = {j["name"]: j for j in r.jobs}
    # one node is busy until 30 s: the two-member gang waits for both, then starts at once
    assert by["gang"]["start_s"] == 30 and by["gang"]["state"] == "completed"
    assert by["too-big"]["state"] == "unscheduled" and "3 x" in by["too-big"]["reason"]

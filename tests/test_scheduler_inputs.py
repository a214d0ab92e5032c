"""Bad scheduler input ends in one line naming the file, the field and what is allowed (exit 2).

Each case is one found in review (issue 11): it used to end in a traceback, a hang, or a silent
wrong answer. The pods are written inline so these run without the openb trace.
"""

from __future__ import annotations

import math

import pytest

from gpufabric.errors import InputError
from gpufabric.scheduler import Job, JobSet, load_jobs, load_nodes, run_arrival, run_replay

HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
          "deletion_time,scheduled_time\n")


@pytest.fixture
def pods(tmp_path):
    """Write a pod list with the openb header: ``pods(*rows) -> path``."""
    def write(*rows: str) -> str:
        p = tmp_path / "pods.csv"
        p.write_text(HEADER + "".join(r + "\n" for r in rows))
        return str(p)
    return write


def error_line(cli, *args: str) -> str:
    code, out, err = cli("schedule", *args)
    assert code == 2 and out == "" and err.count("\n") == 1, (code, out, err)
    return err.removeprefix("gpufabric: error: ").rstrip("\n")


def test_a_trace_with_a_header_and_no_rows(cli, pods):
    path = pods()
    assert error_line(cli, path, "--nodes", "T4x2*2") == (
        f"{path}: no pods under the header; a trace needs at least one row")


def test_replay_at_load_zero(cli, pods):
    path = pods("p0,1000,1024,1,1000,,LS,Running,0,100,0")
    msg = "--load: 0; must be a positive number (arrival times are divided by it)"
    assert error_line(cli, path, "--nodes", "T4x2*2", "--mode", "replay", "--load", "0") == msg
    assert error_line(cli, path, "--nodes", "T4x2*2", "--mode", "replay", "--load",
                      "nan").startswith("--load: nan; must be a positive number")


def test_arrival_of_pods_that_ask_no_gpu_ends(cli, pods):
    path = pods("p0,1000,1024,0,0,,LS,Running,0,100,0")
    assert error_line(cli, path, "--nodes", "T4x2*2", "--runs", "1") == (
        f"{path}: num_gpu: no pod asks for a GPU; arrival mode packs GPU requests up to "
        "--ratio x the GPU capacity (use --mode replay)")


def test_arrival_that_would_need_millions_of_pods_is_refused():
    jobs = JobSet.from_jobs([Job("tiny", 1, 1, 1, 1)], source="tiny.csv")
    with pytest.raises(InputError) as e:
        run_arrival(load_nodes("G2x8*1000"), jobs, "random", ratio=1.3)
    assert str(e.value) == ("tiny.csv: --ratio: packing 1.3 x 8,000 GPUs with these pods takes "
                            "about 10,400,000 pods; at most 2,000,000")


def test_a_pod_deleted_before_it_was_created(cli, pods):
    path = pods("p0,1000,1024,1,1000,,LS,Running,100,50,100")
    assert error_line(cli, path, "--nodes", "T4x2*2", "--mode", "replay") == (
        f"{path}: line 2.deletion_time: 50 is before creation_time 100; a pod is deleted "
        "after it is created")


@pytest.mark.parametrize("field,value", [("cpu_milli", "1e300"), ("creation_time", "nan"),
                                         ("memory_mib", "9" * 40)])
def test_numbers_out_of_range_are_named(pods, field, value):
    row = {"cpu_milli": "1000", "memory_mib": "1024", "creation_time": "0"}
    row[field] = value
    path = pods(f"p0,{row['cpu_milli']},{row['memory_mib']},1,1000,,LS,Running,"
                f"{row['creation_time']},100,0")
    with pytest.raises(InputError) as e:
        load_jobs(path)
    assert str(e.value).startswith(f"{path}: line 2.{field}: ")


def test_a_short_row_is_named(pods):
    path = pods("p0,1000,1024,1,1000")
    with pytest.raises(InputError) as e:
        load_jobs(path)
    assert str(e.value) == f"{path}: line 2: row has 5 fields, the header 11"


@pytest.mark.parametrize("nodes,message", [
    ("gpu=H100-SXM,gpus_per_node=8,nodes=4*2",
     "pool 'gpu=H100-SXM,gpus_per_node=8,nodes=4' describes 4 nodes; a pool is one node type, "
     "its node count goes after '*' (NAME*COUNT)"),
    ("V100M32x8*1000000", "1,000,000 nodes; at most 100,000 in one cluster"),
    ("FOOx8*2", "pool 'FOOx8': unknown GPU model 'FOO' (known: A10, G1, G2, G3, P100, T4, "
     "V100M16, V100M32); any other GPU as an inline spec such as gpu=H100-SXM,gpus_per_node=8"),
    ("T4x2*abc", "pool 'T4x2*abc': count 'abc' is not a whole number; write NAME*COUNT with "
     "COUNT 1 or more"),
    ("cpu*0", "pool 'cpu*0': count 0 must be 1 or more"),
    ("T4x0*2", "pool 'T4x0': 0 GPUs; a node has 1..128"),
    ("cpu-0*2", "pool 'cpu-0': 0 cores; a CPU node has 1..1024"),
])
def test_bad_node_pools(cli, pods, nodes, message):
    path = pods("p0,1000,1024,1,1000,,LS,Running,0,100,0")
    assert error_line(cli, path, "--nodes", nodes) == f"{nodes}: NODES: {message}"


def test_a_million_nodes_are_refused_before_anything_is_built():
    with pytest.raises(InputError, match="at most 100,000"):
        load_nodes("V100M32x8*60000+T4x2*60000")
    # a pool's system is checked before it is built, and only its first node is built
    with pytest.raises(InputError) as e:
        load_nodes("gpu=H100-SXM,gpus_per_node=899999*2")
    assert str(e.value) == ("gpu=H100-SXM,gpus_per_node=899999: gpus_per_node: expected an "
                            "integer >= 1 and <= 576, got 899999")   # the spec schema's limit
    with pytest.raises(InputError, match="no fabric in the catalog connects more than"):
        load_nodes("gpu=H100-SXM,gpus_per_node=8,nodes=1000000*2")


def test_a_gang_that_fits_only_across_pools_fits_no_node():
    # each member needs 10 cores: the T4 server (12 cores) and the CPU node (16 cores) hold one
    # each, but a gang's members stay in one pool
    jobs = JobSet.from_jobs([Job("wide", 10000, 1024, 0, kind="batch", gang=2, creation_s=0,
                                 duration_s=10)])
    r = run_replay(load_nodes("T4x1*1+cpu-16*1"), jobs, "best-fit")
    assert r.jobs[0]["state"] == "unscheduled"
    assert r.jobs[0]["reason"] == ("fits no node of its pools even when empty (needs 2 x "
                                   "10000 mCPU, 1024 MiB, 0 x 0 mGPU, all in one pool)")
    # two CPU nodes make one pool that holds both members
    r = run_replay(load_nodes("T4x1*1+cpu-16*2"), jobs, "best-fit")
    assert r.jobs[0]["state"] == "completed"


def test_a_directory_is_named_as_one(cli, tmp_path):
    assert error_line(cli, str(tmp_path), "--nodes", "T4x2*2") == (
        f"{tmp_path}: is a directory; expected a CSV file with the openb pod columns")
    assert error_line(cli, "synthetic-openb", "--nodes", str(tmp_path)) == (
        f"{tmp_path}: is a directory; expected a CSV file with the openb node columns")
    assert error_line(cli, "synthetic-openb", "--data-dir", str(tmp_path / "none")) == (
        f"{tmp_path / 'none'}: --data-dir: not a directory")


def test_the_best_gpu_set_of_a_large_node_is_grown_greedily():
    # two islands of 20 GPUs: 300 GB/s inside one, 16 GB/s between them; C(40, 8) = 76,904,685
    # sets would take minutes, the greedy growth a few milliseconds
    import numpy as np

    from gpufabric.scheduler.nodetopo import EXHAUSTIVE_SETS, best_gpu_set
    island = np.arange(40) // 20
    bw = np.where(island[:, None] == island[None, :], 300.0, 16.0)
    np.fill_diagonal(bw, np.inf)
    hops = np.where(island[:, None] == island[None, :], 2, 4)
    free = [g for g in range(40) if g not in (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13)]
    gpus, width, worst = best_gpu_set(free, 8, bw, hops)
    assert math.comb(len(free), 8) > EXHAUSTIVE_SETS
    assert len(set(gpus)) == 8 and set(gpus) <= set(range(20, 40)) and (width, worst) == (300, 2)


def test_a_trace_or_failures_file_in_another_encoding_is_one_input_error(tmp_path):
    from gpufabric.scheduler.failures import parse_failures
    trace = tmp_path / "pods.csv"
    trace.write_bytes(b"name,cpu_milli\r\n\xe9\r\n")
    with pytest.raises(InputError) as e:
        load_jobs(str(trace))
    assert str(e.value) == f"{trace}: not UTF-8 text (byte 0xe9 at offset 16); expected a CSV file"
    fails = tmp_path / "failures.txt"
    fails.write_bytes(b"node-1@10\xe9\n")
    with pytest.raises(InputError) as e:
        parse_failures(str(fails), ["node-1"])
    assert str(e.value) == (f"{fails}: not UTF-8 text (byte 0xe9 at offset 9); "
                            "expected a failures file (--failures)")

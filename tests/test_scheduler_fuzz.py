"""Fuzzing the scheduler's inputs: any trace CSV, node CSV, ``--nodes`` spec or ``--failures``
text ends in a result or in :class:`~gpufabric.errors.InputError`, never another exception,
and in bounded time (each example is a small input run on a small cluster).
"""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufabric.errors import InputError
from gpufabric.scheduler import load_jobs, load_nodes, run_arrival, run_replay
from gpufabric.scheduler.failures import parse_failures

FUZZ = settings(max_examples=120, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

POD_HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
              "creation_time,deletion_time,scheduled_time")
POD_ROWS = ["p0,12000,16384,1,1000,,LS,Running,0,100,0",
            "p1,4000,8192,1,460,T4|G2,BE,Running,5,50,5",
            "p2,32000,65536,0,0,,Burstable,Succeeded,7,900,8",
            "p3,64000,131072,8,1000,V100M32,Guaranteed,Running,10,20,10"]
NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model,pool"
NODE_ROWS = ["n0,96000,393216,8,G2,gpu", "n1,32000,131072,2,T4,", "n2,64000,262144,0,,cpu",
             "n3,240000,409600,4,TPU-v4,tpu"]
FIELDS = ["", "0", "-1", "1e400", "nan", "inf", "x", "1000", "999999999999999999999", "0.5",
          "8", "T4", "|", '"', "\x00", "é", "1,2", "  7  "]


@st.composite
def mutated_csv(draw, header: str, rows: list[str]) -> str:
    """A valid CSV with fields replaced, rows dropped or repeated, and bytes spliced in."""
    lines = [header] + draw(st.lists(st.sampled_from(rows), max_size=6))
    out = []
    for ln in lines:
        cells = ln.split(",")
        for _ in range(draw(st.integers(0, 2))):
            k = draw(st.integers(0, len(cells) - 1))
            cells[k] = draw(st.sampled_from(FIELDS) | st.text(max_size=6))
        if draw(st.booleans()) and len(cells) > 1:
            cells = cells[:draw(st.integers(1, len(cells)))]
        out.append(",".join(cells))
    text = "\n".join(out)
    if draw(st.booleans()):
        pos = draw(st.integers(0, len(text)))
        text = text[:pos] + draw(st.text(max_size=8)) + text[pos:]
    return text


def _write(tmp_path, name: str, text: str | bytes):
    p = tmp_path / name
    (p.write_bytes if isinstance(text, bytes) else p.write_text)(text)
    return str(p)


@FUZZ
@given(text=mutated_csv(POD_HEADER, POD_ROWS) | st.text(max_size=200) | st.binary(max_size=64))
def test_any_trace_csv_loads_or_is_an_input_error(tmp_path, text):
    path = _write(tmp_path, "pods.csv", text)
    try:
        jobs = load_jobs(path)
    except InputError:
        return
    cluster = load_nodes("T4x2*2+cpu*1")
    for run in (lambda: run_replay(cluster, jobs, "best-fit", samples=5),
                lambda: run_arrival(cluster, jobs, "fgd", seed=1)):
        try:
            r = run()
        except InputError:
            continue
        assert r is not None


@FUZZ
@given(text=mutated_csv(NODE_HEADER, NODE_ROWS) | st.text(max_size=200) | st.binary(max_size=64))
def test_any_node_csv_loads_or_is_an_input_error(tmp_path, text):
    path = _write(tmp_path, "nodes.csv", text)
    try:
        c = load_nodes(path)
    except InputError:
        return
    assert len(c) >= 1 and (c.num_gpu >= 0).all()


POOL_WORDS = ["T4x2", "V100M32x8", "G2x8", "FOOx4", "tpu-v4-8", "tpu-v5e-8", "cpu", "cpu-32",
              "cpu-0", "dgx-a100", "hgx-h100-4node-ndr", "gpu=H100-SXM,gpus_per_node=8",
              "gpu=T4,gpus_per_node=2,nodes=3", "gpu=H100-SXM,gpus_per_node=", "x", "",
              "gpu_node", "synthetic-openb"]


@FUZZ
@given(pools=st.lists(st.tuples(st.sampled_from(POOL_WORDS),
                                st.sampled_from(["*", "x", "", "**"]),
                                st.sampled_from(["1", "2", "0", "-1", "abc", "", "99999999"])),
                      min_size=1, max_size=3),
       noise=st.text(alphabet="*+x=,-0123456789 ", max_size=4))
def test_any_nodes_spec_builds_or_is_an_input_error(pools, noise):
    spec = "+".join(f"{w}{sep}{n}" if sep != "x" else f"{n}x{w}" for w, sep, n in pools) + noise
    try:
        c = load_nodes(spec)
    except InputError:
        return
    assert 1 <= len(c) <= 100_000


@FUZZ
@given(text=st.text(alphabet="n0123456789@+,=.smhdtbfrepairseedinfnever ", max_size=40)
       | st.sampled_from(["mtbf=1s", "mtbf=0", "mtbf=1e-9s,repair=0", "0@inf", "1@1e400",
                          "0@5+never", "mtbf=10h,repair=never,seed=x"]))
def test_any_failures_text_parses_or_is_an_input_error(text):
    try:
        spec = parse_failures(text, ["n0", "n1", "n2"])
        events = spec.events(0.0, 86400.0 * 30, 3, 7)
    except InputError:
        return
    assert all(math.isfinite(e.time_s) for e in events)

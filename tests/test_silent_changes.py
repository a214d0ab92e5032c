"""Nothing is changed silently: what the command line takes, drops or overrides, it says.

Each test is an example of use: the command a user types, and the one line they get back
(exit status 2 for a refusal), or the note that says what a run used.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from gpufabric.errors import InputError
from gpufabric import downloads as datasets
from gpufabric.scheduler.arrival import run_arrival
from gpufabric.scheduler.cluster import load_nodes
from gpufabric.scheduler.jobs import Job, JobSet, load_jobs
from gpufabric.workloads.inference import requests as R
from gpufabric.workloads.inference.requests import load_trace

pytestmark = pytest.mark.usefixtures("bounded_memory", "deadline")   # conftest.py

OPENB = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "openb"
POD_HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
              "deletion_time,scheduled_time\n")


def _trace(tmp_path: Path, n: int, name: str = "t.csv") -> Path:
    f = tmp_path / name
    f.write_text("arrival_s,isl,osl\n" + "".join(f"{i * 0.05:.2f},64,4\n" for i in range(n)))
    return f


def error(cli, *args: str) -> str:
    """The one error line of a refused command (exit 2, nothing on stdout)."""
    code, out, err = cli(*args)
    assert (code, out) == (2, ""), (code, out, err)
    assert err.startswith("gpufabric: error: ") and err.count("\n") == 1, err
    return err.removeprefix("gpufabric: error: ").rstrip("\n")


# -- 1. a trace longer than --requests ---------------------------------------------------------

def test_a_trace_runs_all_its_requests_when_requests_is_not_given(cli, tmp_path):
    f = _trace(tmp_path, 1200)
    code, out, err = cli("serve", "llama3-8b", "hgx-h100", "--trace", str(f), "--replicas", "1",
                         "--json")
    assert (code, err) == (0, "")
    r = json.loads(out)
    assert r["requests"] == 1200 and r["workload"]["trace_requests"] == 1200
    assert r["workload"]["note"] == ""


def test_a_smaller_requests_says_how_much_of_the_trace_it_uses(cli, tmp_path):
    f = _trace(tmp_path, 1200)
    code, out, err = cli("serve", "llama3-8b", "hgx-h100", "--trace", str(f), "--replicas", "1",
                         "--requests", "1000", "--json")
    note = "using the first 1000 of the trace's 1200 requests (--requests)"
    assert (code, err) == (0, f"gpufabric: note: {note}\n")
    r = json.loads(out)
    assert r["requests"] == 1000 and r["workload"]["trace_requests"] == 1200
    assert r["workload"]["note"] == note
    # the table says it too, on stderr after the results
    code, out, err = cli("serve", "llama3-8b", "hgx-h100", "--trace", str(f), "--replicas", "1",
                         "--requests", "1000")
    assert code == 0 and "# workload: trace t.csv, 1,000 requests" in out
    assert err == f"gpufabric: note: {note}\n"


def test_search_and_pd_runs_say_it_too(cli, tmp_path):
    f = _trace(tmp_path, 40)
    note = "gpufabric: note: using the first 20 of the trace's 40 requests (--requests)\n"
    code, out, err = cli("serve", "llama3-8b", "gpu=H100-SXM,gpus_per_node=2", "--trace", str(f),
                         "--requests", "20", "--slo-ttft", "500", "--slo-tpot", "30",
                         "--search", "--json")
    assert (code, err) == (0, note) and json.loads(out)["note"] == note[17:-1]
    code, out, err = cli("serve", "llama3-8b", "hgx-h100", "--trace", str(f), "--requests",
                         "20", "--pd", "1P1D", "--json")
    assert (code, err) == (0, note) and json.loads(out)["workload"]["trace_requests"] == 40


def test_a_larger_requests_says_the_trace_is_shorter(cli, tmp_path):
    f = _trace(tmp_path, 30)
    code, out, err = cli("serve", "llama3-8b", "hgx-h100", "--trace", str(f), "--replicas", "1",
                         "--requests", "5000", "--json")
    assert code == 0 and json.loads(out)["requests"] == 30
    assert err == ("gpufabric: note: the trace holds 30 requests, fewer than --requests 5000: "
                   "using all 30\n")


@pytest.mark.parametrize("args, note", [
    (("--requests", "50"),
     "simulating 56 requests, 7 in each of 8 streams (--requests 50 rounded up)"),
    (("--requests", "48", "--concurrency", "12"),
     "simulating 8 users, 1 in each of 8 streams (--concurrency 12 rounded down)"),
])
def test_a_run_dealt_over_replicas_says_how_it_rounded(cli, args, note):
    # one of the 8 replicas is simulated: the requests and users are dealt evenly to them
    code, out, err = cli(*SERVE, *args, "--isl", "64", "--osl", "4", "--json")
    assert (code, err) == (0, f"gpufabric: note: {note}\n")
    assert json.loads(out)["workload"]["note"] == note


def test_the_first_requests_of_an_unordered_trace_are_its_first_arrivals(tmp_path):
    f = tmp_path / "merged.csv"       # two front ends' logs, one after the other
    f.write_text("arrival_s,isl,osl\n0.0,10,1\n2.0,20,2\n1.0,30,3\n3.0,40,4\n")
    r = load_trace(str(f), limit=2)
    assert (r.arrival.tolist(), r.isl.tolist(), r.rows) == ([0.0, 1.0], [10, 30], 4)


def test_a_trace_over_the_request_cap_is_refused_not_cut(tmp_path, monkeypatch):
    monkeypatch.setattr(R, "MAX_REQUESTS", 3)
    f = _trace(tmp_path, 4)
    with pytest.raises(InputError) as e:
        load_trace(str(f))
    assert str(e.value) == f"{f}: more than 3 requests; at most 3 in one run (split the trace)"


def test_the_request_cap_still_holds(cli):
    assert error(cli, "serve", "llama3-8b", "hgx-h100", "--requests", str(10**12)) == (
        "--requests: must be an integer from 1 to 5000000, got 1000000000000")


# -- 2. times that go backwards or below zero ----------------------------------------------------

def test_iso_times_without_a_zone_are_utc_across_a_clock_change(tmp_path, monkeypatch):
    # New York turns its clocks back at 02:00 on 2023-11-05; two requests 2 minutes apart
    # must stay 2 minutes apart whatever zone the machine is in
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        f = tmp_path / "azure.csv"
        f.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                     "2023-11-05 01:59:00,10,1\n2023-11-05 02:01:00,10,1\n")
        assert load_trace(str(f)).arrival.tolist() == [0.0, 120.0]
    finally:
        monkeypatch.undo()
        time.tzset()


@pytest.mark.parametrize("row, message", [
    ("p0,1000,1024,1,1000,,LS,Running,-5,100,0",
     "line 2.creation_time: got -5; expected seconds from 0 up"),
    ("p0,1000,1024,1,1000,,LS,Running,50,100,10",
     "line 2.scheduled_time: 10 is before creation_time 50; a pod is scheduled after it is "
     "created"),
    ("p0,1000,1024,1,1000,,LS,Running,50,100,200",
     "line 2.deletion_time: 100 is before scheduled_time 200; a pod is deleted after it is "
     "scheduled"),
])
def test_a_pod_whose_times_go_backwards_is_refused(cli, tmp_path, row, message):
    f = tmp_path / "pods.csv"
    f.write_text(POD_HEADER + row + "\n")
    assert error(cli, "schedule", str(f), "--nodes", "T4x2*2", "--mode", "replay") == (
        f"{f}: {message}")


def test_pods_out_of_creation_order_are_replayed_in_time_order(cli, tmp_path):
    f = tmp_path / "pods.csv"
    f.write_text(POD_HEADER + "late,1000,1024,1,1000,,LS,Running,100,200,100\n"
                 "early,1000,1024,1,1000,,LS,Running,0,50,0\n")
    code, out, err = cli("schedule", str(f), "--nodes", "T4x1*1", "--mode", "replay", "--json",
                         "--jobs")
    assert (code, err) == (0, "")
    jobs = {j["name"]: j for j in json.loads(out)["jobs"]}
    assert jobs["early"]["wait_s"] == 0 and jobs["late"]["wait_s"] == 0


@pytest.mark.openb
def test_the_real_openb_lists_load_though_two_are_not_in_creation_order():
    for name, backwards in (("default", 0), ("cpu050", 191), ("gpushare40", 3518),
                            ("gpuspec10", 0)):
        js = load_jobs(name)
        assert int((js.creation[1:] < js.creation[:-1]).sum()) == backwards, name
    assert len(load_jobs("multigpu20")) == 8324       # no time columns at all


def test_a_failure_at_a_negative_time_is_refused(cli):
    assert error(cli, "schedule", "synthetic-openb", "--mode", "replay", "--failures",
                 "0@-5h") == "--failures: '-5h' must not be negative"


# -- 3. flags that exclude or need each other --------------------------------------------------

SERVE = ("serve", "llama3-8b", "hgx-h100")
TRAIN = ("train", "llama3-8b", "hgx-h100")


@pytest.mark.parametrize("args, message", [
    (SERVE + ("--trace", "t.csv", "--concurrency", "4"),
     "--trace: cannot be used with --concurrency (the trace gives each request's arrival and "
     "lengths)"),
    (SERVE + ("--trace", "t.csv", "--rate", "5"),
     "--trace: cannot be used with --rate (the trace gives each request's arrival and lengths)"),
    (SERVE + ("--trace", "t.csv", "--isl", "100"),
     "--trace: cannot be used with --isl (the trace gives each request's arrival and lengths)"),
    (SERVE + ("--versus", "hgx-h100", "--search"),
     "--versus: cannot be used with --search (--versus finds each system's best layout and "
     "highest rate within the SLO)"),
    (SERVE + ("--search", "--rate", "4", "--tp", "2"),
     "--search: cannot be used with --tp (--search tries the layouts itself)"),
    (SERVE + ("--burst-cv", "2"),
     "--burst-cv: applies only with --rate (the gaps between its arrivals)"),
    (SERVE + ("--rate", "4", "--ray"),
     "--ray: applies only with --search (where its candidates run)"),
    (TRAIN + ("--search", "--tp", "2"),
     "--search: cannot be used with --tp (--search tries the layouts itself)"),
    (TRAIN + ("--search", "--zero", "3"),
     "--search: cannot be used with --zero (--search tries the layouts itself)"),
    (TRAIN + ("--top", "3"), "--top: applies only with --search (the layouts it prints)"),
    (("collective", "dgx-a100", "--explain", "--json"),
     "--explain: cannot be used with --json (the JSON rows hold each size's bottleneck)"),
    (("schedule", "synthetic-openb", "--load", "2"), "--load: applies only with --mode replay"),
    (("schedule", "synthetic-openb", "--mode", "replay", "--ratio", "1.1"),
     "--ratio: applies only with --mode arrival (the packing target)"),
    (("schedule", "synthetic-openb", "--failures", "mtbf=500h"),
     "--failures: applies only with --mode replay"),
])
def test_flags_that_exclude_each_other_are_refused_naming_both(cli, tmp_path, monkeypatch,
                                                               args, message):
    monkeypatch.chdir(tmp_path)
    _trace(tmp_path, 3)
    assert error(cli, *args) == message


# -- 4. zero or negative counts and limits -------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (SERVE + ("--max-num-seqs", "0"), "--max-num-seqs: must be a whole number >= 1, got 0"),
    (SERVE + ("--max-batched-tokens", "0"),
     "--max-batched-tokens: must be a whole number >= 1, got 0"),
    (SERVE + ("--dp-attention", "0"), "--dp-attention: must be a whole number >= 1, got 0"),
    (SERVE + ("--replicas", "0"), "--replicas: must be a whole number >= 1, got 0"),
    (SERVE + ("--concurrency", "-1"), "--concurrency: must be a whole number >= 1, got -1"),
    (SERVE + ("--tp", "0"), "--tp: must be a whole number >= 1, got 0"),
    (SERVE + ("--seed", "-1"),
     "--seed: must be a whole number from 0 to 9,223,372,036,854,775,807, got -1"),
    (SERVE + ("--requests", "abc"), "--requests: got 'abc'; expected a whole number"),
    (SERVE + ("--rate", "x"), "--rate: got 'x'; expected a number"),
    (TRAIN + ("--micro-batch", "0"), "--micro-batch: must be a whole number >= 1, got 0"),
    (TRAIN + ("--vpp", "-1"), "--vpp: must be a whole number >= 1, got -1"),
    (TRAIN + ("--etp", "-1"), "--etp: must be a whole number >= 0, got -1"),
    (TRAIN + ("--zero", "4"), "--zero: must be a whole number from 0 to 3, got 4"),
    (TRAIN + ("--dp", "0"), "--dp: must be a whole number >= 1, got 0"),
    (TRAIN + ("--power-cap", "nan"), "--power-cap: must be a number above 0, got nan"),
    (("collective", "dgx-a100", "--per-node", "0"),
     "--per-node: must be a whole number >= 1, got 0"),
    (("collective", "dgx-a100", "--ranks", "0"), "--ranks: must be a whole number >= 1, got 0"),
    (("collective", "dgx-a100", "--concurrent", "0"),
     "--concurrent: must be a whole number >= 1, got 0"),
    (("schedule", "synthetic-openb", "--runs", "0"),
     "--runs: must be a whole number from 1 to 1,000, got 0"),
])
def test_zero_or_negative_limits_are_refused_with_the_range(cli, args, message):
    assert error(cli, *args) == message


def test_the_library_refuses_a_zero_batch_limit_too():
    from gpufabric.topology.build import load
    from gpufabric.workloads.inference.serve import ServeConfig, serve
    with pytest.raises(InputError) as e:
        serve("llama3-8b", load("hgx-h100"), ServeConfig(requests=10, max_num_seqs=0))
    assert str(e.value) == "--max-num-seqs: must be a whole number >= 1, got 0"


# -- 5. a job larger than any node ---------------------------------------------------------------

def test_replay_counts_a_job_larger_than_any_node_as_unplaceable(cli, tmp_path):
    f = tmp_path / "pods.csv"
    f.write_text(POD_HEADER + "small,1000,1024,1,1000,,LS,Running,0,100,0\n"
                 "eight,1000,1024,8,1000,,LS,Running,5,100,5\n"
                 "fat,99000000,1024,1,1000,,LS,Running,6,100,6\n")
    code, out, err = cli("schedule", str(f), "--nodes", "T4x2*2", "--mode", "replay", "--json",
                         "--jobs")
    assert (code, err) == (0, "")
    r = json.loads(out)
    assert (r["summary"]["unscheduled"], r["summary"]["unplaceable"]) == (2, 2)
    assert [j["name"] for j in r["jobs"] if j.get("unplaceable")] == ["eight", "fat"]
    code, out, _ = cli("schedule", str(f), "--nodes", "T4x2*2", "--mode", "replay")
    assert code == 0 and "unplace" in out
    assert ("unplaceable: 2 jobs, e.g. eight: fits no node of its pools even when empty (needs "
            "1000 mCPU, 1024 MiB, 8 x 1000 mGPU)") in out


def test_arrival_counts_unplaceable_pods_among_the_skipped():
    jobs = JobSet.from_jobs([Job("one", 1000, 1024, 1), Job("sixteen", 1000, 1024, 16)])
    r = run_arrival(load_nodes("T4x2*16"), jobs, "best-fit", seed=1)
    # the list is packed to 1.3 x 32 GPUs with copies of both pods; every "sixteen" is skipped
    # (no node has more than 2 GPUs) and counted as unplaceable
    assert r.unplaceable > 0 and r.skipped >= r.unplaceable


# -- 6. a failed download leaves nothing behind --------------------------------------------------

def test_a_failed_fetch_leaves_no_folder_or_partial_file(cli, tmp_path, monkeypatch):
    def half_then_fail(url, fh, h, name, progress, timeout_s):
        fh.write(b"name,cpu_milli\n")      # part of a file arrived, then the link dropped
        raise InputError("cannot download (connection reset)", file=url)
    monkeypatch.setattr(datasets, "_download", half_then_fail)
    dest = tmp_path / "cache" / "gpufabric" / "openb"
    assert error(cli, "data", "fetch", "openb", "--dest", str(dest), "--url",
                 "http://127.0.0.1:9/") == (
        "http://127.0.0.1:9/openb_node_list_all_node.csv: cannot download (connection reset)")
    assert list(tmp_path.iterdir()) == []


def test_a_failed_fetch_keeps_a_folder_it_did_not_make(tmp_path, monkeypatch):
    def refused(url, fh, h, name, progress, timeout_s):
        raise InputError("cannot download (refused)", file=url)
    monkeypatch.setattr(datasets, "_download", refused)
    with pytest.raises(InputError):
        datasets.fetch(tmp_path, base_url="http://127.0.0.1:9/")
    assert tmp_path.is_dir() and list(tmp_path.iterdir()) == []


def test_a_fetch_from_an_unreachable_loopback_port_leaves_the_cache_unmade(cli, tmp_path,
                                                                           monkeypatch):
    import socket
    with socket.socket() as s:          # a port nothing listens on: refused at once
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    msg = error(cli, "data", "fetch", "openb", "--url", f"http://127.0.0.1:{port}/")
    assert msg.startswith(f"http://127.0.0.1:{port}/openb_node_list_all_node.csv: cannot "
                          "download (")
    assert not (tmp_path / "xdg").exists()


# -- 7. a training layout that does not fit says what would -------------------------------------

def test_a_layout_that_does_not_fit_names_the_first_change_that_fits(cli):
    assert error(cli, *TRAIN) == ("memory: needs 105.4 GiB per GPU, H100-SXM has 80; fits with "
                                  "--zero 2 (77.9 GiB)")
    code, out, _ = cli(*TRAIN, "--zero", "2")
    assert code == 0 and "zero 2" in out


def test_a_layout_no_cheap_change_fixes_points_to_search(cli):
    assert error(cli, "train", "llama3-70b", "hgx-h100", "--tp", "8") == (
        "memory: needs 181.8 GiB per GPU, H100-SXM has 80; no --zero, --recompute or "
        "--micro-batch setting fits this layout; try --search")


# -- 8. values past what they can mean -----------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (SERVE + ("--concurrency", "1000000000", "--requests", "200"),
     "--concurrency: must be a whole number from 1 to 200 (at most --requests: each user of the "
     "closed loop sends one request at least), got 1000000000"),
    (SERVE + ("--concurrency", "5000"),
     "--concurrency: must be a whole number from 1 to 1,000 (at most --requests, 1,000 unless "
     "given: each user of the closed loop sends one request at least), got 5000"),
    (TRAIN + ("--power-cap", "1e9"),
     "--power-cap: must be a number above 0 and at most 700 W (H100-SXM's TDP), got 1e+09"),
    (TRAIN + ("--search", "--top", "1000000000"),
     "--top: must be a whole number from 1 to 100, got 1000000000"),
])
def test_values_past_their_meaning_are_refused_with_the_range(cli, args, message):
    assert error(cli, *args) == message


def test_a_power_cap_at_the_tdp_is_allowed(cli):
    code, out, err = cli(*TRAIN, "--zero", "2", "--power-cap", "700", "--json")
    assert code == 0, err
    uncapped = json.loads(cli(*TRAIN, "--zero", "2", "--json")[1])
    assert json.loads(out)["step_time_s"] == uncapped["step_time_s"]


SCENARIO = ("workloads:\n"
            "  train: {model: llama3-8b, tokens: 1e12, global_batch: 512, seq_len: 8192}\n")


@pytest.mark.parametrize("extra, message", [
    ("", None),
    ("  serve: {model: llama3-8b, rate: 2, slo_tpot_ms: 50}\n"
     "  services: [{name: db, cores: 64, memory_GB: 1e30}]\n",
     "workloads.services[0].memory_GB: must be a number above 0 and at most 1e+06 GB, got 1e+30"),
    ("space: {gpus_per_node: [100000]}\n",
     "space.gpus_per_node[0]: must be a whole number from 1 to 576, got 100000"),
    ("space: {nodes: [8, 10000000]}\n",
     "space.nodes[1]: must be a whole number from 1 to 100,000, got 10000000"),
    ("space: {oversubscription: [2, 1e9]}\n",
     "space.oversubscription[1]: must be a number from 1 to 511 (downlinks per uplink), "
     "got '1e9'"),
    ("constraints: {power_kW: 1e20}\n",
     "constraints.power_kW: must be a number above 0 and at most 1e+07, got 1e+20"),
])
def test_an_advise_scenario_number_past_its_range_is_refused(cli, tmp_path, extra, message):
    f = tmp_path / "s.yaml"
    f.write_text(SCENARIO.replace("tokens: 1e12", "tokens: 1e308") + extra)
    assert error(cli, "advise", str(f)) == (
        f"{f}: workloads.train.tokens: must be a number above 0 and at most 1e+15, got 1e+308")
    if message:
        f.write_text(SCENARIO + extra)
        assert error(cli, "advise", str(f)) == f"{f}: {message}"


# -- 9. a key given twice ------------------------------------------------------------------------

@pytest.mark.parametrize("loader", ["SafeLoader", "CSafeLoader"])
def test_a_yaml_key_given_twice_is_refused_naming_line_and_key(cli, tmp_path, monkeypatch,
                                                               loader):
    """PyYAML keeps the last of two equal keys without a word; every YAML file gpufabric reads
    refuses it instead, with libyaml's loader and the pure-Python one alike."""
    import yaml

    from gpufabric import fileio
    if not hasattr(yaml, loader):
        pytest.skip(f"PyYAML without {loader}")
    monkeypatch.setattr(fileio, "yaml_loader", lambda: getattr(yaml, loader))
    box = tmp_path / "box.yaml"
    box.write_text("gpu: H100-SXM\ngpus_per_node: 8\nnodes: 2\ngpus_per_node: 4\n")
    assert error(cli, "show", str(box)) == (
        f"{box}: line 4: key 'gpus_per_node' given twice (first on line 2); allowed: each key "
        "once in a mapping")
    box.write_text("gpu: H100-SXM\nhost:\n  sockets: 2\n  cpu: xeon-8480\n  sockets: 1\n")
    assert error(cli, "show", str(box)) == (
        f"{box}: line 5: key 'host.sockets' given twice (first on line 3); allowed: each key "
        "once in a mapping")
    s = tmp_path / "s.yaml"
    s.write_text(SCENARIO + "objective: fastest\nobjective: lowest-cost\n")
    assert error(cli, "advise", str(s)) == (
        f"{s}: line 4: key 'objective' given twice (first on line 3); allowed: each key once "
        "in a mapping")
    # a merge key, and the same text as a number and as a string, are not repeats
    box.write_text("base: &b {gpu: H100-SXM, nodes: 1}\nsys:\n  <<: *b\n  nodes: 2\n"
                   "n: {1: a, '1': b}\n")
    assert fileio.load_yaml(box)["sys"] == {"gpu": "H100-SXM", "nodes": 2}


def test_no_yaml_file_shipped_gives_a_key_twice():
    from gpufabric.fileio import load_yaml
    root = Path(__file__).resolve().parents[1]
    files = [p for d in ("src", "tests/data", "tests/fixtures", "examples", "docs")
             for p in (root / d).rglob("*.y*ml") if p.suffix in (".yaml", ".yml")]
    assert len(files) > 50
    for p in files:
        load_yaml(p)          # raises on a key given twice (or any other fault)

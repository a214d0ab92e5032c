"""Collectives among CPU processes of one host (gpu: none): the spec, MPICH's algorithm choice,
calibration recovering known transport parameters, and the measure loop over loopback MPI."""

from pathlib import Path

import pytest
import yaml

from gpufabric.collectives import host
from gpufabric.collectives import params as P
from gpufabric.collectives.validate import load_entries, predict_entry, validate
from gpufabric.errors import InputError
from gpufabric.measure import bench as b
from gpufabric.measure import calibrate as cal
from gpufabric.network import capacity
from gpufabric.measure import profile

EPYC = {"gpu": "none", "cpu": "EPYC-7763", "sockets": 1, "cores": 64, "transport": "shm"}


def _algo(op: str, size: int, ranks: int, spec: dict = EPYC) -> str:
    return host.HostModel(host.host_system(spec)).predict(op, size, ranks).algo


@pytest.mark.parametrize("op,size,ranks,algo", [
    # MPICH defaults (MPIR_CVAR_*_MSG_SIZE): facts of the library, not fits
    ("all_reduce", 2048, 4, "recursive_doubling"),        # <= ALLREDUCE_SHORT_MSG_SIZE
    ("all_reduce", 4096, 4, "rabenseifner"),
    ("all_reduce", 8, 4, "recursive_doubling"),
    ("all_gather", 262144, 4, "recursive_doubling"),      # < 512 KiB, power of two
    ("all_gather", 1 << 20, 4, "ring"),
    ("all_gather", 4096, 3, "bruck"),                     # short, not a power of two
    ("all_gather", 262144, 3, "ring"),
    ("reduce_scatter", 65536, 4, "recursive_halving"),
    ("reduce_scatter", 1 << 20, 4, "pairwise"),
    ("broadcast", 1 << 20, 4, "binomial"),                # fewer than BCAST_MIN_PROCS ranks
    ("broadcast", 65536, 8, "scatter_recursive_doubling"),
    ("broadcast", 1 << 20, 8, "scatter_ring"),
    ("all_to_all", 1024, 8, "bruck"),                     # 128 B blocks, 8 ranks
    ("all_to_all", 1024, 4, "scattered"),
    ("all_to_all", 1 << 20, 4, "pairwise"),
])
def test_mpich_algorithm_choice(op, size, ranks, algo):
    assert _algo(op, size, ranks) == algo


def test_gloo_over_tcp_runs_rings():
    tcp = {**EPYC, "transport": "tcp"}
    assert _algo("all_reduce", 8, 4, tcp) == "ring"
    m = host.HostModel(host.host_system(tcp))
    shm = host.HostModel(host.host_system(EPYC))
    # loopback TCP pays a kernel round per message: slower than shared memory at every size
    for s in (8, 65536, 1 << 26):
        assert m.predict("all_reduce", s, 4).time_us > shm.predict("all_reduce", s, 4).time_us


def test_copy_rate_is_a_core_or_the_shared_dram():
    m = host.HostModel(host.host_system(EPYC))
    assert m.rate_GBps(2) == P.HOST_CORE_COPY_GBps          # one core is the limit
    # 64 ranks share one socket's usable DRAM: 204.8 GB/s x DRAM_EFFICIENCY / 64
    assert m.rate_GBps(64) == pytest.approx(204.8 * capacity.DRAM_EFFICIENCY.value / 64)
    # ranks beyond the cores share them
    small = host.HostModel(host.host_system({"gpu": "none", "cores": 2}))
    assert small.rate_GBps(4) == pytest.approx(P.HOST_CORE_COPY_GBps / 2)
    # large messages approach the alpha-beta bandwidth term: all_reduce moves 1.5 n per rank
    p = m.predict("all_reduce", 1 << 30, 2)
    b_ = P.HOST_COPY_SHARE["shm"] * P.HOST_CORE_COPY_GBps
    assert p.algbw == pytest.approx(b_ / 1.5, rel=1e-3)


@pytest.mark.parametrize("spec,field,msg", [
    ({"gpu": "none", "transport": "udp"}, "transport", "got 'udp'; allowed: shm, tcp"),
    ({"gpu": "none", "cores": 0}, "cores", "expected an integer >= 1"),
    ({"gpu": "none", "nodes": 2}, "nodes", "unknown key(s) nodes for a host without GPUs"),
    ({"gpu": "none", "cpu": "EPYC-9999"}, "cpu", "unknown"),
])
def test_bad_host_specs_are_one_line(spec, field, msg):
    with pytest.raises(InputError) as exc:
        host.host_system(spec, file="h.yaml")
    assert exc.value.field == field and msg in exc.value.message
    assert exc.value.file == "h.yaml"


def test_a_host_entry_names_its_field_in_validate(cli, tmp_path):
    f = tmp_path / "m.yaml"
    f.write_text(yaml.safe_dump([{"id": "h", "system": {"gpu": "none", "transport": "rdma"},
                                  "collective": "all_reduce", "ranks": 2,
                                  "points": [{"size": 8, "time_us": 5.0}]}]))
    code, _, err = cli("validate", str(f))
    assert code == 2
    assert err == (f"gpufabric: error: {f}: [0](h).system.transport: got 'rdma'; allowed: "
                   f"shm, tcp\n")


def test_inline_and_discovered_hosts_load():
    hs = host.load_host("gpu=none,cpu=EPYC-7763,ranks_per_node=4")
    assert (hs.cpu, hs.ranks_per_node, hs.transport) == ("EPYC-7763", 4, "shm")
    assert host.load_host("gpu=H100-SXM") is None
    fixture = Path(__file__).parent / "fixtures" / "sysfs" / "kvm-epyc-2cpu"
    from gpufabric.measure.discover import discover
    from gpufabric.topology.build import from_data
    h = host.from_topology(from_data(discover(fixture).system, "kvm"))
    assert (h.cpu, h.sockets, h.cores) == ("", 1, 2)


#: the synthetic host: its shared-memory copies at 0.3 of a core's rate, 3 us per message
TRUTH = {"HOST_COPY_SHARE.shm": 0.3, "HOST_LAT_US.shm": 3.0}


def _synthetic(tmp_path: Path) -> Path:
    raw = [{"id": f"host-{op}-{n}", "system": {"gpu": "none", "cores": 8}, "collective": op,
            "ranks": n, "points": [{"size": 8 << (2 * k), "time_us": 1.0} for k in range(12)]}
           for op in ("all_reduce", "all_gather") for n in (2, 4)]
    path = tmp_path / "synthetic.yaml"
    path.write_text(yaml.safe_dump(raw))
    with profile.overrides(TRUTH):
        for e, r in zip(load_entries(str(path)), raw, strict=True):
            preds, _ = predict_entry(e, str(path))
            r["points"] = [{"size": p.size, "time_us": p.time_us} for p in preds]
    path.write_text(yaml.safe_dump(raw))
    return path


def test_calibrate_recovers_the_host_transport(tmp_path):
    res = cal.calibrate(str(_synthetic(tmp_path)))
    new = {p["name"]: p["new"] for p in res["params"]}
    assert set(new) == set(TRUTH)                        # nothing else is a candidate here
    for name, value in TRUTH.items():
        assert new[name] == pytest.approx(value, rel=0.02), name
    assert res["after"]["all"]["median_abs_pct"] < 0.5 < res["before"]["all"]["median_abs_pct"]
    # no entry has more ranks than cores: the scheduler's wait is not constrained, not moved
    assert [u["name"] for u in res["unpinned"]] == ["HOST_OVERSUB_WAIT_MS"]
    assert res["unpinned"][0]["why"] == "moves no fitted point's prediction"


def _log_err(summary: dict) -> float:
    """Median |log(predicted / measured)| of a calibrate before/after summary's rows."""
    import math
    import statistics
    return statistics.median(abs(math.log1p(r["error_pct"] / 100)) for r in summary["rows"])


def test_the_loop_over_loopback_mpi(cli, tmp_path):
    """discover -> bench (MPI, 2 ranks) -> validate -> calibrate -> validate --profile."""
    if b.why_not("mpi"):
        pytest.skip(f"MPI backend: {b.why_not('mpi')} (pip install 'gpufabric[bench]')")
    sysf, m, prof = tmp_path / "mine.yaml", tmp_path / "bench.yaml", tmp_path / "p.yaml"
    code, _, err = cli("discover", "-o", str(sysf))
    assert code == 0, err
    code, out, err = cli("bench", str(sysf), "--op", "all_reduce,all_gather", "--min", "8",
                         "--max", "256K", "--step-factor", "4", "--ranks", "2", "--iters", "10",
                         "--warmup", "2", "--stat", "median", "--backend", "mpi", "--timeout",
                         "60", "-o", str(m))
    assert code == 0, err
    raw = yaml.safe_load(m.read_text())
    assert raw[0]["system"]["gpu"] == "none" and raw[0]["system"]["transport"] == "shm"
    assert "needs" not in raw[0]
    assert raw[0]["statistic"] == "median" and raw[0]["system"]["cores"] >= 1
    code, vout, err = cli("validate", str(m), "--json")
    assert code == 0, err
    code, cout, err = cli("calibrate", str(m), "-o", str(prof), "--json")
    assert code == 0, err
    import json
    res = json.loads(cout)
    fitted = {p["name"] for p in res["params"]}
    # the bench's points span latency-bound and copy-bound sizes: both are pinned
    assert fitted == {"HOST_COPY_SHARE.shm", "HOST_LAT_US.shm"}
    # the fit improves on the shipped estimates on the held-out sizes, in the measure it
    # minimizes (|log predicted / measured|: a % error is capped at 100% below the measurement
    # and not above it, so its median can rise while the predictions get closer); how far
    # depends on the machine's load at the time: the goal bound is asserted on a recorded run
    # below, since a shared CI machine can preempt every call of a live run
    assert _log_err(res["after"]) < _log_err(res["before"])
    code, _, err = cli("validate", str(m), "--profile", str(prof))
    assert code == 0, err
    assert validate(str(m))["summary"]["all"]["points"] == 2 * 8      # 8 B to 128 KiB, x4


def test_median_is_an_mpi_statistic(cli, tmp_path, monkeypatch):
    monkeypatch.setattr(b, "choose", lambda backend: "torch")
    code, _, err = cli("bench", "gpu=none", "--stat", "median", "--ranks", "2", "-o",
                       str(tmp_path / "m.yaml"))
    assert code == 2
    assert err == ("gpufabric: error: --stat: median is measured by the mpi backend only "
                   "(this run: torch); use --stat mean\n")
    code, _, err = cli("bench", "gpu=none", "--stat", "mode", "--ranks", "2", "-o",
                       str(tmp_path / "m.yaml"))
    assert err == "gpufabric: error: --stat: unknown statistic 'mode'; allowed: mean, median\n"
    assert not (tmp_path / "m.yaml").exists()


BENCH = Path(__file__).parent / "fixtures" / "bench"


def test_the_recorded_run_of_this_machine_calibrates_within_the_goal():
    """The 2-rank run docs/measure.md shows (tests/fixtures/bench/SOURCES.md)."""
    res = cal.calibrate(str(BENCH / "kvm-epyc-2cpu-mpi-2ranks.yaml"))
    new = {p["name"]: p["new"] for p in res["params"]}
    assert set(new) == {"HOST_COPY_SHARE.shm", "HOST_LAT_US.shm"}
    # physics: a message costs microseconds, and a rank moves less than its core's copy rate
    assert 1 < new["HOST_LAT_US.shm"] < 20 and 0 < new["HOST_COPY_SHARE.shm"] < 0.5
    # goal: held-out sizes within 30% (median) once fitted; the shipped estimates of an idle
    # server core are far off on this shared guest (above 100%)
    assert res["after"]["all"]["median_abs_pct"] <= 30
    assert res["before"]["all"]["median_abs_pct"] > 100
    assert res["after"]["by_size"]["small"]["median_abs_pct"] <= 30


def test_oversubscribed_ranks_pin_the_scheduler_wait():
    """4 ranks on 2 vCPUs: the wait for a descheduled peer is pinned (milliseconds), the
    per-message latency it hides is not and stays as shipped."""
    res = cal.calibrate(str(BENCH / "kvm-epyc-2cpu-mpi-4ranks.yaml"))
    new = {p["name"]: p["new"] for p in res["params"]}
    assert "HOST_OVERSUB_WAIT_MS" in new and 0.1 < new["HOST_OVERSUB_WAIT_MS"] < 20
    assert "HOST_LAT_US.shm" in {u["name"] for u in res["unpinned"]}
    assert res["after"]["all"]["median_abs_pct"] < res["before"]["all"]["median_abs_pct"]

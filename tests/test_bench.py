"""gpufabric bench: a real MPI run over loopback, the nccl-tests parser, the refusals."""

import sys
import time
from pathlib import Path

import pytest

from gpufabric.collectives.validate import load_entries
from gpufabric.errors import InputError
from gpufabric.measure import bench as b

FIX = Path(__file__).parent / "fixtures" / "nccl_tests"
NO_GPU_SKIP = ("gpufabric: error: {f}: [0](vm-all_reduce).system.gpu: required: the GPU model "
               "(e.g. gpu: H100-SXM)\n")


def test_mpi_loopback_run_writes_a_file_validate_reads(cli, tmp_path):
    """2 MPI ranks on this host, all_reduce and all_gather, 8 B to 64 KiB."""
    if b.why_not("mpi"):
        pytest.skip(f"MPI backend: {b.why_not('mpi')} (pip install 'gpufabric[bench]')")
    out = tmp_path / "m.yaml"
    t0 = time.monotonic()
    code, stdout, err = cli("bench", "--op", "all_reduce,all_gather", "--min", "8", "--max",
                            "64K", "--ranks", "2", "--iters", "3", "--warmup", "1",
                            "--backend", "mpi", "--timeout", "60", "-o", str(out))
    assert code == 0, err
    assert time.monotonic() - t0 < 30
    lines = stdout.splitlines()
    assert lines[0].startswith("# gpufabric bench: mpi (MPICH")
    assert "#       size        count    type      time   algbw   busbw" in lines
    assert lines[-1] == f"# wrote {out} (2 entries, 28 points)"
    entries = load_entries(str(out))                   # validate's own reader
    assert [e["collective"] for e in entries] == ["all_reduce", "all_gather"]
    for e in entries:
        assert e["ranks"] == 2
        assert [p["size"] for p in e["points"]] == [2**k for k in range(3, 17)]
        for p in e["points"]:
            assert p["time_us"] > 0 and p["busbw"] > 0
            # busbw is the nccl-tests definition of the measured time
            f = 1.0 if e["collective"] == "all_reduce" else 0.5
            assert p["busbw"] == pytest.approx(p["size"] / p["time_us"] / 1e3 * f, rel=1e-4)
    import yaml
    raw = yaml.safe_load(out.read_text())
    assert all(k not in raw[0]["id"] for k in ("iter", "warmup", "float", "rank"))
    assert {k: raw[0][k] for k in ("backend", "iterations", "warmup", "dtype")} == {
        "backend": "mpi", "iterations": 3, "warmup": 1, "dtype": "float32"}
    assert raw[0]["software"]["mpi_library"].startswith("MPICH Version:")
    assert raw[0]["software"]["mpi4py"]
    # validate: this machine has no GPU, so the entries are skipped with the schema's reason
    code, vout, verr = cli("validate", str(out))
    if raw[0]["system"] == {}:
        name = raw[0]["id"].rsplit("-all_reduce", 1)[0]
        assert code == 2
        assert verr == NO_GPU_SKIP.format(f=out).replace("vm-all_reduce",
                                                         f"{name}-all_reduce")
        assert raw[0]["needs"].startswith("a GPU: measured on CPU processes")
    else:
        assert code == 0, verr


def test_busbw_factors_are_nccl_tests():
    """1 MB in 100 us on 4 ranks: algbw 10 GB/s; busbw by the nccl-tests factor of each op."""
    got = {op: b.row(op, 1_000_000, 250_000, 100.0, 4)["busbw"] for op in b.OPS}
    assert got == {"all_reduce": 15.0, "all_gather": 7.5, "reduce_scatter": 7.5,
                   "broadcast": 10.0, "all_to_all": 7.5}
    assert b.row("all_reduce", 1_000_000, 250_000, 100.0, 4)["algbw"] == 10.0


@pytest.mark.parametrize("name,op,factor", [("all_reduce_perf_h100x8.txt", "all_reduce", 1.75),
                                            ("all_gather_perf_h100x8.txt", "all_gather", 0.875)])
def test_nccl_tests_parser_on_fixture(name, op, factor):
    text = (FIX / name).read_text()
    rows, info = b.parse_nccl_tests(text, op)
    assert info == {"nccl_tests": "2.13.11", "nccl": "2.21.5+cuda12.4", "ranks": 8}
    printed = [ln.split() for ln in text.splitlines()
               if ln.strip() and not ln.lstrip().startswith(("#", "NCCL"))]
    assert len(rows) == len(printed)
    for r, t in zip(rows, printed, strict=True):
        assert (r["size"], r["count"], r["time_us"]) == (int(t[0]), int(t[1]), float(t[5]))
        assert r["algbw"] == pytest.approx(float(t[6]), abs=0.006)
        assert r["busbw"] == pytest.approx(float(t[7]), abs=0.006)
        assert r["busbw"] == pytest.approx(r["algbw"] * factor, rel=1e-12)
    if op == "all_reduce":
        assert rows[-1]["size"] == 1073741824 and rows[-1]["busbw"] == pytest.approx(468.44,
                                                                                     abs=0.005)


def test_nccl_tests_parser_without_redop_root_columns():
    """Older nccl-tests print no redop and root columns; the header says which are there."""
    text = ("#       size         count      type     time   algbw   busbw  error\n"
            "     1048576        262144     float    52.40   20.01   35.02  0e+00\n")
    rows, info = b.parse_nccl_tests(text, "all_reduce", ranks=8)
    assert [(r["size"], r["time_us"]) for r in rows] == [(1048576, 52.4)]
    assert info == {"ranks": 8}


def test_missing_backend_is_one_line(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))                  # no *_perf, no mpiexec
    monkeypatch.setattr(b, "_importable", lambda name: False)  # no torch, no mpi4py
    monkeypatch.setattr(b, "mpiexec", lambda: None)
    out = tmp_path / "m.yaml"
    code, stdout, err = cli("bench", "--ranks", "2", "-o", str(out))
    assert (code, stdout) == (2, "")
    assert err == ("gpufabric: error: --backend: no benchmark backend here (nccl-tests: "
                   "all_reduce_perf is not on PATH; torch: torch is not installed; mpi: mpi4py "
                   "is not installed); install one: pip install 'gpufabric[bench]'\n")
    code, _, err = cli("bench", "--backend", "mpi", "-o", str(out))
    assert err == ("gpufabric: error: --backend: backend mpi is not available: mpi4py is not "
                   "installed; install it: pip install 'gpufabric[bench]'\n")
    code, _, err = cli("bench", "--backend", "torch", "-o", str(out))
    assert err == ("gpufabric: error: --backend: backend torch is not available: torch is not "
                   "installed; install it: pip install torch\n")
    assert not out.exists()


@pytest.mark.parametrize("args,line", [
    (["--ranks", "0"], "--ranks: got 0; expected 1 to 64 ranks"),
    (["--ranks", "65"], "--ranks: got 65; expected 1 to 64 ranks"),
    (["--min", "1K", "--max", "8"], "--min: --min (1024) is above --max (8)"),
    (["--op", "all_reduce,allreduce"], "--op: unknown collective 'allreduce'; allowed: "
     "all_reduce, all_gather, reduce_scatter, broadcast, all_to_all or all"),
    (["--backend", "gloo"], "--backend: unknown backend 'gloo'; allowed: auto, nccl-tests, "
     "torch, mpi"),
    (["--iters", "0"], "--iters: got 0; expected at least 1"),
    (["--timeout", "0"], "--timeout: got 0; expected seconds above 0, at most 86400"),
])
def test_bad_options_are_one_line(cli, tmp_path, args, line):
    out = tmp_path / "m.yaml"
    code, stdout, err = cli("bench", *args, "-o", str(out))
    assert (code, stdout, err) == (2, "", f"gpufabric: error: {line}\n")
    assert not out.exists()


def test_memory_bound_from_meminfo(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:        4000000 kB\nMemAvailable:    1048576 kB\n")
    with pytest.raises(InputError) as e:
        b.check_bounds(2, 2**30, "mpi", meminfo)
    assert str(e.value) == (f"--max: 2 ranks with two buffers of 1073741824 bytes each need "
                            f"4.0 GiB; {meminfo} gives 1.0 GiB available (lower --max or "
                            f"--ranks)")
    b.check_bounds(2, 2**20, "mpi", meminfo)          # 4 MiB fits
    assert b.mem_available(tmp_path / "absent") is None


def test_time_limit_kills_the_run_and_keeps_its_output():
    t0 = time.monotonic()
    out, finished, _ = b._communicate(
        [sys.executable, "-c", "import time; print('point', flush=True); time.sleep(30)"],
        {}, 0.5)
    assert (finished, out) == (False, "point\n")
    assert time.monotonic() - t0 < 10


def test_environment_recorded():
    env = {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple", "MPICH_ASYNC_PROGRESS": "1",
           "OMPI_MCA_btl": "self,tcp", "PATH": "/bin"}
    assert b.environment(env) == {"MPICH_ASYNC_PROGRESS": "1", "NCCL_ALGO": "Ring",
                                  "NCCL_PROTO": "Simple", "OMPI_MCA_btl": "self,tcp"}


def test_torch_backend_over_loopback(cli, tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "t.yaml"
    code, stdout, err = cli("bench", "--backend", "torch", "--op", "all_reduce", "--min", "8",
                            "--max", "1K", "--ranks", "2", "--iters", "2", "--warmup", "1",
                            "--timeout", "120", "-o", str(out))
    assert code == 0, err
    assert [len(e["points"]) for e in load_entries(str(out))] == [8]


def test_nccl_tests_backend_runs_the_binaries_on_path(cli, tmp_path, monkeypatch):
    """A stand-in all_reduce_perf on PATH prints the fixture: bench parses it, prints the
    table and writes an entry validate predicts (its system is the spec given)."""
    exe = tmp_path / "bin" / "all_reduce_perf"
    exe.parent.mkdir()
    exe.write_text(f"#!/bin/sh\ncat '{FIX / 'all_reduce_perf_h100x8.txt'}'\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{exe.parent}:/usr/bin:/bin")
    monkeypatch.setenv("NCCL_PROTO", "Simple")
    monkeypatch.setattr(b, "gpu_count", lambda: 8)
    out = tmp_path / "m.yaml"
    code, stdout, err = cli("bench", "gpu=H100-SXM,gpus_per_node=8", "--op", "all_reduce",
                            "--ranks", "8", "--max", "1G", "-o", str(out))
    assert code == 0, err
    assert "  1073741824    268435456   float   4011.3  267.68  468.44" in stdout
    assert stdout.splitlines()[-1] == f"# wrote {out} (1 entries, 7 points)"
    import yaml
    [e] = yaml.safe_load(out.read_text())
    assert e["system"]["gpu"] == "H100-SXM" and e["system"]["gpus_per_node"] == 8
    env = e["software"].pop("environment")
    assert e["software"] == {"backend": "nccl-tests", "nccl_tests": "2.13.11",
                             "nccl": "2.21.5+cuda12.4"}
    assert env["NCCL_PROTO"] == "Simple"
    code, vout, verr = cli("validate", str(out))
    assert code == 0, verr
    assert "# held-out (no parameter fitted on it, not looked at): 7 points" in vout
    # one rank per GPU
    code, _, err = cli("bench", "--backend", "nccl-tests", "--ranks", "9", "-o", str(out))
    assert err == ("gpufabric: error: --ranks: got 9; this machine has 8 GPU(s) and nccl-tests "
                   "runs one rank per GPU\n")

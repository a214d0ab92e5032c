"""``gpufabric bench``: measure collectives on this machine with a real backend.

Backends (``pip install 'gpufabric[bench]'`` gives MPI):

* ``nccl-tests``: the ``*_perf`` binaries of NVIDIA/nccl-tests on PATH (GPUs only), one process
  driving ``ranks`` GPUs (``-g``); their table is parsed by :func:`parse_nccl_tests`;
* ``torch``: torch.distributed, one process per rank on this host over loopback (NCCL on GPUs,
  Gloo on CPUs), launched as torchrun would (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
  ``MASTER_PORT``);
* ``mpi``: mpi4py under ``mpiexec -n ranks`` (the one beside the running Python first, then
  PATH), processes on this host over loopback.

Each rank runs :mod:`gpufabric.measure.bench_worker`; rank 0 appends one JSON line per point,
so a run stopped at its time limit keeps the points measured so far. Results follow nccl-tests'
definitions: ``algbw = size / time``, ``busbw = algbw * busbw_factor(op, ranks)``
(:func:`gpufabric.collectives.busbw_factor`), and become a measurements file of the schema
``gpufabric validate`` reads (docs/calibration.md), one entry per collective.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufabric.collectives import busbw_factor
from gpufabric.errors import InputError
from gpufabric.measure.bench_worker import DTYPE

#: The collectives bench measures, in nccl-tests' order.
OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")
BACKENDS = ("auto", "nccl-tests", "torch", "mpi")
MAX_RANKS = 64
INSTALL = "pip install 'gpufabric[bench]'"
#: nccl-tests binary of each collective.
NCCL_TESTS_BIN = {"all_reduce": "all_reduce_perf", "all_gather": "all_gather_perf",
                  "reduce_scatter": "reduce_scatter_perf", "broadcast": "broadcast_perf",
                  "all_to_all": "alltoall_perf"}
#: Environment variables recorded with the results (they change what the backend does).
ENV_PREFIXES = ("NCCL_", "OMPI_", "MPICH_", "HYDRA_", "UCX_", "GLOO_", "TORCH_NCCL_")
#: Seconds a backend's version query may take.
QUERY_S = 20


@dataclass
class BenchResult:
    """What a run measured: rows in nccl-tests' terms, the software stack, and whether the run
    ended before its time limit."""

    backend: str
    ranks: int
    iters: int
    warmup: int
    rows: list[dict[str, Any]] = field(default_factory=list)
    stat: str = "mean"
    software: dict[str, Any] = field(default_factory=dict)
    complete: bool = True
    notes: list[str] = field(default_factory=list)


def row(op: str, size: int, count: int, time_us: float, ranks: int) -> dict[str, Any]:
    """One point as nccl-tests prints it: algbw = size / time, busbw = algbw * factor (GB/s).

    >>> r = row("all_reduce", 1_000_000, 250_000, 100.0, 4)
    >>> r["algbw"], r["busbw"]
    (10.0, 15.0)
    """
    algbw = size / time_us / 1e3
    return {"op": op, "size": size, "count": count, "type": DTYPE, "time_us": time_us,
            "algbw": algbw, "busbw": algbw * busbw_factor(op, ranks)}


# --- which backend ---------------------------------------------------------------------------

def mpiexec() -> str | None:
    """``mpiexec`` beside the running Python (a venv with the ``mpich`` wheel), else on PATH."""
    here = Path(sys.executable).parent / "mpiexec"
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    return shutil.which("mpiexec")


def gpu_count() -> int:
    """NVIDIA GPU device nodes present (``/dev/nvidia0``, ...: the driver is loaded)."""
    return sum(1 for p in Path("/dev").glob("nvidia*") if p.name[6:].isdigit())


def has_gpu() -> bool:
    """An NVIDIA GPU is present."""
    return gpu_count() > 0


def _importable(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def why_not(backend: str) -> str:
    """Why ``backend`` cannot run here, or "" when it can."""
    if backend == "mpi":
        if not _importable("mpi4py"):
            return "mpi4py is not installed"
        if mpiexec() is None:
            return "mpiexec is not beside python nor on PATH"
        return ""
    if backend == "torch":
        return "" if _importable("torch") else "torch is not installed"
    if shutil.which(NCCL_TESTS_BIN["all_reduce"]) is None:
        return "all_reduce_perf is not on PATH"
    return "" if has_gpu() else "no NVIDIA GPU (/dev/nvidia*)"


def choose(backend: str) -> str:
    """The backend to run: ``auto`` picks nccl-tests (on PATH, with GPUs), else torch, else MPI.
    A missing one raises :class:`InputError` naming the extra to install."""
    if backend not in BACKENDS:
        raise InputError(f"unknown backend '{backend}'; allowed: {', '.join(BACKENDS)}",
                         field="--backend")
    if backend != "auto":
        why = why_not(backend)
        if why:
            extra = ("build NVIDIA/nccl-tests and put its *_perf binaries on PATH"
                     if backend == "nccl-tests" else
                     "pip install torch" if backend == "torch" else INSTALL)
            raise InputError(f"backend {backend} is not available: {why}; install it: {extra}",
                             field="--backend")
        return backend
    whys = []
    for b in ("nccl-tests", "torch", "mpi"):
        why = why_not(b)
        if not why:
            return b
        whys.append(f"{b}: {why}")
    raise InputError(f"no benchmark backend here ({'; '.join(whys)}); install one: {INSTALL}",
                     field="--backend")


# --- bounds ----------------------------------------------------------------------------------

def mem_available(meminfo: str | Path = "/proc/meminfo") -> int | None:
    """``MemAvailable`` of /proc/meminfo in bytes, or None when it cannot be read."""
    try:
        text = Path(meminfo).read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    m = re.search(r"^MemAvailable:\s+(\d+)\s*kB", text, re.MULTILINE)
    return int(m.group(1)) * 1024 if m else None


def check_bounds(ranks: int, max_size: int, backend: str,
                 meminfo: str | Path = "/proc/meminfo") -> None:
    """Refuse more ranks than :data:`MAX_RANKS`, or host buffers (two of ``max_size`` per rank
    for the CPU backends) larger than the memory /proc/meminfo says is available."""
    if not 1 <= ranks <= MAX_RANKS:
        raise InputError(f"got {ranks}; expected 1 to {MAX_RANKS} ranks", field="--ranks")
    if backend == "nccl-tests" or (backend == "torch" and has_gpu()):
        gpus = gpu_count()
        if ranks > gpus:
            raise InputError(f"got {ranks}; this machine has {gpus} GPU(s) and {backend} runs "
                             f"one rank per GPU", field="--ranks")
        return    # buffers on the GPUs
    need = 2 * max_size * ranks
    avail = mem_available(meminfo)
    if avail is not None and need > avail:
        gib = 2**30
        raise InputError(f"{ranks} ranks with two buffers of {max_size} bytes each need "
                         f"{need / gib:.1f} GiB; {meminfo} gives {avail / gib:.1f} GiB "
                         f"available (lower --max or --ranks)", field="--max")


# --- the software stack ----------------------------------------------------------------------

def environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of :data:`ENV_PREFIXES` that are set (NCCL_ALGO, NCCL_PROTO, ...).

    >>> environment({"NCCL_PROTO": "LL", "HOME": "/root", "OMPI_MCA_btl": "self,tcp"})
    {'NCCL_PROTO': 'LL', 'OMPI_MCA_btl': 'self,tcp'}
    """
    src: Mapping[str, str] = os.environ if env is None else env
    return {k: src[k] for k in sorted(src) if k.startswith(ENV_PREFIXES)}


def driver_version() -> str:
    """The NVIDIA driver's version (NVML, else nvidia-smi), or "" when neither answers."""
    from gpufabric.measure import nvml
    nv = nvml.init()
    if nv is not None:
        try:
            return nvml.text(nv.nvmlSystemGetDriverVersion())
        except Exception:
            pass
        finally:
            nvml.shutdown(nv)
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return ""
    try:
        out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=QUERY_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = out.stdout.strip().splitlines()
    return lines[0].strip() if out.returncode == 0 and lines else ""


# --- nccl-tests ------------------------------------------------------------------------------

def parse_nccl_tests(text: str, op: str, ranks: int | None = None) -> tuple[list[dict], dict]:
    """The out-of-place rows of a nccl-tests ``*_perf`` output, and what its header says.

    Columns follow the header line (``size count type [redop] [root] time algbw busbw #wrong``
    then the in-place ones); ``ranks`` defaults to the devices the output lists. Returns
    ``(rows, info)`` with ``info`` holding ``ranks`` and, when printed, ``nccl_tests`` and
    ``nccl`` (versions).
    """
    info: dict[str, Any] = {}
    cols: list[str] | None = None
    devices = 0
    rows: list[dict] = []
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("#"):
            body = s.lstrip("#").split()
            if "size" in body and "count" in body and "type" in body:
                cols = body
            elif body and body[0] == "Rank":
                devices += 1
            m = re.search(r"nccl-tests version (\S+)", s)
            if m:
                info["nccl_tests"] = m.group(1)
            continue
        m = re.search(r"NCCL version (\S+)", s)
        if m:
            info["nccl"] = m.group(1)
            continue
        t = s.split()
        if cols is None or len(t) < 6 or not (t[0].isdigit() and t[1].isdigit()):
            continue
        base = 3 + ("redop" in cols) + ("root" in cols)
        try:
            time_us = float(t[base])
        except (ValueError, IndexError):
            continue
        n = ranks or devices or 1
        if time_us > 0 and int(t[0]) > 0:
            rows.append(row(op, int(t[0]), int(t[1]), time_us, n))
    info["ranks"] = ranks or devices or None
    return rows, info


def _run_nccl_tests(ops: list[str], sizes: list[int], factor: float, ranks: int, iters: int,
                    warmup: int, deadline: float, res: BenchResult,
                    on_point: Callable[[dict], None] | None) -> None:
    for op in ops:
        exe = shutil.which(NCCL_TESTS_BIN[op])
        if exe is None:
            res.notes.append(f"{NCCL_TESTS_BIN[op]} is not on PATH: {op} not measured")
            continue
        left = deadline - time.monotonic()
        if left <= 0:
            res.complete = False
            return
        cmd = [exe, "-b", str(sizes[0]), "-e", str(sizes[-1]), "-f", f"{factor:g}",
               "-g", str(ranks), "-n", str(iters), "-w", str(warmup), "-d", "float"]
        env = dict(os.environ)
        env.setdefault("NCCL_DEBUG", "VERSION")
        out, finished, rc = _communicate(cmd, env, left)
        rows, info = parse_nccl_tests(out, op, ranks)
        if finished and rc != 0 and not rows:
            last = [x for x in out.splitlines() if x.strip()]
            raise InputError(f"{NCCL_TESTS_BIN[op]} failed (exit status {rc}): "
                             f"{last[-1].strip() if last else 'no output'}", field="--backend")
        res.software.update({k: v for k, v in info.items() if k != "ranks"})
        for r in rows:
            res.rows.append(r)
            if on_point:
                on_point(r)
        if not finished:
            res.complete = False
            return


# --- processes -------------------------------------------------------------------------------

def _kill(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    p.wait()


def _wait(procs: list[subprocess.Popen], deadline: float,
          tick: Callable[[], None] | None = None) -> bool:
    """Wait for every process until ``deadline`` (time.monotonic), calling ``tick`` between
    looks; False when the deadline came first (they are then killed)."""
    while any(p.poll() is None for p in procs):
        left = deadline - time.monotonic()
        if left <= 0:
            for p in procs:
                _kill(p)
            return False
        time.sleep(min(left, 0.05))
        if tick:
            tick()
    return True


def _communicate(cmd: list[str], env: dict[str, str], timeout: float,
                 tick: Callable[[], None] | None = None) -> tuple[str, bool, int]:
    """Run ``cmd`` in its own process group: its output, False when it was killed at
    ``timeout`` seconds, and its exit status."""
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                             start_new_session=True)
        finished = _wait([p], time.monotonic() + max(timeout, 0.1), tick)
        out.seek(0)
        return out.read(), finished, p.returncode


def _worker_env() -> dict[str, str]:
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2])    # the directory holding gpufabric/
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _launch(backend: str, plan_path: str, ranks: int, timeout: float,
            tick: Callable[[], None] | None = None) -> tuple[bool, int, str]:
    """Start the ranks; (finished before ``timeout``, exit status, last line of output)."""
    env = _worker_env()
    worker = [sys.executable, "-m", "gpufabric.measure.bench_worker", backend, plan_path]
    if backend == "mpi":
        exe = mpiexec()
        assert exe is not None
        out, finished, rc = _communicate([exe, "-n", str(ranks)] + worker, env, timeout, tick)
        lines = [x for x in out.splitlines() if x.strip()]
        return finished, rc, lines[-1] if lines else ""
    port = str(_free_port())
    procs = []
    logs = []
    for r in range(ranks):
        e = dict(env, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(ranks),
                 LOCAL_WORLD_SIZE=str(ranks), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        log = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
        logs.append(log)
        procs.append(subprocess.Popen(worker, stdout=log, stderr=subprocess.STDOUT, env=e,
                                      start_new_session=True))
    finished = _wait(procs, time.monotonic() + timeout, tick)
    rc = max(abs(p.returncode or 0) for p in procs) if finished else -9
    logs[0].seek(0)
    lines = [x for x in logs[0].read().splitlines() if x.strip()]
    for log in logs:
        log.close()
    return finished, rc, lines[-1] if lines else ""


def run(ops: list[str], sizes: list[int], ranks: int, backend: str = "auto", iters: int = 20,
        warmup: int = 5, timeout: float = 300.0, factor: float = 2.0,
        on_point: Callable[[dict], None] | None = None, stat: str = "mean") -> BenchResult:
    """Measure ``ops`` at ``sizes`` (bytes) on ``ranks`` processes of this host.

    After ``timeout`` seconds the ranks are killed and the points measured so far are kept
    (``complete`` False). A backend that fails before measuring anything raises
    :class:`InputError` with its last line of output. ``stat`` is ``mean`` (over the timed
    calls, as nccl-tests) or ``median`` (of each call's slowest rank; MPI only).
    """
    backend = choose(backend)
    if stat not in STATS:
        raise InputError(f"unknown statistic '{stat}'; allowed: {', '.join(STATS)}",
                         field="--stat")
    if stat != "mean" and backend != "mpi":
        raise InputError(f"{stat} is measured by the mpi backend only (this run: {backend}); "
                         f"use --stat mean", field="--stat")
    res = BenchResult(backend, ranks, iters, warmup, stat=stat)
    res.software["backend"] = backend
    deadline = time.monotonic() + timeout
    if backend == "nccl-tests":
        _run_nccl_tests(ops, sizes, factor, ranks, iters, warmup, deadline, res, on_point)
    else:
        with tempfile.TemporaryDirectory(prefix="gpufabric-bench-") as tmp:
            out = os.path.join(tmp, "points.jsonl")
            plan = os.path.join(tmp, "plan.json")
            Path(plan).write_text(json.dumps({"ops": ops, "sizes": sizes, "iters": iters,
                                              "warmup": warmup, "stat": stat, "out": out}),
                                  encoding="utf-8")
            pos = 0

            def tick() -> None:
                """Read the points written since the last call (whole lines only)."""
                nonlocal pos
                try:
                    with open(out, "rb") as f:
                        f.seek(pos)
                        chunk = f.read()
                except OSError:
                    return
                whole = chunk[:chunk.rfind(b"\n") + 1]
                pos += len(whole)
                for line in whole.decode("utf-8", "replace").splitlines():
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        continue
                    if "op" in rec:
                        r = row(rec["op"], rec["size"], rec["count"], rec["time_us"], ranks)
                        res.rows.append(r)
                        if on_point:
                            on_point(r)
                    elif "software" in rec:
                        res.software.update(rec["software"])
                    elif "note" in rec:
                        res.notes.append(str(rec["note"]))

            finished, rc, last = _launch(backend, plan, ranks, timeout, tick)
            tick()
        res.complete = finished and rc == 0
        if not finished:
            res.notes.append(f"stopped at the time limit ({timeout:g} s): "
                             f"{len(res.rows)} points kept")
        elif rc != 0 or not res.rows:
            raise InputError(f"the {backend} ranks failed (exit status {rc}): "
                             f"{last or 'no output'}", field="--backend")
    if backend != "mpi":
        drv = driver_version()
        if drv:
            res.software["driver"] = drv
    env = environment()
    if env:
        res.software["environment"] = env
    return res


# --- the measurements file -------------------------------------------------------------------

#: How a point's time is taken from the timed calls (``--stat``).
STATS = ("mean", "median")


def system_entry(gpu_models: list[str], spec: dict[str, Any] | None,
                 host: dict[str, Any] | None = None) -> tuple[dict, str]:
    """The entry's ``system`` (the spec shorthand validate builds) and, when there is none to
    give, what the entry ``needs``: ``spec`` when the system came from one, else the GPU model
    and count of a system file; a system without GPUs gives ``host`` (its ``gpu: none`` spec,
    :mod:`gpufabric.collectives.host`), else ``{}``.

    >>> system_entry([], None)[0], system_entry(["H100-SXM"] * 8, None)[0]
    ({}, {'gpu': 'H100-SXM', 'gpus_per_node': 8, 'nodes': 1})
    >>> system_entry([], None, {"gpu": "none", "sockets": 1, "transport": "shm"})[0]
    {'gpu': 'none', 'sockets': 1, 'transport': 'shm'}
    """
    if spec is not None:
        return {k: v for k, v in spec.items() if v is not None}, ""
    if not gpu_models and host is not None:
        return dict(host), ""
    if not gpu_models:
        return {}, ("a GPU: measured on CPU processes of a machine without GPUs, which the "
                    "collective model does not describe")
    if not gpu_models[0]:
        return {}, "the GPU model (not in the catalog; give SYSTEM as a spec)"
    return {"gpu": gpu_models[0], "gpus_per_node": len(gpu_models), "nodes": 1}, ""


def entries(res: BenchResult, name: str, system: dict[str, Any], needs: str,
            machine: dict[str, Any], when: str) -> list[dict[str, Any]]:
    """One measurements entry per collective measured (docs/calibration.md), with the run's
    configuration and software stack as keys beside the points."""
    out = []
    for op in OPS:
        pts = [r for r in res.rows if r["op"] == op]
        if not pts:
            continue
        sw = res.software
        lib = sw.get("mpi_library") or (f"torch {sw['torch']}" if "torch" in sw else "") \
            or (f"NCCL {sw['nccl']}" if "nccl" in sw else "")
        e: dict[str, Any] = {
            "id": f"{name}-{op}",
            "source": f"gpufabric bench ({res.backend}{', ' + lib if lib else ''}) on {name}, "
                      f"{when}",
            "confidence": "measured",
            "system": copy.deepcopy(system),
            "collective": op,
            "ranks": res.ranks,
            "backend": res.backend,
            "iterations": res.iters,
            "warmup": res.warmup,
            "statistic": res.stat,
            "dtype": DTYPE,
            "software": copy.deepcopy(sw),
            "machine": copy.deepcopy(machine),
        }
        if needs:
            e["needs"] = needs
        if not res.complete:
            e["complete"] = False
        e["points"] = [{"size": r["size"], "time_us": float(f"{r['time_us']:.6g}"),
                        "busbw": float(f"{r['busbw']:.6g}")} for r in pts]
        out.append(e)
    return out


def host_transport(backend: str) -> str:
    """The host transport of a CPU backend's ranks: ``shm`` for MPI (MPICH's shared memory),
    ``tcp`` for torch (Gloo over loopback).

    >>> host_transport("mpi"), host_transport("torch")
    ('shm', 'tcp')
    """
    return "tcp" if backend == "torch" else "shm"


def table_header() -> list[str]:
    """nccl-tests' table header (out-of-place columns)."""
    return [f"#{'size':>11} {'count':>12} {'type':>7} {'time':>9} {'algbw':>7} {'busbw':>7}",
            f"#{'(B)':>11} {'(elements)':>12} {'':>7} {'(us)':>9} {'(GB/s)':>7} {'(GB/s)':>7}"]


def table_line(r: dict[str, Any]) -> str:
    """One row as nccl-tests prints it.

    >>> table_line(row("all_reduce", 1048576, 262144, 52.4, 8))
    '     1048576       262144   float     52.4   20.01   35.02'
    """
    kind = "float" if r["type"] == "float32" else r["type"]
    return (f" {r['size']:>11} {r['count']:>12} {kind:>7} {r['time_us']:>8.1f} "
            f"{r['algbw']:>7.2f} {r['busbw']:>7.2f}")

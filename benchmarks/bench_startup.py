"""Start-up: the wall time of one command as a whole process (median of 5 runs), beside the
interpreter's own floor (``python -c pass``, ``python -c "import numpy"``).

A prediction needs numpy (the serving simulator, the network's fair sharing), so ``import
numpy`` is the floor a ``train`` or ``serve`` run can come down to; the ratios say how far
above it each command is. Goals (a quiet 2-core machine): ``--version`` and ``import
gpufabric`` under 0.1 s, one ``train`` or ``serve`` prediction under 0.2 s. Each command runs
once before it is timed, as a user's second run would: Python's bytecode cache and
gpufabric's cache of its own data files (``GPUFABRIC_CACHE``) are filled, and
``PYTHONDONTWRITEBYTECODE`` is taken out of the environment so that the bytecode cache is
used as on an ordinary install.

Peers in the same run, where they are installed here: ``--peer-python PY`` times
llm-analysis (``pip install llm-analysis``, 0.2.2) under the interpreter ``PY`` on the same
two cases (Llama-2-7B on A100-SXM4-80GB: one GPU, batch 16, 128 tokens in and out; eight GPUs
at tensor parallel 8), and ``--calculon DIR`` times Calculon's single calculation from its
README (a checkout of github.com/calculon-ai/calculon in ``DIR``; it needs pandas and psutil
under ``PY``, or under this interpreter without ``--peer-python``). The last line gives
gpufabric's time over each peer's.

Run by hand (not a test; about a minute): ``.venv/bin/python benchmarks/bench_startup.py``
(``--runs N`` for another count; ``--base SRC`` also times the gpufabric under ``SRC``, a
``src`` folder of another checkout, in the same run).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

#: The built-in model and preset the two predictions use (the shorthand spec of serve is the
#: issue's example: an inline spec, built and checked like a file).
SERVE = ["serve", "llama2-7b", "gpu=A100-SXM4-80GB,gpus_per_node=1", "--tp", "1",
         "--requests", "16", "--isl", "128", "--osl", "128", "--concurrency", "16"]
TRAIN = ["train", "llama2-7b", "dgx-a100", "--tp", "8"]
#: The same serve prediction through the library, without the command line.
LIBRARY = ("from gpufabric.topology.build import load; "
           "from gpufabric.workloads.inference.serve import ServeConfig, serve; "
           "serve('llama2-7b', load('gpu=A100-SXM4-80GB,gpus_per_node=1'), ServeConfig("
           "tp=1, requests=16, isl=128, osl=128, concurrency=16))")
#: (label, goal in seconds or None) of each row, in the order printed.
GOALS = {"--version": 0.1, "import gpufabric": 0.1, "train": 0.2, "serve": 0.2}


def commands(python: str) -> list[tuple[str, list[str]]]:
    """(label, argv) of each row: the floor, then gpufabric's commands as a user types them
    (the ``gpufabric`` script beside the interpreter)."""
    script = Path(python).with_name("gpufabric")
    cli = [str(script)] if script.exists() else [
        python, "-c", "import sys; from gpufabric.cli import main; sys.argv[0] = 'gpufabric'; "
                      "main()"]
    return [("python -c pass", [python, "-c", "pass"]),
            ("python -c 'import numpy'", [python, "-c", "import numpy"]),
            ("import gpufabric", [python, "-c", "import gpufabric"]),
            ("--version", [*cli, "--version"]),
            ("show dgx-a100", [*cli, "show", "dgx-a100"]),
            ("train", [*cli, *TRAIN]),
            ("serve", [*cli, *SERVE]),
            ("serve, library", [python, "-c", LIBRARY])]


def peers(python: str, calculon: str | None) -> list[tuple[str, list[str]]]:
    """(label, argv) of each peer's row: llm-analysis's inference and training estimates of
    the two gpufabric cases under ``python``, and Calculon's README example (Megatron-1T on
    3,072 A100s: Calculon ships no Llama-2-7B) from the checkout ``calculon``."""
    rows = []
    if python:
        llm = [python, "-m", "llm_analysis.analysis"]
        same = ["--model_name", "NousResearch_Llama-2-7b-hf", "--gpu_name", "a100-sxm-80gb",
                "--log_level", "ERROR"]
        rows += [("llm-analysis infer", [*llm, "infer", *same, "--tp_size", "1",
                                         "--batch_size_per_gpu", "16", "--seq_len", "128",
                                         "--num_tokens_to_generate", "128"]),
                 ("llm-analysis train", [*llm, "train", *same, "--tp_size", "8",
                                         "--total_num_gpus", "8", "--seq_len", "4096",
                                         "--batch_size_per_gpu", "1"])]
    if calculon:
        root = Path(calculon).resolve()
        rows.append(("calculon llm", [
            "env", f"PYTHONPATH={root}", python or sys.executable,
            str(root / "bin" / "calculon"), "llm",
            str(root / "models" / "megatron-1T.json"),
            str(root / "examples" / "3072_t4_p64_d12_mbs4_full.json"),
            str(root / "systems" / "a100_80g.json"), "-"]))
    return rows


def _short(arg: str) -> str:
    """``arg`` as the last line shows it: a path by its file name (``PYTHONPATH=DIR`` as
    ``PYTHONPATH=NAME``)."""
    key, eq, value = arg.rpartition("=")
    return key + eq + Path(value).name if "/" in value else arg


#: gpufabric's row and the peer row it is set against in the last line.
VERSUS = [("serve", "llm-analysis infer"), ("train", "llm-analysis train"),
          ("train", "calculon llm")]


def wall_s(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Seconds one run of ``argv`` takes, from start to exit (output thrown away), and the CPU
    seconds (user + system) its process and threads used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # a blocking wait: ``wait(timeout=...)`` polls with sleeps of up to 50 ms, which would
    # add up to 50 ms to each run; the timer kills a run that hangs instead
    watchdog = threading.Timer(300, proc.kill)
    watchdog.start()
    try:
        code = proc.wait()
    finally:
        watchdog.cancel()
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if code:
        raise subprocess.CalledProcessError(code, argv)
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def measure(rows: list[tuple[str, list[str]]], env: dict[str, str], runs: int) -> dict:
    """Median (wall, CPU) seconds per label; the runs of the rows interleave, so that a change
    in the machine's load falls on every row alike."""
    for _, argv in rows:                  # fill the bytecode and data caches
        wall_s(argv, env)
    times: dict[str, list[tuple[float, float]]] = {label: [] for label, _ in rows}
    for _ in range(runs):
        for label, argv in rows:
            times[label].append(wall_s(argv, env))
    return {label: (statistics.median(t[0] for t in ts), statistics.median(t[1] for t in ts))
            for label, ts in times.items()}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="runs per command (median shown)")
    ap.add_argument("--base", default=None, help="also time the gpufabric of this src folder")
    ap.add_argument("--peer-python", default=None,
                    help="an interpreter with llm-analysis installed: time it too")
    ap.add_argument("--calculon", default=None, help="a Calculon checkout: time it too")
    args = ap.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.pop("PYTHONPATH", None)
    rows = commands(sys.executable)
    peer_rows = peers(args.peer_python, args.calculon)
    now = measure(rows + peer_rows, env, args.runs)
    base = None
    if args.base:
        base = measure(rows, {**env, "PYTHONPATH": str(Path(args.base).resolve())}, args.runs)
    floor, numpy = now["python -c pass"][0], now["python -c 'import numpy'"][0]
    print(f"# median of {args.runs} runs, each a whole process: wall seconds; x numpy: over "
          "'python -c \"import numpy\"'; CPU seconds (user + system, all threads)")
    head = f"{'command':<26} {'seconds':>8} {'x numpy':>8} {'goal':>7} {'CPU s':>6}"
    print(head + (f" {'base s':>8} {'speed-up':>8}" if base else ""))
    for label, _ in rows:
        goal, (wall, cpu) = GOALS.get(label), now[label]
        mark = "" if goal is None else (f"<{goal:g}" + (" ok" if wall < goal else " no"))
        line = f"{label:<26} {wall:>8.3f} {wall / numpy:>8.2f} {mark:>7} {cpu:>6.3f}"
        if base:
            line += f" {base[label][0]:>8.3f} {base[label][0] / wall:>7.1f}x"
        print(line)
    for label, _ in peer_rows:
        wall, cpu = now[label]
        print(f"{'peer: ' + label:<26} {wall:>8.3f} {wall / numpy:>8.2f} {'':>7} {cpu:>6.3f}")
    print(f"# the commands: gpufabric {' '.join(TRAIN)}; gpufabric {' '.join(SERVE)}; "
          f"'serve, library': python -c \"{LIBRARY}\"")
    print(f"# above the floor: serve {now['serve'][0] - numpy:.3f} s more than importing "
          f"numpy, --version {now['--version'][0] - floor:.3f} s more than starting python")
    if peer_rows:
        print("# the peers: " + "; ".join(
            f"{label}: {' '.join(_short(a) for a in cmd)}"
            for label, cmd in peer_rows))
        print("# gpufabric over the peer (below 1: gpufabric is faster): " + ", ".join(
            f"{ours} / {peer} {now[ours][0] / now[peer][0]:.2f}"
            for ours, peer in VERSUS if peer in now))


if __name__ == "__main__":
    main()

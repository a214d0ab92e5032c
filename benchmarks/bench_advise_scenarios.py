"""Design advisor: the time to answer each built-in scenario and buyer-shaped questions.

The buyer-shaped questions (``benchmarks/advise/*.yaml``) are serving questions over every GPU
kind of the catalog, on-premises and cloud: Llama 3 70B with long answers (1k tokens in, 8k
out) at the lowest cost, DeepSeek-V3 in fp8 by cost per million tokens, and Mixtral 8x7B at
three interactivity targets (TPOT 20, 40 and 80 ms) by output tokens per watt, each alone and
as one interactivity sweep (``--interactivity 12.5,25,50``: the whole ranking at each
target, the cheapest kind and the crossovers). Each scenario runs as ``gpufabric advise
SCENARIO --json --jobs N`` in its own process (nothing cached between them). Goal: each under
30 s on 2 cores.

Run by hand (not a test): ``.venv/bin/python benchmarks/bench_advise_scenarios.py [--jobs N]
[--only NAME ...]``
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUYERS = sorted(HERE.glob("advise/*.yaml"))


#: the buyer-shaped interactivity sweep: the Mixtral question at its three TPOT targets at once
SWEEP = ("buyer-mixtral-sweep", ["benchmarks/advise/buyer-mixtral-tpot20.yaml",
                                 "--interactivity", "12.5,25,50"])


def scenarios() -> list[tuple[str, list[str]]]:
    """(name, what ``advise`` takes) of each built-in scenario, then each buyer-shaped one and
    the sweep."""
    from gpufabric.advise import scenario
    return ([(n, [n]) for n in scenario.builtin_names()]
            + [(p.stem, [str(p.relative_to(HERE.parent))]) for p in BUYERS] + [SWEEP])


def run(what: list[str], jobs: int) -> tuple[float, float, dict]:
    """Wall seconds, CPU seconds (all processes) and the ``--json`` answer of one scenario."""
    exe = Path(sys.executable).with_name("gpufabric")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run([str(exe), "advise", *what, "--json", "--jobs", str(jobs)],
                         capture_output=True, text=True, cwd=HERE.parent,
                         env={**os.environ, "GPUFABRIC_PROGRESS": "off"})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if out.returncode not in (0, 2):
        raise SystemExit(f"{what}: exit {out.returncode}: {out.stderr.strip()[-300:]}")
    return wall, cpu, json.loads(out.stdout) if out.stdout.strip() else {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)),
                    help="worker processes per scenario (default: this machine's cores)")
    ap.add_argument("--only", nargs="*", default=None, help="scenario names to run")
    a = ap.parse_args()
    print(f"{'scenario':<24} {'wall s':>7} {'CPU s':>7} {'designs':>8} {'model runs':>10}  best")
    worst = 0.0
    for name, what in scenarios():
        if a.only and name not in a.only:
            continue
        wall, cpu, ans = run(what, a.jobs)
        worst = max(worst, wall)
        if "cheapest" in ans:               # a sweep: the cheapest kind at each target
            best = "; ".join(f"{c['interactivity']:g}: {c['kind']}" for c in ans["cheapest"])
        else:
            best = ans["designs"][0]["design"] if ans.get("designs") else \
                "none: " + str(ans.get("infeasible", {}).get("message", ""))[:60]
        counts = [f"{ans[k]:,}" if k in ans else "-"       # (a sweep ranks several times)
                  for k in ("candidates_generated", "evaluated_with_models")]
        print(f"{name:<24} {wall:7.1f} {cpu:7.1f} {counts[0]:>8} {counts[1]:>10}  {best}",
              flush=True)
    print(f"slowest {worst:.1f} s with --jobs {a.jobs} (goal: under 30 s each on 2 cores); "
          f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()

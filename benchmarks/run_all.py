"""Run every speed benchmark (benchmarks/bench_*.py) and write docs/benchmarks.md.

Each benchmark runs as a user runs it (its own interpreter, in its quick mode where it has
one), its standard output is kept as its figures, and the page gets one section per
benchmark: what it measures (the first paragraph of its docstring), the command, the output
and the machine it ran on. The model's accuracy figures are on docs/validation.md
(tools/validation_report.py); this page holds speed only.

Run by hand (not a test; several minutes on two cores)::

    .venv/bin/python benchmarks/run_all.py                 # all, writes docs/benchmarks.md
    .venv/bin/python benchmarks/run_all.py --only training,groups --out /tmp/b.md
"""

from __future__ import annotations

import argparse
import ast
import datetime
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent

#: the arguments of each benchmark's quick mode (a bounded run that still shows its figures);
#: a benchmark not named here runs with none
QUICK: dict[str, list[str]] = {
    "aic_side_by_side": ["--quick"],
    "inference": ["--quick"],
    "k8s": ["--requests", "1000", "--seconds", "15"],
    "k8s_chaos": ["--seconds", "15"],
    "scheduler": ["--traces", "default", "--policies", "fgd", "--runs", "2",
                  "--data-dir", "../shared/traces/openb"],
}
#: seconds after which a benchmark is stopped (its output so far is still shown)
TIMEOUT_S = 600
#: most lines of output kept per benchmark (the rest elided in the middle)
MAX_LINES = 60


def benchmarks() -> list[Path]:
    """The benchmark scripts, by name."""
    return sorted(HERE.glob("bench_*.py"))


def short_name(path: Path) -> str:
    """``bench_k8s_chaos.py`` -> ``k8s_chaos``."""
    return path.stem.removeprefix("bench_")


def what_it_measures(path: Path) -> str:
    """The first paragraph of the script's docstring, joined into one line."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return " ".join(doc.split("\n\n")[0].split())


def machine() -> str:
    """One line naming the machine and interpreter a run used."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ""
    if hasattr(os, "getloadavg"):
        load = f", load average {os.getloadavg()[0]:.1f}"
    return (f"{platform.machine()}, {cpus} CPU(s){' (' + model + ')' if model else ''}, "
            f"python {platform.python_version()}{load}")


def trim(lines: list[str], most: int = MAX_LINES) -> list[str]:
    """At most ``most`` lines: the first half and the last half, with a marker between.

    >>> trim([str(i) for i in range(5)], 4)
    ['0', '1', '... (1 lines left out)', '3', '4']
    """
    if len(lines) <= most:
        return lines
    half = most // 2
    return [*lines[:half], f"... ({len(lines) - 2 * half} lines left out)", *lines[-half:]]


def run(path: Path) -> dict:
    """Run one benchmark; its command, output lines, exit status, wall seconds, machine."""
    args = QUICK.get(short_name(path), [])
    shown = " ".join([".venv/bin/python", f"benchmarks/{path.name}", *args])
    t0 = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, str(path), *args], cwd=ROOT, capture_output=True,
                           text=True, timeout=TIMEOUT_S)
        out, rc = p.stdout, p.returncode
        if rc != 0:
            out += p.stderr[-2000:]
    except subprocess.TimeoutExpired as e:
        text = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        out, rc = text + f"\n(stopped after {TIMEOUT_S} s)", -1
    return {"name": short_name(path), "what": what_it_measures(path), "command": shown,
            "lines": out.rstrip().splitlines(), "rc": rc,
            "wall_s": time.perf_counter() - t0, "machine": machine()}


def render(results: list[dict], date: str) -> str:
    """The page: one section per benchmark."""
    out = ["# Benchmarks", "",
           "How fast the models answer, measured by the scripts in `benchmarks/`. This page is",
           "generated: `.venv/bin/python benchmarks/run_all.py` runs every benchmark (each in",
           "its quick mode where it has one) and writes it. Accuracy figures (predicted against",
           "measured) are on [Validation](validation.md). Times depend on the machine and its",
           "load; compare two versions by running them back to back on the same machine.", "",
           f"Generated on {date}.", ""]
    for r in results:
        status = "" if r["rc"] == 0 else f" (exit status {r['rc']})"
        out += [f"## {r['name']}", "", r["what"], "", "```console", f"$ {r['command']}",
                *trim(r["lines"]), "```", "",
                f"Machine: {r['machine']}; the run took {r['wall_s']:.0f} s{status}.", ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated names (e.g. training,groups)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    args = ap.parse_args(argv)
    only = {s for s in args.only.split(",") if s}
    results = []
    for path in benchmarks():
        if only and short_name(path) not in only:
            continue
        print(f"running {path.name} ...", file=sys.stderr, flush=True)
        r = run(path)
        print(f"  {r['wall_s']:.0f} s, exit {r['rc']}", file=sys.stderr, flush=True)
        results.append(r)
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    page = render(results, date)
    if only and Path(args.out).is_file():
        # --only: the page's other sections stay as they were, the named ones are replaced
        page = merge(Path(args.out).read_text(), page)
    Path(args.out).write_text(page)
    print(f"wrote {args.out}", file=sys.stderr)


def _sections(page: str) -> tuple[str, dict[str, str]]:
    """(the text before the first section, each ``## name`` section's text by name)."""
    head, *parts = re.split(r"(?m)^(?=## )", page)
    return head, {p.split("\n", 1)[0][3:].strip(): p.rstrip("\n") + "\n\n" for p in parts}


def merge(old: str, new: str) -> str:
    r"""``old``'s page with the sections of ``new`` in place of (or beside) its own, in name
    order.

    >>> merge("# B\n\n## a\nold a\n\n## b\nold b\n", "# B\n\n## b\nnew b\n")
    '# B\n\n## a\nold a\n\n## b\nnew b\n'
    """
    head, secs = _sections(old)
    secs.update(_sections(new)[1])
    return (head + "".join(secs[k] for k in sorted(secs))).rstrip("\n") + "\n"


if __name__ == "__main__":
    main()

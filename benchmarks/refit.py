"""Refit every fitted constant of the models on the entries its record names, by one rule.

    .venv/bin/python benchmarks/refit.py [-o docs/refit.md] [--files FILE ...]

A fitted constant (``gpufabric params``: kind ``fitted``) names in ``fitted_on`` the
measurement entries (ids or ``prefix-*`` patterns) it was fitted on. For each one this
command finds those entries in the measurements files (the public ones under
tests/data/calibration by default), validates them with ``gpufabric validate``'s validators
and searches the value that minimises the median absolute error over their points, every
other constant at its shipped value (the rule the records state: "the value that minimises
the median error over their points"). A dict-valued constant is refitted one key at a time.
The search is a grid over [value / 2, value x 2] (within the parameter's bounds, as
``--profile`` checks them), refined around the best point; a new value is kept only where it
lowers the median by more than :data:`GAIN` points of error. The points are those of the
named entries that the constant moves, by at least a tenth as much as the point it moves most
(:data:`PINS`): a KV-transfer rate is fitted on the transfer times, an engine's per-request
cost on the times to first token. A constant that moves none of its entries' points (one the
models read from elsewhere, such as a catalog entry) is reported as such.

It prints, per constant, old -> new with the fitted entries' median error before and after,
then validates every file with the shipped values and with all the refitted values at once
and prints the held-out headline (median, p90, max absolute error) of each before and after.
The shipped values are not changed: a move is reported, for a person to apply with its source.
``-o FILE`` writes the same report as Markdown (docs/refit.md is written by this command).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

import gpufabric.collectives.params  # noqa: F401  (records the collectives' constants)
import gpufabric.workloads.inference.pd  # noqa: F401  (records the workloads' constants)
import gpufabric.workloads.inference.serve  # noqa: F401
import gpufabric.workloads.training  # noqa: F401
from gpufabric import params as _params
from gpufabric import validation
from gpufabric.fileio import load_yaml
from gpufabric.measure import profile

ROOT = Path(__file__).resolve().parent.parent
FILES = sorted((ROOT / "tests" / "data" / "calibration").glob("*.yaml"))
#: least drop of the fitted entries' median absolute error (points of %) for a new value
GAIN = 0.1
#: coarse grid (multiples of the shipped value), then the fine one around the best
#: relative change of a value (up and down) when the points it moves are found; a point it
#: moves has an elasticity (relative change of the prediction per relative change of the
#: value) of at least PINS times the largest among the entries' points, and at least FLOOR:
#: a KV link share moves the transfer times, not the times to first token around them
STEP, PINS, FLOOR = 0.05, 0.1, 0.01
COARSE = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0, 1.05, 1.1, 1.25, 1.4, 1.6, 2.0)
FINE = (0.96, 0.98, 1.02, 1.04)


def _quiet(fn, *a, **kw):
    """Run a validator without its progress lines on stderr."""
    with contextlib.redirect_stderr(io.StringIO()):
        return fn(*a, **kw)


def validate_file(path: str) -> dict[str, Any]:
    """``gpufabric validate``'s result for one file (collectives, training or inference)."""
    from gpufabric.collectives.validate import validate as collectives
    from gpufabric.workloads.inference.validate import is_inference_file
    from gpufabric.workloads.inference.validate import validate as inference
    from gpufabric.workloads.validate import is_training_file
    from gpufabric.workloads.validate import validate as training
    if is_inference_file(path):
        return _quiet(inference, path)
    if is_training_file(load_yaml(path)):
        return _quiet(training, path).to_dict()
    return _quiet(collectives, path)


def entries(path: Path) -> tuple[list[dict], str]:
    """A file's entries and its file-level looked_at mark."""
    ents, mark = validation.entries_of(load_yaml(str(path)), str(path))
    return (ents if isinstance(ents, list) else []), mark


def subset(path: Path, ids: list[str], tmp: Path) -> str:
    """A copy of ``path`` holding only the entries ``ids`` (same directory layout kept by
    writing it beside nothing else: entries are self-contained)."""
    ents, mark = entries(path)
    keep = [e for e in ents if isinstance(e, dict) and str(e.get("id")) in ids]
    out = tmp / f"{path.stem}-{len(list(tmp.iterdir()))}.yaml"
    doc: Any = {"looked_at": mark, "entries": keep} if mark else keep
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(out)


def median_abs(res: dict[str, Any]) -> float | None:
    e = [abs(p["error_pct"]) for p in res["points"] if p.get("error_pct") is not None]
    return statistics.median(e) if e else None


def leaves(p: _params.Param) -> list[tuple[str, float]]:
    """(profile name, value) of each number of a record (a dict's keys joined by dots)."""
    out: list[tuple[str, float]] = []

    def walk(v: Any, name: str) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                walk(x, f"{name}.{k}")
        elif isinstance(v, int | float) and not isinstance(v, bool):
            out.append((name, float(v)))
    walk(p.value, p.name)
    return out


def _points(name: str, v: float, files: list[str]) -> dict[tuple, dict]:
    with profile.overrides({name: v}):
        return {(p["id"], p["point"], p["metric"]): p for f in files
                for p in validate_file(f)["points"] if p.get("error_pct") is not None}


def refit_leaf(name: str, old: float, files: list[str]) -> dict[str, Any]:
    """The value of ``name`` minimising the median absolute error over the points of
    ``files`` that it moves (see :data:`PINS`)."""
    lo, lo_in, hi = profile.bounds(name)

    def ok(v: float) -> bool:
        return (v > lo or (lo_in and v == lo)) and v <= hi

    base_pts = _points(name, old, files)
    el: dict[tuple, float] = {}
    for trial in ((old * (1 + STEP), old * (1 - STEP)) if old else (STEP,)):
        if not ok(trial):
            continue
        rel = math.log(trial / old) if old else trial
        for k, q in _points(name, trial, files).items():
            p = base_pts.get(k)
            if p and p["predicted"] and q["predicted"]:
                e = abs(math.log(q["predicted"] / p["predicted"]) / rel)
                el[k] = max(el.get(k, 0.0), e)
    top = max(el.values(), default=0.0)
    keys = [k for k, e in el.items() if e >= max(PINS * top, FLOOR)]
    metrics = sorted({k[2] for k in keys})
    if not keys:
        return {"name": name, "old": old, "new": old, "before": None, "after": None,
                "points": 0, "metrics": metrics, "elasticity": top}

    def score(v: float) -> float:
        pts = base_pts if v == old else _points(name, v, files)
        errs = [abs(pts[k]["error_pct"]) for k in keys if k in pts]
        return statistics.median(errs) if errs else float("inf")

    base = old if old else 1.0
    seen: dict[float, float] = {old: score(old)}
    for m in COARSE:
        v = float(f"{base * m:.3g}")
        if ok(v) and v not in seen:
            seen[v] = score(v)
    best = min(seen, key=lambda v: (seen[v], abs(v - old)))
    for m in FINE:
        v = float(f"{best * m:.3g}")
        if ok(v) and v not in seen:
            seen[v] = score(v)
    before = seen[old]
    best = min(seen, key=lambda v: (seen[v], abs(v - old)))
    new = best if before - seen[best] > GAIN else old
    return {"name": name, "old": old, "new": new, "before": before, "after": seen[new],
            "points": len(keys), "metrics": metrics, "elasticity": top}


def headline(files: list[Path], values: dict[str, float]) -> dict[str, dict]:
    out = {}
    with profile.overrides(values):
        for f in files:
            s = validate_file(str(f))["summary"]
            out[f.name] = {k: s.get(k) for k in ("median_abs_pct", "p90_abs_pct",
                                                 "max_abs_pct", "points")}
    return out


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f}%"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--output", help="write the report as Markdown to this file")
    ap.add_argument("--files", nargs="+", type=Path, default=FILES,
                    help="measurements files (default: tests/data/calibration/*.yaml)")
    ap.add_argument("--only", nargs="+", default=None, help="refit only these constants")
    args = ap.parse_args(argv)
    files = [f.resolve() for f in args.files]
    index: dict[str, Path] = {}
    for f in files:
        for e in entries(f)[0]:
            if isinstance(e, dict) and "id" in e:
                index.setdefault(str(e["id"]), f)
    fitted = [p for p in _params.REGISTRY.values() if p.fitted_on
              and (args.only is None or p.name in args.only)]
    lines: list[str] = []

    def say(s: str = "") -> None:
        print(s, flush=True)
        lines.append(s)

    def rel(f: Path) -> str:
        return str(f.relative_to(ROOT)) if f.is_relative_to(ROOT) else str(f)
    say("# Refit of the shipped constants")
    say()
    say("Written by `python benchmarks/refit.py -o docs/refit.md` over "
        + ", ".join(f"`{rel(f)}`" for f in files) + ". Rule: each fitted constant's value "
        "minimises the median absolute error over the points of the entries its record names "
        "(`fitted_on`), every other constant at its shipped value; a new value is kept only "
        f"where it lowers that median by more than {GAIN} points. Shipped values are not "
        "changed by this command.")
    say()
    say("Columns: `status` is `entries` (fitted on two or more entries) or `answer` (one "
        "entry, marked as its answer: `gpufabric params --check`); `points it moves` are the "
        "named entries' points whose prediction changes by at least a tenth of the largest "
        "change (and 1% of the constant's own), `elasticity` the largest relative change of a "
        "prediction per relative change of the constant (0: the constant moves none of its "
        "entries' points as the models read it now); the medians are over those points.")
    say()
    say("| constant | status | entries | file | points it moves (metric) | elasticity | old | "
        "new | median before | after |")
    say("|---|---|---|---|---|---|---|---|---|---|")
    moved: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        for p in fitted:
            ids = [i for i in index if _params.matches_fitted(i, p.fitted_on)]
            by_file: dict[Path, list[str]] = {}
            for i in ids:
                by_file.setdefault(index[i], []).append(i)
            subs = [subset(f, v, tmp) for f, v in by_file.items()]
            where = ", ".join(sorted({f.name for f in by_file})) or "none found"
            if not subs:
                say(f"| `{p.name}` | {p.status} | {len(ids)} | {where} | 0 | n/a | {p.value} | "
                    "(no entry found) | n/a | n/a |")
                continue
            for name, old in leaves(p):
                r = refit_leaf(name, old, subs)
                if r["new"] != old:
                    moved[name] = r["new"]
                say(f"| `{name}` | {p.status} | {len(ids)} | {where} | {r['points']} "
                    f"({', '.join(r['metrics']) or 'none moved'}) | {r['elasticity']:.2g} | "
                    f"{old:g} | "
                    f"{r['new']:g}{' (moves)' if r['new'] != old else ''} | "
                    f"{_pct(r['before'])} | {_pct(r['after'])} |")
    say()
    say(f"{len(moved)} of the fitted values move under the rule"
        + (": " + ", ".join(f"`{k}` -> {v:g}" for k, v in moved.items()) if moved else "")
        + ".")
    say()
    say("Held-out headline of each file (`gpufabric validate FILE`: median, p90, max absolute "
        "error over the held-out points) with the shipped values and with every refitted value "
        "at once:")
    say()
    say("| file | held-out points | shipped: median / p90 / max | refitted: median / p90 / max |")
    say("|---|---|---|---|")
    before = headline(files, {})
    after = headline(files, moved) if moved else before
    for f in files:
        b, a = before[f.name], after[f.name]
        say(f"| {f.name} | {b['points']} | {_pct(b['median_abs_pct'])} / "
            f"{_pct(b['p90_abs_pct'])} / {_pct(b['max_abs_pct'])} | "
            f"{_pct(a['median_abs_pct'])} / {_pct(a['p90_abs_pct'])} / "
            f"{_pct(a['max_abs_pct'])} |")
    if args.output:
        Path(args.output).write_text("\n".join(lines) + "\n")
        print(f"# wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

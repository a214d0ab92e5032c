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
import sys
import tempfile
from pathlib import Path

from gpufabric.crossval import GAIN, entries, leaves, refit_leaf, subset, validate_file
from gpufabric.measure import profile
from gpufabric.params import matches_fitted

ROOT = Path(__file__).resolve().parent.parent
FILES = sorted((ROOT / "tests" / "data" / "calibration").glob("*.yaml"))


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
    fitted = [p for p in profile.registry().values() if p.fitted_on
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
            ids = [i for i in index if matches_fitted(i, p.fitted_on)]
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

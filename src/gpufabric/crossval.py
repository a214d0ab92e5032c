"""Refitting the models' fitted constants, and leave-one-source-out cross-validation.

A fitted constant (:mod:`gpufabric.params`, kind ``fitted``) names in ``fitted_on`` the
measurement entries it was fitted on. :func:`refit_leaf` searches the value of one number of
such a constant that minimises the median absolute error over the points of some entries that
the constant moves (the rule every fitted record states); ``benchmarks/refit.py`` applies it to
every constant on the entries its record names.

:func:`cross_validate` answers how the models do on a source they have never seen. Each entry
of a measurements file names its ``source_id`` (the publication its figures come from: one
report, blog post, paper or issue thread; an entry without one is its own source). For every
source whose entries some constant was fitted on, each such constant is refitted by the same
rule on its other sources' entries only, and the left-out source's entries are predicted with
those refitted values, every other constant at its shipped value. Sources no constant was
fitted on are predicted with the shipped values, which no entry of theirs fixed. Where a
constant was fitted on the left-out source alone, nothing is left to refit it on: the points it
moves are counted apart as ``sole-source`` and stay out of the cross-validated figures.

The grid of the search is fixed by the shipped value (:data:`COARSE`, then :data:`FINE` around
the best point), so each value is evaluated once over all the constant's entries and each
left-out source picks its best value from the others' points.

Examples
--------
>>> source_of({"id": "run-a", "source_id": "paper-x"}), source_of({"id": "run-b"})
('paper-x', 'run-b')
>>> best_value({1.0: [5.0, 1.0], 2.0: [2.0, 2.0]}, 1.0)
2.0
"""

from __future__ import annotations

import contextlib
import io
import math
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from gpufabric import params as _params
from gpufabric import validation
from gpufabric.errors import InputError
from gpufabric.fileio import load_yaml

#: least drop of the fitted entries' median absolute error (points of %) for a new value
#: (refit only: a cross-validated value is the best of the grid, whatever its gain)
GAIN = 0.1
#: relative change of a value (up and down) when the points it moves are found; a point it
#: moves has an elasticity (relative change of the prediction per relative change of the
#: value) of at least PINS times the largest among the entries' points, and at least FLOOR:
#: a KV link share moves the transfer times, not the times to first token around them
STEP, PINS, FLOOR = 0.05, 0.1, 0.01
#: coarse grid (multiples of the shipped value), then the fine one around the best
COARSE = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0, 1.05, 1.1, 1.25, 1.4, 1.6, 2.0)
FINE = (0.96, 0.98, 1.02, 1.04)
#: the point status of a cross-validated prediction, and of one that cannot be
CROSS_VALIDATED, SOLE_SOURCE = "cross-validated", "sole-source"

Key = tuple[str, int, str]
Points = dict[Key, dict[str, Any]]


def _quiet(fn: Callable[..., Any], *a: Any, **kw: Any) -> Any:
    """Run a validator without its progress lines on stderr."""
    with contextlib.redirect_stderr(io.StringIO()):
        return fn(*a, **kw)


def kind_of(path: str) -> str:
    """``video``, ``inference``, ``training`` or ``collectives``: which validator reads
    ``path``."""
    from gpufabric.workloads.inference.validate import is_inference_file
    from gpufabric.workloads.validate import is_training_file
    from gpufabric.workloads.video_validate import is_video_file
    if is_video_file(path):
        return "video"
    if is_inference_file(path):
        return "inference"
    if is_training_file(load_yaml(path)):
        return "training"
    return "collectives"


def validate_file(path: str) -> dict[str, Any]:
    """``gpufabric validate``'s result for one file (collectives, training, inference or
    video)."""
    kind = kind_of(path)
    if kind == "video":
        from gpufabric.workloads.video_validate import validate as video
        return dict(_quiet(video, path))
    if kind == "inference":
        from gpufabric.workloads.inference.validate import validate as inference
        return dict(_quiet(inference, path))
    if kind == "training":
        from gpufabric.workloads.validate import validate as training
        return dict(_quiet(training, path).to_dict())
    from gpufabric.collectives.validate import validate as collectives
    return dict(_quiet(collectives, path))


def entries(path: str | Path) -> tuple[list[dict], str]:
    """A file's entries and its file-level looked_at mark."""
    ents, mark = validation.entries_of(load_yaml(str(path)), str(path))
    return [e for e in ents if isinstance(e, dict)] if isinstance(ents, list) else [], mark


def source_of(entry: dict[str, Any]) -> str:
    """The source an entry's figures come from: its ``source_id``, else its own id."""
    s = entry.get("source_id")
    return str(s) if isinstance(s, str) and s.strip() else str(entry.get("id"))


def subset(path: str | Path, ids: Iterable[str], tmp: Path) -> str:
    """A copy of ``path`` holding only the entries ``ids`` (entries are self-contained), with
    the file's looked_at mark; written in ``tmp``."""
    import yaml
    want = set(ids)
    ents, mark = entries(path)
    keep = [e for e in ents if str(e.get("id")) in want]
    out = tmp / f"{Path(path).stem}-{len(list(tmp.iterdir()))}.yaml"
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


def points(values: dict[str, float], files: list[str]) -> Points:
    """Every compared point of ``files`` with the constants ``values`` set (profile names; a
    new :class:`~gpufabric.params.Params` used for the call)."""
    with _params.use(_params.current().replace(values)):
        return {(p["id"], p["point"], validation.measured_as(p)): p for f in files
                for p in validate_file(f)["points"] if p.get("error_pct") is not None}


class Grid:
    """The points of some files at each value of one constant, each value evaluated once."""

    def __init__(self, name: str, old: float, files: list[str]):
        self.name, self.old, self.files = name, old, files
        lo, lo_in, hi = _params.bounds(name)
        self._ok = lambda v: (v > lo or (lo_in and v == lo)) and v <= hi
        self.seen: dict[float, Points] = {}

    def ok(self, v: float) -> bool:
        return bool(self._ok(v))

    def at(self, v: float) -> Points:
        if v not in self.seen:
            self.seen[v] = points({self.name: v}, self.files)
        return self.seen[v]

    def moved(self) -> tuple[list[Key], float]:
        """The points the constant moves (see :data:`PINS`) and the largest elasticity."""
        old, base = self.old, self.at(self.old)
        el: dict[Key, float] = {}
        for trial in ((old * (1 + STEP), old * (1 - STEP)) if old else (STEP,)):
            if not self.ok(trial):
                continue
            rel = math.log(trial / old) if old else trial
            for k, q in points({self.name: trial}, self.files).items():
                p = base.get(k)
                if p and p["predicted"] and q["predicted"]:
                    e = abs(math.log(q["predicted"] / p["predicted"]) / rel)
                    el[k] = max(el.get(k, 0.0), e)
        top = max(el.values(), default=0.0)
        return [k for k, e in el.items() if e >= max(PINS * top, FLOOR)], top

    def errors(self, v: float, keys: list[Key]) -> list[float]:
        pts = self.at(v)
        return [abs(pts[k]["error_pct"]) for k in keys if k in pts]

    def search(self, keys: list[Key]) -> dict[float, float]:
        """Median absolute error over ``keys`` at each value of the grid (coarse, then fine
        around the best)."""
        base = self.old if self.old else 1.0

        def score(v: float) -> float:
            e = self.errors(v, keys)
            return statistics.median(e) if e else math.inf
        scores = {self.old: score(self.old)}
        for m in COARSE:
            v = float(f"{base * m:.3g}")
            if self.ok(v) and v not in scores:
                scores[v] = score(v)
        best = min(scores, key=lambda v: (scores[v], abs(v - self.old)))
        for m in FINE:
            v = float(f"{best * m:.3g}")
            if self.ok(v) and v not in scores:
                scores[v] = score(v)
        return scores


def best_value(scores: dict[float, list[float]] | dict[float, float], old: float) -> float:
    """The value of the least median error (lists of errors are reduced to their median),
    the nearest to ``old`` among equals."""
    med = {v: (statistics.median(s) if s else math.inf) if isinstance(s, list) else s
           for v, s in scores.items()}
    return min(med, key=lambda v: (med[v], abs(v - old)))


def refit_leaf(name: str, old: float, files: list[str]) -> dict[str, Any]:
    """The value of ``name`` minimising the median absolute error over the points of
    ``files`` that it moves (see :data:`PINS`); a new value is kept only where it lowers that
    median by more than :data:`GAIN` points."""
    grid = Grid(name, old, files)
    keys, top = grid.moved()
    metrics = sorted({k[2] for k in keys})
    if not keys:
        return {"name": name, "old": old, "new": old, "before": None, "after": None,
                "points": 0, "metrics": metrics, "elasticity": top}
    scores = grid.search(keys)
    before = scores[old]
    best = best_value(scores, old)
    new = best if before - scores[best] > GAIN else old
    return {"name": name, "old": old, "new": new, "before": before, "after": scores[new],
            "points": len(keys), "metrics": metrics, "elasticity": top}


class Corpus:
    """The entries of some measurements files: where each lives and its source."""

    def __init__(self, files: list[str]):
        self.files = files
        self.file_of: dict[str, str] = {}
        self.source: dict[str, str] = {}
        self.kind = {f: kind_of(f) for f in files}
        for f in files:
            for e in entries(f)[0]:
                i = str(e.get("id"))
                if i in self.file_of:
                    raise InputError(f"entry id {i!r} is also in {self.file_of[i]}; "
                                     "cross-validation needs ids unique across the files",
                                     file=f, field="id")
                self.file_of[i], self.source[i] = f, source_of(e)

    def subsets(self, ids: Iterable[str], tmp: Path) -> list[str]:
        by_file: dict[str, list[str]] = {}
        for i in ids:
            by_file.setdefault(self.file_of[i], []).append(i)
        return [subset(f, v, tmp) for f, v in by_file.items()]


def _say(log: Callable[[str], None] | None, s: str) -> None:
    if log is not None:
        log(s)


def cross_validate(files: list[str], log: Callable[[str], None] | None = None
                   ) -> dict[str, Any]:
    """Leave-one-source-out cross-validation over ``files`` (see the module's doc).

    Returns ``{files, points, summary, by_kind, sources, refits, sole_source}``: every point
    with its ``source_id`` and ``cv`` (``cross-validated`` or ``sole-source``) beside its
    status; the summary (:func:`gpufabric.validation.stats`, with ``by_metric``) over the
    cross-validated points, and per model kind; per source its entries, points, median and
    the values its constants were refitted to; per refitted constant its value with each
    source left out (None where only that source fixed it)."""
    corpus = Corpus(files)
    fitted = [p for p in _params.load_registry().values() if p.fitted_on]
    #: source -> {leaf name: value refitted without it (None: fitted on it alone)}
    without: dict[str, dict[str, float | None]] = {}
    refits: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        for p in fitted:
            ids = [i for i in corpus.file_of if _params.matches_fitted(i, p.fitted_on)]
            if not ids:
                continue
            srcs = sorted({corpus.source[i] for i in ids})
            subs = corpus.subsets(ids, tmp)
            for name, old in leaves(p):
                _say(log, f"refit {name} without each of {len(srcs)} source(s)")
                grid = Grid(name, old, subs)
                keys, _ = grid.moved()
                per: dict[str, float | None] = {}
                for s in srcs:
                    rest = [k for k in keys if corpus.source[k[0]] != s]
                    # a value that moves none of its entries' points was fixed by none
                    per[s] = old if not keys else \
                        best_value(grid.search(rest), old) if rest else None
                    without.setdefault(s, {})[name] = per[s]
                refits.append({"name": name, "old": old, "without": per,
                               "points": len(keys)})
        pts, sole_pts = _predict(corpus, without, tmp, log)
    cv = [q for q in pts if q["cv"] == CROSS_VALIDATED]
    return {"files": files, "points": pts, "summary": _summary(cv),
            "by_kind": {k: _summary([q for q in cv if q["kind"] == k])
                        for k in sorted(set(corpus.kind.values()))},
            "by_status": {st: validation.stats(q["error_pct"] for q in cv if q["status"] == st)
                          for st in validation.STATUSES},
            "sources": _per_source(corpus, pts, without),
            "refits": refits, "sole_source": sole_pts}


def _predict(corpus: Corpus, without: dict[str, dict[str, float | None]], tmp: Path,
             log: Callable[[str], None] | None) -> tuple[list[dict[str, Any]], int]:
    """Every point of the corpus predicted without its own source's entries in any fit."""
    out: list[dict[str, Any]] = []
    shipped_ids = [i for i, s in corpus.source.items() if s not in without]
    _say(log, f"predict {len(shipped_ids)} entries no constant was fitted on")
    for f in corpus.subsets(shipped_ids, tmp):
        out += _tag(points({}, [f]).values(), corpus, CROSS_VALIDATED)
    sole = 0
    for s, vals in sorted(without.items()):
        ids = [i for i, x in corpus.source.items() if x == s]
        subs = corpus.subsets(ids, tmp)
        refit = {n: v for n, v in vals.items() if v is not None}
        _say(log, f"predict source {s} ({len(ids)} entries) with {len(refit)} value(s) "
                  "refitted without it")
        base = points(refit, subs)
        lone: set[Key] = set()
        for n, v in vals.items():
            if v is None:
                old = next(o for name, o in leaves(_params.REGISTRY[_base(n)]) if name == n)
                lone |= _moved_by(n, old, refit, subs, base)
        sole += len(lone)
        out += [q | {"cv": SOLE_SOURCE if k in lone else CROSS_VALIDATED,
                     "source_id": s, "kind": corpus.kind[corpus.file_of[k[0]]]}
                for k, q in base.items()]
    return out, sole


def _moved_by(name: str, old: float, refit: dict[str, float], subs: list[str],
              base: Points) -> set[Key]:
    """The points of ``base`` that constant ``name`` moves by at least :data:`FLOOR`."""
    trial = old * (1 + STEP) if old else STEP
    rel = math.log(trial / old) if old else trial
    moved = set()
    for k, q in points(refit | {name: trial}, subs).items():
        p = base.get(k)
        if p and p["predicted"] and q["predicted"] and \
                abs(math.log(q["predicted"] / p["predicted"]) / rel) >= FLOOR:
            moved.add(k)
    return moved


def _base(name: str) -> str:
    return _params.split(name)[0]


def _tag(pts: Iterable[dict[str, Any]], corpus: Corpus, cv: str) -> list[dict[str, Any]]:
    return [q | {"cv": cv, "source_id": corpus.source[q["id"]],
                 "kind": corpus.kind[corpus.file_of[q["id"]]]} for q in pts]


def _summary(pts: list[dict[str, Any]]) -> dict[str, Any]:
    """:func:`gpufabric.validation.stats` of some points with ``by_metric``, and the
    collectives' large / small split where collective points are among them."""
    out = validation.stats(q["error_pct"] for q in pts)
    if any(q["kind"] == "collectives" for q in pts):
        from gpufabric.collectives.validate import split
        out |= split(pts)
    out["by_metric"] = {m: validation.stats(q["error_pct"] for q in pts
                                            if validation.measured_as(q) == m)
                        for m in sorted({validation.measured_as(q) for q in pts})}
    return out


def _per_source(corpus: Corpus, pts: list[dict[str, Any]],
                without: dict[str, dict[str, float | None]]) -> list[dict[str, Any]]:
    out = []
    for s in sorted(set(corpus.source.values())):
        mine = [q for q in pts if q["source_id"] == s]
        cv = [q for q in mine if q["cv"] == CROSS_VALIDATED]
        out.append({"source_id": s,
                    "entries": sum(1 for x in corpus.source.values() if x == s),
                    "kind": sorted({q["kind"] for q in mine}),
                    "points": len(cv), "sole_source_points": len(mine) - len(cv),
                    "median_abs_pct": validation.stats(q["error_pct"] for q in cv)
                    ["median_abs_pct"],
                    "refitted": without.get(s, {})})
    return out


def _stderr(s: str) -> None:
    print(f"# cv: {s}", file=sys.stderr, flush=True)


__all__ = ["refit_leaf", "cross_validate", "source_of", "leaves", "validate_file", "entries",
           "subset", "points", "Grid", "best_value", "CROSS_VALIDATED", "SOLE_SOURCE"]

"""Named serving workloads: the input / output length statistics of benchmark datasets.

The table lives in ``workloads/data/datasets.yaml``, every number with its source. A dataset
is found by name or alias after normalising case, spacing and punctuation
(:func:`normalise`); free text that names one ("MLPerf llama2-70b: OpenOrca") is matched by
:func:`match`. :func:`sample` draws ``n`` (isl, osl) pairs, seeded and reproducible, from the
published distribution: the quantiles of the whole sample where they are known (inverse CDF,
linear between the points), the mean where only the mean is published, and the synthetic
shapes of trtllm-bench and vLLM's random dataset around the run's own lengths.

Examples
--------
>>> get("ShareGPT_V3_unfiltered_cleaned_split").name
'sharegpt-v3'
>>> match("MLPerf llama2-70b: OpenOrca").name, match("Azure conversation trace").name
('mlperf-llama2-70b-openorca', 'azure-conv-2023')
>>> isl, osl = sample("azure-code-2023", 4, seed=1)
>>> isl.tolist() == sample("azure-code-2023", 4, seed=1)[0].tolist()
True
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import cache, lru_cache
from typing import Any

import numpy as np

from gpufabric.errors import InputError, unknown_name
from gpufabric.fileio import load_data

WHERE = "workloads/data/datasets.yaml"
#: Kinds of synthetic shape: normal (stdev = spread x length), range (uniform in
#: length x [1 - spread, 1 + spread]), fixed.
SYNTHETIC = ("fixed", "normal", "range")


def normalise(text: str) -> str:
    """Lower case, every run of spaces and punctuation one space.

    >>> normalise("MLPerf  llama2-70b: OpenOrca"), normalise("CNN/DailyMail")
    ('mlperf llama2 70b openorca', 'cnn dailymail')
    """
    return " ".join(re.findall(r"[a-z0-9]+(?:\.[0-9]+)?", str(text).lower()))


@dataclass(frozen=True)
class Lengths:
    """One side (input or output) of a dataset: published statistics and how to draw it."""

    mean: float | None = None
    median: float | None = None
    p90: float | None = None
    p99: float | None = None
    min: float | None = None
    max: float | None = None
    quantiles: tuple[float, ...] = ()
    fixed: bool = False          # only a mean (or a median) is published: draw it
    run: bool = False            # a synthetic shape centred on the run's own length
    unknown: str = ""            # why this side cannot be drawn
    source: str = ""

    @property
    def point(self) -> float | None:
        """The one value drawn when only it is published (the mean, else the median)."""
        return self.mean if self.mean is not None else self.median


@dataclass(frozen=True)
class Dataset:
    name: str
    title: str
    isl: Lengths
    osl: Lengths
    aliases: tuple[str, ...] = ()
    tokenizer: str = ""
    fitted_on: str = ""
    max_context: int | None = None
    synthetic: str | None = None
    spread_default: float = 0.0
    notes: str = ""
    at: tuple[float, ...] = field(default=(), repr=False)

    @property
    def missing(self) -> str:
        """Why the dataset cannot be sampled ("" when it can)."""
        why = [f"{side}: {ls.unknown}" for side, ls in (("input", self.isl),
                                                          ("output", self.osl)) if ls.unknown]
        return "; ".join(why)

    def summary(self) -> dict[str, Any]:
        """Plain data for ``gpufabric datasets --json``."""
        def side(ls: Lengths) -> dict[str, Any]:
            return {"mean": ls.mean, "median": ls.median, "p90": ls.p90, "p99": ls.p99,
                    "min": ls.min, "max": ls.max,
                    "distribution": ("run" if ls.run else "quantiles" if ls.quantiles
                                     else "fixed" if ls.fixed else "unknown"),
                    "unknown": ls.unknown or None, "source": ls.source}
        return {"name": self.name, "title": self.title, "aliases": list(self.aliases),
                "tokenizer": self.tokenizer, "fitted_on": self.fitted_on,
                "max_context": self.max_context, "synthetic": self.synthetic,
                "isl": side(self.isl), "osl": side(self.osl), "notes": self.notes or None,
                "samplable": not self.missing}


_LENGTH_KEYS = {"mean", "median", "p90", "p99", "min", "max", "quantiles", "fixed", "run",
                "unknown", "source"}
_KEYS = {"name", "title", "aliases", "tokenizer", "fitted_on", "max_context", "isl", "osl",
         "synthetic", "spread_default", "notes"}


def _lengths(raw: Any, where: str, at: tuple[float, ...]) -> Lengths:
    if not isinstance(raw, dict):
        raise InputError("expected a mapping (mean, median, ..., source)", file=WHERE,
                         field=where)
    bad = set(raw) - _LENGTH_KEYS
    if bad:
        raise InputError(f"unknown key(s) {sorted(bad)}; allowed: {sorted(_LENGTH_KEYS)}",
                         file=WHERE, field=where)
    if not raw.get("source"):
        raise InputError("missing; every length carries its source", file=WHERE,
                         field=f"{where}.source")
    vals: dict[str, Any] = {}
    for k in ("mean", "median", "p90", "p99", "min", "max"):
        v = raw.get(k)
        if v is not None:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise InputError(f"got {v!r}; expected a number of tokens", file=WHERE,
                                 field=f"{where}.{k}")
            vals[k] = float(v)
    q = tuple(float(x) for x in raw.get("quantiles") or ())
    if q and (len(q) != len(at) or any(b < a for a, b in zip(q, q[1:], strict=False))):
        raise InputError(f"expected {len(at)} non-decreasing values (one per percent in `at`)",
                         file=WHERE, field=f"{where}.quantiles")
    ls = Lengths(**vals, quantiles=q, fixed=bool(raw.get("fixed")), run=bool(raw.get("run")),
                 unknown=str(raw.get("unknown") or ""), source=str(raw["source"]))
    if not (ls.quantiles or ls.run or ls.unknown or (ls.fixed and ls.point is not None)):
        raise InputError("give quantiles, fixed with a mean or median, run, or unknown "
                         "with the reason", file=WHERE, field=where)
    return ls


@cache
def _table() -> dict[str, Dataset]:
    data = load_data("gpufabric.workloads", "data", "datasets.yaml")
    at = tuple(float(x) for x in data["at"])
    out: dict[str, Dataset] = {}
    for i, raw in enumerate(data["datasets"]):
        where = f"datasets[{i}]"
        bad = set(raw) - _KEYS
        if bad:
            raise InputError(f"unknown key(s) {sorted(bad)}; allowed: {sorted(_KEYS)}",
                             file=WHERE, field=where)
        syn = raw.get("synthetic")
        if syn is not None and syn not in SYNTHETIC:
            raise InputError(f"got {syn!r}; allowed: {', '.join(SYNTHETIC)}", file=WHERE,
                             field=f"{where}.synthetic")
        ds = Dataset(name=str(raw["name"]), title=str(raw.get("title", "")),
                     isl=_lengths(raw.get("isl"), f"{where}.isl", at),
                     osl=_lengths(raw.get("osl"), f"{where}.osl", at),
                     aliases=tuple(normalise(a) for a in raw.get("aliases") or ()),
                     tokenizer=str(raw.get("tokenizer", "")),
                     fitted_on=str(raw.get("fitted_on", "")),
                     max_context=raw.get("max_context"), synthetic=syn,
                     spread_default=float(raw.get("spread_default") or 0.0),
                     notes=str(raw.get("notes") or ""), at=at)
        out[ds.name] = ds
    return out


def names() -> list[str]:
    return list(_table())


def datasets() -> list[Dataset]:
    """Every dataset, in file order."""
    return list(_table().values())


def _keys() -> dict[str, str]:
    """Normalised name or alias -> dataset name (an alias shared by two is an error)."""
    out: dict[str, str] = {}
    for ds in _table().values():
        for k in (normalise(ds.name), *ds.aliases):
            if out.get(k, ds.name) != ds.name:
                raise InputError(f"alias {k!r} names both {out[k]} and {ds.name}", file=WHERE)
            out[k] = ds.name
    return out


def get(name: str) -> Dataset:
    """A dataset by its name or an alias (normalised); unknown: InputError listing the names.

    >>> get("vllm random").synthetic
    'range'
    """
    hit = _keys().get(normalise(name))
    if hit is None:
        raise unknown_name("dataset", name, names(), field="--dataset")
    return _table()[hit]


def match(text: str) -> Dataset | None:
    """The dataset free text names: the one whose name or alias has the most words, all of
    them among the text's words; None when none does.

    >>> match("CNN/DailyMail summarisation").name, match("MLPerf OpenOrca subset").name
    ('cnn-dailymail', 'mlperf-llama2-70b-openorca')
    >>> match("a private chat log") is None
    True
    """
    words = set(normalise(text).split())
    best: tuple[int, str] | None = None
    for key, name in _keys().items():
        kw = key.split()
        if kw and set(kw) <= words and (best is None or len(kw) > best[0]):
            best = (len(kw), name)
    return _table()[best[1]] if best else None


def _draw(ds: Dataset, ls: Lengths, n: int, rng: np.random.Generator, centre: int,
          spread: float) -> np.ndarray:
    if ls.run:
        if ds.synthetic == "normal":
            x = rng.normal(centre, spread * centre, n)
        elif ds.synthetic == "range":
            lo, hi = math.floor(centre * (1 - spread)), math.ceil(centre * (1 + spread))
            x = rng.integers(lo, hi + 1, n).astype(float)
        else:
            x = np.full(n, float(centre))
    elif ls.quantiles:
        # stratified: one draw in each of n equal slices of the distribution, in random
        # order, so that a stream of a few hundred requests has the dataset's mean and spread
        u = (rng.permutation(n) + rng.random(n)) / n
        x = np.interp(u * 100.0, ds.at, ls.quantiles)
    else:
        x = np.full(n, float(ls.point or 1.0))
    if ls.max is not None:
        x = np.minimum(x, ls.max)
    return np.maximum(np.rint(x), 1).astype(np.int64)


def sample(name: str | Dataset, n: int, seed: int = 0, isl: int = 1024, osl: int = 256,
           spread: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``n`` (input, output) lengths drawn from dataset ``name``, reproducible for a seed.

    The two sides are drawn independently, each stratified over its distribution (one draw
    in each of ``n`` equal slices, in random order); where the dataset has a
    ``max_context`` the output is cut so that input + output fits it. Synthetic shapes
    centre on ``isl`` / ``osl`` with ``spread`` (default: the dataset's). A dataset without
    published lengths raises :class:`InputError` saying which are missing.

    >>> i, o = sample("vllm-random", 1000, isl=1000, osl=100, spread=0.5)
    >>> int(i.min()) >= 500 and int(i.max()) <= 1500, int(o.max()) <= 150
    (True, True)
    """
    ds = name if isinstance(name, Dataset) else get(name)
    if ds.missing:
        raise InputError(f"dataset {ds.name} cannot be sampled: {ds.missing}",
                         field="--dataset")
    s = ds.spread_default if spread is None else float(spread)
    if not (math.isfinite(s) and 0.0 <= s < 1.0):
        raise InputError(f"got {spread!r}; expected a number from 0 to below 1",
                         field="--dataset-spread")
    rng = np.random.default_rng(seed)
    i = _draw(ds, ds.isl, n, rng, isl, s)
    o = _draw(ds, ds.osl, n, rng, osl, s)
    if ds.max_context:
        i = np.minimum(i, ds.max_context - 1)
        o = np.maximum(np.minimum(o, ds.max_context - i), 1)
    return i, o


@lru_cache(maxsize=256)
def mean_lengths(ds: Dataset, isl: int = 1024, osl: int = 256) -> tuple[float, float]:
    """The mean input and output lengths a run on ``ds`` has (published, else of a large
    seeded sample); kept per dataset and lengths (a search asks for them per design)."""
    i, o = sample(ds, 20000, seed=0, isl=isl, osl=osl)
    return float(i.mean()), float(o.mean())


__all__ = ["Dataset", "Lengths", "datasets", "get", "match", "names", "normalise", "sample",
           "mean_lengths"]

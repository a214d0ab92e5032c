"""Published comparisons as a check of the advisor: ``gpufabric advise --check FILE``.

A comparisons file (the built-in one is ``advise/data/comparisons.yaml``) lists questions that
a public source answers: one system against another for a workload, with the published figure
of each (or their ratio) and the source. Each question is a scenario (the advisor's schema,
:mod:`gpufabric.advise.scenario`) and two fixed designs; :func:`check` evaluates both designs
the way the ranking evaluates a candidate (:func:`gpufabric.advise.core.evaluate`: the
serving capacity within the scenario's SLO, or ``train --search``'s best layout; priced by
:func:`gpufabric.advise.core.price`), takes the comparison's metric of each and their ratio.

A comparison **agrees** when the predicted and the published answers name the same winner
(a ratio within ``TIE`` of 1 is a tie, and a tie is a winner of its own) and the predicted
ratio is within ``AGREE_FACTOR`` of the published one. Nothing here is fitted: a comparison
that disagrees is a finding about the model, not a constant to tune. A comparison names the
calibration entries that hold its figures; where a constant of the models was fitted on one of
them (:func:`fitted_on`), it is in-sample and counted apart from the held-out ones.

Examples
--------
>>> winner(1.30, higher_is_better=True), winner(1.02, higher_is_better=True)
('a', 'tie')
>>> winner(0.5, higher_is_better=False)
'a'
>>> agrees(1.35, 1.20, higher_is_better=True), agrees(1.35, 0.9, higher_is_better=True)
(True, False)
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Any

from gpufabric import sweep
from gpufabric.advise import core
from gpufabric.advise import scenario as S
from gpufabric.advise.prices import Prices
from gpufabric.errors import InputError, check_range
from gpufabric.fileio import load_yaml, package_dir, parse_yaml

#: A ratio within this fraction of 1 names no winner (a tie).
TIE = 0.05
#: A predicted ratio within this factor of the published one (either way) agrees.
AGREE_FACTOR = 1.5
#: The name that picks the built-in comparisons file.
BUILTIN = "builtin"
#: What a comparison may measure: name -> (what it is, higher is better).
METRICS = {
    "tokens_per_s_per_gpu": ("output (serving) or trained (training) tokens/s per GPU", True),
    "tokens_per_s": ("output or trained tokens/s of the whole design", True),
    "usd_per_gpu_hour": ("all-in $ per GPU-hour (on-premises TCO, or the cloud rate)", False),
    "usd_per_mtok": ("$ per million output tokens at serving capacity", False),
}
ENTRY_KEYS = ("id", "question", "source", "url", "date", "metric", "scenario", "designs",
              "published", "calibration", "notes")
PUBLISHED_KEYS = ("a", "b", "ratio")
DESIGN_KEYS = ("system", "instance", "precision", "engine")
#: The most comparisons a file may hold (each runs the models on two designs).
MAX_COMPARISONS = 500


@dataclass(frozen=True)
class Design:
    """One side of a comparison: an on-premises spec or a cloud instance of the price table,
    at the scenario's precision or its own."""

    system: str                  # on-premises: a spec string ("" for a cloud instance)
    instance: str = ""
    precision: str = ""          # this side's precision ("": the scenario's)
    engine: str = ""             # this side's serving engine profile ("": the scenario's)

    def scenario(self, sc: S.Scenario) -> S.Scenario:
        """The scenario as this side runs it (its own precision and engine where it names
        them)."""
        serve = sc.serve
        if serve is not None:
            serve = replace(serve, precision=self.precision or serve.precision,
                            engine=self.engine or serve.engine)
        train = sc.train
        if train is not None and self.precision:
            train = replace(train, precision=self.precision)
        return replace(sc, serve=serve, train=train)


@dataclass(frozen=True)
class Comparison:
    id: str
    question: str
    source: str
    url: str
    date: str
    metric: str
    scenario: S.Scenario
    a: Design
    b: Design
    published_ratio: float
    published: tuple[float, float] | None = None
    notes: str = ""
    #: ids of the calibration entries (tests/data/calibration) that hold the same figures
    calibration: tuple[str, ...] = ()


@dataclass
class Row:
    """One comparison's verdict."""

    id: str
    question: str
    metric: str
    published_ratio: float
    predicted_ratio: float | None
    published_winner: str
    predicted_winner: str | None
    same_winner: bool
    agree: bool
    predicted: dict[str, float | None] = field(default_factory=dict)
    why: str = ""                # a design the model cannot evaluate, and why
    #: the fitted constants whose fit used this comparison's figures (empty: held out)
    fitted: list[str] = field(default_factory=list)
    source: str = ""
    url: str = ""
    date: str = ""
    elapsed_s: float = 0.0


def winner(ratio: float, *, higher_is_better: bool) -> str:
    """'a', 'b' or 'tie' for a ratio a / b of a metric."""
    if abs(ratio - 1.0) <= TIE:
        return "tie"
    return "a" if (ratio > 1.0) == higher_is_better else "b"


def agrees(predicted: float, published: float, *, higher_is_better: bool) -> bool:
    """The same winner and a predicted ratio within ``AGREE_FACTOR`` of the published one."""
    return winner(predicted, higher_is_better=higher_is_better) == winner(
        published, higher_is_better=higher_is_better) and \
        abs(math.log(predicted / published)) <= math.log(AGREE_FACTOR) + 1e-12


# --------------------------------------------------------------------------------------------
# the file
# --------------------------------------------------------------------------------------------
def builtin_text() -> str:
    return (package_dir("gpufabric.advise") / "data" / "comparisons.yaml").read_text()


def file_name(what: str) -> str:
    """The name errors give a comparisons file (the built-in one's, or the path given)."""
    return "comparisons (built-in)" if what == BUILTIN else what


def load(what: str) -> list[Comparison]:
    """The comparisons of a file, or of the built-in file (``builtin``); every problem is
    one :class:`InputError` naming the file and the field."""
    if what == BUILTIN:
        data = parse_yaml(builtin_text(), file_name(what))
    else:
        data = load_yaml(what, what="a comparisons YAML file")
    return parse(data, file_name(what))


def parse(data: Any, file: str) -> list[Comparison]:
    """Comparisons from parsed YAML (``comparisons:`` a list of entries)."""
    if not isinstance(data, dict) or set(data) != {"comparisons"}:
        raise InputError("expected a mapping with one key, comparisons (a list)", file=file)
    items = data["comparisons"]
    if not isinstance(items, list) or not items:
        raise InputError("expected a non-empty list of comparisons", file=file,
                         field="comparisons")
    if len(items) > MAX_COMPARISONS:
        raise InputError(f"{len(items)} comparisons; allowed: at most {MAX_COMPARISONS}",
                         file=file, field="comparisons")
    out = [_entry(e, file, f"comparisons[{i}]") for i, e in enumerate(items)]
    seen: set[str] = set()
    for i, c in enumerate(out):
        if c.id in seen:
            raise InputError(f"id {c.id!r} given twice; ids must be unique", file=file,
                             field=f"comparisons[{i}].id")
        seen.add(c.id)
    return out


def _text(e: dict[str, Any], key: str, file: str, where: str, required: bool = True) -> str:
    v = e.get(key)
    if v is None and not required:
        return ""
    if not isinstance(v, str) or not v.strip():
        raise InputError(f"expected a non-empty text, got {v!r}", file=file,
                         field=f"{where}.{key}")
    return v.strip()


def _entry(e: Any, file: str, where: str) -> Comparison:
    if not isinstance(e, dict):
        raise InputError(f"expected a mapping of {', '.join(ENTRY_KEYS)}", file=file,
                         field=where)
    for k in e:
        if k not in ENTRY_KEYS:
            raise InputError(f"unknown key {k!r}; allowed: {', '.join(ENTRY_KEYS)}", file=file,
                             field=f"{where}.{k}")
    metric = e.get("metric")
    if metric not in METRICS:
        raise InputError(f"got {metric!r}; allowed: {', '.join(METRICS)}", file=file,
                         field=f"{where}.metric")
    sc = _scenario(e.get("scenario"), file, f"{where}.scenario")
    if metric == "usd_per_mtok" and sc.serve is None:
        raise InputError("usd_per_mtok needs a serve workload", file=file,
                         field=f"{where}.metric")
    a, b = _designs(e.get("designs"), file, f"{where}.designs")
    ratio, pub = _published(e.get("published"), file, f"{where}.published")
    if not _text(e, "url", file, where).startswith(("https://", "http://")):
        raise InputError("expected the source's address (https://...)", file=file,
                         field=f"{where}.url")
    return Comparison(id=_text(e, "id", file, where), question=_text(e, "question", file, where),
                      source=_text(e, "source", file, where), url=_text(e, "url", file, where),
                      date=str(_date(e.get("date"), file, f"{where}.date")), metric=metric,
                      scenario=sc, a=a, b=b, published_ratio=ratio, published=pub,
                      notes=_text(e, "notes", file, where, required=False),
                      calibration=_ids(e.get("calibration"), file, f"{where}.calibration"))


def _ids(v: Any, file: str, where: str) -> tuple[str, ...]:
    if v is None:
        return ()
    if not isinstance(v, list) or not all(isinstance(x, str) and x.strip() for x in v):
        raise InputError(f"expected a list of calibration entry ids, got {v!r}", file=file,
                         field=where)
    return tuple(x.strip() for x in v)


def _date(v: Any, file: str, where: str) -> str:
    import datetime as dt
    if (isinstance(v, (dt.date, int)) and not isinstance(v, bool)) or \
            (isinstance(v, str) and v.strip()):
        return str(v)
    raise InputError(f"expected the source's date (2024-08-28, or a year), got {v!r}",
                     file=file, field=where)


def _scenario(v: Any, file: str, where: str) -> S.Scenario:
    """The question as a scenario: a mapping of the scenario schema, or a built-in's name."""
    if isinstance(v, str) and v in S.builtin_names():
        return S.builtin(v)
    if not isinstance(v, dict):
        raise InputError("expected a scenario (a mapping of the scenario schema) or a built-in "
                         f"scenario's name ({', '.join(S.builtin_names())}), got {v!r}",
                         file=file, field=where)
    try:
        return S.parse(v, file)
    except InputError as exc:
        raise exc.located(file, where) from None


def _designs(v: Any, file: str, where: str) -> tuple[Design, Design]:
    if not isinstance(v, dict) or set(v) != {"a", "b"}:
        raise InputError("expected a mapping of a and b, each a system spec "
                         "(gpu=H100-SXM,gpus_per_node=8) or {instance: NAME}", file=file,
                         field=where)
    return _design(v["a"], file, f"{where}.a"), _design(v["b"], file, f"{where}.b")


def _design(v: Any, file: str, where: str) -> Design:
    """A spec string, or a mapping of ``system`` (a spec) or ``instance`` (a cloud instance of
    the price table) and an optional ``precision`` for this side (FP8 on H100 against FP16 on
    A100, as published comparisons pose it)."""
    from gpufabric.topology.build import normalize_spec, parse_inline
    prec, eng = "", ""
    if isinstance(v, dict):
        if any(k not in DESIGN_KEYS for k in v) or ("system" in v) == ("instance" in v):
            raise InputError("expected a system spec, or a mapping of system or instance and "
                             f"an optional precision ({', '.join(S.PRECISIONS)}) and serving "
                             "engine", file=file, field=where)
        prec = v.get("precision", "")
        if prec and prec not in S.PRECISIONS:
            raise InputError(f"got {prec!r}; allowed: {', '.join(S.PRECISIONS)}", file=file,
                             field=f"{where}.precision")
        if "engine" in v:
            eng = S.engine(v["engine"], file, f"{where}.engine")
        if "instance" in v:
            if not isinstance(v["instance"], str) or not v["instance"].strip():
                raise InputError(f"expected a cloud instance's name, got {v['instance']!r}",
                                 file=file, field=f"{where}.instance")
            return Design(system="", instance=v["instance"].strip(), precision=prec,
                          engine=eng)
        where, v = f"{where}.system", v["system"]
    if not isinstance(v, str) or not v.strip():
        raise InputError(f"expected a system spec (gpu=H100-SXM,gpus_per_node=8), got {v!r}",
                         file=file, field=where)
    try:
        normalize_spec(parse_inline(v), file="design")
    except InputError as exc:
        raise InputError(exc.message, file=file, field=where) from None
    return Design(system=v.strip(), precision=prec, engine=eng)


def _published(v: Any, file: str, where: str) -> tuple[float, tuple[float, float] | None]:
    """(a / b, (a, b) when the source gives both figures)."""
    if not isinstance(v, dict) or not v or any(k not in PUBLISHED_KEYS for k in v) or \
            ("ratio" in v) == ("a" in v or "b" in v) or ("a" in v) != ("b" in v):
        raise InputError("expected {a: FIGURE, b: FIGURE} (the published figures) or "
                         "{ratio: A_OVER_B}", file=file, field=where)
    if "ratio" in v:
        return float(check_range(v["ratio"], 0.0, 1e6, above=True, file=file,
                                 field=f"{where}.ratio")), None
    a = float(check_range(v["a"], 0.0, 1e15, above=True, file=file, field=f"{where}.a"))
    b = float(check_range(v["b"], 0.0, 1e15, above=True, file=file, field=f"{where}.b"))
    return a / b, (a, b)


# --------------------------------------------------------------------------------------------
# evaluation
# --------------------------------------------------------------------------------------------
def _candidate(d: Design, prices: Prices, where: str) -> core.Candidate:
    """The design as the ranking's candidate (its rules' verdict in ``refused``)."""
    from gpufabric import catalog
    from gpufabric.topology.build import normalize_spec, parse_inline
    if d.instance:
        inst = next((r for r in prices.cloud() if r["instance"] == d.instance), None)
        if inst is None:
            raise InputError(f"no cloud instance {d.instance!r} in the price table; allowed: "
                             + ", ".join(sorted(str(r["instance"]) for r in prices.cloud())),
                             field=f"{where}.instance")
        spec = parse_inline(str(inst["system"]))
    else:
        spec = parse_inline(d.system)
    s = normalize_spec(dict(spec), file="design")
    node = {k: v for k, v in spec.items() if k not in ("nodes", "nic", "nics_per_node",
                                                       "fabric")}
    return core.Candidate(gpu=catalog.gpu(str(s["gpu"])).name,
                          gpus_per_node=int(s["gpus_per_node"]), nodes=int(s["nodes"]),
                          spec=dict(spec), deployment="cloud" if d.instance else "on-prem",
                          instance=d.instance, design=core.spec_string(node),
                          refused=core._refusal(core.spec_string(spec)))


def fitted_on(ids: tuple[str, ...], engines: tuple[str, ...] = ("vllm",)) -> list[str]:
    """The fitted constants the advisor's predictions use whose ``fitted_on`` names one of the
    calibration entries ``ids``: a comparison on those figures is in-sample for them, not held
    out. An engine profile's constants count only for the ``engines`` the comparison's two
    sides serve with."""
    from gpufabric import params
    return sorted({p.name for p in params.load_registry().values()
                   if any(params.matches_fitted(i, p.fitted_on) for i in ids)
                   and (not p.name.startswith("ENGINE_")
                        or any(p.name.endswith(f"[{e}]") for e in engines))})


def engines(comp: Comparison) -> tuple[str, ...]:
    """The serving engine profiles of a comparison's two sides (none for training or cost)."""
    sides = (comp.a.scenario(comp.scenario).serve, comp.b.scenario(comp.scenario).serve)
    return tuple(dict.fromkeys(s.engine for s in sides if s is not None))


def metric_value(c: core.Candidate, sc: S.Scenario, metric: str) -> float | None:
    """The comparison's metric of an evaluated, priced design (None: the model gives none)."""
    from gpufabric.advise.interactivity import at_capacity
    if metric == "usd_per_gpu_hour":
        h = core.hourly(c)
        return h / c.gpus if h is not None else None
    if metric == "usd_per_mtok":
        fig = at_capacity(c)
        return fig["usd_per_mtok"] if fig else None
    tps = core._tokens_per_s(c, sc)
    if not tps:
        return None
    return tps / c.gpus if metric == "tokens_per_s_per_gpu" else tps


def _why(c: core.Candidate, metric: str) -> str:
    """Why a design has no figure for ``metric``."""
    if c.refused:
        return f"the design rules refuse it: {c.refused}"
    for k in ("train_error", "serve_error"):
        if k in c.metrics:
            return str(c.metrics[k])
    if metric.startswith("usd") and core.hourly(c) is None:
        return "no price"
    return "the model gives no figure"


def _judge_one(comp: Comparison, cands: tuple[core.Candidate, core.Candidate],
               runner: core.Runner, prices: Prices, kwh_usd: float) -> Row:
    """Evaluate both designs of a comparison (the models only where the metric needs them)
    and compare the predicted ratio with the published one."""
    higher = METRICS[comp.metric][1]
    vals: dict[str, float | None] = {}
    why = []
    for side, c, d in zip("ab", cands, (comp.a, comp.b), strict=True):
        sc = d.scenario(comp.scenario)
        if not c.refused:
            core.price(c, prices, kwh_usd, sc.constraints.amortize_years,
                       sc.constraints.cloud_term)
            if comp.metric != "usd_per_gpu_hour":
                core.evaluate([c], sc, runner=runner)
        vals[side] = None if c.refused else metric_value(c, sc, comp.metric)
        if vals[side] is None:
            why.append(f"{side} ({core.describe(c)}): {_why(c, comp.metric)}")
    pub_w = winner(comp.published_ratio, higher_is_better=higher)
    a, b = vals["a"], vals["b"]
    ratio = a / b if a is not None and b is not None and b > 0 else None
    pred_w = winner(ratio, higher_is_better=higher) if ratio else None
    return Row(id=comp.id, question=comp.question, metric=comp.metric,
               published_ratio=comp.published_ratio, predicted_ratio=ratio,
               published_winner=pub_w, predicted_winner=pred_w, same_winner=pred_w == pub_w,
               agree=ratio is not None and agrees(ratio, comp.published_ratio,
                                                  higher_is_better=higher),
               predicted=vals, why="; ".join(why),
               fitted=fitted_on(comp.calibration, engines(comp)),
               source=comp.source, url=comp.url, date=comp.date)


def check(comps: list[Comparison], prices: Prices, *, kwh_usd: float = 0.10, jobs: int = 1,
          ray: bool = False, file: str = "", on_row: Any = None) -> dict[str, Any]:
    """Every comparison judged (:class:`Row`), and the summary: how many agree of how many.

    Each comparison runs its two designs' model jobs (on ``jobs`` worker processes, or on
    Ray) before the next; a job two comparisons share runs once. ``on_row(1, total)`` is told
    as each is done.
    """
    from gpufabric.workloads.search import memory_verdicts
    t0 = time.perf_counter()
    cands = []
    for i, comp in enumerate(comps):
        try:
            cands.append((_candidate(comp.a, prices, "a"), _candidate(comp.b, prices, "b")))
        except InputError as exc:
            raise exc.located(file or None, f"comparisons[{i}].designs") from None
    runner = core.Runner(jobs=jobs, ray=ray)
    rows: list[Row] = []
    with memory_verdicts(), sweep.workers(jobs if not ray else 1):
        for comp, pair in zip(comps, cands, strict=True):
            t1 = time.perf_counter()
            if comp.metric != "usd_per_gpu_hour":
                runner.run([j for c, d in zip(pair, (comp.a, comp.b), strict=True)
                            if not c.refused
                            for j in core.all_jobs([c], d.scenario(comp.scenario))])
            rows.append(_judge_one(comp, pair, runner, prices, kwh_usd))
            rows[-1].elapsed_s = time.perf_counter() - t1     # its model runs included
            if on_row:
                on_row(1, len(comps))
    n_agree = sum(r.agree for r in rows)
    held = [r for r in rows if not r.fitted]
    return {"file": file, "rows": rows, "agree": n_agree, "total": len(rows),
            "held_out_agree": sum(r.agree for r in held), "held_out_total": len(held),
            "same_winner": sum(r.same_winner for r in rows),
            "not_evaluated": sum(r.predicted_ratio is None for r in rows),
            "tie": TIE, "agree_factor": AGREE_FACTOR, "elapsed_s": time.perf_counter() - t0}


__all__ = ["AGREE_FACTOR", "BUILTIN", "METRICS", "TIE", "Comparison", "Design", "Row",
           "agrees", "check", "file_name", "fitted_on", "load", "metric_value", "parse",
           "winner"]

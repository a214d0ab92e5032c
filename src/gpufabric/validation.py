"""One validation layer for every model: the point record, the skip record, the status of an
entry and the summary, shared by the collectives, training and inference validators.

A **point** is one measured figure compared with the model's prediction: a dict with ``id``
(the entry), ``point`` (its index in the entry's ``points``), ``metric`` (what ``measured``
and ``predicted`` carry; where the source gave another figure, converted from it, that figure
is ``measured_as``), ``measured``, ``predicted``, ``error_pct`` (``predicted / measured - 1``,
in %), ``breakdown`` (the model's parts, where it has them), ``notes`` and ``status``; a
validator adds its own keys beside these (a collective's size and algorithm, a training layout, an
inference engine). A **skip** is ``{id, point, reason}``: a point the model cannot predict.

The **status** of an entry is derived, never listed by hand:

- ``fitted``: a parameter record (:data:`gpufabric.params.REGISTRY`) names the entry in its
  ``fitted_on`` (its id, or a ``prefix-*`` pattern it matches);
- ``looked-at``: the measurements file marks the entry as seen while the model changed, with
  a key ``looked_at: "what changed after looking"`` on the entry, or on the whole file (the
  file is then a mapping ``{looked_at: "...", entries: [...]}``);
- ``held-out``: neither. Only these points make the headline figures.

The **summary** (:func:`summarize`) gives ``median_abs_pct``, ``p90_abs_pct``,
``max_abs_pct`` and ``points`` over the held-out points, with ``fitted``, ``looked_at`` and
``all`` (every point) beside them in the same shape, and ``by_metric`` (the figure measured,
:func:`measured_as` -> the same summary over those points). A validator may add its own split
to every block (the collectives' ``by_size``: large and small messages). Several files pool
by summarizing all their points at once (:func:`pooled`).

Examples
--------
>>> ps = [point("a", 0, "busbw", 100.0, 110.0, HELD_OUT),
...       point("b", 0, "busbw", 100.0, 95.0, FITTED)]
>>> round(ps[0]["error_pct"], 6)
10.0
>>> s = summarize(ps)
>>> s["median_abs_pct"], s["points"], s["fitted"]["points"], s["looked_at"]["points"]
(10.0, 1, 1, 0)
>>> s["by_metric"]["busbw"]["fitted"]["max_abs_pct"]
5.0
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from gpufabric import params as _params
from gpufabric.errors import InputError, closest_name

#: the three statuses of an entry (see the module's doc)
FITTED, LOOKED_AT, HELD_OUT = "fitted", "looked-at", "held-out"
STATUSES = (HELD_OUT, FITTED, LOOKED_AT)
#: the summary's key for each status besides the headline (held-out)
STATUS_KEY = {FITTED: "fitted", LOOKED_AT: "looked_at"}
#: the key of a measurements file or entry that marks it as looked at
MARK = "looked_at"


def point(eid: str, index: int, metric: str, measured: float, predicted: float, status: str,
          *, error_pct: float | None = None, breakdown: dict[str, float] | None = None,
          notes: str = "", **extra: Any) -> dict[str, Any]:
    """One compared point (the record every validator returns); ``error_pct`` defaults to
    ``(predicted / measured - 1) * 100``; ``extra`` keys are the validator's own.

    >>> point("x", 2, "tokens_per_s_per_gpu", 200.0, 150.0, HELD_OUT)["error_pct"]
    -25.0
    """
    if error_pct is None:
        error_pct = (predicted / measured - 1) * 100 if measured else None
    return {"id": eid, "point": index, "metric": metric, "measured": measured,
            "predicted": predicted, "error_pct": error_pct, "status": status,
            "breakdown": dict(breakdown or {}), "notes": notes, **extra}


def skip(eid: str, index: int | None, reason: str) -> dict[str, Any]:
    """One point (or, with ``index`` None, a whole entry) the model cannot predict."""
    return {"id": eid, "point": index, "reason": reason}


def fitted_ids() -> set[str]:
    """Every id and ``prefix-*`` pattern some recorded parameter (any layer) was fitted on."""
    return {i for p in _params.REGISTRY.values() for i in p.fitted_on}


#: What a training or inference entry's ``system`` may state, the keys both validators build
#: the machine from (each adds the ones only it reads); ``fabric`` is free text for the reader.
SYSTEM_FIELDS = frozenset({"gpu", "gpu_variant", "gpus", "gpus_per_node", "nodes", "scale_up",
                         "nic", "nics_per_node", "fabric"})


def check_keys(mapping: dict[str, Any], allowed: Iterable[str], path: str, field: str) -> None:
    """Refuse a key of an entry's mapping (its ``system``) that its validator does not read: a
    misspelt ``scale-up`` used to leave the machine at its default without a word.

    >>> check_keys({"gpu": "H100-SXM", "scale-up": "nvswitch"}, SYSTEM_FIELDS, "f.yaml",
    ...            "[0](x).system")
    Traceback (most recent call last):
    ...
    gpufabric.errors.InputError: f.yaml: [0](x).system: unknown key 'scale-up'; did you mean \
'scale_up'? (allowed: fabric, gpu, gpu_variant, gpus, gpus_per_node, nic, nics_per_node, \
nodes, scale_up)
    """
    known = sorted(set(allowed))
    bad = sorted(str(k) for k in mapping if k not in known)
    if bad:
        near = closest_name(bad[0], known)
        hint = f"; did you mean {near!r}?" if near else ""
        raise InputError(f"unknown key {bad[0]!r}{hint} (allowed: {', '.join(known)})",
                         file=path, field=field)


def entries_of(data: Any, path: str) -> tuple[Any, str]:
    """A measurements file's entries and its file-level ``looked_at`` mark ('' when none):
    a list of entries, or a mapping ``{looked_at: "...", entries: [...]}``. Anything else is
    returned as it is, for the validator to refuse in its own words.

    >>> entries_of({"looked_at": "why", "entries": [{"id": "a"}]}, "f.yaml")
    ([{'id': 'a'}], 'why')
    >>> entries_of({"looked_at": 3, "entries": []}, "f.yaml")
    Traceback (most recent call last):
    ...
    gpufabric.errors.InputError: f.yaml: looked_at: got 3; expected a sentence saying what \
changed in the model after looking at this file
    """
    if isinstance(data, dict) and isinstance(data.get("entries"), list):
        return data["entries"], _mark(data.get(MARK), path, MARK)
    return data, ""


def _mark(v: Any, path: str, field: str) -> str:
    if v is None:
        return ""
    if not isinstance(v, str) or not v.strip():
        raise InputError(f"got {v!r}; expected a sentence saying what changed in the model "
                         f"after looking at this {'file' if field == MARK else 'entry'}",
                         file=path, field=field)
    return v.strip()


def looked_at(entry: dict[str, Any], file_mark: str = "", path: str = "",
              where: str = "") -> str:
    """Why an entry counts as looked at ('' when it does not): its own ``looked_at`` key, else
    the file's mark."""
    own = _mark(entry.get(MARK), path, f"{where or entry.get('id', '')}.{MARK}")
    return own or file_mark


def status(eid: str, looked: str = "", ids: Iterable[str] | None = None) -> str:
    """``fitted`` when a parameter record names ``eid``, else ``looked-at`` when ``looked`` (a
    reason) is given, else ``held-out``.

    >>> status("run-a", ids=["run-a"]), status("x", "seen", ids=[]), status("x", ids=[])
    ('fitted', 'looked-at', 'held-out')
    """
    if _params.matches_fitted(eid, fitted_ids() if ids is None else ids):
        return FITTED
    return LOOKED_AT if looked else HELD_OUT


def p90(values: list[float]) -> float:
    """The 90th percentile by nearest rank (the smallest value at or above 90 % of them).

    >>> p90([1.0, 2.0, 3.0]), p90(list(range(1, 11)))
    (3.0, 9)
    """
    v = sorted(values)
    return v[max(0, math.ceil(0.9 * len(v)) - 1)]


def stats(errors: Iterable[float | None]) -> dict[str, Any]:
    """``median_abs_pct``, ``p90_abs_pct``, ``max_abs_pct`` (absolute % error, 2 decimals; None
    without points) and ``points`` over some errors in % (None entries are left out).

    >>> stats([-4.0, 2.0, 10.0])
    {'median_abs_pct': 4.0, 'p90_abs_pct': 10.0, 'max_abs_pct': 10.0, 'points': 3}
    """
    e = sorted(abs(x) for x in errors if x is not None)
    if not e:
        return {"median_abs_pct": None, "p90_abs_pct": None, "max_abs_pct": None, "points": 0}
    n = len(e)
    med = e[n // 2] if n % 2 else (e[n // 2 - 1] + e[n // 2]) / 2
    return {"median_abs_pct": round(med, 2), "p90_abs_pct": round(p90(e), 2),
            "max_abs_pct": round(e[-1], 2), "points": n}


Split = Callable[[list[dict[str, Any]]], dict[str, Any]]


def _block(points: list[dict[str, Any]], split: Split | None) -> dict[str, Any]:
    out = stats(p["error_pct"] for p in points)
    if split is not None:
        out.update(split(points))
    return out


def _statused(points: list[dict[str, Any]], split: Split | None) -> dict[str, Any]:
    out = _block([p for p in points if p["status"] == HELD_OUT], split)
    for st, key in STATUS_KEY.items():
        out[key] = _block([p for p in points if p["status"] == st], split)
    out["all"] = _block(points, split)
    return out


def summarize(points: list[dict[str, Any]], split: Split | None = None) -> dict[str, Any]:
    """The summary of some points (see the module's doc): the held-out figures, ``fitted``,
    ``looked_at`` and ``all`` beside them, and ``by_metric``; ``split(points)`` adds a
    validator's own keys to every block."""
    out = _statused(points, split)
    metrics = sorted({measured_as(p) for p in points})
    out["by_metric"] = {m: _statused([p for p in points if measured_as(p) == m], split)
                        for m in metrics}
    return out


def measured_as(p: dict[str, Any]) -> str:
    """The figure a point's source gave: its ``measured_as`` (a training step time, TFLOP/s
    or MFU, carried as tokens/s per GPU), else its ``metric``; summaries group by it."""
    return str(p.get("measured_as") or p["metric"])


def pooled(results: list[dict[str, Any]], split: Split | None = None) -> dict[str, Any]:
    """The summary over every point of several validators' results (``{points, ...}`` each)."""
    return summarize([p for r in results for p in r["points"]], split)


__all__ = ["FITTED", "LOOKED_AT", "HELD_OUT", "STATUSES", "point", "skip", "status",
           "looked_at", "entries_of", "fitted_ids", "stats", "summarize", "pooled", "p90"]

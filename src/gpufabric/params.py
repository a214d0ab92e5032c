"""One record type for every fitted or sourced constant of the models, in one registry.

A :class:`Param` holds a value, its unit, what it applies to (a protocol, a link type, a GPU
generation, an inference engine; never one machine) and where it comes from: a ``source``
(NCCL's tuning code with its version, a datasheet, a paper, or the reasoning behind a prior)
and, for fitted values, the calibration ids (or ``prefix-*`` patterns) it was ``fitted_on``.
A fitted value rests on at least two independent entries (different sources or machines), or
it is marked as its single entry's ``answer`` (why no second entry is in our files): that
entry counts as fitted and the value is not a prediction (:attr:`Param.status`).
Each layer records its constants here under its ``layer`` name (``collectives``,
``workloads``); a name is recorded once across all layers. ``gpufabric params`` lists them and
each layer's ``validate`` reports its error also over the entries nothing was fitted on.

Examples
--------
>>> import gpufabric.collectives.params, gpufabric.workloads.inference.itertime
>>> REGISTRY["KERNEL_US"].kind, REGISTRY["KERNEL_US"].layer
('prior', 'workloads')
>>> REGISTRY["ENGINE_LAYER_S[fastertransformer]"].kind
'fitted'
>>> matches_fitted("run-a-70b", ["run-a-*"]), matches_fitted("run-b", ["run-a-*"])
(True, False)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from typing import Any

#: layers that record constants, in listing order
LAYERS = ("collectives", "workloads")


@dataclass(frozen=True)
class Param:
    """One constant of a model, with what it applies to and where it comes from."""

    name: str
    value: Any
    unit: str
    applies_to: str
    source: str
    fitted_on: tuple[str, ...] = ()
    nccl_version: str = ""
    layer: str = ""
    #: for a value fitted on a single entry: why it is that entry's answer (no second
    #: independent published entry in our measurement files that it also explains)
    answer: str = ""

    @property
    def kind(self) -> str:
        """``fitted`` (on calibration ids), ``nccl`` (taken from NCCL's code), ``prior`` or
        ``estimate`` (reasoned, neither measured nor taken) or ``source`` (a datasheet, a
        paper, an engine's default)."""
        if self.fitted_on:
            return "fitted"
        if self.nccl_version:
            return "nccl"
        for k in ("estimate", "prior"):
            if self.source.startswith(k):
                return k
        return "source"

    @property
    def single_entry(self) -> bool:
        """Whether a fitted value rests on one entry (one id, or one ``prefix-*`` pattern: one
        source's series on one machine): it is that entry's answer rather than a prediction,
        and that entry counts as fitted (never held out) in every ``validate``."""
        return len(self.fitted_on) == 1

    @property
    def status(self) -> str:
        """What a fitted value rests on: ``entries`` (two or more entries), ``answer`` (a single
        entry, marked as that entry's answer) or ``single`` (a single entry, unmarked: it needs
        a second entry or the mark); '' for values that are not fitted."""
        if not self.fitted_on:
            return ""
        if not self.single_entry:
            return "entries"
        return "answer" if self.answer else "single"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["fitted_on"] = list(self.fitted_on)
        d["kind"] = self.kind
        d["single_entry"] = self.single_entry
        d["status"] = self.status
        return d


#: every recorded constant by name (all layers)
REGISTRY: dict[str, Param] = {}
_BY_LAYER: dict[str, dict[str, Param]] = {}


def _fits() -> dict[str, dict]:
    """What each fitted constant was fitted on, by name (``data/fits.yaml``)."""
    global _FITS
    if _FITS is None:
        from gpufabric.fileio import load_data
        _FITS = load_data("gpufabric", "data", "fits.yaml") or {}
    return _FITS


_FITS: dict[str, dict] | None = None


def register(p: Param) -> Param:
    """Record ``p`` (its name must be new across all layers) and return it; what a fitted
    constant was fitted on (and, on one entry, why it is that entry's answer) comes from
    ``data/fits.yaml`` by its name, so that no measurement entry id is written in the code."""
    if p.name in REGISTRY:
        raise ValueError(f"parameter {p.name} recorded twice")
    fit = _fits().get(p.name)
    if fit is not None:
        if p.fitted_on:
            raise ValueError(f"parameter {p.name}: fitted_on given in the code and in "
                             "data/fits.yaml; give it once, in the data file")
        p = replace(p, fitted_on=tuple(fit.get("fitted_on") or ()),
                    answer=str(fit.get("answer") or p.answer))
    REGISTRY[p.name] = p
    layer_registry(p.layer)[p.name] = p
    return p


def record(layer: str, name: str, value: Any, unit: str, applies_to: str, source: str, *,
           fitted_on: Iterable[str] = (), nccl_version: str = "", answer: str = "") -> Param:
    """Record one constant of ``layer`` and return its record (a name already recorded, in
    any layer, raises ``ValueError``).

    >>> import gpufabric.collectives.params
    >>> record("workloads", "NVLS_LAT_US", 1.0, "us", "x", "prior: y")
    Traceback (most recent call last):
    ...
    ValueError: parameter NVLS_LAT_US recorded twice
    """
    return register(Param(name, value, unit, applies_to, source, tuple(fitted_on), nccl_version,
                          layer, answer))


def layer_registry(layer: str) -> dict[str, Param]:
    """The live registry of one layer (name -> record)."""
    return _BY_LAYER.setdefault(layer, {})


def fitted_ids(layer: str) -> set[str]:
    """Calibration ids (and ``prefix-*`` patterns) some parameter of ``layer`` was fitted on."""
    return {i for p in layer_registry(layer).values() for i in p.fitted_on}


def matches_fitted(eid: str, ids: Iterable[str]) -> bool:
    """Whether entry ``eid`` is one of ``ids`` or matches one of its ``prefix-*`` patterns."""
    return any(eid.startswith(i[:-1]) if i.endswith("*") else eid == i for i in ids)


def single_entry(layer: str | None = None) -> list[Param]:
    """The fitted records (one layer or all) that rest on a single entry (see
    :attr:`Param.single_entry`).

    Examples
    --------
    >>> import gpufabric.collectives.params
    >>> recs = single_entry("collectives")
    >>> all(p.kind == "fitted" and p.single_entry for p in recs)
    True
    """
    return [p for p in REGISTRY.values()
            if p.single_entry and (layer is None or p.layer == layer)]


def table(layer: str | None = None) -> list[dict]:
    """Records as dicts, one layer or all (for ``gpufabric params --json`` and the docs)."""
    return [p.to_dict() for p in REGISTRY.values() if layer is None or p.layer == layer]

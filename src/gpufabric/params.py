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

The values the models use form one immutable :class:`Params`: the shipped values of the
records, overlaid by what a calibration profile sets (:meth:`Params.replace` checks names,
keys, types and ranges and returns a new value; nothing is patched). The models read the
value of the current context: :func:`current` (a :class:`contextvars.ContextVar`, the shipped
value by default) and :func:`use` (a context manager), so threads and nested uses each see
their own; a record's :attr:`Param.value` and the collectives' ``P.NAME`` read through it, and
every cache of a result that depends on a parameter keys on :attr:`Params.key` (:func:`cache`).

Examples
--------
>>> import gpufabric.collectives.params, gpufabric.workloads.inference.itertime
>>> REGISTRY["KERNEL_US"].kind, REGISTRY["KERNEL_US"].layer
('prior', 'workloads')
>>> REGISTRY["ENGINE_LAYER_S[fastertransformer]"].kind
'fitted'
>>> matches_fitted("run-a-70b", ["run-a-*"]), matches_fitted("run-b", ["run-a-*"])
(True, False)
>>> p = current().replace({"KERNEL_US": 5.0})
>>> with use(p):
...     REGISTRY["KERNEL_US"].value, current().key == p.key
(5.0, True)
>>> REGISTRY["KERNEL_US"].value, current().key
(4.0, 'shipped')
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from gpufabric.errors import InputError, unknown_name

#: layers that record constants, in listing order
LAYERS = ("collectives", "workloads")

#: The modules that record parameters (imported before a name is looked up by its text).
RECORDING = ("gpufabric.collectives.params", "gpufabric.workloads.training",
             "gpufabric.workloads.inference.pd", "gpufabric.workloads.inference.serve",
             "gpufabric.workloads.video")

#: Highest latency (us) a profile may give one hop or fixed cost: a millisecond is far above
#: any GPU transport (NCCL's slowest figure is 14 us for a network hop).
LAT_CEILING_US = 1000.0


class FrozenDict(dict):
    """A parameter's dict value: a ``dict`` that refuses every change (make a new
    :class:`Params` with :meth:`Params.replace` instead).

    >>> d = FrozenDict({"a": 1})
    >>> d["a"] = 2
    Traceback (most recent call last):
    ...
    TypeError: a parameter's value cannot change; make a new Params with Params.replace
    """

    __slots__ = ()

    def _refuse(self, *args: Any, **kw: Any) -> Any:
        raise TypeError("a parameter's value cannot change; make a new Params with "
                        "Params.replace")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _refuse
    __ior__ = _refuse

    def __reduce__(self) -> Any:
        return (FrozenDict, (dict(self),))

    def __copy__(self) -> FrozenDict:
        return self

    def __deepcopy__(self, memo: dict) -> FrozenDict:
        return self


def freeze(v: Any) -> Any:
    """``v`` with every dict frozen (:class:`FrozenDict`) and every list a tuple."""
    if isinstance(v, Mapping):
        return v if type(v) is FrozenDict else FrozenDict({k: freeze(x) for k, x in v.items()})
    if isinstance(v, (list, tuple)):
        return tuple(freeze(x) for x in v)
    return v


def plain(v: Any) -> Any:
    """A value as plain data (dicts, tuples, numbers) for JSON and YAML."""
    if isinstance(v, Mapping):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, tuple):
        return tuple(plain(x) for x in v)
    return v


@dataclass(frozen=True)
class Param:
    """One constant of a model, with what it applies to and where it comes from.

    ``shipped`` is the value as recorded; :attr:`value` the value the models use now (the
    current :class:`Params`' for a registered record)."""

    name: str
    shipped: Any
    unit: str
    applies_to: str
    source: str
    fitted_on: tuple[str, ...] = ()
    nccl_version: str = ""
    layer: str = ""
    #: for a value fitted on a single entry: why it is that entry's answer (no second
    #: independent published entry in our measurement files that it also explains)
    answer: str = ""
    #: whether :func:`register` recorded it (its value then comes from the current Params)
    registered: bool = field(default=False, compare=False, repr=False)

    @property
    def value(self) -> Any:
        """The value the models use now: the current :class:`Params`' (a registered record),
        else the record's own."""
        if not self.registered:
            return self.shipped
        return _CURRENT.get()._over.get(self.name, self.shipped)

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
        """The record as plain data, with the value in use now."""
        return {"name": self.name, "value": plain(self.value), "unit": self.unit,
                "applies_to": self.applies_to, "source": self.source,
                "fitted_on": list(self.fitted_on), "nccl_version": self.nccl_version,
                "layer": self.layer, "answer": self.answer, "kind": self.kind,
                "single_entry": self.single_entry, "status": self.status}


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
    """Record ``p`` (its name must be new across all layers) and return it, its value frozen
    (:func:`freeze`) and read from the current :class:`Params` from now on; what a fitted
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
    p = replace(p, shipped=freeze(p.shipped), registered=True)
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


# -- the values the models use: one immutable Params, held in a context ---------------------
#: keys of a dict-valued parameter that are another parameter's value: (name, key) -> the
#: other's name (``HOP_LAT_US["shm"]`` is ``SHM_HOP_LAT_US``); setting either sets both
_ALIASES: dict[tuple[str, str], str] = {}


def alias(name: str, key: str, target: str) -> None:
    """Declare that key ``key`` of dict-valued parameter ``name`` is parameter ``target``'s
    value: a :class:`Params` that sets one sets both."""
    _ALIASES[(name, key)] = target


def _canon(v: Any) -> Any:
    if isinstance(v, Mapping):
        return tuple(sorted((str(k), _canon(x)) for k, x in v.items()))
    if isinstance(v, tuple):
        return tuple(_canon(x) for x in v)
    return v


def _set_in(value: Any, keys: tuple, new: Any) -> Any:
    """A copy of (frozen) ``value`` with the leaf at ``keys`` set to ``new``."""
    if not keys:
        return freeze(new)
    d = dict(value)
    d[keys[0]] = _set_in(value[keys[0]], keys[1:], new)
    return FrozenDict(d)


class Params(Mapping[str, Any]):
    """The values of every recorded constant: the shipped ones, overlaid by a profile's.

    Immutable and hashable: :attr:`key` is a digest of what differs from the shipped values
    (``'shipped'`` when nothing does); a dict value is a :class:`FrozenDict`.
    :meth:`replace` makes a new value. Read the one in use with :func:`current`; set one
    for a block with :func:`use`.

    >>> p = Params().replace({"HOP_LAT_US.nvlink.Simple": 4.1})
    >>> p["HOP_LAT_US"]["nvlink"]["Simple"], Params()["HOP_LAT_US"]["nvlink"]["Simple"]
    (4.1, 3.4)
    >>> p == Params().replace({"HOP_LAT_US": {"nvlink": {"Simple": 4.1}}}), p == Params()
    (True, False)
    """

    __slots__ = ("_over", "key", "_facets")

    def __init__(self, overrides: Mapping[str, Any] | None = None):
        # overrides by parameter name, as they are (Params() is the shipped value; values
        # from a user go through replace(), which checks them)
        self._over: dict[str, Any] = {k: freeze(v) for k, v in (overrides or {}).items()}
        self.key = ("shipped" if not self._over else hashlib.sha1(
            repr(_canon(self._over)).encode()).hexdigest()[:16])
        self._facets: dict[tuple[str, ...], str] = {}

    def __getitem__(self, name: str) -> Any:
        v = self._over.get(name, _MISSING)
        return REGISTRY[name].shipped if v is _MISSING else v

    def __iter__(self) -> Iterator[str]:
        return iter(REGISTRY)

    def __len__(self) -> int:
        return len(REGISTRY)

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Params) and other.key == self.key

    def __repr__(self) -> str:
        return f"Params({self.key}: {', '.join(sorted(self._over)) or 'as shipped'})"

    def __reduce__(self) -> Any:
        return (Params, (self._over,))

    @property
    def overrides(self) -> Mapping[str, Any]:
        """The values that differ from the shipped ones, by name."""
        return FrozenDict(self._over)

    def key_of(self, names: Iterable[str]) -> str:
        """A digest of the values of ``names`` only (a cache of a result that depends on
        those alone keys on it)."""
        names = tuple(names)
        if names not in self._facets:
            self._facets[names] = Params({n: self._over[n] for n in names
                                          if n in self._over}).key
        return self._facets[names]

    def replace(self, values: Mapping[str, Any], file: str = "profile") -> Params:
        """A new value with ``values`` set (profile names -> numbers or ``{value: ...}``, see
        :func:`check`; bad input raises :class:`~gpufabric.errors.InputError` naming ``file``
        and the field)."""
        return self.with_leaves(check(values, file))

    def with_leaves(self, leaves: Iterable[tuple[str, tuple, Any]]) -> Params:
        """A new value with each checked ``(parameter, keys, value)`` leaf set (a key that is
        another parameter, :func:`alias`, sets that parameter)."""
        over = dict(self._over)
        for base, keys, new in leaves:
            while keys and (base, keys[0]) in _ALIASES:
                base, keys = _ALIASES[(base, keys[0])], keys[1:]
            over[base] = _set_in(over.get(base, REGISTRY[base].shipped), keys, new)
        for (name, key), target in _ALIASES.items():
            if target in over and name in REGISTRY:
                over[name] = _set_in(over.get(name, REGISTRY[name].shipped), (key,),
                                     over[target])
        return Params({k: v for k, v in over.items() if v != REGISTRY[k].shipped})


_MISSING = object()
#: the shipped values (nothing overridden)
SHIPPED = Params()
_CURRENT: ContextVar[Params] = ContextVar("gpufabric_params", default=SHIPPED)


def value_of(name: str) -> Any:
    """The value of registered constant ``name`` in the current :class:`Params` (the models'
    reads by name, as ``P.NAME``: one lookup, no :class:`Params` method on the way)."""
    return _CURRENT.get()._over.get(name, REGISTRY[name].shipped)


def current() -> Params:
    """The :class:`Params` the models read in this context (the shipped values unless a
    :func:`use` block sets another)."""
    return _CURRENT.get()


@contextlib.contextmanager
def use(p: Params) -> Iterator[Params]:
    """Make ``p`` the current :class:`Params` for the ``with`` block (this thread and
    context only: a thread started inside reads the shipped values unless it uses ``p``
    itself; the previous value comes back on exit)."""
    token = _CURRENT.set(p)
    try:
        yield p
    finally:
        _CURRENT.reset(token)


R = TypeVar("R")


def cache(fn: Callable[..., R]) -> Callable[..., R]:
    """:func:`functools.cache` for a function whose result depends on the parameters: keyed
    on the current :attr:`Params.key` as well as the arguments."""
    @functools.cache
    def at(key: str, *args: Any, **kw: Any) -> Any:
        return fn(*args, **kw)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kw: Any) -> Any:
        return at(_CURRENT.get().key, *args, **kw)
    wrapper.cache_clear = at.cache_clear  # type: ignore[attr-defined]
    return wrapper


# -- checking values by their profile names -------------------------------------------------
def load_registry() -> dict[str, Param]:
    """Every recorded constant of every layer (the modules that record them imported)."""
    for m in RECORDING:
        with contextlib.suppress(ImportError):
            importlib.import_module(m)
    return REGISTRY


def split(name: str) -> tuple[str, tuple[str, ...]]:
    """A profile name as (parameter, keys): ``HOP_LAT_US.nvlink.Simple`` ->
    ``('HOP_LAT_US', ('nvlink', 'Simple'))``; a registry name that itself holds dots is
    taken whole first.

    >>> split("HOP_LAT_US.nvlink.Simple")
    ('HOP_LAT_US', ('nvlink', 'Simple'))
    """
    reg = load_registry()
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        head = ".".join(parts[:i])
        if head in reg:
            return head, tuple(parts[i:])
    return parts[0], tuple(parts[1:])


def bounds(name: str) -> tuple[float, bool, float]:
    """``(low, low_included, high)`` a value of parameter ``name`` (profile syntax) must
    respect, from physics and its unit: a share or fraction of a rate in (0, 1]; a latency in
    [0, :data:`LAT_CEILING_US`]; ``USABLE_RATE_SCALE`` (:mod:`gpufabric.network.capacity`)
    above 0 and at most raw / NCCL-usable rate of the catalog's fastest-to-saturate link of
    the transport (no link above its raw rate); anything else finite and >= 0.

    >>> bounds("PROTO_EFFICIENCY.LL128"), bounds("HOP_LAT_US.net.LL")
    ((0.0, False, 1.0), (0.0, True, 1000.0))
    """
    base, keys = split(name)
    p = load_registry()[base]
    if base == "USABLE_RATE_SCALE":
        return 0.0, False, rate_scale_ceiling(keys[0] if keys else "")
    if p.unit == "us":
        return 0.0, True, LAT_CEILING_US
    if p.unit.startswith(("share of", "fraction of")):
        return 0.0, False, 1.0
    return 0.0, True, math.inf


def rate_scale_ceiling(transport: str) -> float:
    """The highest ``USABLE_RATE_SCALE`` of a transport the catalog allows: raw rate over
    NCCL-usable rate, the largest over the catalog's link kinds of that transport (a profile
    for one machine cannot know its generation; calibrate bounds it by the machine's own
    links, :func:`gpufabric.measure.calibrate.rate_ceiling`).

    >>> round(rate_scale_ceiling("net"), 3) > 1
    True
    """
    from gpufabric import catalog
    ratios = [1.0]
    if transport in ("nvlink", ""):
        ratios += [pl.per_link_GBps / pl.nccl_GBps for pl in catalog.table("peer_link").values()
                   if pl.name.startswith("nvlink") and pl.nccl_GBps and pl.per_link_GBps]
    if transport in ("pcie", ""):
        ratios += [g.x16_GBps / g.nccl_x16_GBps for g in catalog.table("pcie").values()
                   if g.nccl_x16_GBps]
    if transport in ("net", ""):
        ratios += [1 / s.efficiency for s in catalog.table("net_speed").values() if s.efficiency]
    return max(ratios)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _leaves(value: Any, shipped: Any, keys: tuple[str, ...], file: str, field: str,
            name: str) -> list[tuple[tuple[str, ...], Any]]:
    """The (keys, value) leaves an override sets, checked against the shipped value's shape."""
    if isinstance(shipped, Mapping):
        if not isinstance(value, Mapping):
            raise InputError(f"got {value!r}; expected a mapping of "
                             f"{', '.join(map(str, shipped))} (or name one key: "
                             f"{name}.{next(iter(shipped))})", file=file, field=field)
        out = []
        for k, v in value.items():
            if str(k) not in map(str, shipped):
                raise unknown_name(f"key of {name}", str(k), list(map(str, shipped))
                                   ).located(file, field)
            key = next(s for s in shipped if str(s) == str(k))
            out += _leaves(v, shipped[key], keys + (key,), file, f"{field}.{k}", f"{name}.{k}")
        return out
    if isinstance(shipped, (tuple, list)):
        if not isinstance(value, (list, tuple)) or len(value) != len(shipped) or not all(
                _number(x) for x in value):
            raise InputError(f"got {value!r}; expected a list of {len(shipped)} numbers",
                             file=file, field=field)
        return [(keys, tuple(float(x) for x in value))]
    if not _number(value):
        raise InputError(f"got {value!r}; expected a number", file=file, field=field)
    if isinstance(shipped, int) and not isinstance(shipped, bool) and value != int(value):
        raise InputError(f"got {value!r}; expected a whole number", file=file, field=field)
    return [(keys, int(value) if isinstance(shipped, int) else float(value))]


def _check_bounds(name: str, value: Any, file: str, field: str) -> None:
    lo, lo_in, hi = bounds(name)
    for x in value if isinstance(value, tuple) else (value,):
        if not math.isfinite(x) or x < lo or (x == lo and not lo_in) or x > hi:
            allowed = (f"{'[' if lo_in else '('}{lo:g}, {hi:g}]" if math.isfinite(hi)
                       else f"a finite number >= {lo:g}")
            raise InputError(f"got {x!r}; allowed: {allowed}", file=file, field=field)


def _located(base: str, keys: tuple[str, ...], file: str, field: str) -> tuple[Any, tuple]:
    """The shipped value at profile keys ``keys`` of ``base`` and those keys as the dict's own
    (which may be numbers); an unknown key raises :class:`InputError`."""
    shipped, real = REGISTRY[base].shipped, []
    for k in keys:
        if not isinstance(shipped, Mapping) or k not in map(str, shipped):
            allowed = list(map(str, shipped)) if isinstance(shipped, Mapping) else []
            if not allowed:
                raise InputError(f"{'.'.join((base,) + keys[:keys.index(k)])} has no keys",
                                 file=file, field=field)
            raise unknown_name(f"key of {base}", k, allowed).located(file, field)
        key = next(s for s in shipped if str(s) == k)
        real.append(key)
        shipped = shipped[key]
    return shipped, tuple(real)


def check(values: Mapping[str, Any], file: str = "profile") -> list[tuple[str, tuple, Any]]:
    """Every override of ``values`` (profile names -> numbers or ``{value: ...}``) as
    ``(parameter, keys, value)`` leaves, checked against the recorded values' names, keys,
    types and :func:`bounds`; bad input raises :class:`InputError` naming ``file`` and the
    field."""
    reg = load_registry()
    out: list[tuple[str, tuple, Any]] = []
    for name, raw in values.items():
        field = f"params.{name}"
        base, keys = split(str(name))
        if base not in reg:
            raise unknown_name("parameter", base, list(reg)).located(file, field)
        shipped, real_keys = _located(base, keys, file, field)
        # {value: ..., fitted_on: ...} as calibrate writes it, else the value itself (a
        # mapping of keys for a dict-valued parameter)
        if isinstance(raw, Mapping) and "value" in raw:
            value = raw["value"]
        elif isinstance(raw, Mapping) and not isinstance(shipped, Mapping):
            raise InputError("missing value; expected a number or {value: number, ...}",
                             file=file, field=field)
        else:
            value = raw
        for leaf_keys, v in _leaves(value, shipped, real_keys, file, field, str(name)):
            _check_bounds(".".join((base,) + tuple(map(str, leaf_keys))), v, file, field)
            out.append((base, leaf_keys, v))
    return out

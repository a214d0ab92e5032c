"""Calibration profiles: parameter overrides for one machine, applied reversibly.

A profile is a YAML file (``gpufabric calibrate`` writes them) whose ``params`` map names of
:data:`gpufabric.params.REGISTRY` to values. A name is a whole parameter
(``NVLS_KERNEL_SHARE: 0.7``) or one key of a dict-valued one, keys joined by dots
(``HOP_LAT_US.nvlink.Simple: 4.1``). A value is a number, or a mapping with ``value`` and,
as calibrate writes them, ``old`` (the shipped value), ``fitted_on`` (the measurement ids)
and ``residual_pct`` (the fit's median absolute error on those points)::

    profile: gpufabric calibration profile
    measurements: tests/data/calibration/collectives.yaml
    params:
      USABLE_RATE_SCALE.nvlink: {value: 0.8, old: 1.0, fitted_on: [my-dgx], residual_pct: 0.4}
      HOP_LAT_US.net.Simple: 21.0

:func:`apply` checks every name and value before changing anything (an unknown name, a value
of the wrong shape, not finite or outside the parameter's :func:`bounds` is one
:class:`~gpufabric.errors.InputError` naming the file and the field), then sets the value in
the registry and in every module attribute the models read (the constant itself, as the
collectives' ``P.NAME``, or its record, as the workloads' ``KERNEL_US.value``; a dict key is
set in place, so every alias of the dict sees it), and puts back the shipped values when its
``with`` block ends. A parameter no model reads from a module is refused.

Examples
--------
>>> from gpufabric.collectives import params as P
>>> with overrides({"HOP_LAT_US.nvlink.Simple": 4.1}):
...     P.HOP_LAT_US["nvlink"]["Simple"], P.REGISTRY["HOP_LAT_US"].value["nvlink"]["Simple"]
(4.1, 4.1)
>>> P.HOP_LAT_US["nvlink"]["Simple"]
3.4
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from gpufabric import params as _params
from gpufabric.errors import InputError, unknown_name
from gpufabric.fileio import load_yaml

#: Environment variable naming a profile every prediction command applies (``--profile``
#: wins over it).
ENV = "GPUFABRIC_PROFILE"

#: Highest latency (us) a profile may give one hop or fixed cost: a millisecond is far above
#: any GPU transport (NCCL's slowest figure is 14 us for a network hop).
LAT_CEILING_US = 1000.0

#: The modules that record parameters (imported before a name is looked up).
_RECORDING = ("gpufabric.collectives.params", "gpufabric.workloads.training",
              "gpufabric.workloads.inference.pd", "gpufabric.workloads.inference.serve",
              "gpufabric.workloads.video")


def _load_registry() -> dict[str, _params.Param]:
    import importlib
    for m in _RECORDING:
        with contextlib.suppress(ImportError):
            importlib.import_module(m)
    return _params.REGISTRY


def registry() -> dict[str, _params.Param]:
    """Every recorded constant of every layer (the modules that record them imported)."""
    return _load_registry()


def split(name: str) -> tuple[str, tuple[str, ...]]:
    """A profile name as (parameter, keys): ``HOP_LAT_US.nvlink.Simple`` ->
    ``('HOP_LAT_US', ('nvlink', 'Simple'))``; a registry name that itself holds dots is
    taken whole first.

    >>> split("HOP_LAT_US.nvlink.Simple")
    ('HOP_LAT_US', ('nvlink', 'Simple'))
    """
    reg = _load_registry()
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        head = ".".join(parts[:i])
        if head in reg:
            return head, tuple(parts[i:])
    return parts[0], tuple(parts[1:])


def bounds(name: str) -> tuple[float, bool, float]:
    """``(low, low_included, high)`` a value of parameter ``name`` (profile syntax) must
    respect, from physics and its unit: a share or fraction of a rate in (0, 1]; a latency in
    [0, :data:`LAT_CEILING_US`]; :data:`~gpufabric.network.capacity.USABLE_RATE_SCALE` above
    0 and at most raw / NCCL-usable rate of the catalog's fastest-to-saturate link of the
    transport (no link above its raw rate); anything else finite and >= 0.

    >>> bounds("PROTO_EFFICIENCY.LL128"), bounds("HOP_LAT_US.net.LL")
    ((0.0, False, 1.0), (0.0, True, 1000.0))
    """
    base, keys = split(name)
    p = _load_registry()[base]
    if base == "USABLE_RATE_SCALE":
        return 0.0, False, rate_scale_ceiling(keys[0] if keys else "")
    if p.unit == "us":
        return 0.0, True, LAT_CEILING_US
    if p.unit.startswith(("share of", "fraction of")):
        return 0.0, False, 1.0
    return 0.0, True, math.inf


def rate_scale_ceiling(transport: str) -> float:
    """The highest :data:`USABLE_RATE_SCALE` of a transport the catalog allows: raw rate over
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


def check(values: Mapping[str, Any], file: str = "profile") -> list[tuple[str, tuple, Any]]:
    """Every override of ``values`` (profile names -> numbers or ``{value: ...}``) as
    ``(parameter, keys, value)`` leaves, checked; bad input raises :class:`InputError`."""
    reg = _load_registry()
    out: list[tuple[str, tuple, Any]] = []
    for name, raw in values.items():
        field = f"params.{name}"
        base, keys = split(str(name))
        if base not in reg:
            raise unknown_name("parameter", base, list(reg)).located(file, field)
        shipped = reg[base].value
        if not _homes(base, shipped) and not _holders(reg[base]):
            raise InputError(f"no model reads {base} from a module constant; a profile cannot "
                             f"set it", file=file, field=field)
        for k in keys:
            if not isinstance(shipped, Mapping) or k not in map(str, shipped):
                allowed = list(map(str, shipped)) if isinstance(shipped, Mapping) else []
                if not allowed:
                    raise InputError(f"{'.'.join((base,) + keys[:keys.index(k)])} has no keys",
                                     file=file, field=field)
                raise unknown_name(f"key of {base}", k, allowed).located(file, field)
            shipped = shipped[next(s for s in shipped if str(s) == k)]
        # {value: ..., fitted_on: ...} as calibrate writes it, else the value itself (a
        # mapping of keys for a dict-valued parameter)
        if isinstance(raw, Mapping) and "value" in raw:
            value = raw["value"]
        elif isinstance(raw, Mapping) and not isinstance(shipped, Mapping):
            raise InputError("missing value; expected a number or {value: number, ...}",
                             file=file, field=field)
        else:
            value = raw
        real_keys = _real_keys(reg[base].value, keys)
        for leaf_keys, v in _leaves(value, shipped, real_keys, file, field, str(name)):
            _check_bounds(".".join((base,) + tuple(map(str, leaf_keys))), v, file, field)
            out.append((base, leaf_keys, v))
    return out


def _real_keys(value: Any, keys: tuple[str, ...]) -> tuple:
    """Profile keys (text) as the dict's own keys (which may be numbers)."""
    out = []
    for k in keys:
        real = next(s for s in value if str(s) == k)
        out.append(real)
        value = value[real]
    return tuple(out)


def _homes(base: str, shipped: Any) -> list[tuple[Any, str]]:
    """Module attributes the models read ``base`` from: ``(module, attr)`` of every loaded
    gpufabric module whose attribute ``base`` is the registry's value (or equal to it)."""
    out = []
    for mname, mod in list(sys.modules.items()):
        if not mname.startswith("gpufabric.") or mod is None:
            continue
        v = getattr(mod, base, None)
        if v is None or isinstance(v, type) or callable(v):
            continue
        if v is shipped or (type(v) is type(shipped) and v == shipped):
            out.append((mod, base))
    return out


def _holders(record: _params.Param) -> list[tuple[str, Any, Any]]:
    """Where the models hold the record itself (they read its ``.value``): ``("attr", module,
    name)`` or ``("item", dict, key)`` of a module-level dict (GEMM_EFF[hopper])."""
    out: list[tuple[str, Any, Any]] = []
    for mname, mod in list(sys.modules.items()):
        if not mname.startswith("gpufabric.") or mod is None:
            continue
        for attr, v in list(vars(mod).items()):
            if v is record:
                out.append(("attr", mod, attr))
            elif isinstance(v, dict) and any(x is record for x in v.values()):
                out += [("item", v, k) for k, x in v.items() if x is record]
    return out


def _get(container: Any, keys: tuple) -> Any:
    for k in keys:
        container = container[k]
    return container


@contextlib.contextmanager
def overrides(values: Mapping[str, Any], file: str = "profile") -> Iterator[list[dict]]:
    """Set the parameters of ``values`` (profile names -> values) for the ``with`` block;
    yields one ``{name, old, new}`` per value set. Checks everything first; restores the
    shipped values on exit, whatever happens inside."""
    leaves = check(values, file)
    reg = _params.REGISTRY
    undo: list[tuple[str, Any, Any, Any]] = []
    changes: list[dict] = []
    try:
        for base, keys, new in leaves:
            p = reg[base]
            name = ".".join((base,) + tuple(map(str, keys)))
            if keys:
                # a key of a dict: set it in place in every distinct dict holding the
                # parameter (the registry's and the modules'), so aliases see it too
                dicts = {id(p.value): p.value}
                for mod, attr in _homes(base, p.value):
                    d = getattr(mod, attr)
                    dicts[id(d)] = d
                old = _get(p.value, keys)
                for d in dicts.values():
                    parent = _get(d, keys[:-1])
                    undo.append(("item", parent, keys[-1], parent[keys[-1]]))
                    parent[keys[-1]] = new
            else:
                old = p.value
                rec = dataclasses.replace(p, value=new)
                for mod, attr in _homes(base, p.value):
                    undo.append(("attr", mod, attr, getattr(mod, attr)))
                    setattr(mod, attr, new)
                for kind, obj, key in _holders(p):
                    undo.append((kind, obj, key, p))
                    if kind == "item":
                        obj[key] = rec
                    else:
                        setattr(obj, key, rec)
                for r in (reg, _params.layer_registry(p.layer)):
                    undo.append(("item", r, base, r[base]))
                    r[base] = rec
            changes.append({"name": name, "old": old, "new": new})
        yield changes
    finally:
        for kind, obj, key, old in reversed(undo):
            if kind == "item":
                obj[key] = old
            else:
                setattr(obj, key, old)


def load(path: str) -> dict[str, Any]:
    """Read a profile file: its ``params`` mapping (bad input raises :class:`InputError`)."""
    data = load_yaml(path, what="a profile (YAML)")
    if not isinstance(data, dict) or not isinstance(data.get("params"), dict):
        raise InputError("expected a mapping with params: {NAME: value, ...} (a profile as "
                         "gpufabric calibrate writes it)", file=path, field="params")
    if not data["params"]:
        raise InputError("empty; expected at least one NAME: value", file=path, field="params")
    return data["params"]


@contextlib.contextmanager
def apply(path: str | None) -> Iterator[list[dict]]:
    """Apply the profile at ``path`` (None or empty: none) for the ``with`` block; yields the
    changes, one ``{name, old, new}`` per value."""
    if not path:
        yield []
        return
    if not os.path.exists(path):
        raise InputError("no such profile file", file=path)
    with overrides(load(path), file=path) as changes:
        yield changes

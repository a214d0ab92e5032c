"""Calibration profiles: parameter values for one machine, used as a new parameter value.

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

:func:`overrides` checks every name and value before anything is used (an unknown name, a
value of the wrong shape, not finite or outside the parameter's :func:`bounds` is one
:class:`~gpufabric.errors.InputError` naming the file and the field), makes a new
:class:`~gpufabric.params.Params` from the current one (:meth:`~gpufabric.params.Params.replace`)
and makes it the current value for its ``with`` block (:func:`gpufabric.params.use`): the
models read it there, in this thread and context only; nothing else changes, and the value
in use before comes back when the block ends. :func:`apply` does the same with a file.

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
import os
from collections.abc import Iterator, Mapping
from typing import Any

from gpufabric import params as _params
from gpufabric.errors import InputError
from gpufabric.fileio import load_yaml
from gpufabric.params import LAT_CEILING_US, bounds, check, rate_scale_ceiling, split

__all__ = ["ENV", "LAT_CEILING_US", "apply", "bounds", "check", "load", "load_params",
           "overrides", "rate_scale_ceiling", "registry", "split"]

#: Environment variable naming a profile every prediction command applies (``--profile``
#: wins over it).
ENV = "GPUFABRIC_PROFILE"


def registry() -> dict[str, _params.Param]:
    """Every recorded constant of every layer (the modules that record them imported)."""
    return _params.load_registry()


def _get(container: Any, keys: tuple) -> Any:
    for k in keys:
        container = container[k]
    return container


def changed(values: Mapping[str, Any], file: str = "profile"
            ) -> tuple[_params.Params, list[dict]]:
    """The current :class:`~gpufabric.params.Params` with ``values`` (profile names ->
    values) set, and one ``{name, old, new}`` per value set (checked first; bad input raises
    :class:`InputError`)."""
    leaves = check(values, file)
    now = _params.current()
    changes = [{"name": ".".join((base,) + tuple(map(str, keys))),
                "old": _params.plain(_get(now[base], keys)), "new": new}
               for base, keys, new in leaves]
    return now.with_leaves(leaves), changes


@contextlib.contextmanager
def overrides(values: Mapping[str, Any], file: str = "profile") -> Iterator[list[dict]]:
    """Use the current parameters with those of ``values`` (profile names -> values) set, for
    the ``with`` block; yields one ``{name, old, new}`` per value set. Checks everything
    first; the value in use before comes back on exit, whatever happens inside."""
    new, changes = changed(values, file)
    with _params.use(new):
        yield changes


def load(path: str) -> dict[str, Any]:
    """Read a profile file: its ``params`` mapping (bad input raises :class:`InputError`)."""
    data = load_yaml(path, what="a profile (YAML)")
    if not isinstance(data, dict) or not isinstance(data.get("params"), dict):
        raise InputError("expected a mapping with params: {NAME: value, ...} (a profile as "
                         "gpufabric calibrate writes it)", file=path, field="params")
    if not data["params"]:
        raise InputError("empty; expected at least one NAME: value", file=path, field="params")
    return data["params"]


def load_params(path: str, base: _params.Params | None = None) -> _params.Params:
    """The :class:`~gpufabric.params.Params` of the profile at ``path``: ``base`` (default the
    shipped values) with the file's values set.

    >>> load_params("tests/data/calibration/no-such.yaml")
    Traceback (most recent call last):
    ...
    gpufabric.errors.InputError: tests/data/calibration/no-such.yaml: no such profile file
    """
    if not os.path.exists(path):
        raise InputError("no such profile file", file=path)
    return (base or _params.SHIPPED).replace(load(path), file=path)


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

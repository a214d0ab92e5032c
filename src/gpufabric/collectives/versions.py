"""NCCL releases: the algorithms a release has and the latency tables its tuner chooses by.

The collective model's NCCL constants are those of one release (``params.NCCL_VERSION``).
Older releases lack some algorithms (no NVLS before 2.17.1, no NVLS tree before 2.18.1, no
PAT before 2.23.4) and their tuners estimate latencies from other tables, so they choose
other algorithms and protocols. ``data/nccl_versions.yaml`` holds, per era of releases, what
NCCL's ``src/graph/tuning.cc`` states at the first release tag of the era (its commit named);
:func:`params_for` turns a release into the :class:`~gpufabric.params.Params` of its tables.

:func:`use` makes a release current for a block (``gpufabric collective --nccl`` and a
measurements entry's ``stack: {nccl: ...}`` do so): the algorithms it lacks are gone, and the
collective model chooses the algorithm and protocol with the release's tables
(:func:`chooser`), as that release's tuner does, but times the choice with the current
tables. NCCL raised its estimates over the releases (a ring LL collective's fixed cost went
from 3.6 to 6.6 us in 2.18), and on the measurements of older releases in our files the
newer tables are the closer estimate of what the hardware costs (docs/collectives.md).

Examples
--------
>>> parse("2.18.5-1"), parse("v2.21"), parse("2.26.6+cuda12.8")
((2, 18, 5), (2, 21, 0), (2, 26, 6))
>>> era((2, 20, 5))["from"], era((2, 30, 0))["from"]
('2.19.1', '2.23.4')
>>> from gpufabric.collectives import params as P
>>> with use("2.16.5"):
...     missing(), P.BASE_LAT_US["ring"]["LL"], chooser()["BASE_LAT_US"]["ring"]["LL"]
(('nvls', 'nvls_tree', 'pat'), 6.6, 3.6)
>>> missing(), chooser() is None, release() is None
((), True, True)
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from contextvars import ContextVar
from functools import cache, lru_cache
from typing import Any

from gpufabric import params as _params
from gpufabric.errors import InputError
from gpufabric.fileio import load_data

Version = tuple[int, int, int]
PROTOCOLS = ("LL", "LL128", "Simple")
#: what a release is written as: 2.18.5, v2.18.5-1, 2.26.6+cuda12.8, 2.21
_FORM = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?(?:-\d+)?(?:\+\S*)?$")


def parse(text: Any, field: str = "nccl") -> Version:
    """A release as (major, minor, patch); bad input raises :class:`InputError` naming
    ``field``."""
    m = _FORM.match(str(text).strip()) if isinstance(text, (str, int, float)) else None
    if m is None:
        raise InputError(f"got {text!r}; expected an NCCL release such as 2.18.5 (also "
                         f"v2.18.5-1, 2.26.6+cuda12.8 or 2.21)", field=field)
    v = (int(m[1]), int(m[2]), int(m[3] or 0))
    first = eras()[0]["version"]
    if v < first:
        raise InputError(f"NCCL {_text(v)} is older than the releases modelled (from "
                         f"{_text(first)})", field=field)
    return v


def _text(v: Version) -> str:
    return ".".join(map(str, v))


@cache
def eras() -> list[dict[str, Any]]:
    """The eras of ``data/nccl_versions.yaml``, oldest first, each with its start as
    ``version`` (a tuple)."""
    rows = load_data("gpufabric.collectives", "data", "nccl_versions.yaml")
    out = [dict(r, version=tuple(int(x) for x in str(r["from"]).split("."))) for r in rows]
    return sorted(out, key=lambda r: r["version"])


def era(v: Version) -> dict[str, Any]:
    """The era a release belongs to: the newest one starting at or below it."""
    return [e for e in eras() if e["version"] <= v][-1]


def leaves(v: Version) -> list[tuple[str, tuple, Any]]:
    """The constants a release sets, as ``(parameter, keys, value)`` leaves
    (:meth:`gpufabric.params.Params.with_leaves`): only the rows NCCL's tables give, so a
    profile's other values (the shared-memory rows, fitted constants) stay as they are."""
    e = era(v)
    out: list[tuple[str, tuple, Any]] = []
    for algo in ("ring", "tree"):
        for p, x in zip(PROTOCOLS, e["base_lat"][algo], strict=True):
            out.append(("BASE_LAT_US", (algo, p), float(x)))
    for p, x in zip(PROTOCOLS, e["base_lat"]["ring"], strict=True):
        out.append(("BASE_LAT_US", ("p2p", p), float(x)))
    for name, key in (("HOP_LAT_US", "hop_lat"), ("TREE_HOP_LAT_US", "tree_hop_lat")):
        for kind, row in e[key].items():
            for p, x in zip(PROTOCOLS, row, strict=True):
                out.append((name, (kind, p), float(x)))
    if e.get("nvls_lat") is not None:
        out.append(("BASE_LAT_US", ("nvls", "Simple"), 0.0))
        out.append(("NVLS_LAT_US", (), float(e["nvls_lat"])))
    if e.get("nvls_tree_net_lat") is not None:
        out.append(("NVLS_TREE_NET_LAT_US", (), float(e["nvls_tree_net_lat"])))
    return out


def params_for(release: str | Version, base: _params.Params | None = None) -> _params.Params:
    """The parameters of ``base`` (the current ones by default) with NCCL ``release``'s
    latency tables and algorithms."""
    v = release if isinstance(release, tuple) else parse(release)
    return (base if base is not None else _params.current()).with_leaves(leaves(v))


#: the NCCL release in use (None: the one the shipped constants are)
_RELEASE: ContextVar[Version | None] = ContextVar("gpufabric_nccl_release", default=None)


def release() -> Version | None:
    """The NCCL release in use in this context (:func:`use`), or None."""
    return _RELEASE.get()


def missing() -> tuple[str, ...]:
    """The modelled algorithms the NCCL release in use lacks (none without one)."""
    v = _RELEASE.get()
    return () if v is None else tuple(era(v).get("missing") or ())


@lru_cache(maxsize=64)
def _chooser(v: Version, base: _params.Params) -> _params.Params:
    return params_for(v, base)


def chooser() -> _params.Params | None:
    """The parameters NCCL's tuner chooses by in this context: the release in use's tables
    over the current parameters (a profile in use stays in use), or None without one (the
    current parameters choose, as they time)."""
    v = _RELEASE.get()
    return None if v is None else _chooser(v, _params.current())


@contextlib.contextmanager
def use(release: str | Version | None) -> Iterator[None]:
    """Make NCCL ``release`` the one in use for the ``with`` block: its missing algorithms
    are gone and its tables choose (:func:`chooser`); ``None``: nothing changes."""
    if release is None:
        yield
        return
    token = _RELEASE.set(release if isinstance(release, tuple) else parse(release))
    try:
        yield
    finally:
        _RELEASE.reset(token)

"""Max-min fair sharing of directed link capacities, and a fluid simulation over it.

Note: max-min fairness is not monotone. Slowing one flow can free a shared link for another
and end a set of transfers sooner (see tests/test_network.py for a four-number example), so
"more contention never helps" holds for :attr:`FluidResult.drain_s`, the busiest link's busy
time, not always for the re-shared makespan.

A *flow* crosses a set of directed edges (a link in one direction). At every instant the
flows get the max-min fair allocation (progressive filling): all rates rise together until an
edge is full; the flows through that edge freeze; the others keep rising. When a flow has sent
its bytes it leaves and the others are re-shared. This is the classic fluid model of TCP-like or
credit-based transports sharing links (InfiniBand, NVLink and PCIe all share by credits).

Examples
--------
Two flows share one 10 GB/s edge, a third crosses only a second edge:

>>> import numpy as np
>>> rates = maxmin_rates([np.array([0]), np.array([0, 1]), np.array([1])],
...                      np.array([10.0, 30.0]))
>>> rates.tolist()
[5.0, 5.0, 25.0]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_EPS = 1e-12


def maxmin_rates(paths: list[np.ndarray], caps: np.ndarray,
                 flow_caps: np.ndarray | None = None,
                 weights: list[np.ndarray] | None = None) -> np.ndarray:
    """Max-min fair rates of flows over edges.

    Parameters
    ----------
    paths : list of int arrays
        Edge indices each flow crosses (an edge at most once per flow).
    caps : array
        Capacity of each edge (any rate unit; the result is in that unit).
    flow_caps : array, optional
        A per-flow ceiling (``inf`` for none), e.g. a copy engine or a staged copy.
    weights : list of float arrays, optional
        Capacity used per unit of rate on each edge of each flow (default 1): a copy bounced
        through host memory uses DRAM twice (write, then read) per byte delivered.

    Returns
    -------
    numpy.ndarray
        Rate of each flow. A flow crossing no edge and with no ceiling gets ``inf``.
    """
    nf = len(paths)
    if nf == 0:
        return np.zeros(0)
    caps = np.asarray(caps, dtype=float)
    ne = len(caps)
    if weights is None:
        weights = [np.ones(len(p)) for p in paths]
    if flow_caps is not None:
        fc = np.asarray(flow_caps, dtype=float)
        has = np.isfinite(fc)
        # a per-flow ceiling is a private edge
        extra = np.flatnonzero(has)
        caps = np.concatenate([caps, fc[has]])
        paths = list(paths)
        weights = list(weights)
        for k, f in enumerate(extra):
            paths[f] = np.concatenate([paths[f], [ne + k]]).astype(int)
            weights[f] = np.concatenate([weights[f], [1.0]])
        ne = len(caps)
    lens = np.fromiter((len(p) for p in paths), dtype=int, count=nf)
    inc_f = np.repeat(np.arange(nf), lens)
    inc_e = np.concatenate(paths).astype(int) if lens.sum() else np.zeros(0, dtype=int)
    inc_w = np.concatenate(weights).astype(float) if lens.sum() else np.zeros(0)
    rate = np.full(nf, np.inf)
    active = lens > 0
    rem = caps.copy()
    level = 0.0
    while active.any():
        act_inc = active[inc_f]
        cnt = np.bincount(inc_e[act_inc], weights=inc_w[act_inc], minlength=ne)
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(cnt > 0, rem / cnt, np.inf)
        s = share.min()
        if not np.isfinite(s):
            break
        s = max(s, 0.0)
        full = share <= s * (1 + 1e-9) + _EPS
        # raise every active flow by s; flows on full edges freeze
        rem -= s * cnt
        level += s
        frozen_inc = act_inc & full[inc_e]
        frozen = np.zeros(nf, dtype=bool)
        frozen[inc_f[frozen_inc]] = True
        rate[frozen] = level
        active &= ~frozen
    return rate


@dataclass
class FluidResult:
    """Outcome of :func:`fluid`.

    Attributes
    ----------
    finish_s : numpy.ndarray
        When each flow has delivered its last byte (seconds, from the common start).
    edge_bytes : numpy.ndarray
        Bytes carried by each edge.
    makespan_s : float
        When the last flow finished.
    drain_s : float
        The busiest edge's busy time, max over edges of bytes / capacity: a lower bound of
        ``makespan_s``, equal to it when every flow is held back only by shared edges (the
        steady state of pipelined collectives). Unlike the max-min makespan it never falls
        when traffic is added or a capacity lowered.
    """

    finish_s: np.ndarray
    edge_bytes: np.ndarray
    makespan_s: float
    drain_s: float = 0.0


def fluid(paths: list[np.ndarray], caps_Bps: np.ndarray, size_bytes: np.ndarray,
          flow_caps_Bps: np.ndarray | None = None,
          weights: list[np.ndarray] | None = None) -> FluidResult:
    """Fluid simulation: flows start together and are re-shared max-min fairly as they end.

    Parameters
    ----------
    paths : list of int arrays
        Edges of each flow.
    caps_Bps : array
        Edge capacities in bytes per second.
    size_bytes : array
        Bytes of each flow.
    flow_caps_Bps : array, optional
        Per-flow ceilings in bytes per second.
    weights : list of float arrays, optional
        Bytes each edge carries per byte of the flow (default 1).

    Examples
    --------
    >>> import numpy as np
    >>> r = fluid([np.array([0]), np.array([0])], np.array([10.0]), np.array([10.0, 30.0]))
    >>> r.finish_s.tolist(), r.makespan_s
    ([2.0, 4.0], 4.0)
    """
    size = np.asarray(size_bytes, dtype=float)
    nf = len(paths)
    finish = np.zeros(nf)
    ne = len(caps_Bps)
    edge_bytes = np.zeros(ne)
    if weights is None:
        weights = [np.ones(len(p)) for p in paths]
    for p, w, b in zip(paths, weights, size, strict=True):
        if len(p):
            np.add.at(edge_bytes, p, b * w)
    remaining = size.copy()
    alive = remaining > 0
    t = 0.0
    fc = None if flow_caps_Bps is None else np.asarray(flow_caps_Bps, dtype=float)
    while alive.any():
        idx = np.flatnonzero(alive)
        r = maxmin_rates([paths[i] for i in idx], caps_Bps,
                         None if fc is None else fc[idx], [weights[i] for i in idx])
        if np.all(np.isinf(r)):      # nothing constrains them: instantaneous
            finish[idx] = t
            break
        if np.any(r <= 0):
            raise ValueError("a flow crosses a link of zero capacity")
        dt_each = remaining[idx] / r
        dt = dt_each.min()
        done = dt_each <= dt * (1 + 1e-9)
        t += dt
        inf = np.isinf(r)
        remaining[idx] -= np.where(inf, remaining[idx], np.where(inf, 0.0, r) * dt)
        finish[idx[done]] = t
        remaining[idx[done]] = 0.0
        alive[idx[done]] = False
    caps = np.asarray(caps_Bps, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        busy = np.where(edge_bytes > 0, edge_bytes / caps, 0.0)
    return FluidResult(finish, edge_bytes, float(finish.max()) if nf else 0.0,
                       float(busy.max()) if len(busy) else 0.0)

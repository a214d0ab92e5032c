"""Fit the collective model's physical parameters to one machine's measurements.

:func:`calibrate` reads a collectives measurements file (docs/calibration.md), splits its
points into the ones it fits and the ones it holds out (every other message size of each
entry, one collective, or none), and fits only what the fitted points constrain, among:

- ``USABLE_RATE_SCALE.<transport>`` (nvlink, pcie, net: the usable share of the links'
  rate, large messages), bounded so that no link of the system runs above its raw rate;
- ``HOP_LAT_US.<transport>.<protocol>`` and ``TREE_HOP_LAT_US.<transport>.<protocol>`` (one
  ring step, one tree hop: small messages), in [0, ``profile.LAT_CEILING_US``];
- ``PROTO_EFFICIENCY.LL`` and ``.LL128`` (a protocol's share of the rate, in (0, 1]) where an
  entry forces that one protocol (Simple's is the reference, 1 by definition),
- for hosts of CPU ranks (``gpu: none``, :mod:`gpufabric.collectives.host`):
  ``HOST_COPY_SHARE.<transport>`` (shm, tcp: the share of a rank's copy rate, in (0, 1]),
  ``HOST_LAT_US.<transport>`` (one message) and ``HOST_OVERSUB_WAIT_MS`` (the wait for a
  descheduled peer when the ranks outnumber the cores),

for the transports the measured systems have. Which of them the points constrain is read
from the model itself: each is changed by :data:`STEP` and the predictions of the fitted
points compared; one that moves no point's time by :data:`PINS` of its own relative change
is not constrained, and one that moves them only as
the parameters already chosen do (in order: shares, latencies, efficiencies) cannot be told
apart from those. Neither moves. The others are fitted with
:func:`scipy.optimize.least_squares` within their bounds, on the log of predicted over
measured time of each point (the log of busbw's ratio, negated: large and small points
weigh alike, relative errors as validate scores them).

The held-out points are validated (:func:`gpufabric.collectives.validate.validate_entries`)
with the shipped parameters and with the fitted ones: the before / after errors.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any

import numpy as np

from gpufabric import params as _params
from gpufabric.cache import BoundedDict
from gpufabric.collectives import params as P
from gpufabric.collectives.validate import (entry_error, entry_model, entry_rows, load_entries,
                                            predict_entry, validate_entries)
from gpufabric.errors import InputError
from gpufabric.measure import profile
from gpufabric.network.capacity import PARAMS as NETWORK_PARAMS

#: The transports whose share and hop latency calibrate may fit.
TRANSPORTS = ("nvlink", "pcie", "net")
#: Relative change of a parameter (absolute, in us, for a latency of 0) when its sensitivity
#: is measured.
STEP = 0.05
#: Least elasticity (relative change of a fitted point's time per relative change of the
#: parameter) at some fitted point for a parameter to count as constrained: a hop latency is
#: not pinned by a gigabyte message whose time it moves by a millionth.
PINS = 0.02
#: Least share of a parameter's effect on the points that the parameters chosen before it
#: cannot reproduce, for it to be fitted on its own.
INDEPENDENT = 0.05
#: Hold-out modes.
HOLD_OUT = ("sizes", "ops", "none")


def _fmt_size(n: int) -> str:
    for u, v in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if n >= v and n % v == 0:
            return f"{n // v}{u}"
    return str(n)


def _kind(k: str) -> str | None:
    return {"nvlink": "nvlink", "xgmi": "nvlink", "pcie": "pcie", "net": "net"}.get(k)


def rate_ceiling(topos: list, transport: str) -> float:
    """The highest ``USABLE_RATE_SCALE`` of ``transport`` that keeps every such link of
    ``topos`` at or under its raw rate (the catalog's ceiling when they have none)."""
    from gpufabric.network.capacity import USABLE_RATE_SCALE, usable_GBps
    scale = USABLE_RATE_SCALE.value[transport]
    ratios = [ln.bw_GBps / (usable_GBps(ln, t) / scale) for t in topos for ln in t.links
              if _kind(ln.kind) == transport and ln.bw_GBps > 0 and usable_GBps(ln, t) > 0]
    return min(ratios) if ratios else profile.rate_scale_ceiling(transport)


def share_of_raw(topos: list, transport: str) -> float | None:
    """The usable share of the raw rate of ``transport``'s links now (the median over the
    systems' links), for the report."""
    from gpufabric.network.capacity import usable_GBps
    r = [usable_GBps(ln, t) / ln.bw_GBps for t in topos for ln in t.links
         if _kind(ln.kind) == transport and ln.bw_GBps > 0]
    return statistics.median(r) if r else None


def _split(entries: list[dict], mode: str, path: str) -> tuple[list[dict], list[dict], str]:
    """(fitted entries, held-out entries, what was held out), each entry with its share of
    the points."""
    if mode == "none":
        return entries, [], "nothing (--hold-out none)"
    if mode == "ops":
        ops = list(dict.fromkeys(e["collective"] for e in entries))
        if len(ops) < 2:
            raise InputError(f"the file measures one collective ({ops[0]}); hold out sizes "
                             f"or none", file=path, field="--hold-out")
        out = ops[-1]
        return ([e for e in entries if e["collective"] != out],
                [e for e in entries if e["collective"] == out],
                f"every {out} point")
    fit, held = [], []
    for e in entries:
        pts = sorted(e["points"], key=lambda p: p["size"])
        fit.append({**e, "points": pts[0::2]})
        if pts[1::2]:
            held.append({**e, "points": pts[1::2]})
    return fit, held, "every other message size of each entry"


def _candidates(topos: list, entries: list[dict]) -> list[str]:
    kinds = [k for k in TRANSPORTS
             if any(_kind(ln.kind) == k for t in topos for ln in t.links)]
    names = [f"USABLE_RATE_SCALE.{k}" for k in kinds]
    # hosts of CPU ranks (gpu: none): their transport's share of the copy rate and latency
    from gpufabric.collectives.host import HostSystem
    host_ts = [k for k in P.HOST_TRANSPORTS
               if any(isinstance(t, HostSystem) and t.transport == k for t in topos)]
    names += [f"HOST_COPY_SHARE.{k}" for k in host_ts]
    for table in ("HOP_LAT_US", "TREE_HOP_LAT_US"):
        names += [f"{table}.{k}.{p}" for k in kinds for p in P.PROTOCOLS]
    names += [f"HOST_LAT_US.{k}" for k in host_ts]
    if host_ts:
        names.append("HOST_OVERSUB_WAIT_MS")
    from gpufabric.collectives import check_proto
    pinned = {check_proto(e["protocol"]) for e in entries if e["protocol"] is not None}
    names += [f"PROTO_EFFICIENCY.{p}" for p in ("LL", "LL128") if (p,) in pinned]
    return names


def _value(name: str) -> float:
    base, keys = profile.split(name)
    v: Any = P.REGISTRY[base].value
    for k in keys:
        v = v[k]
    return float(v)


class _Fit:
    """The fitted points and their residuals under trial parameter values.

    The models of the entries are kept per value of the network's parameters
    (:data:`gpufabric.network.capacity.PARAMS`: the link capacities and the planner's
    simulations depend on those alone; of the candidates, the transports' rate shares); the
    plans, which hold the latencies, are made again at every evaluation."""

    #: network parameter values whose models are kept (the fit's Jacobian moves one at a time)
    KEEP = 4

    def __init__(self, entries: list[dict], path: str, system: str | None):
        self.entries, self.path, self.system = entries, path, system
        self.evals = 0
        self._models: BoundedDict[str, list] = BoundedDict(self.KEEP, refresh=True)

    def _models_for(self) -> list:
        """The entries' models for the current parameters' link rates (a model's network is
        that of the parameters it was built with; its plans are made again)."""
        key = _params.current().key_of(NETWORK_PARAMS)
        ms = self._models.get(key)
        if ms is None:
            ms = [entry_model(e, self.path, self.system) for e in self.entries]
        else:
            for m in ms:
                m._plans.clear()
        self._models[key] = ms                      # most recently used last
        return ms

    def rows(self, values: dict[str, float]) -> list[dict]:
        with profile.overrides(values, file=self.path):
            out = []
            for e, m in zip(self.entries, self._models_for(), strict=True):
                preds, note = predict_entry(e, self.path, self.system, m)
                out += entry_rows(e, preds, note)
        self.evals += 1
        return out

    def residuals(self, values: dict[str, float]) -> np.ndarray:
        return np.array([math.log(r["predicted_time_us"] / r["measured_time_us"])
                         for r in self.rows(values) if r["measured_time_us"]])


def calibrate(path: str, system: str | None = None, hold_out: str = "sizes",
              on_step: Callable[[str], None] | None = None) -> dict:
    """Fit what the points of measurements file ``path`` constrain; see the module.

    Returns ``{file, system, hold_out, held_out, fitted_points, held_out_points, params,
    unpinned, before, after, residual_pct, profile}``: ``params`` one ``{name, old, new,
    pinned_by, fitted_on, residual_pct}`` per fitted parameter (``share_old`` /
    ``share_new`` of the raw rate for a transport's share), ``unpinned`` one
    ``{name, why}`` per candidate left as it is,
    ``residual_pct`` the median absolute error of the fitted points' time before and after,
    ``before`` / ``after`` validate's summary of the held-out points with the shipped and the
    fitted values, ``profile`` the overrides as :func:`gpufabric.measure.profile.apply` reads
    them."""
    from gpufabric.fileio import load_yaml
    from gpufabric.workloads.inference.validate import is_inference_file
    from gpufabric.workloads.validate import is_training_file
    if hold_out not in HOLD_OUT:
        raise InputError(f"unknown hold-out '{hold_out}'; allowed: {', '.join(HOLD_OUT)}",
                         field="--hold-out")
    data = load_yaml(path, what="a measurements file (YAML)")
    kind = ("an inference" if is_inference_file(path) else
            "a training" if is_training_file(data) else None)
    if kind:
        raise InputError(f"{kind} measurements file; calibrate fits the collective model: a "
                         f"file of nccl-tests points (docs/calibration.md)", file=path)
    topos, usable, skipped = _usable(load_entries(path), path, system)
    fit_entries, held_entries, held_what = _split(usable, hold_out, path)
    fit = _Fit([e for e in fit_entries if e["points"]], path, system)
    if not fit.entries:
        raise InputError("no points left to fit after holding out; use --hold-out none",
                         file=path, field="--hold-out")
    base = fit.residuals({})
    if base.size == 0:
        raise InputError("no points to fit (none has a measured time)", file=path)
    rows0 = [r for r in fit.rows({}) if r["measured_time_us"]]
    chosen, unpinned, moved_by = _pinned(fit, base, rows0, topos, on_step)
    fitted = _solve(fit, chosen, topos)
    after_rows = fit.rows(fitted)
    result: dict[str, Any] = {
        "file": path, "system": system or "each entry's own", "hold_out": hold_out,
        "held_out": held_what, "skipped": skipped,
        "fitted_points": int(base.size),
        "held_out_points": sum(len(e["points"]) for e in held_entries),
        "params": [_record(n, fitted[n], moved_by[n], after_rows, topos) for n in chosen],
        "unpinned": unpinned, "before": None, "after": None,
        "residual_pct": {"before": _median_pct(rows0), "after": _median_pct(after_rows)}}
    result["profile"] = {r["name"]: {"value": r["new"], "old": r["old"],
                                     "fitted_on": r["fitted_on"],
                                     "residual_pct": r["residual_pct"]}
                         for r in result["params"]}
    if held_entries:
        result["before"] = _summary(held_entries, path, system, {})
        result["after"] = _summary(held_entries, path, system, fitted)
    result["evaluations"] = fit.evals
    return result


def _usable(entries: list[dict], path: str, system: str | None
            ) -> tuple[list, list[dict], list[str]]:
    """(topologies, entries, skip notes): the systems, built once; entries that cannot be
    built are left out, as validate skips them (none left: the first one's error)."""
    from gpufabric.collectives import host
    from gpufabric.topology.build import from_spec, load
    given = host.load_host(system) if system is not None else None
    if system is not None and given is None:
        load(system)          # a system that does not build: its own one-line error
    topos, usable, skipped = [], [], []
    first: InputError | None = None
    for e in entries:
        if not e["points"]:
            continue
        try:
            topo = (given if given is not None else load(system) if system is not None else
                    host.host_system(dict(e["system"]), name=e["id"], file=path)
                    if host.is_host(e["system"]) else
                    from_spec(dict(e["system"]), name=e["id"], file=path))
            predict_entry(e, path, system)
        except InputError as exc:
            err = entry_error(e, path, exc)
            first = first or err
            skipped.append(str(err))
            continue
        topos.append(topo)
        usable.append(e)
    if not usable:
        if first is not None:
            raise first
        raise InputError("no points to fit; expected entries with points: [{size, busbw | "
                         "time_us}, ...]", file=path)
    return topos, usable, skipped


def _pinned(fit: _Fit, base: np.ndarray, rows0: list[dict], topos: list,
            on_step: Callable[[str], None] | None
            ) -> tuple[list[str], list[dict], dict[str, list[dict]]]:
    """(chosen, unpinned, moved_by): the candidates the fitted points constrain and tell apart
    (each moves some point's time by :data:`PINS` of its own change, and not only as the
    ones already chosen do), why each other one is left as it is, and the points each moves."""
    cols: list[np.ndarray] = []
    chosen: list[str] = []
    unpinned: list[dict] = []
    moved_by: dict[str, list[dict]] = {}
    for name in _candidates(topos, fit.entries):
        old = _value(name)
        trial = old * (1 + STEP) if old > 0 else STEP
        if trial > _bounds(name, topos)[2]:
            trial = old * (1 - STEP)
        d = fit.residuals({name: trial}) - base
        if on_step:
            on_step(name)
        # elasticity of each point's time (per relative change; per us for a latency of 0)
        col = d / (math.log(trial / old) if old > 0 else trial)
        pins = np.abs(col) >= PINS
        if not pins.any():
            unpinned.append({"name": name, "why": "moves no fitted point's prediction"
                             if not np.any(d) else f"moves no fitted point's time by "
                             f"{PINS:.0%} of its own change"})
            continue
        if cols:
            a = np.array(cols).T
            coef, *_ = np.linalg.lstsq(a, col, rcond=None)
            rest = np.linalg.norm(col - a @ coef) / np.linalg.norm(col)
            if rest < INDEPENDENT:
                alike = [chosen[i] for i in np.argsort(-np.abs(coef))[:2] if abs(coef[i]) > 1e-9]
                unpinned.append({"name": name, "why": "moves the fitted points only as "
                                 + " and ".join(alike) + " do"})
                continue
        cols.append(col)
        chosen.append(name)
        moved_by[name] = [r for r, x in zip(rows0, pins, strict=True) if x]
    return chosen, unpinned, moved_by


def _solve(fit: _Fit, chosen: list[str], topos: list) -> dict[str, float]:
    """The chosen parameters' values that best fit the points (bounded least squares on
    their relative change, bounds from physics)."""
    from scipy.optimize import least_squares
    if not chosen:
        return {}
    olds = np.array([_value(n) for n in chosen])
    scale = np.where(olds > 0, olds, 1.0)
    bnds = [_bounds(n, topos) for n in chosen]
    lows = np.array([(b[0] if b[1] else b[0] + 1e-6 * s) / s
                     for b, s in zip(bnds, scale, strict=True)])
    highs = np.array([b[2] / s for b, s in zip(bnds, scale, strict=True)])
    x0 = np.clip(olds / scale, lows, highs)

    def fun(x: np.ndarray) -> np.ndarray:
        return fit.residuals(dict(zip(chosen, (x * scale).tolist(), strict=True)))

    sol = least_squares(fun, x0, bounds=(lows, highs), method="trf", diff_step=1e-4,
                        x_scale=1.0, xtol=1e-8, ftol=1e-8, gtol=1e-8, max_nfev=200)
    return {n: float(f"{v:.6g}") for n, v in zip(chosen, (sol.x * scale).tolist(), strict=True)}


def _record(n: str, new: float, rows: list[dict], after_rows: list[dict], topos: list) -> dict:
    """One fitted parameter: old and new value, the points that pinned it, their residual."""
    by_id: dict[str, list[int]] = {}
    for r in rows:
        by_id.setdefault(r["id"], []).append(r["size"])
    moved = {(x["id"], x["size"]) for x in rows}
    rec = {"name": n, "old": _value(n), "new": new, "fitted_on": list(by_id),
           "pinned_by": [f"{i} ({', '.join(_fmt_size(s) for s in sorted(v))})"
                         for i, v in by_id.items()],
           "residual_pct": _median_pct([r for r in after_rows
                                        if (r["id"], r["size"]) in moved])}
    if n.startswith("USABLE_RATE_SCALE."):
        t = n.split(".", 1)[1]
        rec["share_old"] = share_of_raw(topos, t)
        with profile.overrides({n: new}):
            rec["share_new"] = share_of_raw(topos, t)
    return rec


def _bounds(name: str, topos: list) -> tuple[float, bool, float]:
    lo, lo_in, hi = profile.bounds(name)
    if name.startswith("USABLE_RATE_SCALE."):
        hi = min(hi, rate_ceiling(topos, name.split(".", 1)[1]))
    return lo, lo_in, hi


def _median_pct(rows: list[dict]) -> float | None:
    e = [abs(r["time_err_pct"]) for r in rows if r["time_err_pct"] is not None]
    return round(statistics.median(e), 3) if e else None


def _summary(entries: list[dict], path: str, system: str | None,
             values: dict[str, float]) -> dict:
    with profile.overrides(values, file=path):
        res = validate_entries(entries, path, system=system)
    return res["summary"] | {"rows": [
        {k: r[k] for k in ("id", "collective", "size", "metric", "error_pct")}
        for r in res["points"]]}


def profile_yaml(result: dict) -> str:
    """The profile file of a :func:`calibrate` result."""
    import yaml

    class _Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True
    doc = {"profile": "gpufabric calibration profile",
           "measurements": result["file"], "system": result["system"],
           "hold_out": f"{result['hold_out']}: {result['held_out']}",
           "unpinned": [u["name"] for u in result["unpinned"]],
           "params": result["profile"]}
    return ("# written by gpufabric calibrate; apply with --profile FILE or GPUFABRIC_PROFILE\n"
            + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=100))


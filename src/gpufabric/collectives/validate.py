"""Predicted against measured: run every entry of a measurements file.

The file follows the schema of docs/calibration.md: a list of entries, each with ``id``,
``system`` (the shorthand spec), ``collective``, ``ranks``, optional ``per_node`` (ranks on each
node, default: fill nodes), ``algorithm`` and ``protocol`` (what the run allowed, as NCCL_ALGO and
NCCL_PROTO take them: one name or a list), and ``points`` (``size`` with ``busbw`` in GB/s or
``time_us``). Any such file works, not only ours.

Each point is a :func:`gpufabric.validation.point` record (``metric`` ``busbw`` or
``time_us``, whichever the file gives; ``status`` fitted, looked-at or held-out) and the
summary is :func:`gpufabric.validation.summarize`'s: the held-out figures first, ``fitted``,
``looked_at``, ``all`` and ``by_metric`` beside them, and in every block ``by_size``: ``large``
(absolute % error of busbw over points of 64 MiB and more) and ``small`` (absolute % error of
time over points below 64 KiB), each ``{median_abs_pct, p90_abs_pct, max_abs_pct, points}``,
and ``by_stack``: the errors by what the entry's source says of its software stack (its NCCL
release, ``unstated``, or nothing recorded). A point measured as time is compared as busbw
when large, and a point measured as busbw is compared as time when small (each derived from
the other with the nccl-tests definitions).
:func:`validate_many` runs several files and summarizes all their points together (the
headline over several hold-outs at once).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from gpufabric import validation
from gpufabric.collectives import (OPS, Model, busbw_factor, check_algo, check_proto, model,
                                   params, versions)
from gpufabric.collectives.versions import Version
from gpufabric.errors import InputError
from gpufabric.fileio import load_yaml


def _need(entry: dict, key: str, where: str, file: str, kind, allowed: str) -> Any:
    if key not in entry:
        raise InputError(f"missing; expected {allowed}", file=file, field=f"{where}.{key}")
    v = entry[key]
    if kind is not None and (not isinstance(v, kind) or isinstance(v, bool)):
        raise InputError(f"got {v!r}; expected {allowed}", file=file, field=f"{where}.{key}")
    return v


def _positive_number(v: Any) -> bool:
    """A finite number above 0 (not a bool)."""
    return (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            and v > 0)


def load_entries(path: str) -> list[dict]:
    """Read and check a measurements file; bad input raises :class:`InputError`."""
    data = load_yaml(path, what="a measurements file (YAML)")
    data, file_mark = validation.entries_of(data, path)
    if not isinstance(data, list) or not data:
        raise InputError("expected a list of entries (id, system, collective, ranks, points)",
                         file=path)
    out = []
    for i, e in enumerate(data):
        where = f"[{i}]"
        if not isinstance(e, dict):
            raise InputError("expected a mapping with id, system, collective, ranks, points",
                             file=path, field=where)
        eid = str(e.get("id", where))
        where = f"[{i}]({eid})" if "id" in e else where
        _need(e, "system", where, path, dict, "a system spec mapping (gpu, nodes, ...)")
        op = _need(e, "collective", where, path, str, "one of " + ", ".join(OPS))
        if op not in OPS:
            raise InputError(f"unknown collective '{op}'; allowed: {', '.join(OPS)}",
                             file=path, field=f"{where}.collective")
        ranks = e.get("ranks")
        if ranks is not None and (not isinstance(ranks, int) or isinstance(ranks, bool)
                                  or ranks < 1):
            raise InputError(f"got {ranks!r}; expected a positive integer", file=path,
                             field=f"{where}.ranks")
        per_node = e.get("per_node")
        if per_node is not None and (not isinstance(per_node, int) or isinstance(per_node, bool)
                                     or per_node < 1):
            raise InputError(f"got {per_node!r}; expected a positive integer (ranks on each "
                             f"node)", file=path, field=f"{where}.per_node")
        try:
            algo = check_algo(e.get("algorithm"))
        except InputError as exc:
            raise InputError(exc.message, file=path, field=f"{where}.algorithm") from None
        proto = e.get("protocol")
        try:
            if proto is not None and not isinstance(proto, str):
                raise InputError(f"got {proto!r}; expected LL, LL128, Simple or a list of them "
                                 f"as NCCL_PROTO takes it")
            check_proto(proto)
        except InputError as exc:
            raise InputError(exc.message, file=path, field=f"{where}.protocol") from None
        pts = _need(e, "points", where, path, list, "a list of {size, busbw | time_us}")
        clean = []
        for j, pt in enumerate(pts):
            pw = f"{where}.points[{j}]"
            if not isinstance(pt, dict):
                raise InputError("expected {size, busbw} or {size, time_us}", file=path, field=pw)
            size: Any = pt.get("size")
            if not _positive_number(size):
                raise InputError(f"got {size!r}; expected a size in bytes > 0", file=path,
                                 field=f"{pw}.size")
            if not any(_positive_number(pt.get(k)) for k in ("busbw", "time_us")):
                raise InputError("needs busbw (GB/s) or time_us (us), a number > 0",
                                 file=path, field=pw)
            clean.append({"size": int(size), "busbw": pt.get("busbw"),
                          "time_us": pt.get("time_us")})
        stack, nccl = _stack(e.get("stack"), path, where)
        out.append({"id": eid, "where": where, "system": e["system"], "collective": op,
                    "ranks": ranks, "per_node": per_node, "algorithm": algo, "protocol": proto,
                    "points": clean,
                    "source": e.get("source", ""), "confidence": e.get("confidence", ""),
                    "needs": str(e.get("needs", "")), "stack": stack, "nccl": nccl,
                    "looked_at": validation.looked_at(e, file_mark, path, where)})
    return out


#: what an entry's ``stack`` mapping may name
STACK_KEYS = ("nccl", "net_plugin", "tuner")


def _stack(raw: Any, path: str, where: str) -> tuple[str, Version | None]:
    """An entry's ``stack``: its text (free text, or ``unstated: ...``), and the NCCL release
    the model uses when it is a mapping naming one (``{nccl: 2.18.5, net_plugin: ...,
    tuner: ...}``; the plugin and tuner are recorded, not modelled)."""
    if raw is None:
        return "", None
    if isinstance(raw, str):
        return raw, None
    if not isinstance(raw, dict) or set(raw) - set(STACK_KEYS):
        extra = sorted(set(raw) - set(STACK_KEYS)) if isinstance(raw, dict) else []
        raise InputError(f"{'unknown key ' + repr(extra[0]) + '; ' if extra else ''}expected "
                         f"text, or a mapping of {', '.join(STACK_KEYS)}", file=path,
                         field=f"{where}.stack")
    nccl = None
    if raw.get("nccl") is not None:
        try:
            nccl = versions.parse(raw["nccl"])
        except InputError as exc:
            raise InputError(exc.message, file=path, field=f"{where}.stack.nccl") from None
    text = ", ".join(f"{k} {raw[k]}" for k in STACK_KEYS if raw.get(k) is not None)
    return text, nccl


def validate(path: str, on_entry: Callable[[str], None] | None = None) -> dict:
    """Predict every point of a measurements file; return ``{summary, points, skipped}``.

    An entry whose system cannot be built here (say, a GPU missing from the catalog) is listed
    in ``skipped`` with the reason, and the others still run; if none can run, the first
    reason is raised. A forced ``algorithm`` this model lacks for that system (NCCL's
    ``collnet_direct``, ``collnet_chain`` or ``pat``, or ``nvls`` without NVLS hardware) falls
    back to the automatic choice, noted per point. ``on_entry`` is called with each entry's id
    once it is done (progress).

    Examples
    --------
    >>> r = validate("tests/data/calibration/collectives.yaml")   # doctest: +SKIP
    >>> r["summary"]["by_size"]["large"]["median_abs_pct"] <= 10     # doctest: +SKIP
    True
    """
    return validate_entries(load_entries(path), path, on_entry)


def validate_entries(entries: list[dict], path: str,
                     on_entry: Callable[[str], None] | None = None,
                     system: str | None = None) -> dict:
    """:func:`validate` of entries already read by :func:`load_entries` (all of a file's, or
    some of them: the points ``gpufabric calibrate`` holds out); ``path`` names the file in
    messages; ``system`` (what :func:`gpufabric.topology.build.load` takes) replaces every
    entry's own."""
    rows: list[dict] = []
    skipped: list[dict] = []
    first_error: InputError | None = None
    for e in entries:
        # an entry whose system this model cannot build (a GPU not in the catalog...) is
        # reported and skipped, so one exotic entry does not hide the others
        try:
            preds, note = predict_entry(e, path, system)
        except InputError as exc:
            err = entry_error(e, path, exc)
            first_error = first_error or err
            needs = f" (needs: {e['needs']})" if e["needs"] else ""
            skipped.append(validation.skip(e["id"], None, f"{err}{needs}"))
            if on_entry:
                on_entry(e["id"])
            continue
        rows.extend(entry_rows(e, preds, note))
        if on_entry:
            on_entry(e["id"])
    if not rows and first_error is not None:
        raise first_error
    return {"file": path, "summary": summarize(rows), "points": rows, "skipped": skipped}


def entry_model(e: dict, path: str, system: str | None = None) -> Any:
    """A new collective model of an entry's system (the entry's own, or ``system`` as
    :func:`gpufabric.topology.build.load` takes it), reading the parameters as they are now:
    a :class:`~gpufabric.collectives.Model`, or for a host of CPU ranks (``gpu: none``, a
    system file without GPUs) a :class:`~gpufabric.collectives.host.HostModel`."""
    from gpufabric.collectives import host
    from gpufabric.topology.build import from_spec, load
    if system is not None:
        hs = host.load_host(system)
        if hs is not None:
            return host.HostModel(hs)
    elif host.is_host(e["system"]):
        return host.HostModel(host.host_system(dict(e["system"]), name=e["id"], file=path))
    if system is not None:
        topo = load(system, materialize_nodes=Model.SAMPLE_NODES)
    else:
        topo = from_spec(dict(e["system"]), name=e["id"], file=path,
                         materialize_nodes=Model.SAMPLE_NODES)
    return model(topo)


def predict_entry(e: dict, path: str, system: str | None = None,
                  m: Model | None = None) -> tuple[list, str]:
    """The model's predictions for every point of one entry (of :func:`load_entries`), and a
    note when its forced algorithm is not modelled there (the automatic choice is used).
    The model is ``m``, else :func:`entry_model`'s (built anew, so it reads the parameters as
    they are now)."""
    with versions.use(e.get("nccl")):    # the entry's NCCL release, where it names one
        if m is None:
            m = entry_model(e, path, system)
        algo = e["algorithm"]
        note = ""
        if algo != "auto" and e["points"]:
            try:
                m.predict(e["collective"], e["points"][0]["size"], e["ranks"], algo,
                          e["protocol"], per_node=e["per_node"])
            except InputError as exc:
                if exc.field != "algorithm":
                    raise
                note = f"algorithm {algo} not modelled here; auto used"
                algo = "auto"
        preds = [m.predict(e["collective"], pt["size"], e["ranks"], algo,
                           e["protocol"], per_node=e["per_node"])
                 for pt in e["points"]]
    # a run whose software stack (NCCL, plugin versions) its source does not give says so on
    # every point, rather than in a constant
    if str(e.get("stack", "")).startswith("unstated"):
        note = "; ".join(x for x in (note, "software stack " + str(e["stack"])) if x)
    return preds, note


def entry_error(e: dict, path: str, exc: InputError) -> InputError:
    """The error of an entry that cannot be predicted, naming the entry's field."""
    sub = exc.field or ""
    if sub in ("ranks", "size", "op", "algorithm", "proto", "per_node"):
        field = f"{e['where']}.{'protocol' if sub == 'proto' else sub}"
    else:
        field = f"{e['where']}.system" + (f".{sub}" if sub else "")
    return InputError(exc.message, file=path, field=field)


def entry_rows(e: dict, preds: list, note: str = "") -> list[dict]:
    """One :func:`gpufabric.validation.point` per point of an entry (``metric``: what the file
    measured, busbw or time_us), with measured and predicted busbw and time and both errors."""
    rows = []
    st = validation.status(e["id"], e.get("looked_at", ""))
    for j, (pt, p) in enumerate(zip(e["points"], preds, strict=True)):
        n = p.ranks
        f = busbw_factor(e["collective"], n)
        if pt["busbw"] is not None:
            meas_bus = float(pt["busbw"])
            meas_t = pt["size"] * f / (meas_bus * 1e9) * 1e6 if f else None
        else:
            meas_t = float(pt["time_us"])
            meas_bus = pt["size"] / (meas_t * 1e-6) / 1e9 * f
        busbw_err = (p.busbw - meas_bus) / meas_bus * 100 if meas_bus else None
        time_err = ((p.time_us - meas_t) / meas_t * 100) if meas_t else None
        if pt["busbw"] is not None:
            metric, meas, pred, err = "busbw", meas_bus, p.busbw, busbw_err
        else:
            metric, meas, pred, err = "time_us", float(pt["time_us"]), p.time_us, time_err
        rows.append(validation.point(
            e["id"], j, metric, meas, pred, st, error_pct=err, notes=note,
            collective=e["collective"], ranks=n, size=pt["size"], algo=p.algo, proto=p.proto,
            measured_busbw=meas_bus, predicted_busbw=p.busbw, measured_time_us=meas_t,
            predicted_time_us=p.time_us, busbw_err_pct=busbw_err, time_err_pct=time_err,
            stack=e["stack"], stack_kind=stack_kind(e)))
    return rows


def validate_many(paths: list[str], on_entry: Callable[[str], None] | None = None) -> dict:
    """:func:`validate` each file, and summarize all their points together: ``{files, summary}``
    with ``files`` the per-file results and ``summary`` over every point of every file, as for
    one file. This is the headline over several hold-outs at once: the machines of all of them.

    Examples
    --------
    >>> r = validate_many(["tests/data/calibration/collectives.yaml",
    ...                    "tests/data/calibration/holdout.yaml"])
    >>> [f["summary"]["all"]["points"] for f in r["files"]], r["summary"]["all"]["points"]
    ([21, 31], 52)
    >>> r["summary"]["by_size"]["large"]["median_abs_pct"] <= 10   # the goal of issue 9
    True
    """
    files = [validate(p, on_entry) for p in paths]
    return {"files": files, "summary": validation.pooled(files, split)}


#: what an entry's source says of its software stack (a point's ``stack_kind``): its NCCL
#: release (``stack.nccl``), that it is not published (``stack: unstated ...``), or nothing
STACK_KINDS = ("release", "unstated", "unrecorded")


def stack_kind(e: dict) -> str:
    """Which of :data:`STACK_KINDS` an entry (of :func:`load_entries`) is."""
    if e.get("nccl") is not None:
        return "release"
    return "unstated" if str(e.get("stack", "")).startswith("unstated") else "unrecorded"


def split(rows: list[dict]) -> dict:
    """The collectives' own split of a summary block: ``by_size`` ``{large, small}``, busbw
    error over points of :data:`~gpufabric.collectives.params.LARGE_BYTES` and more, time
    error below :data:`~gpufabric.collectives.params.SMALL_BYTES`; and ``by_stack``, each
    point's error by what its source says of its software stack (:data:`STACK_KINDS`), so a
    run whose stack is not published is seen apart rather than fitted to. Points without a
    size, from other validators pooled with these, are left out."""
    sized = [r for r in rows if "busbw_err_pct" in r]
    return {"by_size": {
        "large": validation.stats(r["busbw_err_pct"] for r in sized
                                  if r["size"] >= params.LARGE_BYTES),
        "small": validation.stats(r["time_err_pct"] for r in sized
                                  if r["size"] < params.SMALL_BYTES)},
        "by_stack": {k: validation.stats(r["error_pct"] for r in sized
                                         if r.get("stack_kind") == k) for k in STACK_KINDS}}


def summarize(rows: list[dict]) -> dict:
    """:func:`gpufabric.validation.summarize` with the large / small split in every block."""
    return validation.summarize(rows, split)

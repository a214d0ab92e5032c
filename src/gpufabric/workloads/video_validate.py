"""Validation of the video-generation model against published generation times.

A measurements file (schema: ``tests/data/calibration/video.yaml``) holds entries with a
``generation`` mapping (width, height, frames, steps) and ``points`` that each give a layout
(``ulysses``, ``ring``, ``cfg_parallel``) and the measured ``latency_s`` (one video or image).
Each point is predicted by :func:`gpufabric.workloads.video.generate` on the entry's system and
reported with the one point record and summary of :mod:`gpufabric.validation`; an entry's
status (held-out, fitted, looked-at) is derived from the parameter records as for every kind.

Examples
--------
>>> is_video_file("tests/data/calibration/video.yaml")
True
>>> is_video_file("tests/data/calibration/inference.yaml")
False
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpufabric import validation
from gpufabric.errors import InputError
from gpufabric.fileio import load_yaml
from gpufabric.sweep import each

#: the figures a point may carry, and the key of the model's result that predicts each
METRICS = {"latency_s": "seconds_per_video"}
#: layout keys a point (or the entry's ``parallelism``) may give
LAYOUT_KEYS = ("ulysses", "ring", "cfg_parallel")


#: The keys a generation entry's ``system`` may state: one server of a catalog GPU.
SYSTEM_FIELDS = frozenset({"gpu", "gpus_per_node", "scale_up", "fabric"})


def _entries(path: str) -> tuple[list[Any], str]:
    data = load_yaml(path, what="a measurements file (YAML)")
    ents, mark = validation.entries_of(data, path)
    return (ents if isinstance(ents, list) else []), mark


def is_video_file(path: str) -> bool:
    """Whether ``path`` holds generation measurements (entries with a ``generation``)."""
    try:
        ents, _ = _entries(path)
    except InputError:
        return False       # the collective validator says what is wrong with the file
    return bool(ents) and isinstance(ents[0], dict) and "generation" in ents[0]


def _bool(v: Any, where: str, key: str) -> bool:
    if not isinstance(v, bool):
        raise InputError(f"got {v!r}; expected true or false", file=where, field=key)
    return v


def predict_point(e: dict[str, Any], pt: dict[str, Any], where: str) -> dict[str, Any]:
    """The model's result for one point of an entry."""
    from gpufabric.topology.build import from_spec
    from gpufabric.workloads.video import Layout, Run, generate
    sysd = {**(e.get("system") or {}), **({"gpu": pt["gpu"]} if pt.get("gpu") else {})}
    if not sysd.get("gpu"):
        raise InputError("missing; give system.gpu (a catalog GPU)", file=where,
                         field="system.gpu")
    spec = {"gpu": sysd["gpu"], "gpus_per_node": int(sysd.get("gpus_per_node") or 8)}
    if sysd.get("scale_up"):
        spec["scale_up"] = sysd["scale_up"]
    topo = from_spec(spec)
    gen = {**(e.get("generation") or {}), **{k: v for k, v in pt.items()
                                              if k in ("width", "height", "frames", "steps")}}
    par = {**(e.get("parallelism") or {}), **{k: v for k, v in pt.items() if k in LAYOUT_KEYS}}
    eng = dict(e.get("engine") or {})
    lay = Layout(ulysses=int(par.get("ulysses", 1)), ring=int(par.get("ring", 1)),
                 cfg_parallel=_bool(par.get("cfg_parallel", False), where, "cfg_parallel"))
    run = Run(precision=str(eng.get("precision", "bf16")),
              attn_kernel=str(eng.get("attention", "fa2")),
              compiled=_bool(eng.get("compile", False), where, "engine.compile"),
              cache_skip=float(eng.get("cache_skip", 0.0)))
    model = (e.get("model") or {}).get("name")
    if not model:
        raise InputError("missing; give model.name", file=where, field="model.name")
    return generate(str(model), topo, width=gen.get("width"), height=gen.get("height"),
                    frames=gen.get("frames"), steps=gen.get("steps"), layout=lay, run=run)


def validate(path: str, progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Every point of a generation measurements file: measured, predicted, error, the
    breakdown of the prediction; a summary (held-out first) and the points skipped."""
    ents, mark = _entries(path)
    fitted = validation.fitted_ids()
    rows: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    total = sum(len(e.get("points") or [{}]) for e in ents if isinstance(e, dict))
    for i, e in enumerate(ents):
        if not isinstance(e, dict) or not e.get("id"):
            raise InputError("expected a mapping with an id", file=path, field=f"[{i}]")
        eid = str(e["id"])
        if isinstance(e.get("system"), dict):
            validation.check_keys(e["system"], SYSTEM_FIELDS, path, f"[{i}]({eid}).system")
        status = validation.status(eid, validation.looked_at(e, mark, path), fitted)
        for j, pt in each(enumerate(e.get("points") or [{}]), progress, total):
            keys = [k for k in METRICS if isinstance(pt.get(k), int | float)]
            if not keys:
                skipped.append(validation.skip(eid, j, "no figure the model predicts "
                                                       f"({', '.join(METRICS)})"))
                continue
            try:
                r = predict_point(e, pt, f"{path}: {eid}")
            except InputError as exc:
                skipped.append(validation.skip(eid, j, f"refused: {exc}"))
                continue
            for k in keys:
                rows.append(validation.point(
                    eid, j, k, float(pt[k]), float(r[METRICS[k]]), status,
                    breakdown=r["breakdown_s"], gpu=r["gpu"], model=r["model"],
                    layout=r["layout"], tokens=r["tokens"]["sequence"]))
    return {"file": path, "summary": validation.summarize(rows), "points": rows,
            "skipped": skipped}


__all__ = ["is_video_file", "validate", "predict_point", "METRICS"]

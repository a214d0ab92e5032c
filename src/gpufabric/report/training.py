"""The training section of ``gpufabric compare``: data-parallel scaling on the systems compared.

The seed's question -- does this job need NVLink / NVSwitch / 8 NICs, or is PCIe with RoCE
enough? -- answered with the training-step model on the systems the user named: BERT-Large and
a 7B and a 70B LLM trained data-parallel (ZeRO-1; FSDP for 70B) from 1 GPU to the whole system
(a system with scale-out NICs is grown to :data:`MAX_GPUS` by adding servers of the same
design), as scaling efficiency (throughput per GPU against the same system's smallest size
that fits) and as the step-time breakdown at the largest size.

Examples
--------
>>> from gpufabric.topology.build import load
>>> d = scaling({"hgx-h100": load("hgx-h100")}, models=("bert-large",), max_gpus=16)
>>> [(r["gpus"], r["scaling_efficiency"] is not None) for r in d["rows"]][:2]
[(1, True), (2, True)]
>>> sorted({r["gpus"] for r in d["rows"]})
[1, 2, 4, 8, 16]
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from typing import Any

from gpufabric.errors import InputError
from gpufabric.report import charts

#: model -> (micro-batch, sequence length, precision, recompute, zero stage)
MODELS: dict[str, tuple[int, int, str, str, int]] = {
    "bert-large": (32, 512, "fp16", "none", 0),
    "llama2-7b": (1, 4096, "bf16", "selective", 1),
    "llama2-70b": (1, 4096, "bf16", "full", 3),
}
#: how far a system with scale-out NICs is grown (servers of the same design added)
MAX_GPUS = 256


def sizes(t: Any, max_gpus: int = MAX_GPUS) -> list[int]:
    """GPU counts the scaling runs on: powers of two from 1 to the system's GPUs, or to
    ``max_gpus`` when it has scale-out NICs to grow over (and a spec to grow from)."""
    total = int(t.meta.get("nodes", 1)) * int(t.meta.get("gpus_per_node") or len(t.gpus(0)))
    grows = bool(t.meta.get("spec")) and int(t.meta.get("nics_per_node") or 0) > 0
    top = max(total, max_gpus) if grows else total
    top = min(top, max_gpus) if grows else top
    return [2 ** e for e in range(int(math.log2(max(top, 1))) + 1)]


def _precision(t: Any, wanted: str) -> str:
    """``wanted``, or fp16 on a GPU without a bf16 tensor rate (V100, T4)."""
    from gpufabric import catalog
    gpus = t.gpus()
    if wanted == "bf16" and gpus and not catalog.gpu(gpus[0].model).bf16_tflops:
        return "fp16"
    return wanted


def _grown(t: Any, n: int, cache: dict[int, Any]) -> Any:
    """``t`` itself when it has ``n`` GPUs, else the same design grown to enough servers."""
    gpn = int(t.meta.get("gpus_per_node") or len(t.gpus(0)))
    total = int(t.meta.get("nodes", 1)) * gpn
    if n <= total:
        return t
    nodes = -(-n // gpn)
    if nodes not in cache:
        from gpufabric.collectives import Model
        from gpufabric.topology.build import from_spec
        cache[nodes] = from_spec({**t.meta["spec"], "nodes": nodes}, name=t.name,
                                 materialize_nodes=Model.SAMPLE_NODES)
    return cache[nodes]


def scaling(systems: dict[str, Any], models: tuple[str, ...] = tuple(MODELS),
            max_gpus: int = MAX_GPUS, progress: Callable[[int, int], None] | None = None
            ) -> dict[str, Any]:
    """Rows of {system, model, gpus, tokens_per_s_per_gpu, scaling_efficiency, step_time_s,
    breakdown_s, fits, bottleneck} over ``systems`` (name -> Topology), plain data for JSON,
    tables and charts. ``progress(n, total)`` is told as each system is done."""
    from gpufabric.workloads.parallel import Parallel
    from gpufabric.workloads.training import predict_step
    rows: list[dict[str, Any]] = []
    for name, t in systems.items():
        grown: dict[int, Any] = {}
        for model in models:
            mb, seq, prec, rc, zero = MODELS[model]
            prec = _precision(t, prec)
            base = None
            for n in sizes(t, max_gpus):
                par = Parallel(dp=n, micro_batch=mb, global_batch=n * mb, recompute=rc,
                               zero=zero if n > 1 else 0)
                try:
                    topo = _grown(t, n, grown)
                except InputError as exc:       # the design does not grow this far
                    rows.append({"system": name, "model": model, "gpus": n, "fits": False,
                                 "note": f"not built: {exc}"})
                    break
                try:
                    r = predict_step(model, topo, par, seq, precision=prec)
                except InputError as exc:
                    rows.append({"system": name, "model": model, "gpus": n, "fits": False,
                                 "note": str(exc)})
                    continue
                row = {"system": name, "model": model, "gpus": n, "fits": r.fits,
                       "tokens_per_s_per_gpu": round(r.tokens_per_s_per_gpu, 2),
                       "step_time_s": round(r.step_time_s, 5),
                       "breakdown_s": {k: round(v, 5) for k, v in r.breakdown_s.items()},
                       "bottleneck": r.bottleneck, "memory_GiB_per_gpu": r.memory_GiB_per_gpu}
                if r.fits and base is None:
                    base = r
                row["scaling_efficiency"] = (round(r.tokens_per_s_per_gpu
                                                   / base.tokens_per_s_per_gpu, 4)
                                             if r.fits and base else None)
                row["base_gpus"] = base.parallel["dp"] if base else None
                rows.append(row)
        if progress:
            progress(1, len(systems))
    return {"models": {m: dict(zip(("micro_batch", "seq_len", "precision", "recompute",
                                    "zero"), MODELS[m], strict=True)) for m in models},
            "systems": list(systems), "rows": rows}


def above_100(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows whose efficiency exceeds 100%, each with ``why``: the per-GPU share of work that
    does not grow with GPUs (the optimizer step, sharded by ZeRO/FSDP over the data-parallel
    group) that shrank against the base size."""
    base = {(r["system"], r["model"]): r for r in data["rows"]
            if r.get("fits") and r.get("gpus") == r.get("base_gpus")}
    out = []
    for r in data["rows"]:
        if round(r.get("scaling_efficiency") or 0, 2) <= 1.0:
            continue
        b = base.get((r["system"], r["model"]))
        opt = (b["breakdown_s"].get("optimizer", 0.0) - r["breakdown_s"].get("optimizer", 0.0)
               if b else 0.0)
        why = (f"the optimizer step, sharded over {r['gpus']} GPUs, is {opt * 1e3:.0f} ms "
               f"shorter than on {b['gpus']}" if b and opt > 0 else
               "per-GPU work shrinks faster than communication grows")
        out.append({**r, "why": why})
    return out


def _largest(data: dict[str, Any]) -> dict[tuple[str, str], int]:
    """(system, model) -> the largest GPU count that was predicted (a design that cannot grow
    further stops there); the largest tried where none was."""
    ran: dict[tuple[str, str], int] = {}
    tried: dict[tuple[str, str], int] = {}
    for r in data["rows"]:
        key = (r["system"], r["model"])
        tried[key] = max(tried.get(key, 0), r["gpus"])
        if "step_time_s" in r:
            ran[key] = max(ran.get(key, 0), r["gpus"])
    return {**tried, **ran}


def table_rows(data: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """(system, model, GPUs, efficiency at the system's largest size, bottleneck) for the
    terminal; an efficiency above 100% is marked ``*`` (the footnote: :func:`above_100`)."""
    big = _largest(data)
    out = []
    for r in data["rows"]:
        if r["gpus"] != big[(r["system"], r["model"])]:
            continue
        eff = r.get("scaling_efficiency")
        if not r.get("fits") or eff is None:
            mem = r.get("memory_GiB_per_gpu")
            cell = f"does not fit ({mem:.0f} GiB/GPU)" if mem else "does not fit"
        else:
            cell = f"{eff:.0%}" + ("*" if round(eff, 2) > 1.0 else "")
        out.append((r["system"], r["model"], str(r["gpus"]), cell,
                    r.get("bottleneck", r.get("note", ""))))
    return out


def footnote(data: dict[str, Any]) -> str:
    """Why an efficiency exceeds 100% (empty when none does)."""
    over = above_100(data)
    if not over:
        return ""
    r = max(over, key=lambda x: x["scaling_efficiency"])
    return (f"* above 100%: per-GPU throughput grows when the optimizer step is sharded over "
            f"more GPUs (ZeRO/FSDP) while communication stays hidden; e.g. {r['model']} on "
            f"{r['system']} at {r['gpus']} GPUs: {r['why']}.")


def table(data: dict[str, Any]) -> Any:
    """A rich table of :func:`table_rows` (its caption: :func:`footnote`)."""
    from rich.table import Table
    tb = Table(title="Data-parallel training at each system's largest size: scaling efficiency "
               "against its smallest size that fits", box=None, caption=footnote(data) or None,
               caption_justify="left")
    for col in ("system", "model", "GPUs", "efficiency", "bottleneck"):
        tb.add_column(col, no_wrap=col in ("model", "GPUs"), overflow="fold",
                      justify="right" if col == "GPUs" else "left")
    for r in table_rows(data):
        tb.add_row(*r)
    return tb


def _e(x: Any) -> str:
    return html.escape(str(x))


def efficiency_figure(data: dict[str, Any], model: str) -> Any:
    """Scaling efficiency against GPUs (log2), one line per system, each divided by its own
    smallest size that fits (named in its legend entry). Every system keeps its colour in every
    chart: a system with no point here keeps its place in the palette."""
    base = {r["system"]: r.get("base_gpus") for r in data["rows"]
            if r["model"] == model and r.get("base_gpus")}
    series: dict[str, Sequence[tuple[float, float]]] = {
        (f"{name} (/ {base[name]} GPUs)" if name in base else name):
        [(r["gpus"], r["scaling_efficiency"]) for r in data["rows"]
         if r["system"] == name and r["model"] == model
         and r.get("scaling_efficiency") is not None]
        for name in data["systems"]}
    gpus = sorted({r["gpus"] for r in data["rows"] if r["model"] == model})
    return charts.lines(series,
                        charts.Axis("GPUs (data parallel)", log=True,
                                    ticks=tuple((g, str(g)) for g in gpus)),
                        charts.Axis("scaling efficiency (tokens/s per GPU / the same at the "
                                    "base size)", fmt=".1~%"),
                        title=f"{model}: throughput per GPU against each system's smallest "
                              "size that fits (the base, in the legend)",
                        hover="<b>%{fullData.name}</b><br>%{x} GPUs: %{y:.1%}<extra></extra>")


def _parts(data: dict[str, Any]) -> list[str]:
    """Every breakdown part of the report in one order, so a part keeps its colour in every
    chart."""
    parts: list[str] = []
    for r in data["rows"]:
        parts += [k for k in r.get("breakdown_s", {}) if k not in parts]
    return parts


def fitting_largest(data: dict[str, Any], model: str) -> tuple[list[dict[str, Any]], list[str]]:
    """(the row of each system's largest size that fits ``model``, the systems on which no size
    fits): the breakdown chart draws only what the table says runs."""
    best: dict[str, dict[str, Any]] = {}
    for r in data["rows"]:
        if r["model"] == model and r.get("fits") and r.get("breakdown_s") and (
                r["system"] not in best or r["gpus"] > best[r["system"]]["gpus"]):
            best[r["system"]] = r
    return ([best[s] for s in data["systems"] if s in best],
            [s for s in data["systems"] if s not in best])


def breakdown_figure(data: dict[str, Any], model: str) -> Any:
    """Stacked bars: where the step goes (seconds) at each system's largest size that fits
    (systems on which the model fits at no size are not drawn: :func:`fitting_largest`)."""
    rows, _ = fitting_largest(data, model)
    labels = [f"{r['system']} ({r['gpus']} GPUs)" for r in rows]
    return charts.stacked_bars(labels, {k: [r["breakdown_s"].get(k, 0.0) for r in rows]
                                        for k in _parts(data)}, "step time (s)",
                               title=f"{model}: step-time breakdown at the largest size that "
                                     "fits",
                               hover_unit=" s")


def section_html(data: dict[str, Any]) -> str:
    """The report's training section: per model, the efficiency curves and breakdown bars."""
    out = ["<section><h2>Training: data-parallel scaling on each system</h2>",
           "<p class='d'>Throughput per GPU against the same system's smallest size that fits "
           "(weak scaling, one micro-batch per GPU per step), predicted by the training-step "
           "model; a system with scale-out NICs is grown by servers of the same design. Each "
           "line divides by its own system's base size, named in the legend. Bars: where the "
           "step goes at the largest size that fits. A system keeps its colour in every chart."
           "</p>"]
    note = footnote(data)
    for model, cfg in data["models"].items():
        out.append(f"<h3>{_e(model)} (micro-batch {cfg['micro_batch']}, seq {cfg['seq_len']}, "
                   f"{_e(cfg['precision'])}, ZeRO {cfg['zero']})</h3>")
        out.append(charts.figure_div(efficiency_figure(data, model)))
        out.append(charts.figure_div(breakdown_figure(data, model)))
        _, none = fitting_largest(data, model)
        if none:
            out.append(f"<p class='d'>Not drawn: {_e(', '.join(none))} (the model fits at no "
                       "size tried; the table says why).</p>")
    if note:
        out.append(f"<p class='d'>{_e(note)}</p>")
    out.append("</section>")
    return "".join(out)


__all__ = ["MODELS", "MAX_GPUS", "sizes", "scaling", "above_100", "table_rows", "footnote",
           "table", "section_html", "efficiency_figure", "breakdown_figure", "fitting_largest"]

"""Write docs/validation.md: the model's current figures against published measurements.

For every measurements file in tests/data/calibration/ it runs ``gpufabric validate FILE
--json`` (each file in its own process, as a user runs it) and renders the summary: the
held-out points first (no parameter fitted on them, not looked at while the model changed),
per metric, then the fitted and the looked-at points apart, each file with the one command
that reproduces its figures. The four collective hold-outs are also pooled, as
``gpufabric validate tests/data/calibration/holdout*.yaml`` pools them. The page leads with
the leave-one-source-out cross-validation of every file at once (``gpufabric validate
tests/data/calibration/*.yaml --cv source --json``): the figure that predicts how the models do
on sources they have never seen.

Run by hand after a model change (the cross-validation takes most of its time)::

    .venv/bin/python tools/validation_report.py            # writes docs/validation.md
    .venv/bin/python tools/validation_report.py --out /tmp/v.md
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = "tests/data/calibration"

#: (section title, what the file holds, its files); the order of the page
SECTIONS: list[tuple[str, str, list[str]]] = [
    ("Collectives: calibration file",
     "nccl-tests figures of the machines the collective parameters were fitted on",
     ["collectives.yaml"]),
    ("Collectives: hold-out 1", "published nccl-tests runs of other machines",
     ["holdout.yaml"]),
    ("Collectives: hold-out 2",
     "rack-scale NVLink domains, multi-node clusters and cloud fabrics", ["holdout2.yaml"]),
    ("Collectives: hold-out 3", "runs published outside the other files", ["holdout3.yaml"]),
    ("Collectives: hold-out 4", "published runs of machines collected as a blind test",
     ["holdout4.yaml"]),
    ("Collectives: the four hold-outs together", "hold-outs 1 to 4 pooled",
     ["holdout.yaml", "holdout2.yaml", "holdout3.yaml", "holdout4.yaml"]),
    ("Training", "published training runs (tokens/s per GPU; images/s for CNNs; the memory "
     "figures some of them give, in GiB)",
     ["training.yaml"]),
    ("Training: hold-out 2", "published training runs collected after the model was settled",
     ["training_holdout2.yaml"]),
    ("Training: Korthikanti et al. 2022",
     "the eight iteration times Calculon validates against (A100, full and selective "
     "recomputation)", ["training_korthikanti.yaml"]),
    ("Training: memory", "published memory figures of training runs and of the papers that "
     "account training memory (GiB on the most loaded GPU)", ["training_memory.yaml"]),
    ("Inference", "published serving figures (throughput, latencies, KV transfers)",
     ["inference.yaml"]),
    ("Inference: prefill/decode disaggregation",
     "published pool figures of disaggregated serving with large expert parallelism",
     ["inference_pd.yaml"]),
    ("Inference: llama-bench", "llama.cpp prompt and generation speeds of GGUF formats",
     ["llamacpp.yaml"]),
    ("Inference: MLPerf Inference submissions",
     "MLPerf Inference v4.0, v4.1 and v5.0 closed-division LLM results of eight submitters "
     "(Llama 2 70B, Mixtral 8x7B, GPT-J; LoadGen's Offline, Server and Interactive scenarios) "
     "on H100, H100 NVL, H200, B200, L40S, MI300X and MI325X, with TensorRT-LLM and vLLM as "
     "each submission configured them; nothing is fitted on them, and GPT-J's summaries "
     "(samples per second only) are skipped",
     ["mlperf_inference.yaml"]),
    ("Video and image generation", "published generation times of diffusion transformers "
     "(seconds per video or image)", ["video.yaml"]),
]
#: the status blocks of a summary, in the order shown (held-out first)
STATUSES = [("held-out", None), ("fitted", "fitted"), ("looked-at", "looked_at")]
#: the collectives' own split of a block (gpufabric.collectives.validate.split)
SIZES = [("large", ">= 64 MiB, busbw"), ("small", "< 64 KiB, time")]


def command(files: list[str]) -> str:
    """The one command that reproduces a section's figures."""
    if len(files) > 1 and all(f.startswith("holdout") for f in files):
        return f"gpufabric validate {DATA}/holdout*.yaml"
    return "gpufabric validate " + " ".join(f"{DATA}/{f}" for f in files)


def run_file(name: str) -> dict[str, Any]:
    """``gpufabric validate FILE --json`` of one file (its own process)."""
    exe = Path(sys.executable).with_name("gpufabric")
    out = subprocess.run([str(exe), "validate", f"{DATA}/{name}", "--json"], cwd=ROOT,
                         capture_output=True, text=True, check=True,
                         env={**os.environ, "GPUFABRIC_PROGRESS": "off"}).stdout
    return dict(json.loads(out))


def run_cv() -> dict[str, Any]:
    """``gpufabric validate FILES --cv source --json`` over every file (one process)."""
    exe = Path(sys.executable).with_name("gpufabric")
    files = [f"{DATA}/{f}" for f in sorted({f for _t, _w, fs in SECTIONS for f in fs})]
    out = subprocess.run([str(exe), "validate", *files, "--cv", "source", "--json"], cwd=ROOT,
                         capture_output=True, text=True, check=True,
                         env={**os.environ, "GPUFABRIC_PROGRESS": "off"}).stdout
    return dict(json.loads(out))


#: the model kinds of the cross-validation, in the page's order
KINDS = [("collectives", "Collectives"), ("training", "Training"), ("inference", "Inference")]


def cv_section(cv: dict[str, Any]) -> list[str]:
    """The page's first section: the cross-validated figures per model kind and metric, the
    same points by their entries' status, what could not be cross-validated, and each
    source's median."""
    out = ["## Cross-validated: leave-one-source-out", "",
           "Every entry names the publication its figures come from (`source_id`). Each source "
           "in turn is left out: every fitted constant is refitted by its rule (the value of "
           "the least median error over its entries' points, on a grid around the shipped "
           "value) on the other sources' entries only, and the left-out source's entries are "
           "predicted with those values. Sources no constant was fitted on are predicted with "
           "the shipped values, which none of their figures fixed. Points that move with a "
           "constant fitted on their own source alone cannot be cross-validated (nothing is "
           "left to refit it on): they are counted apart. Looked-at entries are among the "
           "cross-validated points (their figures fixed no constant, but the model changed "
           "after they were read); their share is shown below.", "",
           "Reproduce: `gpufabric validate tests/data/calibration/*.yaml --cv source`", "",
           "| kind | metric | points | median | p90 | max |",
           "| --- | --- | ---: | ---: | ---: | ---: |"]

    def row(kind: str, metric: str, b: dict[str, Any]) -> str:
        return (f"| {kind} | {metric} | {b['points']} | {_pct(b['median_abs_pct'])} | "
                f"{_pct(b['p90_abs_pct'])} | {_pct(b['max_abs_pct'])} |")
    out.append(row("all", "all", cv["summary"]))
    for key, name in KINDS:
        b = cv["by_kind"].get(key)
        if not b:
            continue
        out.append(row(name, "all", b))
        for size, what in SIZES if "by_size" in b else ():
            if b["by_size"][size]["points"]:
                out.append(row(name, f"{size} ({what})", b["by_size"][size]))
        for kind, what in STACKS if "by_stack" in b else ():
            if b["by_stack"][kind]["points"]:
                out.append(row(name, f"software stack {what}", b["by_stack"][kind]))
        for m, mb in sorted(b["by_metric"].items()):
            out.append(row(name, m, mb))
    out += ["", "The same cross-validated points by the status of their entry (see below):", "",
            "| entries | points | median | p90 | max |", "| --- | ---: | ---: | ---: | ---: |"]
    for st, b in cv["by_status"].items():
        out.append(f"| {st} | {b['points']} | {_pct(b['median_abs_pct'])} | "
                   f"{_pct(b['p90_abs_pct'])} | {_pct(b['max_abs_pct'])} |")
    out += ["", f"Not cross-validated: {cv['sole_source']} points move with a constant fitted on "
            "their own source alone.", "",
            "Per source (the values its constants were refitted to without it; `none`: "
            "fitted on it alone):", "",
            "| source | kind | entries | points | sole-source points | median | refitted "
            "without it |", "| --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for s in cv["sources"]:
        refit = ", ".join(f"`{k}` {'none' if v is None else f'{v:g}'}"
                          for k, v in s["refitted"].items())
        out.append(f"| {s['source_id']} | {', '.join(s['kind'])} | {s['entries']} | "
                   f"{s['points']} | {s['sole_source_points']} | "
                   f"{_pct(s['median_abs_pct'])} | {refit} |")
    return out + [""]


def pooled_summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The summary over several files' points, as ``validate`` pools several files."""
    from gpufabric import validation
    from gpufabric.collectives.validate import split as collectives_split
    split = collectives_split if any(r.get("kind") == "collectives" for r in results) else None
    return validation.pooled(results, split)


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1f} %"


def _row(status: str, metric: str, b: dict[str, Any], sized: bool) -> str:
    cells = [status, metric, str(b["points"]), _pct(b["median_abs_pct"]),
             _pct(b["p90_abs_pct"]), _pct(b["max_abs_pct"])]
    if sized:
        large, small = b["by_size"]["large"], b["by_size"]["small"]
        cells += [f"{_pct(large['median_abs_pct'])} / {_pct(large['max_abs_pct'])} "
                  f"({large['points']})", f"{_pct(small['median_abs_pct'])} ({small['points']})"]
    return "| " + " | ".join(cells) + " |"


def _block(summary: dict[str, Any], key: str | None) -> dict[str, Any]:
    return summary if key is None else dict(summary[key])


def summary_table(summary: dict[str, Any]) -> list[str]:
    """The rows of one summary: each status (held-out first) over all metrics, then per
    metric where there are several; empty fitted / looked-at blocks are left out."""
    sized = "by_size" in summary
    cols = ["status", "metric", "points", "median", "p90", "max"]
    if sized:
        cols += [f"large ({SIZES[0][1]}): median / max (points)",
                 f"small ({SIZES[1][1]}): median (points)"]
    head = ["| " + " | ".join(cols) + " |"]
    rule = ["| --- | --- |" + " ---: |" * (len(cols) - 2)]
    rows = head + rule
    metrics = sorted(summary["by_metric"])
    for status, key in STATUSES:
        block = _block(summary, key)
        if key is not None and block["points"] == 0:
            continue
        rows.append(_row(status, "all", block, sized))
        if len(metrics) > 1:
            for m in metrics:
                b = _block(summary["by_metric"][m], key)
                if b["points"]:
                    rows.append(_row(status, m, b, sized))
    return rows


#: what a collective entry's source says of its software stack (the split's by_stack)
STACKS = (("release", "NCCL release stated"), ("unstated", "not published"),
          ("unrecorded", "not recorded"))


def stack_line(by_stack: dict[str, Any]) -> str:
    """What the sources say of their software stack, over all of a section's points: the
    points of runs whose source does not publish it are seen apart, not fitted to."""
    parts = [f"{what}: {b['points']} points, median {_pct(b['median_abs_pct'])}"
             for kind, what in STACKS if (b := by_stack[kind])["points"]]
    return "All points by what their source says of its software stack: " + "; ".join(parts) \
        + "."


def render(sections: list[tuple[str, str, list[str], dict[str, Any], int]],
           cv: dict[str, Any]) -> str:
    """The page from the cross-validation and ``(title, what, files, summary, skipped
    points)`` per section."""
    out = ["# Validation", "",
           "How far the model's predictions are from published measurements, per measurements",
           "file and metric. Each figure is the absolute error `|predicted / measured - 1|` over",
           "a file's points: the median, the 90th percentile and the maximum. The page leads",
           "with the leave-one-source-out cross-validation: each publication predicted with",
           "every fitted constant refitted without it, the figure that predicts how the models",
           "do on sources they have never seen. Then, per file: **held-out** points",
           "are of entries no parameter was fitted on and nobody looked at while the model",
           "changed. **fitted** points are of entries a parameter record",
           "names in its `fitted_on` (`gpufabric params`); **looked-at** points are of entries",
           "marked `looked_at` in their file, with the reason. How a status is derived:",
           "[Measurement files](calibration.md).", "",
           "This page is generated by `.venv/bin/python tools/validation_report.py` from the",
           "`--json` output of the command under each section; run that command to see every",
           "point, its prediction's breakdown and the points skipped with their reasons.", "",
           *cv_section(cv),
           "## Overview (held-out points)", "",
           "| file | what | points | median | p90 | max |",
           "| --- | --- | ---: | ---: | ---: | ---: |"]
    for title, what, _files, s, _skipped in sections:
        anchor = title.lower().replace(":", "").replace("/", "").replace(" ", "-")
        out.append(f"| [{title}](#{anchor}) | {what} | {s['points']} | "
                   f"{_pct(s['median_abs_pct'])} | {_pct(s['p90_abs_pct'])} | "
                   f"{_pct(s['max_abs_pct'])} |")
    out.append("")
    for title, what, files, s, skipped in sections:
        names = ", ".join(f"`{DATA}/{f}`" for f in files)
        out += [f"## {title}", "", f"{names}: {what}.", "",
                f"Reproduce: `{command(files)}`", "", *summary_table(s), ""]
        if "by_stack" in s:
            out += [stack_line(s["all"]["by_stack"]), ""]
        if skipped:
            out += [f"{skipped} skipped (entries or points the model cannot predict; the command "
                    "prints each with its reason).", ""]
    return "\n".join(out)


def collect() -> list[tuple[str, str, list[str], dict[str, Any], int]]:
    """Run every file's validator once and build the sections."""
    cache: dict[str, dict[str, Any]] = {}
    sections = []
    for title, what, files in SECTIONS:
        for f in files:
            if f not in cache:
                print(f"validate {f} ...", file=sys.stderr, flush=True)
                cache[f] = run_file(f)
        results = [cache[f] for f in files]
        summary = results[0]["summary"] if len(results) == 1 else pooled_summary(results)
        skipped = sum(len(r.get("skipped", [])) for r in results)
        sections.append((title, what, files, summary, skipped))
    return sections


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "validation.md"))
    args = ap.parse_args(argv)
    sections = collect()
    print("validate --cv source ...", file=sys.stderr, flush=True)
    Path(args.out).write_text(render(sections, run_cv()))
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()

"""CLI: collective and validate commands (see gpufabric.collectives)."""

from __future__ import annotations

import math
import re
from typing import Any

import typer

from gpufabric.cli.common import (Col, Progress, app, emit_json, kernel_times_option,
                                  nccl_option, print_cross_validation, print_table,
                                  print_validation_summary, print_wrapped, profile_option,
                                  refuse_together, whole, wide_option)
from gpufabric.cli.serve import print_inference, run_inference
from gpufabric.errors import InputError

SYSTEM_HELP = ("A preset name (see `gpufabric systems`), a YAML spec or system file, "
               "or key=value,...")
#: The option that carries each argument of the collective model, for messages.
_OPTION = {"op": "--op", "algorithm": "--algo", "ranks": "--ranks", "proto": "--proto",
           "size": "--min", "per_node": "--per-node", "concurrent": "--concurrent"}
#: Most sizes one run predicts (nccl-tests' default 8 B to 8 GiB by 2 gives 31).
MAX_SIZES = 1000
MAX_SIZE_BYTES = 2**50
_UNITS = {"": 1, "B": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_size(text: str, field: str) -> int:
    """``8``, ``64K``, ``1M``, ``8G`` (binary units, as nccl-tests) -> bytes.

    >>> parse_size("8G", "--max"), parse_size("64k", "--min")
    (8589934592, 65536)
    """
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", str(text), re.IGNORECASE)
    if not m:
        raise InputError(f"bad size {text!r}; allowed: a number of bytes with an optional "
                         "K, M, G or T suffix (powers of 1024), e.g. 8, 64K, 1M, 8G", field=field)
    num = float(m.group(1)) * _UNITS[m.group(2).upper()]
    if not num <= MAX_SIZE_BYTES:
        raise InputError(f"bad size {text!r}; at most {MAX_SIZE_BYTES} bytes (1P)", field=field)
    val = int(num)
    if val < 1:
        raise InputError(f"bad size {text!r}; must be at least 1 byte", field=field)
    return val


def _sizes(lo: int, hi: int, factor: float) -> list[int]:
    if hi < lo:
        raise InputError(f"--max ({hi}) is below --min ({lo})", field="--max")
    if not (1 < factor < math.inf):
        raise InputError(f"must be above 1, got {factor}", field="--step-factor")
    count = math.floor(math.log(hi / lo) / math.log(factor) + 1e-9) + 1
    if count > MAX_SIZES:
        raise InputError(f"{count} sizes from --min to --max; at most {MAX_SIZES} allowed "
                         "(raise the factor)", field="--step-factor")
    out: list[int] = []
    s = float(lo)
    while s <= hi:
        out.append(int(s))
        s = s * factor
    return out


def _fmt_size(n: int) -> str:
    for u, v in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if n >= v and n % v == 0:
            return f"{n // v}{u}"
    return str(n)


@app.command()
def collective(
    ctx: typer.Context,
    system: str = typer.Argument(..., help=SYSTEM_HELP),
    op: str = typer.Option("all_reduce", "--op", help="all_reduce, all_gather, reduce_scatter, "
                           "all_to_all, broadcast, reduce or send_recv."),
    min_size: str = typer.Option("8", "--min", "-b", help="Smallest size (bytes; K/M/G)."),
    max_size: str = typer.Option("8G", "--max", "-e", help="Largest size (bytes; K/M/G)."),
    step_factor: float = typer.Option(2.0, "--step-factor", "-f", help="Size multiplier."),
    ranks: int | None = typer.Option(None, "--ranks", "-n", callback=whole(1),
                                        help="GPUs taking part (default: all)."),
    per_node: int | None = typer.Option(None, "--per-node", callback=whole(1),
                                        help="Ranks on each node (default: fill nodes)."),
    concurrent: int = typer.Option(1, "--concurrent", callback=whole(1),
                                   help="Groups of this shape running at once on the same "
                                   "nodes' other GPUs (they share NICs, PCIe, fabric)."),
    algo: str = typer.Option("auto", "--algo", help="auto, ring, tree, nvls, nvls_tree, "
                             "hierarchical (all_reduce); pat (all_gather, reduce_scatter at "
                             "one rank per node); all_to_all: pairwise; send_recv: p2p; any "
                             "registered plugin; or a list as NCCL_ALGO takes it (ring,tree: "
                             "choose among those; ^nvls: all but those)."),
    proto: str | None = typer.Option(None, "--proto",
                                        help="Force a protocol (LL, LL128 or Simple), or "
                                        "allow a list as NCCL_PROTO takes it (Simple,LL128; "
                                        "^LL)."),
    json: bool = typer.Option(False, "--json", help="Print JSON."),
    explain: bool = typer.Option(False, "--explain",
                                 help="Name the bottleneck link and how busy it is."),
    nccl: str | None = nccl_option(),
    profile: str | None = profile_option(),
) -> None:
    """Predict an nccl-tests table: size, count, type, redop, root, time, algbw, busbw."""
    from gpufabric import collectives as C
    from gpufabric.collectives import versions
    refuse_together(ctx, [("explain", "json", "the JSON rows hold each size's bottleneck")])
    lo, hi = parse_size(min_size, "--min"), parse_size(max_size, "--max")
    sizes = _sizes(lo, hi, step_factor)
    try:
        opn = C.check_op(op)
        algo_n = C.check_algo(algo)
    except InputError as exc:
        raise InputError(exc.message, field=_OPTION.get(exc.field or "", exc.field)) from None
    release = versions.release()             # --nccl
    m, name = _model(system)
    try:
        preds = []
        with Progress("collective", len(sizes)) as progress:
            for s in sizes:
                preds.append(m.predict(opn, s, ranks, algo_n, proto, per_node=per_node,
                                       concurrent=concurrent))
                progress.step(_fmt_size(s))
    except InputError as exc:
        raise InputError(exc.message, file=system,
                         field=_OPTION.get(exc.field or "", exc.field)) from None
    if json:
        emit_json({"system": name, "op": opn, "ranks": preds[0].ranks,
                   **({"nccl": ".".join(map(str, release))} if release else {}),
                   "rows": [p.to_dict() for p in preds]})
        return
    _print_table(preds, opn, name + (f", NCCL {'.'.join(map(str, release))}" if release
                                     else ""), explain)

def _model(system: str) -> tuple[Any, str]:
    """The collective model of a system spec (a CPU-only host's model for ``gpu: none``) and
    the system's name."""
    from gpufabric import collectives as C
    from gpufabric.collectives.host import HostModel, load_host
    from gpufabric.topology.build import load
    host = load_host(system)            # gpu: none: CPU ranks of one host
    if host is not None:
        return HostModel(host), host.name
    topo = load(system, materialize_nodes=C.Model.SAMPLE_NODES)
    return C.model(topo), topo.name


def _print_table(preds: list[Any], opn: str, name: str, explain: bool) -> None:
    """The nccl-tests table of the predictions (and, with --explain, each size's bottleneck)."""
    n = preds[0].ranks
    typer.echo(f"# gpufabric collective: {opn} on {name}, {n} ranks "
               f"(predicted; nccl-tests columns, out-of-place)")
    typer.echo(f"#{'size':>11} {'count':>12} {'type':>7} {'redop':>6} {'root':>5} "
               f"{'time':>10} {'algbw':>7} {'busbw':>7}  algo/proto")
    typer.echo(f"#{'(B)':>11} {'(elements)':>12} {'':>7} {'':>6} {'':>5} "
               f"{'(us)':>10} {'(GB/s)':>7} {'(GB/s)':>7}")
    for p in preds:
        typer.echo(f" {p.size:>11} {p.count:>12} {p.type:>7} {p.redop:>6} {p.root:>5} "
                   f"{p.time_us:>10.2f} {p.algbw:>7.2f} {p.busbw:>7.2f}  {p.algo}/{p.proto}")
    avg = sum(p.busbw for p in preds) / len(preds)
    typer.echo(f"# Avg bus bandwidth    : {avg:.3f}")
    if explain:
        typer.echo("#")
        for p in preds:
            if p.bottleneck:
                typer.echo(f"# {_fmt_size(p.size):>6}: {p.algo}/{p.proto}, bottleneck "
                           f"{p.bottleneck}, {p.bottleneck_busy:.0%} busy")
            else:
                typer.echo(f"# {_fmt_size(p.size):>6}: {p.algo}/{p.proto}, {p.note}")
        if preds[-1].note:
            typer.echo(f"# algorithm: {preds[-1].note}")


@app.command()
def validate(
    files: list[str] = typer.Argument(
        ..., help="Measurements files (YAML; schema: docs/calibration.md): collective, training, "
                  "inference or video generation, any mix; several are summarized each and "
                  "then together."),
    json: bool = typer.Option(False, "--json", help="Print JSON: {file, summary, points, "
                              "skipped} (several files: {files, summary})."),
    profile: str | None = profile_option(),
    kernel_times: str = kernel_times_option(),
    cv: str | None = typer.Option(
        None, "--cv", help="Cross-validate: 'source' predicts each source's entries (their "
        "source_id: one publication) with every fitted constant refitted without them "
        "(leave-one-source-out)."),
    wide: bool = wide_option(),
) -> None:
    """Predicted against measured for every point of measurements files, with a summary.

    Collective files (nccl-tests points), training files (schema of training.yaml),
    inference files (schema of inference.yaml) and video-generation files (schema of
    video.yaml) alike. Each summary leads with the points of
    held-out entries (no parameter fitted on them, not marked looked_at), per metric, then the
    fitted and looked-at points apart; several files print each file's, then one over all
    their points. With ``--cv source``, the figures of a leave-one-source-out
    cross-validation instead."""
    from gpufabric import validation
    if cv is not None:
        if cv != "source":
            raise InputError(f"got {cv!r}; allowed: source (leave-one-source-out)",
                             field="--cv")
        _cross_validate(files, json)
        return
    from gpufabric.cli.train import print_training
    from gpufabric.collectives.validate import split
    results = [_validate_file(f) for f in files]
    # the large / small split where collective files are among them
    pooled = validation.pooled(results, split if any(r["kind"] == "collectives"
                                                       for r in results) else None)
    if json:
        emit_json(results[0] if len(files) == 1 else {"files": results, "summary": pooled})
        return
    for res in results:
        if res["kind"] == "video":
            from gpufabric.cli.generate import print_video
            print_video(res)
            continue
        {"inference": print_inference, "training": print_training,
         "collectives": _print_validation}[res["kind"]](res, wide)
    if len(files) > 1:
        print_validation_summary(pooled, f"all {len(files)} files")


def _validate_file(f: str) -> dict:
    """One measurements file validated by its kind (video, inference, training, collectives)."""
    from gpufabric.cli.train import is_training_file, run_training
    from gpufabric.collectives.validate import load_entries
    from gpufabric.collectives.validate import validate as validate_file
    from gpufabric.workloads.inference.validate import is_inference_file
    from gpufabric.workloads.video_validate import is_video_file
    if is_video_file(f):
        from gpufabric.cli.generate import run_video
        return run_video(f) | {"kind": "video"}
    if is_inference_file(f):
        return run_inference(f) | {"kind": "inference"}
    if is_training_file(f):
        return run_training(f) | {"kind": "training"}
    with Progress("validate", len(load_entries(f))) as progress:
        return validate_file(f, on_entry=progress.step) | {"kind": "collectives"}


def _cross_validate(files: list[str], json: bool) -> None:
    """`gpufabric validate --cv source`: leave-one-source-out over ``files``, printed."""
    from gpufabric.crossval import cross_validate
    with Progress("validate --cv source") as progress:
        res = cross_validate(files, log=progress.step)
    if json:
        emit_json(res)
        return
    print_cross_validation(res)


def _print_validation(res: dict, wide: bool = False) -> None:
    """One collective measurements file's summary, table and skipped entries."""
    typer.echo(f"# gpufabric validate {res['file']} (collectives)")
    print_validation_summary(res["summary"], res["file"])
    cols = [Col("id", wrap=True, min_width=20), Col("op"), Col("ranks", right=True),
            Col("size (B)", right=True), Col("measured", right=True), Col("unit"),
            Col("predicted", right=True), Col("error", right=True), Col("status"),
            Col("algo/proto", drop=1)]
    print_table(cols, [(r["id"], r["collective"], r["ranks"], r["size"],
                        f"{r['measured']:.1f}", "GB/s" if r["metric"] == "busbw" else "us",
                        f"{r['predicted']:.1f}", f"{r['error_pct']:+.1f}%", r["status"],
                        f"{r['algo']}/{r['proto']}") for r in res["points"]], wide=wide)
    for sk in res.get("skipped", []):
        typer.echo(f"# skipped {sk['id']}: {sk['reason']}")


@app.command()
def params(
    ctx: typer.Context,
    layer: str = typer.Option("collectives", "--layer",
                              help="Whose constants: collectives (the network's and collective "
                                   "models'), workloads (training and inference) or all."),
    json: bool = typer.Option(False, "--json", help="Print JSON: a list of records."),
    check: bool = typer.Option(False, "--check", help="List only the fitted constants that "
                               "rest on a single entry: marked as that entry's answer (the "
                               "entry counts as fitted in validate) or still needing a second "
                               "entry (exit status 1 when any does)."),
    profile: str | None = profile_option(),
    wide: bool = wide_option(),
) -> None:
    """Every fitted or estimated constant of the models with its status (fitted, source,
    prior, nccl, estimate), its source (NCCL version) or the calibration ids it was fitted
    on; a constant fitted on a single entry is flagged as that entry's answer."""
    import gpufabric.workloads.inference.pd  # noqa: F401  (records the workloads' constants)
    import gpufabric.workloads.inference.serve  # noqa: F401
    import gpufabric.workloads.training  # noqa: F401
    import gpufabric.workloads.video  # noqa: F401
    from gpufabric import params as shared
    from gpufabric.collectives import params as P
    if layer != "all" and layer not in shared.LAYERS:
        raise InputError(f"--layer: unknown layer '{layer}'; expected one of "
                         f"{', '.join(shared.LAYERS)} or all")
    rows = shared.table(None if layer == "all" else layer)
    if check:
        rows = [r for r in rows if r["single_entry"]]
    applied = ctx.meta.get("profile")
    changes = [{**c, "old": _plain(c["old"]), "new": _plain(c["new"])}
               for c in (applied[1] if applied else [])]
    if json:
        emit_json({"nccl_version": P.NCCL_VERSION, "params": rows}
                  | ({"profile": {"file": applied[0], "changes": changes}} if applied else {}))
        return
    if applied:
        typer.echo(f"# profile {applied[0]}: {len(changes)} values changed (old -> new)")
        for c in changes:
            typer.echo(f"{c['name']:<30} {c['old']} -> {c['new']}")
    if check:
        unmarked = [r["name"] for r in rows if r["status"] == "single"]
        print_wrapped(f"# gpufabric params --check: {len(rows)} fitted constants rest on a "
                      f"single entry; {len(rows) - len(unmarked)} are marked as that entry's "
                      f"answer (not a prediction; validate counts the entry as fitted), "
                      f"{len(unmarked)} need a second entry or the mark", 2, wide=wide)
    else:
        typer.echo(f"# gpufabric params: {len(rows)} constants (NCCL figures from NCCL "
                   f"{P.NCCL_VERSION}); status: fitted, source, prior, nccl or estimate")
    for r in rows:
        _print_param(r, layer == "all", wide)
    if check and any(r["status"] == "single" for r in rows):
        raise typer.Exit(1)


def _print_param(r: dict, with_layer: bool, wide: bool) -> None:
    """One constant of `gpufabric params`: name, kind, unit, what it applies to, its value and
    where it comes from."""
    where = ("fitted on " + ", ".join(r["fitted_on"])) if r["fitted_on"] else r["source"]
    if r["status"] == "answer":
        where += f" (a single entry: that entry's answer; {r['answer']})"
    elif r["status"] == "single":
        where += " (a single entry, not marked: needs a second entry or the answer mark)"
    col = f"{r['layer']:<12} " if with_layer else ""
    print_wrapped(f"{r['name']:<26} {r['kind']:<8} {col}{r['unit']:<20} "
                  f"{r['applies_to']}", 27, wide=wide)
    print_wrapped(f"{'':<26} value: {_short(r['value'])}", 34, wide=wide)
    print_wrapped(f"{'':<26} from: {where}", 33, wide=wide)


def _plain(v):
    """A value as JSON and the table print it (tuples as lists)."""
    return list(v) if isinstance(v, tuple) else v


def _short(v) -> str:
    text = str(v)
    return text if len(text) <= 200 else text[:197] + "..."

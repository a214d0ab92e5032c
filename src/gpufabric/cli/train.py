"""CLI: train (step time of a parallel layout, or --search) and models."""

from __future__ import annotations

from typing import Any

import typer

from gpufabric.cli.common import (Col, Progress, above, app, emit_json, model_file_option,
                                  nccl_option,
                                  print_table, print_validation_summary, profile_option,
                                  refuse_alone, refuse_together, whole)
from gpufabric.errors import InputError

#: Options of `train` that --search would ignore (it tries the layouts itself).
LAYOUT_OPTIONS = ("tp|pp|dp|cp|ep|etp|vpp|zero|fsdp|micro_batch|recompute|no_sp|ep_overlap|"
                  "order|sac|power_cap|framework")

SYSTEM_HELP = ("A preset name (see `gpufabric systems`), a YAML spec or system file, "
               "or key=value,...")


@app.command()
def models(json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the built-in models (name, kind, parameters, shape, source)."""
    from gpufabric.workloads.models import list_models
    ms = list_models()
    if json:
        emit_json([m.to_dict() for m in ms])
        return
    typer.echo(f"{'model':20s} {'arch':8s} {'params':>9s} {'active':>9s}  shape")
    for m in ms:
        shape = (f"{m.layers}L h{m.hidden} {m.heads}/{m.kv_heads} heads"
                 + (f" {m.experts}e top{m.top_k}" if m.is_moe else "")
                 + (" MLA" if m.attention == "mla" else "")) if m.is_transformer else \
            f"{m.flops_per_sample / 1e9:g} GFLOP/sample"
        typer.echo(f"{m.name:20s} {m.arch:8s} {m.params() / 1e9:8.2f}B "
                   f"{m.active_params() / 1e9:8.2f}B  {shape}")


def _fmt_s(t: float) -> str:
    return f"{t * 1e3:.1f} ms" if t < 1 else f"{t:.3f} s"


def _etp(p: dict) -> str:
    """`` etp N`` where the experts' tensor parallelism differs from the layout's."""
    return f" etp {p['etp']}" if p.get("etp") and p["etp"] != p["tp"] else ""


def _run_words(p: dict) -> str:
    """The search's run settings of a layout (sequence parallelism, offload, overlaps)."""
    if "tp_overlap" not in p:
        return " offload" if p.get("offload") else ""
    words = [("sp" if p["sp"] else "no sp") if p["tp"] > 1 else ""]
    words += ["offload" if p.get("offload") else ""]
    words += ["tp-overlap" if p["tp_overlap"] and p["tp"] > 1 else
              "tp-bwd-overlap" if p.get("tp_bwd_overlap") and p["tp"] > 1 else ""]
    words += ["dp-overlap" if p["dp_overlap"] else "no dp-overlap"]
    words += [f"order {p['order']}" if p.get("order", "tp-cp-ep-dp-pp") != "tp-cp-ep-dp-pp"
              else ""]
    return "".join(f" {w}" for w in words if w)


def _print_result(r, rank: int | None = None) -> None:
    p = r.parallel
    head = f"#{rank} " if rank is not None else ""
    typer.echo(f"{head}{r.model} on {r.gpus} x {r.gpu}: tp {p['tp']} pp {p['pp']} dp {p['dp']}"
               f" cp {p['cp']} ep {p['ep']}{_etp(p)} vpp {p['vpp']} zero {p['zero']}"
               f"{' fsdp ' + p['fsdp'] if p['fsdp'] else ''} micro-batch {p['micro_batch']} "
               f"global batch {p['global_batch']} (x{p['grad_accum']} accumulation) "
               f"seq {r.seq_len} {r.precision} recompute {p['recompute']}{_run_words(p)}")
    typer.echo(f"  step time        {_fmt_s(r.step_time_s)}")
    for k, v in r.breakdown_s.items():
        if v > 0:
            typer.echo(f"    {k:15s} {_fmt_s(v):>12s}  {v / r.step_time_s:6.1%}")
    typer.echo(f"  tokens/s         {r.tokens_per_s:,.0f} ({r.tokens_per_s_per_gpu:,.1f} per GPU)")
    typer.echo(f"  TFLOP/s per GPU  {r.tflops_per_gpu:.1f}   MFU {r.mfu:.1%}")
    typer.echo(f"  memory per GPU   {r.memory_GiB_per_gpu:.1f} GiB of "
               f"{r.memory['capacity_GiB']:g}")
    typer.echo(f"  bottleneck       {r.bottleneck}")


#: The options of `train` (its signature reads them from here, one per parameter).
OPT: dict[str, Any] = {
    "model": typer.Argument(None, help="A model name (see `gpufabric models`) or a "
        "YAML file of the same shape; with --model-file, leave "
        "it out."),
    "system": typer.Argument(None, help=SYSTEM_HELP),
    "model_file": model_file_option(),
    "tp": typer.Option(1, "--tp", callback=whole(1),
        help="Tensor-parallel size (inside a node)."),
    "pp": typer.Option(1, "--pp", callback=whole(1), help="Pipeline stages."),
    "dp": typer.Option(None, "--dp", callback=whole(1), help="Data-parallel size "
        "(default: the rest of the GPUs)."),
    "cp": typer.Option(1, "--cp", callback=whole(1), help="Context-parallel size."),
    "ep": typer.Option(1, "--ep", callback=whole(1), help="Expert-parallel size (MoE)."),
    "etp": typer.Option(0, "--etp", callback=whole(0), help="Tensor parallelism inside "
        "each expert (MoE; 0: as --tp). Other than --tp, experts fold over "
        "tp x cp x dp (Megatron-Core MoE parallel folding)."),
    "vpp": typer.Option(1, "--vpp", callback=whole(1),
        help="Virtual pipeline stages per rank (interleaved)."),
    "zero": typer.Option(1, "--zero", callback=whole(0, 3),
        help="ZeRO stage 0-3 (1: distributed optimizer)."),
    "fsdp": typer.Option("", "--fsdp", help="FSDP: full or hybrid (overrides --zero)."),
    "micro_batch": typer.Option(1, "--micro-batch", callback=whole(1),
        help="Sequences per micro-batch."),
    "global_batch": typer.Option(None, "--global-batch", callback=whole(1),
        help="Sequences per optimizer step."),
    "seq_len": typer.Option(None, "--seq-len", help="Tokens per sequence "
        "(default: the model's)."),
    "precision": typer.Option("bf16", "--precision",
        help="fp32, tf32, fp16, bf16, fp8, mxfp8 or fp4."),
    "recompute": typer.Option("none", "--recompute", help="none, selective or full."),
    "no_sp": typer.Option(False, "--no-sp", help="Tensor parallel without sequence "
        "parallelism (all-reduce instead of reduce-scatter/all-gather)."),
    "tp_overlap": typer.Option(False, "--tp-overlap", help="TP communication overlapped "
        "with GEMMs (TE userbuffers / async TP)."),
    "ep_overlap": typer.Option(False, "--ep-overlap", help="Expert all-to-all overlapped "
        "with another micro-batch's compute (DualPipe)."),
    "order": typer.Option("tp-cp-ep-dp-pp", "--order", help="Rank order, innermost "
        "first."),
    "sac": typer.Option("attention", "--sac", help="What --recompute selective "
        "recomputes: attention (Megatron) or op (torchtitan's op policy)."),
    "power_cap": typer.Option(None, "--power-cap", callback=above(0),
        help="Board power limit in W below the GPU's TDP "
        "(slower tensor clock)."),
    "framework": typer.Option(None, "--framework", help="Run with a framework's "
        "defaults (megatron, nemo, torchtitan, deepspeed, "
        "pytorch-fsdp, composer, maxtext; or a profile YAML "
        "file): sequence parallelism, ZeRO/FSDP, overlaps, "
        "attention kernel, fusion, recomputation. Options "
        "given on the command line override it."),
    "search_": typer.Option(False, "--search", help="Rank the valid layouts by "
        "throughput instead of timing one."),
    "top": typer.Option(5, "--top", callback=whole(1, 100),
        help="Layouts to print with --search."),
    "ray": typer.Option(False, "--ray", help="Run the search on a local Ray instance."),
    "ray_address": typer.Option(None, "--ray-address",
        help="Run the search on this Ray cluster."),
    "json": typer.Option(False, "--json", help="Print JSON."),
    "profile": profile_option(),
    "nccl": nccl_option(),
}


@app.command()
def train(ctx: typer.Context, model: str | None = OPT["model"], system: str | None = OPT["system"],
          model_file: str | None = OPT["model_file"], tp: int = OPT["tp"], pp: int = OPT["pp"],
          dp: int | None = OPT["dp"], cp: int = OPT["cp"], ep: int = OPT["ep"],
          etp: int = OPT["etp"], vpp: int = OPT["vpp"], zero: int = OPT["zero"],
          fsdp: str = OPT["fsdp"], micro_batch: int = OPT["micro_batch"],
          global_batch: int | None = OPT["global_batch"], seq_len: int | None = OPT["seq_len"],
          precision: str = OPT["precision"], recompute: str = OPT["recompute"],
          no_sp: bool = OPT["no_sp"], tp_overlap: bool = OPT["tp_overlap"],
          ep_overlap: bool = OPT["ep_overlap"], order: str = OPT["order"], sac: str = OPT["sac"],
          power_cap: float | None = OPT["power_cap"], framework: str | None = OPT["framework"],
          search_: bool = OPT["search_"], top: int = OPT["top"], ray: bool = OPT["ray"],
          ray_address: str | None = OPT["ray_address"], json: bool = OPT["json"],
          profile: str | None = OPT["profile"], nccl: str | None = OPT["nccl"]) -> None:
    """Step time of a training job with its breakdown, tokens/s, MFU, memory, bottleneck."""
    from gpufabric.cli.common import model_and_system
    from gpufabric.workloads.models import load_model
    from gpufabric.workloads.training import check_seq_len
    o = {k: v for k, v in locals().items() if k != "ctx"}
    model, system = model_and_system(model, system, model_file, ctx)
    refuse_together(ctx, [("search_", LAYOUT_OPTIONS, "--search tries the layouts itself")])
    refuse_alone(ctx, [(name, search_, f"applies only with --search ({what})")
                       for name, what in (("top", "the layouts it prints"),
                                          ("ray", "where its candidates run"),
                                          ("ray_address", "where its candidates run"))])
    m = load_model(model)
    seq = check_seq_len(seq_len, m)
    if search_:
        return _search(m, system, seq, o)
    _one(ctx, m, system, seq, o)


def _search(m: Any, system: str, seq: int, o: dict[str, Any]) -> None:
    """`train --search`: the valid layouts ranked by throughput, the best ``--top`` printed
    with what the search considered and pruned."""
    from gpufabric.workloads.search import _topology, search_layouts
    per_domain, domains = _topology(system).scale_up()
    gb = o["global_batch"] or per_domain * domains
    with Progress("train --search") as progress:
        # TP overlap is searched (on and off) unless --tp-overlap fixes it on
        rs, counts = search_layouts(m, system, global_batch=gb, seq_len=seq,
                                    precision=o["precision"], top=o["top"],
                                    tp_overlap=True if o["tp_overlap"] else None, ray=o["ray"],
                                    ray_address=o["ray_address"],
                                    progress=progress.told("shapes"))
    if o["json"]:
        best = rs[0]
        emit_json({"step_time_s": best.step_time_s,
                   "tokens_per_s_per_gpu": best.tokens_per_s_per_gpu, "mfu": best.mfu,
                   "memory_GiB_per_gpu": best.memory_GiB_per_gpu,
                   "search": counts.to_dict(),
                   "layouts": [r.to_dict() for r in rs]})
        return
    typer.echo(f"# best {len(rs)} layouts of {m.name} on {system} (global batch {gb}, "
               f"seq {seq}, {o['precision']})")
    typer.echo(f"# considered {counts.considered:,} layouts ({counts.shapes:,} shapes): "
               f"{counts.pruned_bound:,} pruned by bound, {counts.pruned_memory:,} by "
               f"memory, {counts.timed:,} timed")
    for i, r in enumerate(rs, 1):
        _print_result(r, i)
        for w in _warnings(r, m):
            typer.echo(f"  warning          {w}")


def _one(ctx: typer.Context, m: Any, system: str, seq: int, o: dict[str, Any]) -> None:
    """One layout's step: the data-parallel size filling the system unless --dp gives it, the
    framework's settings where --framework names one, the prediction printed or as JSON."""
    from gpufabric.workloads.parallel import Parallel
    from gpufabric.workloads.training import Software, _topology, predict_step
    topo = _topology(system)
    if o["power_cap"] is not None:      # a limit above the TDP would cap nothing, silently
        from gpufabric.workloads.compute import gpu_spec, power_capped
        power_capped(gpu_spec(topo.gpus()[0].model), o["power_cap"], field="--power-cap")
    tp, pp, cp, dp = o["tp"], o["pp"], o["cp"], o["dp"]
    if dp is None:
        per_domain, domains = topo.scale_up()
        Parallel(tp=tp, pp=pp, cp=cp)     # refuses a tp, pp or cp below 1 before it divides
        if (per_domain * domains) % (tp * pp * cp):
            raise InputError(f"tp x pp x cp = {tp * pp * cp} does not divide the "
                             f"{per_domain * domains} GPUs", field="--tp")
        dp = per_domain * domains // (tp * pp * cp)
    opts: dict = {k: o[k] for k in ("tp_overlap", "ep_overlap", "sac")}
    no_sp, zero, fsdp, recompute = o["no_sp"], o["zero"], o["fsdp"], o["recompute"]
    if o["framework"]:
        run = _framework_settings(ctx, o["framework"], no_sp=no_sp, zero=zero, fsdp=fsdp,
                                  tp_overlap=o["tp_overlap"], ep_overlap=o["ep_overlap"],
                                  recompute=recompute, sac=o["sac"])
        from gpufabric.workloads.frameworks import step_options
        no_sp = not run.get("sp", not no_sp)
        zero = int(run.get("zero", zero))
        fsdp = str(run.get("fsdp", fsdp))
        recompute = str(run.get("recompute", recompute))
        opts.update(step_options(run))
    par = Parallel(tp=tp, pp=pp, dp=dp, cp=cp, ep=o["ep"], vpp=o["vpp"], zero=zero, fsdp=fsdp,
                   sp=not no_sp, micro_batch=o["micro_batch"],
                   global_batch=o["global_batch"] or dp * o["micro_batch"],
                   recompute=recompute, order=o["order"], etp=o["etp"])
    # the job's software from the flags and the framework's profile, beside its layout
    software = Software(precision=o["precision"], power_cap_W=o["power_cap"],
                        check_memory=True, **opts)
    r = predict_step(m, topo, par, seq, software)
    warnings = _warnings(r, m)
    if o["json"]:
        emit_json({**r.to_dict(), "warnings": warnings})
        return
    _print_result(r)
    for w in warnings:
        typer.echo(f"  warning          {w}")

def _warnings(r, m) -> list[str]:
    """What makes a prediction implausible (:mod:`gpufabric.workloads.plausibility`)."""
    from gpufabric.workloads.compute import gpu_spec
    from gpufabric.workloads.plausibility import mfu_warning
    kind = "moe" if m.is_moe else m.arch
    w = mfu_warning(r.mfu, gpu_spec(r.gpu).arch, kind, r.breakdown_s, r.step_time_s)
    return [w] if w else []


def _framework_settings(ctx: typer.Context, name: str, **given: object) -> dict:
    """The run settings of ``--framework NAME``: the profile's defaults with every option the
    command line gives on top."""
    from gpufabric.cli.common import given as on_command_line
    from gpufabric.workloads.frameworks import load_profile, resolve
    prof = load_profile(name, field="--framework")
    stated: dict = {}
    for opt, key in (("no_sp", "sp"), ("zero", "zero"), ("fsdp", "fsdp"),
                     ("tp_overlap", "tp_comm_overlap"), ("ep_overlap", "ep_comm_overlap"),
                     ("recompute", "recompute"), ("sac", "sac")):
        if on_command_line(ctx, opt):
            stated[key] = (not given[opt]) if opt == "no_sp" else given[opt]
    return resolve(prof, stated)


def is_training_file(path: str) -> bool:
    """Whether ``path`` holds training measurements (dispatch for ``gpufabric validate``)."""
    from gpufabric.errors import InputError
    from gpufabric.fileio import load_yaml
    from gpufabric.workloads.validate import is_training_file as sniff
    try:
        return sniff(load_yaml(path, what="a measurements file (YAML)"))
    except InputError:
        return False       # the collective validator reports what is wrong with the file


def run_training(path: str) -> dict:
    """`gpufabric validate FILE` of a training measurements file: the validator's result."""
    from gpufabric.workloads.validate import validate
    with Progress("validate") as progress:
        rep = validate(path, progress=progress.told("points"))
    return {"file": path} | rep.to_dict()


def print_training(res: dict, wide: bool = False) -> None:
    """One training file's summary, table (status per point) and skipped points."""
    path = res["file"]
    mem = any(p["metric"].endswith("_GiB") for p in res["points"])
    typer.echo(f"# gpufabric validate {path} (training: tokens/s per GPU, images/s for CNNs"
               + ("; memory in GiB per GPU)" if mem else ")"))
    print_validation_summary(res["summary"], path)
    cols = [Col("id", wrap=True, min_width=24), Col("#", right=True),
            Col("measured", right=True), Col("predicted", right=True), Col("per GPU"),
            Col("error", right=True), Col("status"), Col("layout; bottleneck", wrap=True,
                                                          min_width=30)]
    print_table(cols, [(p["id"], p["point"], f"{p['measured']:.1f}", f"{p['predicted']:.1f}",
                        p["unit"].removesuffix(" per GPU"), f"{p['error_pct']:+.1f}%",
                        p["status"],
                        f"{p['layout']}; {p['bottleneck']}") for p in res["points"]],
                wide=wide)
    for sk in res["skipped"]:
        at = "" if sk["point"] is None else f"#{sk['point']}"
        typer.echo(f"# skipped {sk['id']}{at}: {sk['reason']}")

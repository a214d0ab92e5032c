"""CLI: generate command (see gpufabric.workloads.video)."""

from __future__ import annotations

import re
from typing import Any

import typer

from gpufabric.cli.common import (Progress, app, emit_json, print_validation_summary,
                                  profile_option, whole)
from gpufabric.errors import InputError

SYSTEM_HELP = ("A preset name (see `gpufabric systems`), a YAML spec or system file, "
               "or key=value,...")


def parse_resolution(text: str) -> tuple[int, int]:
    """``1280x720`` -> (1280, 720); ``720p`` / ``480p`` / ``1080p`` as 16:9."""
    t = str(text).strip().lower()
    named = {"480p": (832, 480), "540p": (960, 544), "720p": (1280, 720),
             "1080p": (1920, 1088)}
    if t in named:
        return named[t]
    m = re.fullmatch(r"(\d{1,5})\s*[x*]\s*(\d{1,5})", t)
    if not m:
        raise InputError(f"got {text!r}; expected WIDTHxHEIGHT (1280x720) or 480p, 540p, "
                         "720p, 1080p", field="--resolution")
    return int(m.group(1)), int(m.group(2))


def _list_models(json: bool) -> None:
    from gpufabric.workloads.video import list_dits
    ms = list_dits()
    if json:
        emit_json([m.to_dict() for m in ms])
        return
    typer.echo(f"# {'model':<18} {'kind':<6} {'params':>7} {'blocks':<22} {'guidance':<10} "
               "defaults")
    for m in ms:
        blocks = " + ".join(f"{n} {t}" for t, n in m.blocks)
        d = m.defaults
        typer.echo(f"  {m.name:<18} {m.kind:<6} {m.params() / 1e9:>6.1f}B {blocks:<22} "
                   f"{m.guidance:<10} {d['width']}x{d['height']}, {d['frames']} frames, "
                   f"{d['steps']} steps")


@app.command()
def generate(
    model: str | None = typer.Argument(None, help="A diffusion model (see `gpufabric "
                                       "generate --list`): wan2.1-t2v-14b, hunyuanvideo, "
                                       "flux.1-dev, ..."),
    system: str | None = typer.Argument(None, help=SYSTEM_HELP),
    resolution: str | None = typer.Option(None, "--resolution", help="WIDTHxHEIGHT "
                                          "(default: the model's)."),
    seconds: float | None = typer.Option(None, "--seconds", help="Video length; frames = "
                                         "seconds x fps + 1, rounded up to the VAE's 4k + 1."),
    fps: float | None = typer.Option(None, "--fps", help="Frames per second (default: the "
                                     "model's)."),
    frames: int | None = typer.Option(None, "--frames", help="Frames (instead of --seconds)."),
    steps: int | None = typer.Option(None, "--steps", help="Denoising steps (default: the "
                                     "model's)."),
    sp: int = typer.Option(1, "--sp", callback=whole(1), help="Sequence parallelism: Ulysses "
                           "ranks (all-to-all of Q/K/V and the output around each attention)."),
    ring: int = typer.Option(1, "--ring", callback=whole(1), help="Ring-attention ranks (keys "
                             "and values passed round a ring), times --sp."),
    cfg_parallel: bool = typer.Option(False, "--cfg-parallel", help="Run the two guidance "
                                      "branches on two GPU groups."),
    cache_skip: float = typer.Option(0.0, "--cache-skip", help="Fraction of steps a step "
                                     "cache (TeaCache, First-Block-Cache) skips."),
    attn_kernel: str = typer.Option("fa2", "--attn-kernel", help="fa2 (flash-attn 2, PyTorch "
                                    "SDPA) or native (FA3 / cuDNN on Hopper)."),
    compile_: bool = typer.Option(False, "--compile", help="torch.compile: fused "
                                  "element-wise kernels."),
    precision: str = typer.Option("bf16", "--precision", help="The DiT's precision: bf16, "
                                  "fp16, fp8."),
    list_: bool = typer.Option(False, "--list", help="List the diffusion models and exit."),
    json: bool = typer.Option(False, "--json", help="Print JSON."),
    profile: str | None = profile_option(),
) -> None:
    """Predict seconds per video (or image) of a diffusion transformer on SYSTEM, and videos
    per hour of the whole system, with the breakdown: text encoder, DiT steps (GEMM,
    attention, element-wise, communication), VAE decode."""
    if list_:
        _list_models(json)
        return
    if model is None or system is None:
        raise InputError("missing; give MODEL SYSTEM (see `gpufabric generate --list`)",
                         field="SYSTEM" if model else "MODEL")
    from gpufabric.topology.build import load
    from gpufabric.workloads.video import Layout, Run, load_dit
    from gpufabric.workloads.video import generate as run
    m = load_dit(model)
    width, height = parse_resolution(resolution) if resolution is not None else (None, None)
    frames = _frames(m, frames, seconds, fps)
    res = run(m, load(system), width=width, height=height, frames=frames, steps=steps,
              layout=Layout(ulysses=sp, ring=ring, cfg_parallel=cfg_parallel),
              run=Run(precision=precision, attn_kernel=attn_kernel, compiled=compile_,
                      cache_skip=cache_skip))
    if fps is not None:
        res["request"]["fps"] = fps
        res["request"]["seconds"] = (res["request"]["frames"] - 1) / fps
    res["system"] = system
    if json:
        emit_json(res)
        return
    print_generation(res)


def _frames(m: Any, frames: int | None, seconds: float | None, fps: float | None) -> int | None:
    """The frames asked for: --frames, or --seconds at --fps (either defaulting to the
    model's) rounded as the VAE needs; None for the model's default."""
    from gpufabric.errors import check_range
    from gpufabric.workloads.video import frames_for
    if frames is not None and seconds is not None:
        raise InputError("give --frames or --seconds, not both", field="--frames")
    if seconds is None and fps is None:
        return frames
    s = check_range(seconds if seconds is not None else
                    (m.defaults["frames"] - 1) / m.defaults["fps"], 0.0, 600.0,
                    above=True, field="--seconds")
    f = check_range(fps if fps is not None else m.defaults["fps"], 0.0, 240.0,
                    above=True, field="--fps")
    return frames if frames is not None else frames_for(m, s, f)


def print_generation(r: dict) -> None:
    """The human-readable prediction of one generation."""
    q, t, lay, run = r["request"], r["tokens"], r["layout"], r["run"]
    what = (f"{q['width']}x{q['height']}, {q['frames']} frames ({q['seconds']:.2f} s at "
            f"{q['fps']:g} fps)" if r["kind"] == "video" else f"{q['width']}x{q['height']} image")
    typer.echo(f"# gpufabric generate: {r['model']} on {r['system']} ({r['system_gpus']} x "
               f"{r['gpu']}), {what}")
    typer.echo(f"# tokens: {t['latent_frames']} x {t['rows']} x {t['cols']} = {t['video']:,} "
               f"latent + {t['text']} text = {t['sequence']:,}; {q['steps']} steps "
               f"({q['steps_computed']} computed), {run['passes_per_step']} pass(es) per step "
               f"({run['guidance']} guidance)")
    typer.echo(f"# layout: Ulysses {lay['ulysses']} x ring {lay['ring']}"
               f"{' x CFG 2' if lay['cfg_parallel'] else ''} = {lay['gpus']} GPU(s) per "
               f"video; {run['precision']}, attention {run['attn_kernel']}, "
               f"{'compiled' if run['compiled'] else 'eager'}")
    f = r["flops_per_step"]
    typer.echo(f"# FLOPs per step: GEMM {f['gemm'] / 1e15:,.2f} PFLOP, attention "
               f"{f['attention'] / 1e15:,.2f} PFLOP")
    b = r["breakdown_s"]
    names = (("text_encoder", "text encoder"), ("dit_gemm", "DiT GEMM"),
             ("dit_attention", "DiT attention"), ("dit_elementwise", "DiT element-wise"),
             ("dit_communication", "DiT communication"), ("vae_decode", "VAE decode"))
    total = r["seconds_per_video"]
    for key, name in names:
        typer.echo(f"{name:<20} {b[key]:>10.2f} s  {b[key] / total:>6.1%}")
    typer.echo(f"{'per step':<20} {r['step_s']:>10.3f} s")
    typer.echo(f"{'seconds per video':<20} {total:>10.2f} s")
    typer.echo(f"{'videos per hour':<20} {r['videos_per_hour']:>10.1f}  ({r['instances']} "
               f"instance(s) of {lay['gpus']} GPU(s) on the system)")


def run_video(file: str) -> dict:
    """`gpufabric validate FILE` of a generation measurements file: the validator's result."""
    from gpufabric.workloads import video_validate as V
    with Progress("validate") as progress:
        return V.validate(file, progress=progress.told("points"))


def print_video(res: dict) -> None:
    """One generation file's summary and table (status per point)."""
    file = res["file"]
    typer.echo(f"# gpufabric validate {file} (video generation)")
    print_validation_summary(res["summary"], file)
    typer.echo(f"# {'id':<34} {'pt':>2} {'model':<15} {'gpu':<14} {'layout':<9} "
               f"{'measured':>9} {'predicted':>9} {'error':>8}  status")
    for r in res["points"]:
        lay = r["layout"]
        ls = f"u{lay['ulysses']}r{lay['ring']}" + ("+cfg" if lay["cfg_parallel"] else "")
        typer.echo(f"  {r['id']:<34} {r['point']:>2} {r['model']:<15} {r['gpu']:<14} "
                   f"{ls:<9} {r['measured']:>9.2f} {r['predicted']:>9.2f} "
                   f"{r['error_pct']:>+7.1f}%  {r['status']}")
    for sk in res["skipped"]:
        typer.echo(f"# skipped {sk['id']} point {sk['point']}: {sk['reason']}")

"""``gpufabric calibrate``: fit the collective model to one machine's measurements."""

from __future__ import annotations

import typer

from gpufabric.cli.common import Progress, app, emit_json
from gpufabric.errors import InputError


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f}%"


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4g}"


@app.command()
def calibrate(
    measurements: str = typer.Argument(
        ..., help="A collectives measurements file (YAML; schema: docs/calibration.md)."),
    system: str | None = typer.Option(
        None, "--system", help="The system every entry ran on (a preset, a YAML spec or system "
        "file, key=value,...); default: each entry's own."),
    output: str = typer.Option(..., "--output", "-o", help="The profile to write (YAML)."),
    hold_out: str = typer.Option("sizes", "--hold-out", help="Points not fitted, to validate "
                                 "on: sizes (every other size of each entry), ops (the last "
                                 "collective of the file) or none."),
    json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Fit the physical parameters the measurements constrain (per transport: usable share of
    the rate, per-hop latency; per forced protocol: efficiency), write them as a profile,
    and print validate's error on the held-out points before and after."""
    from gpufabric.fileio import check_output, write_output
    from gpufabric.measure.calibrate import HOLD_OUT, calibrate as fit, profile_yaml
    if hold_out not in HOLD_OUT:
        raise InputError(f"unknown hold-out '{hold_out}'; allowed: {', '.join(HOLD_OUT)}",
                         field="--hold-out")
    check_output(output, field="--output")
    with Progress("calibrate") as progress:
        res = fit(measurements, system, hold_out, on_step=progress.step)
    write_output(output, profile_yaml(res), field="--output")
    if json:
        emit_json(res)
        return
    _print_fit(res, measurements)
    typer.echo(f"# wrote {output} ({len(res['params'])} parameters); use it with "
               f"--profile {output}")


def _print_fit(res: dict, measurements: str) -> None:
    """What calibrate fitted: each parameter old and new with the points that pinned it, those
    left as shipped and why, and the error before and after."""
    typer.echo(f"# gpufabric calibrate {measurements}: {res['fitted_points']} points fitted, "
               f"{res['held_out_points']} held out ({res['held_out']})")
    for sk in res["skipped"]:
        typer.echo(f"# skipped: {sk}")
    typer.echo(f"# {'parameter':<28} {'old':>9} {'new':>9}  pinned by")
    for p in res["params"]:
        share = ""
        if "share_old" in p:
            share = (f" (usable share of the raw rate {_num(p['share_old'])} -> "
                     f"{_num(p['share_new'])})")
        typer.echo(f"  {p['name']:<28} {_num(p['old']):>9} {_num(p['new']):>9}  "
                   f"{'; '.join(p['pinned_by'])}{share}")
    if not res["params"]:
        typer.echo("  (none: no candidate parameter moves these points on its own)")
    if res["unpinned"]:
        typer.echo(f"# not pinned by these points, left as shipped: "
                   f"{', '.join(u['name'] for u in res['unpinned'])}")
        whys: dict[str, list[str]] = {}
        for u in res["unpinned"]:
            whys.setdefault(u["why"], []).append(u["name"])
        for why, names in whys.items():
            typer.echo(f"#   {why}: {len(names)}")
    r = res["residual_pct"]
    typer.echo(f"# fitted points, median |error| of time: {_pct(r['before'])} shipped -> "
               f"{_pct(r['after'])} fitted")
    if res["before"] is not None:
        for label in ("before", "after"):
            s = res[label]["all"]      # every held-out point, whatever its entry's status
            lg, sm = s["by_size"]["large"], s["by_size"]["small"]
            typer.echo(f"# held-out {label:<6} ({s['points']} points): large (>= 64 MiB, "
                       f"busbw) median {_pct(lg['median_abs_pct'])}, max "
                       f"{_pct(lg['max_abs_pct'])} over {lg['points']}; small "
                       f"(< 64 KiB, time) median {_pct(sm['median_abs_pct'])} over "
                       f"{sm['points']}; all median {_pct(s['median_abs_pct'])}")

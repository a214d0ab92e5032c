"""``gpufabric bench``: measure collectives on this machine (see gpufabric.measure.bench)."""

from __future__ import annotations

import socket
import sys
import time
from typing import Any

import typer
import yaml

from gpufabric.cli.collective import _sizes, parse_size
from gpufabric.cli.common import Progress, app, emit_json
from gpufabric.errors import InputError


def _ops(text: str) -> list[str]:
    from gpufabric.measure.bench import OPS
    ops = [o.strip() for o in text.split(",") if o.strip()]
    if ops == ["all"]:
        return list(OPS)
    for o in ops:
        if o not in OPS:
            raise InputError(f"unknown collective '{o}'; allowed: {', '.join(OPS)} or all",
                             field="--op")
    if not ops:
        raise InputError(f"empty; allowed: {', '.join(OPS)} or all", field="--op")
    return list(dict.fromkeys(ops))


def _machine(system: str | None, backend: str = "mpi"
             ) -> tuple[str, list[str], dict | None, dict, dict | None]:
    """(name, GPU models, spec or None, machine facts, host spec or None) of SYSTEM, else of
    this machine; the host spec (``gpu: none``) describes a machine without GPUs, whose ranks
    are CPU processes exchanging over ``backend``'s transport."""
    from pathlib import Path

    from gpufabric.collectives.host import load_host
    from gpufabric.measure.bench import host_transport
    from gpufabric.topology.build import load
    host = socket.gethostname()
    transport = host_transport(backend)
    if system is not None:
        hs = load_host(system)
        if hs is not None:
            hs.transport = transport
            return hs.name, [], None, {"hostname": host, "system": system, "gpus": 0}, hs.spec()
        t = load(system)
        spec = t.meta.get("spec") if isinstance(t.meta.get("spec"), dict) else None
        gpus = [g.model for g in t.gpus()]
        return (t.name, gpus, spec, {"hostname": host, "system": system, "gpus": len(gpus)},
                None)
    from gpufabric.measure.discover import discover
    d = discover(Path("/"))
    for line in d.notes:
        print(f"gpufabric: note: {line}", file=sys.stderr)
    rep = d.report()
    cpu = rep.get("cpu") or {}
    gpus = [x.get("model", "") for x in d.system.get("devices", []) if x.get("kind") == "gpu"]
    facts = {"hostname": host, "cpu": cpu.get("model_name", ""), "sockets": cpu.get("sockets"),
             "cores": cpu.get("cores"), "gpus": len(gpus)}
    if rep.get("gpu_name"):
        facts["gpu_name"] = rep["gpu_name"]
    hspec: dict | None = None
    if not gpus:
        hspec = {"gpu": "none"}
        model = next((x.get("model", "") for x in d.system.get("devices", [])
                      if x.get("kind") == "cpu" and x.get("model")), "")
        if model:
            hspec["cpu"] = model
        hspec["sockets"] = cpu.get("sockets") or 1
        if cpu.get("cores"):
            hspec["cores"] = cpu["cores"]
        hspec["transport"] = transport
    return host, gpus, None, facts, hspec


@app.command()
def bench(
    system: str | None = typer.Argument(
        None, help="The system the run is recorded as (a preset, spec or system file); "
                   "default: what `gpufabric discover` finds here."),
    op: str = typer.Option("all_reduce", "--op", help="Collectives, comma-separated: "
                           "all_reduce, all_gather, reduce_scatter, broadcast, all_to_all "
                           "(or all)."),
    min_size: str = typer.Option("8", "--min", help="Smallest size (bytes; K, M, G suffixes)."),
    max_size: str = typer.Option("64M", "--max", help="Largest size."),
    step_factor: float = typer.Option(2.0, "--step-factor", help="Size multiplier per step."),
    ranks: int = typer.Option(2, "--ranks", help="Processes (one per GPU with GPUs), 1 to 64."),
    backend: str = typer.Option("auto", "--backend", help="auto (nccl-tests with GPUs, else "
                                "torch, else mpi), nccl-tests, torch or mpi."),
    iters: int = typer.Option(20, "--iters", help="Timed calls per point."),
    warmup: int = typer.Option(5, "--warmup", help="Untimed calls before them."),
    stat: str = typer.Option("mean", "--stat", help="A point's time: mean over the timed "
                             "calls (as nccl-tests), or median of each call's slowest rank "
                             "(mpi only; for a machine shared with other work)."),
    timeout: float = typer.Option(300.0, "--timeout", help="Seconds for the whole run; then "
                                  "it is stopped and the points measured so far are kept."),
    output: str = typer.Option(..., "--output", "-o", help="Measurements file to write (YAML; "
                               "the schema `gpufabric validate` reads)."),
    json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Measure collectives on this machine with a real backend (nccl-tests, torch.distributed
    or MPI; processes on this host over loopback), print the nccl-tests table and write a
    measurements file for `gpufabric validate` and `gpufabric calibrate`."""
    from gpufabric.fileio import check_output, write_output
    from gpufabric.measure import bench as b
    ops = _ops(op)
    sizes = _checked_run(ranks, min_size, max_size, step_factor, iters, warmup, timeout)
    check_output(output, field="--output")
    chosen = b.choose(backend)
    b.check_bounds(ranks, sizes[-1], chosen)
    name, gpus, spec, facts, hspec = _machine(system, chosen)
    sys_entry, needs = b.system_entry(gpus, spec, hspec)
    with Progress("bench", len(ops) * len(sizes)) as progress:
        res = b.run(ops, sizes, ranks, chosen, iters, warmup, timeout, step_factor,
                    on_point=lambda r: progress.step(f"{r['op']} {r['size']} B"), stat=stat)
    if not res.rows:
        raise InputError(f"nothing measured in {timeout:g} s (raise --timeout or lower --max)",
                         field="--timeout")
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    ents = b.entries(res, name, sys_entry, needs, facts, when)
    write_output(output, yaml.safe_dump(ents, sort_keys=False), field="--output")
    for note in res.notes:
        print(f"gpufabric: note: {note}", file=sys.stderr)
    if json:
        emit_json({"backend": res.backend, "ranks": ranks, "iterations": iters,
                   "warmup": warmup, "statistic": res.stat, "complete": res.complete,
                   "software": res.software,
                   "rows": res.rows, "notes": res.notes, "output": output})
        return
    _print_tables(res, ops, name, ranks, iters, warmup)
    if needs:
        typer.echo(f"# validate skips these entries: they need {needs}")
    typer.echo(f"# wrote {output} ({len(ents)} entries, {len(res.rows)} points"
               f"{'' if res.complete else ', stopped at the time limit'})")


def _checked_run(ranks: int, min_size: str, max_size: str, step_factor: float, iters: int,
                 warmup: int, timeout: float) -> list[int]:
    """The sizes of a bench run, its ranks, iterations, warm-up and time limit checked."""
    from gpufabric.measure import bench as b
    if not 1 <= ranks <= b.MAX_RANKS:
        raise InputError(f"got {ranks}; expected 1 to {b.MAX_RANKS} ranks", field="--ranks")
    lo, hi = parse_size(min_size, "--min"), parse_size(max_size, "--max")
    if lo > hi:
        raise InputError(f"--min ({lo}) is above --max ({hi})", field="--min")
    if iters < 1:
        raise InputError(f"got {iters}; expected at least 1", field="--iters")
    if warmup < 0:
        raise InputError(f"got {warmup}; expected 0 or more", field="--warmup")
    if not 0 < timeout <= 86400:
        raise InputError(f"got {timeout:g}; expected seconds above 0, at most 86400",
                         field="--timeout")
    return _sizes(lo, hi, step_factor)


def _print_tables(res: Any, ops: list[str], name: str, ranks: int, iters: int,
                  warmup: int) -> None:
    """The nccl-tests table of each measured collective, under one heading for the run."""
    from gpufabric.measure import bench as b
    sw = res.software
    lib = sw.get("mpi_library") or sw.get("nccl") or sw.get("torch") or ""
    typer.echo(f"# gpufabric bench: {res.backend}{' (' + lib + ')' if lib else ''}, {ranks} "
               f"ranks on {name}, {iters} iterations after {warmup} warmup, {b.DTYPE}"
               f"{', median of the calls' if res.stat == 'median' else ''}")
    for o in ops:
        rows = [r for r in res.rows if r["op"] == o]
        if not rows:
            continue
        typer.echo(f"#\n# {o}")
        for line in b.table_header():
            typer.echo(line)
        for r in rows:
            typer.echo(b.table_line(r))

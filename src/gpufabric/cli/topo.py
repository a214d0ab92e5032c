"""CLI: systems, show, p2p, topo, import, compare."""

from __future__ import annotations

from pathlib import Path

import typer
import yaml
from rich.console import Console
from rich.table import Table

from gpufabric.cli.common import Progress, app, emit_json
from gpufabric.fileio import check_output, read_text, write_text_atomic

console = Console()

SYSTEM_HELP = ("A preset name (see `gpufabric systems`), a YAML spec or system file, "
               "or key=value,...")


def _load(system: str):
    from gpufabric.topology.build import load
    return load(system)


@app.command()
def systems(json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the built-in example systems (presets)."""
    from gpufabric.topology import presets
    compared = presets.compared()
    rows = [{"name": n, "compare": n in compared, "description": presets.describe(n)}
            for n in presets.names()]
    if json:
        emit_json(rows)
        return
    table = Table("preset", "in compare", "description", box=None)
    for n in presets.names():
        table.add_row(n, "yes" if n in compared else "", presets.describe(n))
    console.print(table)


def _print_matrix(title: str, labels: list[str], cells: list[list[str]]) -> None:
    """A square matrix, never squeezed: wider than the terminal beats unreadable cells."""
    table = Table(title=title, box=None, pad_edge=False)
    table.add_column("", no_wrap=True)
    for lab in labels:
        table.add_column(lab, justify="right", no_wrap=True)
    for lab, row in zip(labels, cells, strict=True):
        table.add_row(lab, *row)
    widest = max([len(c) for row in cells for c in row] + [len(ln) for ln in labels] + [1])
    _print_wide(table, 8 + (widest + 2) * (len(labels) + 1))


def _print_wide(table: Table, need: int) -> None:
    (console if console.width >= need else Console(width=need)).print(table)


@app.command()
def show(system: str = typer.Argument(..., help=SYSTEM_HELP),
         node: int = typer.Option(0, help="Which server of a cluster to show."),
         json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Devices, PCIe lanes used and free per socket, path matrix with bandwidths, warnings."""
    from gpufabric.report.summary import path_table
    from gpufabric.topology import rules
    with Progress("show", 2) as progress:
        t = _load(system)
        t.check_node(node, field="--node", file=system)
        progress.step("system built")
        lanes = rules.lane_budget(t)
        pt = path_table(t, node)
        progress.step("paths")
    warns = rules.warnings(t)
    if json:
        emit_json({**t.to_dict(), "lanes": lanes, "paths": pt, "warnings": warns})
        return
    console.print(f"[bold]{t.name}[/bold]  {t.meta.get('description', '')}")
    nodes = t.meta.get("nodes", t.node_count)
    console.print(f"{nodes} node(s), {len(t.gpus(node))} GPU(s) per node"
                  + (f", fabric: {t.meta['fabric']['topology']} "
                     f"{t.meta['nic']} x{t.meta['nics_per_node']}, "
                     f"{t.meta['fabric']['oversubscription']:g}:1"
                     if t.meta.get("fabric") else ""))
    dev = Table(title=f"Devices of node {node}", box=None)
    for col in ("id", "kind", "model", "numa", "attached to"):
        dev.add_column(col)
    for d in t.devices.values():
        if d.node != node:
            continue
        ups = [f"{n} ({ln.kind}{' x' + str(ln.lanes) if ln.lanes else ''}"
               f"{' x' + str(ln.count) if ln.count > 1 else ''}, {ln.bw_GBps:g} GB/s)"
               for n, ln in t.neighbors(d.id) if ln.b == d.id or ln.kind != "pcie"]
        dev.add_row(d.id, d.kind, d.model or "?", str(d.numa), "; ".join(ups))
    console.print(dev)
    lt = Table(title="PCIe lanes at the CPU root ports", box=None)
    for col in ("cpu", "model", "lanes", "used", "free"):
        lt.add_column(col)
    for r in lanes:
        if r["node"] == node:
            lt.add_row(r["cpu"], r["model"], str(r["lanes"]), str(r["used"]), str(r["free"]))
    console.print(lt)
    cells = [[("X" if ty == "X" else f"{ty} {bw:g}") for ty, bw in zip(trow, brow, strict=True)]
             for trow, brow in zip(pt["type"], pt["bw_GBps"], strict=True)]
    _print_matrix("Paths (type, bottleneck GB/s per direction)", pt["labels"], cells)
    for w in warns:
        console.print(f"[yellow]warning:[/yellow] {w}")


@app.command()
def p2p(system: str = typer.Argument(..., help=SYSTEM_HELP),
        node: int = typer.Option(0, help="Which server of a cluster."),
        json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """GPU-pair bandwidth matrix (bottleneck GB/s per direction; * = no peer-to-peer)."""
    from gpufabric.report.summary import path_table
    with Progress("p2p", 2) as progress:
        t = _load(system)
        t.check_node(node, field="--node", file=system)
        progress.step("system built")
        pt = path_table(t, node)
        progress.step("paths")
    n = len(t.gpus(node))
    sub = {k: [row[:n] for row in pt[k][:n]] for k in ("type", "bw_GBps", "p2p", "lat_us")}
    if json:
        emit_json({"system": t.name, "gpus": pt["labels"][:n], **sub})
        return
    cells = [["-" if ty == "X" else f"{bw:g}{'' if ok else '*'}"
              for ty, bw, ok in zip(trow, brow, prow, strict=True)]
             for trow, brow, prow in zip(sub["type"], sub["bw_GBps"], sub["p2p"], strict=True)]
    _print_matrix(f"{t.name}: GPU-pair bandwidth, GB/s per direction (* = no P2P: through host "
                  "memory)", pt["labels"][:n], cells)


@app.command()
def topo(system: str = typer.Argument(..., help=SYSTEM_HELP),
         node: int = typer.Option(0, help="Which server of a cluster."),
         json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Print the `nvidia-smi topo -m` matrix of a modeled system."""
    from dataclasses import asdict

    from gpufabric.topology import nvsmi
    with Progress("topo", 2) as progress:
        t = _load(system)
        t.check_node(node, field="--node", file=system)
        progress.step("system built")
        m = nvsmi.from_topology(t, node=node)
        progress.step("paths")
    if json:
        emit_json(asdict(m))
        return
    typer.echo(nvsmi.render(m), nl=False)


import_app = typer.Typer(help="Read real hardware descriptions into a system file.",
                         no_args_is_help=True)
app.add_typer(import_app, name="import")


@import_app.command("nvidia-smi")
def import_nvidia_smi(
        file: Path = typer.Argument(..., help="Saved output of `nvidia-smi topo -m`."),
        output: Path = typer.Option(..., "-o", "--output", help="System file to write (YAML)."),
        gpu: str = typer.Option("", help="GPU model (catalog name), if known."),
        name: str = typer.Option("", help="System name (default: the file's stem)."),
        json: bool = typer.Option(False, "--json", help="Also print the system as JSON.")) -> None:
    """Read `nvidia-smi topo -m` output into a system file."""
    from gpufabric import catalog
    from gpufabric.topology import nvsmi
    from gpufabric.topology.build import from_system_file
    if gpu:
        gpu = catalog.gpu(gpu, field="--gpu").name
    text = read_text(file, what="the output of `nvidia-smi topo -m`")
    m = nvsmi.parse(text, file=str(file))
    data = nvsmi.to_system(m, name or file.stem, gpu_model=gpu)
    from_system_file(data, data.get("name", ""), str(file))   # must build before we write
    write_text_atomic(output, yaml.safe_dump(data, sort_keys=False), field="--output")
    if json:
        emit_json(data)
    else:
        typer.echo(f"wrote {output}: {sum(d['kind'] == 'gpu' for d in data['devices'])} GPUs, "
                   f"{sum(d['kind'] == 'nic' for d in data['devices'])} NICs")


@app.command()
def compare(systems_: list[str] | None = typer.Argument(
                None, metavar="[SYSTEM]...", help="Systems to compare (default: the archetypes)."),
            output: Path = typer.Option(Path("gpufabric-report.html"), "-o", "--output",
                                        help="HTML report to write."),
            no_html: bool = typer.Option(False, "--no-html", help="Do not write the report."),
            json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Put ways of connecting GPUs side by side, and write an HTML report with drawings."""
    from gpufabric.report import compare as cmp
    from gpufabric.topology import presets
    names = systems_ or presets.compared()
    if not no_html:
        check_output(output, field="--output")
    topos, rows = [], []
    with Progress("compare", len(names) + (0 if no_html else 1)) as progress:
        for n in names:
            topos.append(_load(n))
            rows += cmp.rows(topos[-1:])
            progress.step(n)
        if not no_html:
            from gpufabric.report.html import render_report
            write_text_atomic(output, render_report(topos, rows), field="--output")
            progress.step("report")
    if json:
        emit_json({"systems": rows, "report": None if no_html else str(output)})
        return
    console.print(cmp.table(rows))
    if not no_html:
        console.print(f"report: {output}")

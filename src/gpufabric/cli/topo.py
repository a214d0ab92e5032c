"""CLI: systems, show, p2p, topo, import, compare."""

from __future__ import annotations

from pathlib import Path

import typer
import yaml
from rich.console import Console
from rich.table import Table

from gpufabric.cli.common import (Col, Progress, app, emit_json, profile_option, table_lines,
                                  wide_option)
from gpufabric.fileio import check_output, read_text, write_output

console = Console()

SYSTEM_HELP = ("A preset name (see `gpufabric systems`), a YAML spec or system file, "
               "or key=value,...")


def _load(system: str, node: int | None = None):
    """Build what a command prints: with ``node``, the nodes up to it (whole NVLink domains),
    not every node of a large cluster (``meta['nodes']`` keeps the true count)."""
    from gpufabric.errors import InputError
    from gpufabric.topology.build import load
    if node is None:
        return load(system)
    if node < 0:
        raise InputError(f"expected a node index >= 0, got {node}", field="--node")
    t = load(system, materialize_nodes=1, first_node=node)
    nodes = int(t.meta.get("nodes") or t.node_count)
    if node >= nodes:     # the wording of Topology.check_node
        raise InputError(f"the system has {nodes} node(s); allowed: 0 to {nodes - 1}",
                         file=system, field="--node")
    return t


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


def _print_matrix(title: str, labels: list[str], cells: list[list[str]],
                  wide: bool = False) -> None:
    """A square matrix, its cells never squeezed: a matrix wider than the terminal is printed
    in blocks of columns, each with the row labels (``wide``: in one piece)."""
    console.print(title, highlight=False)
    cols = [Col("", key=True)] + [Col(lab, right=True) for lab in labels]
    for ln in table_lines(cols, [[lab, *row] for lab, row in zip(labels, cells, strict=True)],
                          wide=wide, header_prefix="  ", gap=2):
        typer.echo(ln)


@app.command()
def show(system: str = typer.Argument(..., help=SYSTEM_HELP),
         node: int = typer.Option(0, help="Which server of a cluster to show."),
         json: bool = typer.Option(False, "--json", help="Print JSON."),
         wide: bool = wide_option()) -> None:
    """Devices, PCIe lanes used and free per socket, path matrix with bandwidths, warnings."""
    from gpufabric.report.summary import path_table
    from gpufabric.topology import rules
    with Progress("show", 2) as progress:
        t = _load(system, node)
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
    if t.meta.get("supernode"):
        sup = t.meta["supernode"]
        part = (f" (part of a {sup['domain_gpus']}-GPU domain of {sup['domain_trays']} trays)"
                if sup.get("domain_gpus", t.meta["nvlink_domain"]) > t.meta["nvlink_domain"]
                else "")
        console.print(f"NVLink domain: {t.meta['nvlink_domain']} GPUs = {sup['trays']} trays of "
                      f"{sup['gpus_per_tray']}{part}, {sup['switch_trays']} switch trays x "
                      f"{sup['chips_per_tray']} {sup['switch']} ({sup['ports_used']} of "
                      f"{sup['chips'] * sup['ports_per_chip']} ports), {sup['racks']} rack(s); "
                      f"{t.meta['domains']} domain(s)")
    if t.meta.get("fabric", {}).get("tiers"):
        _print_fabric(t.meta["fabric"])
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
    _print_matrix("Paths (type, bottleneck GB/s per direction)", pt["labels"], cells, wide)
    for w in warns:
        console.print(f"[yellow]warning:[/yellow] {w}")


def _print_fabric(fab: dict) -> None:
    """The scale-out tiers: switches, ports, oversubscription, cables, optics, bisection."""
    tb = Table(title=f"Fabric: {fab['levels']} tier(s), {fab['topology']}, {fab['end_ports']:,} "
                     f"NIC ports of {fab['speed']}", box=None)
    for col in ("tier", "switch", "switches", "down/up per switch", "ports used/total", "over"):
        tb.add_column(col, justify="left" if col in ("tier", "switch") else "right")
    for tr in fab["tiers"]:
        tb.add_row(tr["name"], f"{tr['switch']} ({tr['radix']}p)", f"{tr['switches']:,}",
                   f"{tr['down']}/{tr['up']}", f"{tr['ports_used']:,}/{tr['ports_total']:,}",
                   f"{tr['oversubscription']:g}:1")
    console.print(tb)
    layout = (f"{fab['nodes_per_leaf']} nodes per leaf"
              + (f", {fab['rails_per_leaf']} rail(s) per leaf, {fab['leaves_per_rail']} leaves "
                 "per rail" if fab["topology"] == "rail-optimized" else "")
              + (f", {fab['pods']} pods of {fab['nodes_per_pod']} nodes" if fab["levels"] == 3
                 else ""))
    console.print(layout)
    console.print("cables: " + "; ".join(f"{v:,} {k}" for k, v in fab["cables"].items()))
    if fab["optics"]:
        console.print("optics: " + "; ".join(f"{v:,} {k}" for k, v in fab["optics"].items()))
    hops = fab["hops"]
    between = [f"same leaf {hops['same_leaf']}"]
    if fab["levels"] == 2:
        between.append(f"other leaves {hops['same_pod']}")
    if fab["levels"] == 3:
        between += [f"same pod {hops['same_pod']}", f"across pods {hops['across_pods']}"]
    console.print(f"bisection: {fab['bisection_GBps']:,.0f} GB/s per direction; switches "
                  f"between two GPUs: {', '.join(between)} (same NVLink domain: NVLink only)")


@app.command()
def p2p(system: str = typer.Argument(..., help=SYSTEM_HELP),
        node: int = typer.Option(0, help="Which server of a cluster."),
        json: bool = typer.Option(False, "--json", help="Print JSON."),
        wide: bool = wide_option()) -> None:
    """GPU-pair bandwidth matrix (bottleneck GB/s per direction; * = no peer-to-peer)."""
    from gpufabric.report.summary import path_table
    with Progress("p2p", 2) as progress:
        t = _load(system, node)
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
                  "memory)", pt["labels"][:n], cells, wide)


@app.command()
def topo(system: str = typer.Argument(..., help=SYSTEM_HELP),
         node: int = typer.Option(0, help="Which server of a cluster."),
         json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Print the `nvidia-smi topo -m` matrix of a modeled system."""
    from dataclasses import asdict

    from gpufabric.topology import nvsmi
    with Progress("topo", 2) as progress:
        t = _load(system, node)
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
    import sys

    from gpufabric import catalog
    from gpufabric.topology import nvsmi
    from gpufabric.topology.build import from_yaml_text
    if gpu:
        gpu = catalog.gpu(gpu, field="--gpu").name
    text = read_text(file, what="the output of `nvidia-smi topo -m`")
    m = nvsmi.parse(text, file=str(file), gpu_model=gpu)
    data = nvsmi.to_system(m, name or file.stem, gpu_model=gpu, file=str(file))
    out = yaml.safe_dump(data, sort_keys=False)
    from_yaml_text(out, str(file))   # read back as `show` reads the file, before it is written
    write_output(output, out, field="--output")
    gens = sorted({ln["gen"] for ln in data["links"] if ln["kind"] == "nvlink" and "gen" in ln})
    if gens:   # no --gpu: the NVLink generation, and so every NVLink speed, is a guess
        taken = ", ".join(f"NVLink {g} ({catalog.peer_link(f'nvlink{g}').per_link_GBps:g} GB/s "
                          "per link per direction)" for g in gens)
        print(f"gpufabric: warning: {file}: --gpu not given: GPU model unknown, NVLink links "
              f"taken as {taken}; give --gpu MODEL (see `gpufabric catalog gpus`)",
              file=sys.stderr)
    if json:
        emit_json(data)
    else:
        typer.echo(f"wrote {output}: {sum(d['kind'] == 'gpu' for d in data['devices'])} GPUs, "
                   f"{sum(d['kind'] == 'nic' for d in data['devices'])} NICs")


def _parse_heat(text: str) -> tuple[str, int] | None:
    """``all_to_all:256M`` -> ("all_to_all", 268435456); ``none`` -> None."""
    from gpufabric import collectives
    from gpufabric.errors import InputError
    if text.lower() == "none":
        return None
    op, _, size = text.partition(":")
    op = collectives.check_op(op)
    size = size or "1G"
    mult = {"K": 2**10, "M": 2**20, "G": 2**30}.get(size[-1:].upper(), 1)
    try:
        n = int(float(size[:-1] if mult > 1 else size) * mult)
    except ValueError:
        raise InputError(f"expected OP:SIZE such as all_reduce:1G, got {text!r}",
                         field="--heat") from None
    if n <= 0:
        raise InputError(f"the size must be positive, got {size!r}", field="--heat")
    return op, n


@app.command()
def compare(systems_: list[str] | None = typer.Argument(
                None, metavar="[SYSTEM]...", help="Systems to compare (default: the archetypes)."),
            output: Path = typer.Option(Path("gpufabric-report.html"), "-o", "--output",
                                        help="HTML report to write."),
            no_html: bool = typer.Option(False, "--no-html", help="Do not write the report."),
            heat: str = typer.Option("all_reduce:1G", "--heat", help="OP:SIZE whose per-link "
                                     "utilisation colours the fabric drawings (e.g. "
                                     "all_to_all:256M), or 'none'."),
            no_training: bool = typer.Option(False, "--no-training",
                                             help="Leave out the training-scaling section."),
            inference: bool = typer.Option(False, "--inference", help="Add the inference "
                                           "serving section (~30 s)."),
            json: bool = typer.Option(False, "--json", help="Print JSON."),
            profile: str | None = profile_option()) -> None:
    """Put ways of connecting GPUs side by side, and write an HTML report with drawings."""
    heat_op = _parse_heat(heat)
    from gpufabric.report import compare as cmp
    from gpufabric.topology import presets
    names = systems_ or presets.compared()
    if not no_html:
        check_output(output, field="--output")
    from gpufabric.collectives import Model
    from gpufabric.topology.build import load
    from gpufabric.report import training as tr
    from gpufabric.report import inference as inf
    topos, rows = [], []
    steps = len(names) + (0 if no_training else 1) + (1 if inference else 0) + (0 if no_html else 1)
    with Progress("compare", steps) as progress:
        for n in names:
            # the nodes the collective model samples, not every node of a large cluster
            topos.append(load(n, materialize_nodes=Model.SAMPLE_NODES))
            rows += cmp.rows(topos[-1:])
            progress.step(n)
        training = None
        if not no_training:
            training = tr.scaling({t.name: t for t in topos},
                                  progress=progress.part("training scaling"))
        serving = None
        if inference:
            serving = inf.section(system=names[0] if systems_ else inf.SYSTEM,
                                  progress=progress.part("inference serving"))
        if not no_html:
            from gpufabric.report.html import render_report
            write_output(output, render_report(topos, rows, heat=heat_op, training=training,
                                                    inference=serving), field="--output")
            progress.step("report")
    if json:
        emit_json({"systems": rows, "report": None if no_html else str(output),
                   "training": training, "inference": serving})
        return
    console.print(cmp.table(rows))      # both fit the terminal's width (COLUMNS)
    if training:
        console.print(tr.table(training))
    if not no_html:
        console.print(f"report: {output}")
